"""Robustness harnesses: bad inputs given to both front ends, and faults injected into real training processes
(`python -m benchmarks.robustness.NAME`); their tables are under benchmarks/results/."""
