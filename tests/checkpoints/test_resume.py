"""Exact resume: a run interrupted mid-epoch and resumed from its checkpoint ends bit-for-bit where an
uninterrupted run of the same seed ends (parameters, optimizer state, JSA's cache, VQ-VAE's codebook
statistics), on CPU. What makes it exact: the loader's position and shuffling (datamodules/resumable.py),
seeded binarization, and every rank's random state saved in the checkpoint (checkpoints/trainer.py)."""

from __future__ import annotations

import functools
from pathlib import Path

import lightning as L
from checkpoints.trainer import SafeCheckpoints
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import MNISTDataModule
from models import JSA, VAE, VQVAE

pytestmark = pytest.mark.slow  # end to end: run by the full suite (README), not the quick loop

STOP, END = 13, 17  # 10 batches per epoch: the checkpoint falls in the middle of the second epoch


def build(name: str) -> L.LightningModule:
    if name == "jsa":
        return JSA(mis_steps=3, val_num_samples=2)
    if name.startswith("vae"):  # a cosine schedule's checkpoint falls after the schedule's first step (an epoch's end)
        cosine = functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR, T_max=2)
        return VAE(latent_dim=4, val_num_samples=2, scheduler=cosine if "cosine" in name else None)
    return VQVAE(num_categories=16, code_dim=4, hidden_channels=16, val_num_samples=1)


def fit(name: str, mnist_dir: Path, ckpt_dir: Path, max_steps: int, ckpt_path: Path | None = None) -> L.LightningModule:
    L.seed_everything(0)  # as train.py does at the start of every run, resumed or not
    model = build(name)
    trainer = L.Trainer(
        max_steps=max_steps, limit_train_batches=10, limit_val_batches=2, num_sanity_val_steps=2, logger=False,
        callbacks=[ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=STOP, save_top_k=-1, filename="step{step}"),
                   SafeCheckpoints()],
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(model, datamodule=MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32), ckpt_path=ckpt_path)
    model.final_optimizer_state = trainer.optimizers[0].state_dict()
    return model


