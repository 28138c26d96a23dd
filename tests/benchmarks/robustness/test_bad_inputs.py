"""A case of each kind from benchmarks/robustness/bad_inputs.py (its --quick set) against real `python train.py` processes:
each must stay a clear one-line error that names the option or file and leaves nothing behind, or a
documented, logged behaviour. The whole table (306 cases) is `python -m benchmarks.robustness.bad_inputs`.

The quick set itself runs in tests/test_documented_commands.py, as README's `python -m benchmarks.robustness.bad_inputs`
with `--quick`: the command exits 1 (and that test fails) unless every case is a clear error or documented."""

from __future__ import annotations

import pytest

from benchmarks.robustness import bad_inputs

pytestmark = pytest.mark.slow  # real processes: run by the full suite (README), not the quick loop


def test_the_quick_set_covers_every_kind_of_input():
    quick = [case for case in bad_inputs.all_cases() if case.quick]
    assert {case.family for case in quick} == {"hydra", "cli", "data", "checkpoint", "resume"}
    assert {case.expect for case in quick} == {"error", "documented"}
    assert len(bad_inputs.all_cases()) >= 80
