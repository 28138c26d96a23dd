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


def alternating(fns: dict[str, Callable[[], object]], measure: Measure, rounds: int, reference: str) -> dict[str, tuple[float, float]]:
    """name -> (median time, median of the rounds' ratios to `reference`): `rounds` rounds, each measuring every fn
    in turn. The machine's drift then falls on all of them alike instead of on one."""
    times = [{name: measure(fn) for name, fn in fns.items()} for _ in range(rounds)]
    return {name: (statistics.median(t[name] for t in times), statistics.median(t[name] / t[reference] for t in times))
            for name in fns}


def paired(first: Callable[[], object], second: Callable[[], object], measure: Measure, rounds: int) -> tuple[float, float, float]:
    """(first, second, first / second): `alternating` for two."""
    (a, ratio), (b, _) = alternating({"first": first, "second": second}, measure, rounds, reference="second").values()
    return a, b, ratio
