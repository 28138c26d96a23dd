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
