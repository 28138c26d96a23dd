"""README's test command in the environment a newcomer has: a fresh clone with ../shared beside it and no DATA_DIR
exported. The tests then read real MNIST from ../shared/data (tests/conftest.py), and CI runs them that way."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

# Tests that read the data root without a data_dir of their own: one through the environment (the real files the
# corruption cases copy), one through a composed config whose data.data_dir is left at its default.
LEFT_TO_THE_DEFAULT = ["tests/datamodules/test_datamodules.py::test_corrupt_idx_file_is_one_line_naming_it[mnist-truncated]",
                       "tests/models/components/test_precision.py::test_every_model_trains_and_tests_under_bf16_mixed[vae]"]


def test_ci_runs_the_readme_command_with_nothing_set_that_readme_does_not_set():
    script = (REPO / ".ci" / "run").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"\bexport\b", code), "CI exports a variable README's test command does not set"
    assert "env -u DATA_DIR" in code, "CI must run the test command without a DATA_DIR, as a newcomer does"


@pytest.mark.slow  # starts pytest
def test_tests_left_to_the_default_data_root_pass_without_data_dir():
    env = {key: value for key, value in os.environ.items() if key not in ("DATA_DIR", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *LEFT_TO_THE_DEFAULT],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