@pytest.mark.parametrize("name", ["jsa", "vqvae", "vae, cosine schedule"])
def test_resumed_run_equals_uninterrupted_run(name, mnist_dir, tmp_path):
    uninterrupted = fit(name, mnist_dir, tmp_path / "a", END)
    fit(name, mnist_dir, tmp_path / "b", STOP)
    (checkpoint,) = (tmp_path / "b").glob("*.ckpt")
    assert torch.load(checkpoint, weights_only=False)["global_step"] == STOP
    resumed = fit(name, mnist_dir, tmp_path / "c", END, ckpt_path=checkpoint)

    for key, value in uninterrupted.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
    for a, b in zip(uninterrupted.final_optimizer_state["state"].values(), resumed.final_optimizer_state["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in a)
    if name == "jsa":  # a chain for every example trained on (two epochs' batches may share a few)
        assert END * 32 - 8 <= (uninterrupted.cache.codes != 255).all(1).sum() <= END * 32


def test_interruption_changes_nothing_only_if_state_is_restored(mnist_dir, tmp_path):
    """The check above can fail: resuming without the saved random state gives a different run."""
    uninterrupted = fit("jsa", mnist_dir, tmp_path / "a", END)
    fit("jsa", mnist_dir, tmp_path / "b", STOP)
    (checkpoint,) = (tmp_path / "b").glob("*.ckpt")
    stripped = torch.load(checkpoint, weights_only=False)
    del stripped["rng_states"]
    torch.save(stripped, tmp_path / "stripped.ckpt")
    resumed = fit("jsa", mnist_dir, tmp_path / "c", END, ckpt_path=tmp_path / "stripped.ckpt")
    assert not torch.equal(uninterrupted.cache.codes, resumed.cache.codes)


@pytest.mark.parametrize("first, then", [("vae, cosine schedule", "vae"), ("vae", "vae, cosine schedule")])
def test_a_run_resumed_with_another_learning_rate_schedule_is_refused(first, then, mnist_dir, tmp_path):
    """The learning rate of a scheduled run is the restored scheduler's: a resume without it (or with one the
    checkpoint's run did not have) would train with a learning rate nobody chose."""
    from checkpoints.errors import CheckpointError

    fit(first, mnist_dir, tmp_path / "b", STOP)
    (checkpoint,) = (tmp_path / "b").glob("*.ckpt")
    cosine, none = "torch.optim.lr_scheduler.CosineAnnealingLR", "no scheduler"
    saved, this = (cosine, none) if "cosine" in first else (none, cosine)
    with pytest.raises(CheckpointError, match=f"scheduled its learning rate with {saved}, this run with {this}: resume with") as refused:
        fit(then, mnist_dir, tmp_path / "c", END, ckpt_path=checkpoint)
    assert "--lr_scheduler=... beside --optimizer" in str(refused.value)  # LightningCLI's own optimizer's scheduler


def test_a_checkpoint_written_where_max_steps_stopped_inside_an_epoch_resumes_with_that_epochs_rest(mnist_dir, tmp_path):
    """Lightning counts an epoch that trainer.max_steps ended as processed, so its final checkpoint (last.ckpt) would
    resume at the next epoch, skipping the rest of this one and its validation. Resumed, it ends where an
    uninterrupted run ends, bit for bit."""
    class SaveAtEpochEnd(L.Callback):  # where ModelCheckpoint writes last.ckpt when max_steps ends the epoch
        def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            trainer.save_checkpoint(tmp_path / "stopped.ckpt")

    uninterrupted = fit("vae", mnist_dir, tmp_path / "a", END)
    L.seed_everything(0)
    trainer = L.Trainer(max_steps=STOP, limit_train_batches=10, limit_val_batches=2, num_sanity_val_steps=2, logger=False,
                        callbacks=[SaveAtEpochEnd(), SafeCheckpoints()], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(build("vae"), datamodule=MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32))
    resumed = fit("vae", mnist_dir, tmp_path / "c", END, ckpt_path=tmp_path / "stopped.ckpt")
    for key, value in uninterrupted.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_a_resumed_schedule_takes_this_runs_settings_at_the_epoch_it_reached(mnist_dir, tmp_path, caplog):
    """Lightning restores a scheduler's settings with its progress: a resume given a longer cosine (T_max=4, as
    configs/scheduler/cosine.yaml's ${trainer.max_epochs} gives) and another learning rate would go on with the
    checkpoint's T_max=2 and lr, climbing back up past T_max. It keeps the epoch reached and takes this run's settings,
    each logged, the rate that of a run begun with them."""
    import logging
    import math

    fit("vae, cosine schedule", mnist_dir, tmp_path / "b", STOP)
    (checkpoint,) = (tmp_path / "b").glob("*.ckpt")
    cosine = functools.partial(torch.optim.lr_scheduler.CosineAnnealingLR, T_max=4)
    trainer = L.Trainer(max_steps=END, limit_train_batches=10, limit_val_batches=1, logger=False, callbacks=[SafeCheckpoints()],
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    with caplog.at_level(logging.WARNING, logger="common.resumed_optimizers"):
        trainer.fit(VAE(latent_dim=4, val_num_samples=2, scheduler=cosine, lr=2e-3), ckpt_path=checkpoint,
                    datamodule=MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32))
    (config,) = trainer.lr_scheduler_configs
    assert config.scheduler.T_max == 4 and config.scheduler.base_lrs == [2e-3] and config.scheduler.last_epoch == 1
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(2e-3 * (1 + math.cos(math.pi / 4)) / 2)
    assert "scheduler T_max 2 (checkpoint) -> 4 (this run)" in caplog.text and "base_lrs [0.001] (checkpoint) -> [0.002]" in caplog.text


def test_changed_settings_are_logged_by_what_the_checkpoint_is_read_for(mnist_dir, tmp_path, caplog):
    """Testing a checkpoint with other settings says so as testing, not as resuming."""
    import logging

    fit("vae", mnist_dir, tmp_path, STOP)
    (checkpoint,) = tmp_path.glob("*.ckpt")
    trainer = L.Trainer(limit_test_batches=1, logger=False, callbacks=[SafeCheckpoints()], enable_progress_bar=False,
                        enable_model_summary=False)
    with caplog.at_level(logging.WARNING, logger="checkpoints.trainer"):
        trainer.test(VAE(latent_dim=4, val_num_samples=2, test_num_samples=2, lr=5e-4), ckpt_path=checkpoint,
                     datamodule=MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32))
    assert "testing with changed settings" in caplog.text and "model.lr: 0.001 -> 0.0005" in caplog.text, caplog.text


def test_a_checkpoint_evaluated_on_its_own_logs_at_the_step_its_training_reached(mnist_dir, tmp_path, monkeypatch):
    """`python train.py test --ckpt_path=...` builds a trainer that never trained: its test and validation metrics land
    at the checkpoint's step, as a test after fit in the same process does, not at step 0 before the training curves.
    A trainer of one's own script keeps Lightning's behaviour: a test, then a fit from scratch that trains its steps."""
    import csv

    import launch.cli_app

    monkeypatch.chdir(tmp_path)
    fit("vae", mnist_dir, tmp_path, STOP)
    (checkpoint,) = tmp_path.glob("*.ckpt")
    # the step Lightning logs at: the batches that stepped before the checkpoint's (written within step STOP)
    reached = torch.load(checkpoint, weights_only=True)["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"]
    assert reached == STOP - 1
    for stage in ("validate", "test"):
        launch.cli_app.main([stage, "--model=VAE", f"--ckpt_path={checkpoint}", "--model.val_num_samples=2",
                             "--model.test_num_samples=2", "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1",
                             f"--data.data_dir={mnist_dir}", "--data.batch_size=32", "--trainer.logger=CSVLogger",
                             f"--trainer.logger.save_dir={tmp_path / stage}", "--trainer.enable_progress_bar=false"])
        (metrics,) = (tmp_path / stage).rglob("metrics.csv")
        rows = list(csv.DictReader(open(metrics)))
        # Lightning logs the metrics at the batches that stepped, callbacks/hparams.py its hp/* at the global step
        assert rows and {row["step"] for row in rows} <= {str(reached), str(STOP)}, rows
    data = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32)
    trainer = L.Trainer(max_steps=3, limit_val_batches=1, limit_test_batches=1, logger=False, enable_checkpointing=False,
                        callbacks=[SafeCheckpoints()], enable_progress_bar=False, enable_model_summary=False)
    model = VAE(latent_dim=4, val_num_samples=2, test_num_samples=2)
    trainer.test(model, ckpt_path=checkpoint, datamodule=data)
    trainer.fit(model, datamodule=data)
    assert trainer.global_step == 3


