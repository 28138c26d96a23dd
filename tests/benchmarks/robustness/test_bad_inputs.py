"""A case of each kind from benchmarks/robustness/bad_inputs.py (its --quick set) against `python train.py` processes:
each must stay a clear one-line error that names the option or file and leaves nothing behind, or a
documented, logged behaviour. The whole table is `python -m benchmarks.robustness.bad_inputs`.

The quick set runs here as `python -m benchmarks.robustness.bad_inputs --quick`, which exits 1 unless every case is a
clear error or documented; tests/test_documented_commands.py runs README's command with one case."""

from __future__ import annotations

import os

import pytest

from benchmarks.robustness import bad_inputs
from tests import preloaded
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # real processes: run by the full suite (README), not the quick loop
QUICK_SET_LIMIT_S = 900


def test_the_quick_set_covers_every_kind_of_input():
    quick = [case for case in bad_inputs.all_cases() if case.quick]
    assert {case.family for case in quick} == {"hydra", "cli", "data", "checkpoint", "resume"}
    assert {case.expect for case in quick} == {"error", "documented"}
    assert len(bad_inputs.all_cases()) >= 80


def test_each_kind_of_bad_input_is_clear_or_documented(tmp_path, mnist_dir):
    """The quick set, each case a real process (two at a time, the benchmark's default), with a limit that holds where
    the suite's workers and other jobs share two cores. Its `python train.py` cases are forked from a process that has
    the libraries imported (tests/preloaded.py); the whole table starts each case in a new interpreter."""
    env = {**os.environ, "DATA_DIR": str(mnist_dir), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = preloaded.run_module("benchmarks.robustness.bad_inputs", ["--quick", "--out", str(tmp_path / "out")],
                                  tmp_path, env, timeout=QUICK_SET_LIMIT_S, forks_python=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_fault_harness_can_read_the_checkpoints_it_makes():
    """`python -m benchmarks.robustness.faults` reads its runs' checkpoints in its own process: the model classes they
    name are registered there (a checkpoint naming an unregistered class is refused). The probe imports the harness
    alone in a process of its own, forked from tests/preloaded's server, which holds none of the project's modules."""
    probe = "import benchmarks.robustness.faults\nfrom common.registry import is_registered\nprint(is_registered('models.jsa.JSA'))"
    result = preloaded.run_code(probe, [], REPO, dict(os.environ), timeout=120)
    assert result.stdout.strip() == "True", result.stderr[-2000:]


def test_only_takes_a_case_id_that_holds_a_comma():
    from benchmarks.robustness.bad_inputs import all_cases, case_ids

    known = {case.id for case in all_cases()}
    assert "hydra DATA_DIR empty, no network" in known
    given = "hydra DATA_DIR empty, no network,hydra seed=abc".split(",")  # as --only splits it
    assert case_ids(given, known) == ["hydra DATA_DIR empty, no network", "hydra seed=abc"]
    assert case_ids(["hydra seed=abc", "nope"], known) == ["hydra seed=abc", "nope"]  # an unknown id stays, to be named
