"""What README (and `python train.py --help`) say about the command line is what a newcomer sees, and README stays
short enough to read: at most 300 lines."""

from __future__ import annotations

import re

import pytest

import launch.cli_app
import train
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def test_readme_is_at_most_300_lines():
    assert len(README.splitlines()) <= 300


def help_text(capsys: pytest.CaptureFixture, *args: str) -> str:
    with pytest.raises(SystemExit):
        launch.cli_app.main(list(args))
    return capsys.readouterr().out


def test_what_fit_help_lists_is_what_readme_and_usage_say(capsys):
    """`fit --help` lists the trainer's options and names the model and data classes; a model's own options come from
    `fit --model.help JSA`. README and train.py's usage say so (not "every option of model, data and trainer")."""
    for text in (README, train.USAGE):
        [line] = [line for line in text.splitlines() if re.search(r"python train.py fit --help\s", line)]
        assert "every option" not in line and "fit --model.help JSA" in line, line
    fit_help = help_text(capsys, "fit", "--help")
    assert "--trainer.max_epochs" in fit_help and "--model.help" in fit_help and "--data.help" in fit_help
    assert "--model.mis_steps" not in fit_help and "--data.batch_size" not in fit_help
    assert "--model.mis_steps" in help_text(capsys, "fit", "--model.help", "JSA")
    assert "--data.batch_size" in help_text(capsys, "fit", "--data.help", "MNISTDataModule")


@pytest.mark.slow  # starts a Python process (torch's import)
def test_readme_says_its_timings_are_of_an_idle_machine_and_how_to_share_a_busy_one():
    """README's timings were taken on an idle machine, and it says so; its advice for a busy one, one torch thread
    with OMP_NUM_THREADS=1, is what torch does with it."""
    import os
    import subprocess
    import sys

    assert "README's timings are of an idle machine" in README and "on an idle 2-core AMD EPYC" in README
    advice = re.search(r"cores busy, prefix `(\w+)=(\d+)`", README)
    assert advice, "README names the setting for a busy machine"
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True, text=True,
                           env={**os.environ, advice[1]: advice[2]}, timeout=120)
    assert probe.stdout.strip() == advice[2], probe.stderr[-2000:]


@pytest.mark.slow  # starts a Python process (torch's import)
def test_the_cpu_wheel_tip_checks_that_pip_kept_the_cpu_build():
    """`pip install -e .` replaces the CPU build when the CPU index lacks the torch pyproject.toml asks for: the tip
    names the command that shows which build is installed, and it runs."""
    import subprocess
    import sys

    [tip] = [p for p in README.split("\n\n") if p.startswith("No GPU?")]
    check = re.search(r'`(python -c "import torch; print\(torch.__version__\)")` must still end in `\+cpu`', tip)
    assert check, tip
    shown = subprocess.run([sys.executable, *check[1].split(" ", 2)[1:2], check[1].split('"')[1]], capture_output=True,
                           text=True, timeout=120)
    assert re.fullmatch(r"\d+\.\d+\.\d+(\+\w+)?", shown.stdout.strip()), shown.stdout + shown.stderr
