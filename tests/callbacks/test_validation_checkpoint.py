"""A run's last.ckpt after every validation (callbacks/validation_checkpoint.py): also when val/nll did not
improve there (Lightning 2.6 writes save_last only with a top-k file), so that a run cut after it resumes from it."""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from hydra.utils import instantiate

from checkpoints.loader import load_checkpoint_file
from launch.checks.configs import config_file


class NoImprovement(BoringModel):
    """Its val/nll is the same at every validation: only the first one is a best."""

    def validation_step(self, batch, batch_idx):
        self.log("val/nll", torch.tensor(1.0))


def fit(tmp_path, check_val_every_n_epoch: int) -> L.Trainer:
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    callback = instantiate({**config_file("callbacks/default.yaml")["model_checkpoint"], "dirpath": str(tmp_path)})
    trainer = L.Trainer(max_epochs=4, limit_train_batches=2, limit_val_batches=1, check_val_every_n_epoch=check_val_every_n_epoch,
                        callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0)
    trainer.fit(NoImprovement())
    return trainer


def test_last_checkpoint_is_written_at_every_validation_that_did_not_improve(tmp_path, caplog):
    """The run's checkpoint callback (configs/callbacks/default.yaml), validating every 2 epochs or every epoch: the
    best is the first validation's, and last.ckpt the last validation's (epoch 3, step 8), not the best's."""
    for every in (1, 2):
        fit(tmp_path / str(every), every)
        assert "before any validation" not in caplog.text
        assert [p.name for p in (tmp_path / str(every)).glob("epoch*.ckpt")] == [f"epoch{every - 1:03d}-step{2 * every:06d}.ckpt"]
        last = load_checkpoint_file(tmp_path / str(every) / "last.ckpt")
        assert (last["epoch"], last["global_step"]) == (3, 8), every


def test_its_state_in_a_checkpoint_is_lightnings(tmp_path):
    """The state key is ModelCheckpoint's for the same settings: a checkpoint either wrote restores the other's best."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    settings = {key: value for key, value in config_file("callbacks/default.yaml")["model_checkpoint"].items() if key != "_target_"}
    callback = instantiate({**config_file("callbacks/default.yaml")["model_checkpoint"]})
    assert type(callback) is not ModelCheckpoint and callback.state_key == ModelCheckpoint(**settings).state_key


def test_a_run_stopped_before_its_first_validation_says_so_and_keeps_last_ckpt_without_a_warning_about_logging(tmp_path, caplog):
    """No validation yet, so no val/nll to rank by: last.ckpt is written, a line says that the run has no val/nll and no
    best checkpoint, and Lightning's warning that asks whether val/nll is logged at all is not shown (it is, at every
    validation)."""
    callback = instantiate({**config_file("callbacks/default.yaml")["model_checkpoint"], "dirpath": str(tmp_path)})
    trainer = L.Trainer(max_steps=2, limit_train_batches=4, callbacks=[callback], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(NoImprovement())
    assert not [w for w in caught if "could not find the monitored key" in str(w.message)]
    assert load_checkpoint_file(tmp_path / "last.ckpt")["global_step"] == 2
    assert "training stopped at step 2 before any validation" in caplog.text and "trainer.val_check_interval" in caplog.text
    assert "at an epoch's end, after 4 batches" in caplog.text


@pytest.mark.parametrize("schedule, when", [({"val_check_interval": 0.5}, "every 4 batches here"),
                                            ({"check_val_every_n_epoch": 3}, "at an epoch's end, after 8 batches here, every 3 epochs")])
def test_the_line_of_a_run_stopped_before_its_first_validation_says_when_validation_comes(schedule, when, tmp_path, caplog):
    callback = instantiate({**config_file("callbacks/default.yaml")["model_checkpoint"], "dirpath": str(tmp_path)})
    trainer = L.Trainer(max_steps=2, limit_train_batches=8, callbacks=[callback], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, **schedule)
    trainer.fit(NoImprovement())
    assert f"before any validation (each comes {when})" in caplog.text, caplog.text


@pytest.mark.parametrize("monitor, refused", [("val/nlll", True), ("val/nll", False), ("train/loss", False)])
def test_a_monitored_validation_metric_no_validation_logs_is_refused_before_training(monitor, refused, tmp_path):
    """The sanity check's validation logs what each validation logs; training's keys come later and are left to
    Lightning's check at the first validation."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    callback = instantiate({**config_file("callbacks/default.yaml")["model_checkpoint"], "dirpath": str(tmp_path),
                            "monitor": monitor})
    trainer = L.Trainer(max_steps=1, limit_val_batches=1, num_sanity_val_steps=1, callbacks=[callback], logger=False,
                        enable_progress_bar=False, enable_model_summary=False)
    if not refused:
        trainer.fit(NoImprovement())
        return
    with pytest.raises(MisconfigurationException, match=r"monitor=val/nlll\): .*did you mean val/nll\?"):
        trainer.fit(NoImprovement())
    assert trainer.global_step == 0
