"""Timing two things side by side on a machine whose speed drifts (a shared VM: 20% within minutes, seen here)."""

from __future__ import annotations

import statistics
from typing import Callable

Measure = Callable[[Callable[[], object]], float]


def paired(first: Callable[[], object], second: Callable[[], object], measure: Measure, rounds: int) -> tuple[float, float, float]:
    """(first, second, first / second): `rounds` alternating rounds each `measure` one, then the other; the medians
    of each side and the median of the rounds' ratios. The drift then falls on both sides alike instead of on one."""
    times = [(measure(first), measure(second)) for _ in range(rounds)]
    return (statistics.median(a for a, _ in times), statistics.median(b for _, b in times),
            statistics.median(a / b for a, b in times))
