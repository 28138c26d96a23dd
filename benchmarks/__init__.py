"""Measurements beside the collection, in rooms:

* `lib/`: what they share: the study runner (resumable runs, lanes, one record per finished run), paired timing,
  argument checks, records' curves, the seed statistics, measurements at trained checkpoints;
* `studies/`: the studies, each a `python -m benchmarks.studies.NAME` that trains runs under one protocol and writes
  its report under `results/<study>/`;
* `speed/`: speed and memory probes, ratios measured side by side (`results/speed/`);
* `robustness/`: bad inputs to both front ends and faults injected into real training runs;
* `compare.py`: the comparison report of a user's own runs (`python -m benchmarks.compare LOG_DIR`, README);
* `results/`: every committed output.
"""
