"""Measurements beside the collection, in rooms: `lib/` (the study runner, paired timing, argument checks, records'
curves, seed statistics, measurements at checkpoints), `studies/` (each `python -m benchmarks.studies.NAME` trains
runs under one protocol and writes its report under `results/<study>/`), `speed/` (speed and memory, ratios measured
side by side), `robustness/` (bad inputs to both front ends, faults injected into real runs), `tools/` (counts of
the code itself), `compare.py` (the comparison report of a user's own runs, README) and `results/` (every committed
output)."""
