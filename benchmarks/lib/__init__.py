"""What the benchmarks share: the study runner (resumable runs, lanes, records), paired timing, argument checks,
records' curves and the seed statistics, and measurements at trained checkpoints."""
