"""models/components/optimizers.py: a learning-rate scheduler's period of fewer than one epoch is refused when the model
is built, in one line naming the setting, by the model itself and through both front ends."""

from __future__ import annotations

import functools
import logging

import pytest
import torch

import launch.cli_app
import launch.hydra_app
from launch.checks.settings import SettingsError
from models import VAE
from tests.conftest import says
from tests.launch.test_configs import composed

COSINE, STEP = torch.optim.lr_scheduler.CosineAnnealingLR, torch.optim.lr_scheduler.StepLR


@pytest.mark.parametrize("scheduler, named", [
    (functools.partial(COSINE, T_max=0), ["scheduler", "CosineAnnealingLR's T_max=0", "epochs >= 1"]),
    (functools.partial(COSINE, T_max=-1), ["scheduler", "CosineAnnealingLR's T_max=-1", "epochs >= 1"]),
    (functools.partial(STEP, step_size=0), ["scheduler", "StepLR's step_size=0", "epochs >= 1"]),
])
def test_a_scheduler_period_under_one_epoch_is_refused_when_the_model_is_built(scheduler, named):
    """Torch takes these: 0 divides by zero at the first epoch's end, a negative T_max sets the learning rate to 0."""
    with pytest.raises(ValueError) as error:
        VAE(latent_dim=4, scheduler=scheduler)
    says(error.value, *named)


def test_a_scheduler_of_whole_epochs_is_taken():
    VAE(latent_dim=4, scheduler=functools.partial(COSINE, T_max=1))
    VAE(latent_dim=4, scheduler=functools.partial(STEP, step_size=1))


def test_a_scheduler_is_checked_on_the_models_own_optimizer():
    """CyclicLR cycles the momentum by default: SGLD has none, which Adam (the default) and SGD would hide."""
    from samplers import SGLD

    cyclic = functools.partial(torch.optim.lr_scheduler.CyclicLR, base_lr=1e-8, max_lr=1e-6)
    VAE(latent_dim=4, scheduler=cyclic)
    with pytest.raises(ValueError, match="^scheduler: optimizer must support momentum"):
        VAE(latent_dim=4, optimizer=functools.partial(SGLD, lr=1e-7), scheduler=cyclic)


@pytest.mark.parametrize("overrides, named", [
    # scheduler=cosine's T_max is trainer.max_epochs, -1 when trainer.max_steps alone bounds the run
    (["scheduler=cosine", "trainer.max_epochs=-1", "trainer.max_steps=3"],
     ["scheduler.T_max=-1 (CosineAnnealingLR)", "epochs >= 1", "${trainer.max_epochs}", "give scheduler.T_max="]),
    (["scheduler=step", "scheduler.step_size=0"], ["scheduler.step_size=0 (StepLR)", "epochs >= 1"]),
    (["optimizer.lr=-1"], ["optimizer (Adam)", "learning rate: -1"]),
])
def test_hydra_names_the_optimizer_and_scheduler_groups_setting_it_refuses(overrides, named, monkeypatch, tmp_path):
    overrides = ["model=vae", f"log_dir={tmp_path / 'logs'}", *overrides]
    monkeypatch.setattr("sys.argv", ["train.py", *overrides])
    with pytest.raises(SettingsError) as error:
        launch.hydra_app.build_run(composed(overrides))
    assert str(error.value).startswith(named[0]), error.value
    says(error.value, *named)
    assert not (tmp_path / "logs").exists()


def test_the_cli_refuses_a_zero_step_size_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        launch.cli_app.main(["--model=VAE", "--model.scheduler=StepLR", "--model.scheduler.step_size=0",
                             f"--log_dir={tmp_path / 'logs'}"], run=False)
    assert stopped.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], "error: --model.scheduler", "(VAE)", "StepLR's step_size=0",
         "epochs >= 1")
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("args, named", [
    (["--optimizer=Adam", "--lr_scheduler=CosineAnnealingLR", "--lr_scheduler.T_max=0"],
     ["--lr_scheduler.T_max=0 (CosineAnnealingLR)", "epochs >= 1"]),
    (["--optimizer=Adam", "--lr_scheduler=StepLR", "--lr_scheduler.step_size=0"], ["--lr_scheduler.step_size=0 (StepLR)"]),
    (["--optimizer=Adam", "--optimizer.lr=-1"], ["--optimizer (Adam)", "learning rate"]),
    # CyclicLR cycles a momentum SGLD does not have
    (["--optimizer=SGLD", "--optimizer.lr=1e-7", "--lr_scheduler=CyclicLR", "--lr_scheduler.base_lr=1e-8",
      "--lr_scheduler.max_lr=1e-6"], ["--lr_scheduler (CyclicLR)", "momentum"]),
])
def test_the_cli_refuses_its_own_optimizer_and_scheduler_before_training(args, named, tmp_path, capsys):
    """LightningCLI builds --optimizer and --lr_scheduler once training starts: torch takes a zero period, which
    divides by zero at the first epoch's end."""
    with pytest.raises(SystemExit) as stopped:
        launch.cli_app.main(["--model=VAE", *args, f"--log_dir={tmp_path / 'logs'}"], run=False)
    error = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and error.startswith(f"error: {named[0]}") and "\n" not in error, error
    says(error, *named)
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("args, named", [
    (["--model.scheduler=torch.optim.lr_scheduler.CosineAnnealingLR"],
     ["--model.scheduler.T_max", "--model.scheduler=torch.optim.lr_scheduler.CosineAnnealingLR", "--model.scheduler.T_max=VALUE"]),
    (["--optimizer=Adam", "--lr_scheduler=StepLR"],  # Adam requires nothing: the scheduler is named
     ["--lr_scheduler.step_size", "--lr_scheduler=StepLR", "--lr_scheduler.step_size=VALUE"]),
    (["--trainer.logger=CSVLogger"], ["--trainer.logger.save_dir", "--trainer.logger=CSVLogger", "--trainer.logger.save_dir=VALUE"]),
])
def test_the_cli_names_the_option_a_class_on_the_command_line_requires(args, named, tmp_path, capsys, caplog):
    """jsonargparse's "the following arguments are required: T_max" names no option: the line names the one to give,
    and nothing else is said (no log line of the classes looked for)."""
    with pytest.raises(SystemExit) as stopped:
        launch.cli_app.main(["--model=VAE", *args, f"--log_dir={tmp_path / 'logs'}"], run=False)
    error = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and error.startswith(f"error: {named[0]}") and "\n" not in error, error
    says(error, *named)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING], caplog.records