class PrintEpoch(L.Callback):
    """A callback of one's own, given when a run starts."""


@pytest.mark.parametrize("kept", [False, True])
def test_a_resume_without_a_callback_its_run_had_names_it(kept, mnist_dir, tmp_path, caplog):
    """A resume takes its callbacks from its own command: one the checkpoint's run had and this one lacks is named in
    one line, with how to give it again; the Trainer's own progress bar and model summary are not callbacks one gives."""
    import logging

    def trainer(steps: int, *extra: L.Callback) -> L.Trainer:
        return L.Trainer(max_steps=steps, limit_train_batches=10, limit_val_batches=1, logger=False, enable_model_summary=steps == 2,
                         callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True), SafeCheckpoints(), *extra],
                         enable_progress_bar=steps == 2)

    data = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32)
    trainer(2, PrintEpoch()).fit(VAE(latent_dim=4, val_num_samples=2), datamodule=data)
    with caplog.at_level(logging.WARNING, logger="checkpoints.trainer"):
        trainer(3, *([PrintEpoch()] if kept else [])).fit(VAE(latent_dim=4, val_num_samples=2), datamodule=data,
                                                          ckpt_path=tmp_path / "last.ckpt")
    said = [record.getMessage() for record in caplog.records if "callbacks the checkpoint's run had" in record.getMessage()]
    if kept:
        assert not said, said
    else:
        (line,) = said
        assert line.startswith("resuming without callbacks the checkpoint's run had: tests.checkpoints.test_resume.PrintEpoch;"), line
        assert "--trainer.callbacks+=CLASS" in line and "+callbacks.NAME._target_=CLASS" in line
