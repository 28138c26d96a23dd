"""Timing for the benchmarks: one median, and two things side by side on a machine whose speed drifts (a shared VM:
20% within minutes, seen here)."""

from __future__ import annotations

import statistics
from typing import Callable

from torch.utils.benchmark import Timer

Measure = Callable[[Callable[[], object]], float]


def median_seconds(fn: Callable[[], object], min_run_time: float, num_threads: int = 1, warm_up: int = 0) -> float:
    """Median time of fn() from torch.utils.benchmark's blocked_autorange (which synchronizes CUDA), on `num_threads`
    threads, after `warm_up` untimed calls (cuDNN's algorithm search, compilation for a new shape)."""
    for _ in range(warm_up):
        fn()
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def paired(first: Callable[[], object], second: Callable[[], object], measure: Measure, rounds: int) -> tuple[float, float, float]:
    """(first, second, first / second): `rounds` alternating rounds each `measure` one, then the other; the medians
    of each side and the median of the rounds' ratios. The drift then falls on both sides alike instead of on one."""
    times = [(measure(first), measure(second)) for _ in range(rounds)]
    return (statistics.median(a for a, _ in times), statistics.median(b for _, b in times),
            statistics.median(a / b for a, b in times))
