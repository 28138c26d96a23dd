"""benchmarks/lib/timing.py: side-by-side timings whose ratio does not move when the machine's speed drifts."""

from __future__ import annotations

import itertools

from benchmarks.lib.timing import paired


def test_paired_rounds_keep_the_ratio_under_drift_and_name_it_first_over_second():
    slowdown = itertools.count(1)  # the machine gets slower at every measurement: 1x, 2x, 3x, ...
    costs = {"first": 3.0, "second": 1.0}

    def measure(fn):
        return costs[fn()] * next(slowdown)

    first, second, ratio = paired(lambda: "first", lambda: "second", measure, rounds=5)
    # Rounds (3*1, 1*2), (3*3, 1*4), (3*5, 1*6), ...: each round's second side runs on a slower machine, so the
    # rounds' ratios 1.5, 2.25, 2.5, 2.625, 2.7 approach the true 3 from below; timing all of one side first
    # and then all of the other would give 3*3 / (1*8) = 1.125.
    assert (first, second) == (15.0, 6.0)
    assert ratio == 2.5
