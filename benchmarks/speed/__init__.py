"""Speed and memory probes: each times the compared pieces side by side in one process and prints ratios
(`python -m benchmarks.speed.NAME`); their outputs are under benchmarks/results/speed/."""
