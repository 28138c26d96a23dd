"""launch/run_builder.py: each front end describes its run, and one builder turns the description into the trainer.
The same run is driven through both front ends and what each built is compared."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback

import launch.hydra_run
import launch.cli_app
import launch.run_builder
from common.signatures import settings_of
from tests.launch.test_configs import composed


@pytest.fixture
def described(monkeypatch):
    """Every RunDescription the builder is given, in order; `python train.py fit` builds everything and fits nothing."""
    import functools

    import lightning

    # LightningCLI reads the fit subcommand's options (--ckpt_path) from Trainer.fit's signature: kept by wraps
    monkeypatch.setattr(lightning.Trainer, "fit", functools.wraps(lightning.Trainer.fit)(lambda trainer, *args, **kwargs: None))
    seen = []
    build_trainer = launch.run_builder.build_trainer

    def recording(run):
        seen.append(run)
        return build_trainer(run)

    for front_end in (launch.hydra_run, launch.cli_app):  # each calls the one builder
        monkeypatch.setattr(front_end, "build_trainer", recording)
    return seen


def both_front_ends(tmp_path: Path, hydra: list[str], cli: list[str]) -> tuple:
    """(Hydra's description and trainer, the CLI's) of one run given to each front end in its own words."""
    log_dir = tmp_path / "logs"
    _, _, hydra_trainer, hydra_resume = launch.hydra_run.build_run(composed([*hydra, f"log_dir={log_dir}"]))
    app = launch.cli_app.main(["fit", *cli, f"--log_dir={log_dir}"])
    return hydra_trainer, hydra_resume, app


def test_the_same_run_through_both_front_ends_builds_the_same_run(tmp_path, described, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hydra_trainer, _, app = both_front_ends(
        tmp_path, ["model=jsa", "data=mnist", "seed=3", "trainer.max_epochs=2", "model.mis_steps=5", "model.gradient_rows=2"],
        ["--model=JSA", "--data=MNISTDataModule", "--seed_everything=3", "--trainer.max_epochs=2", "--model.mis_steps=5",
         "--model.gradient_rows=2"])
    hydra_run, cli_run = described
    assert isinstance(hydra_run.model.row_choice(torch.device("cpu")), int) and isinstance(cli_run.model.row_choice(torch.device("cpu")), int)  # JSA's k + 1 gradient rows, from both
    assert (hydra_run.name, cli_run.name) == ("jsa-mnist-mlp-K10-L5", "jsa-mnist-mlp-K10-L5")
    assert hydra_run.log_dir == cli_run.log_dir == str(tmp_path / "logs")
    without_optimizer = lambda model: {k: v for k, v in settings_of(model).items() if k != "optimizer"}
    assert without_optimizer(hydra_run.model) == without_optimizer(cli_run.model)
    assert settings_of(hydra_run.datamodule) == settings_of(cli_run.datamodule)
    for hydra_param, cli_param in zip(hydra_run.model.parameters(), cli_run.model.parameters(), strict=True):
        assert torch.equal(hydra_param, cli_param)  # the same seed before the same construction
    cli_trainer = app.trainer
    for setting in ("max_epochs", "precision", "log_every_n_steps", "num_sanity_val_steps"):
        assert getattr(hydra_trainer, setting) == getattr(cli_trainer, setting), setting
    hydra_trainer_precision = hydra_trainer.precision
    assert hydra_trainer_precision == "32-true"
    # Two TensorBoard runs of the same name under the same root (versions 0 and 1: each reserves its own).
    assert Path(hydra_trainer.logger.log_dir).parent == Path(cli_trainer.logger.log_dir).parent == tmp_path / "logs" / "tensorboard" / hydra_run.name
    kinds = lambda trainer: sorted(type(c).__name__ for c in trainer.callbacks if not isinstance(c, SaveConfigCallback))
    assert kinds(hydra_trainer) == kinds(cli_trainer)
    hydra_checkpoint, cli_checkpoint = hydra_trainer.checkpoint_callback, cli_trainer.checkpoint_callback
    assert (hydra_checkpoint.monitor, hydra_checkpoint.save_last) == (cli_checkpoint.monitor, cli_checkpoint.save_last) == ("val/nll", True)


def test_both_front_ends_leave_the_checkpoints_out_and_write_an_unlogged_run_under_log_dir_alike(tmp_path, described, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hydra_trainer, _, app = both_front_ends(
        tmp_path, ["trainer.enable_checkpointing=false", "~logger"], ["--trainer.enable_checkpointing=false", "--trainer.logger=false"])
    for trainer in (hydra_trainer, app.trainer):
        assert not any(isinstance(c, ModelCheckpoint) for c in trainer.callbacks) and trainer.logger is None
    hydra_run, cli_run = described
    assert hydra_run.tensorboard is None and cli_run.tensorboard is None
    # Hydra's run directory holds a run without a logger; the CLI's is <log_dir>/cli/<name>/<time>-<pid>, the same layout.
    assert Path(app.trainer.default_root_dir).parent == tmp_path / "logs" / "cli" / cli_run.name


@pytest.mark.slow  # runs through both front ends
def test_a_checkpoint_resumes_into_its_own_run_through_both_front_ends_and_another_models_is_refused_by_both(tmp_path, described, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    hydra_trainer, _, _ = both_front_ends(tmp_path, [], [])
    checkpoint = Path(hydra_trainer.logger.log_dir) / "checkpoints" / "last.ckpt"
    model = described[0].model
    hydra_trainer.strategy.connect(model)
    hydra_trainer.save_checkpoint(checkpoint)
    described.clear()
    hydra_trainer, hydra_resume, app = both_front_ends(tmp_path, [f"ckpt_path={checkpoint}"], [f"--ckpt_path={checkpoint}"])
    assert hydra_resume == str(checkpoint) and app.config_init.fit.ckpt_path == str(checkpoint)
    assert hydra_trainer.logger.log_dir == app.trainer.logger.log_dir == str(checkpoint.parent.parent)  # the run that wrote it
    from checkpoints.errors import CheckpointError

    with pytest.raises(CheckpointError, match="was written by models.jsa.JSA, not models.vae.VAE"):
        launch.hydra_run.build_run(composed(["model=vae", f"ckpt_path={checkpoint}", f"log_dir={tmp_path / 'logs'}"]))
    capsys.readouterr()
    with pytest.raises(SystemExit):  # the same check, before LightningCLI reads the checkpoint's hyperparameters
        launch.cli_app.main(["fit", "--model=VAE", f"--ckpt_path={checkpoint}", f"--log_dir={tmp_path / 'logs'}"])
    assert "was written by models.jsa.JSA, not models.vae.VAE: resume it with the model that wrote it" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the model named by the package's short path, as the configs name it
        launch.cli_app.main(["fit", "--model=models.VAE", f"--ckpt_path={checkpoint}", f"--log_dir={tmp_path / 'logs'}"])
    assert "was written by models.jsa.JSA, not models.vae.VAE" in capsys.readouterr().err


@pytest.mark.slow  # a run through the CLI
def test_a_log_dir_from_a_config_file_is_where_the_cli_writes_and_is_checked_there(tmp_path, described, monkeypatch, capsys):
    """`log_dir` set in a -c file: the run goes there, a ./logs that is a file does not matter, and a log_dir that is a
    file is one line (the early checks see the command line only)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").write_text("not a directory")
    config = tmp_path / "run.yaml"
    config.write_text("log_dir: mylogs\n")
    app = launch.cli_app.main(["fit", "--model=JSA", "--data=MNISTDataModule", "-c", str(config)])
    assert Path(app.trainer.logger.log_dir).parent.parent == (tmp_path / "mylogs" / "tensorboard").resolve()
    config.write_text("log_dir: logs\n")
    with pytest.raises(SystemExit):
        launch.cli_app.main(["fit", "--model=JSA", "--data=MNISTDataModule", "-c", str(config)])
    assert capsys.readouterr().err.strip().endswith("--log_dir=logs: logs is a file, not a directory; expected a directory to write the run in")
