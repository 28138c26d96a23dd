"""Lightning's ModelCheckpoint with `last.ckpt` written after every validation, the resume point of a run cut there.

Lightning writes `last.ckpt` only at a step where it also saved a top-k file, so a run whose val/nll did not improve,
or a replicated process that keeps no top-k of its own (callbacks/replica_runs.py keeps each replica's), would resume
from an older validation, or from nothing. Here, where Lightning saves after a validation, `last.ckpt` is written when
Lightning wrote nothing (with `every_n_train_steps`, the steps' saves are the resume points instead).
"""

from __future__ import annotations

import logging
import warnings

import lightning as L
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from common.private_api import checkpoint_every_n_train_steps
from common.settings import did_you_mean

log = logging.getLogger(__name__)


class ValidationCheckpoint(ModelCheckpoint):
    """ModelCheckpoint (same arguments) whose `save_last` holds after every validation of a fit."""

    @property
    def state_key(self) -> str:
        """Lightning's key for these settings (`ModelCheckpoint{...}`): its state in a checkpoint written by either
        class is restored by the other (a run resumed across the change keeps its best)."""
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    _saves = 0  # files written, to tell whether Lightning's own hook saved (no __init__: the CLI reads Lightning's)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        # Before the first validation there is no val/nll to rank checkpoints by (last.ckpt is the run's checkpoint):
        # Lightning's warning there ("... HINT: Did you call `log('val/nll', value)`?") points at a logging bug there
        # is not. A key still missing once a validation ran stays Lightning's error.
        warnings.filterwarnings("ignore", message=r"`ModelCheckpoint\(monitor=.*\)` could not find the monitored key")

    def on_sanity_check_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The sanity check's validation logs every val/ key a validation logs (training's are not logged yet): a
        # monitored one missing is a typo, refused before the first epoch trains rather than after it (Lightning's).
        logged = sorted(key for key in trainer.callback_metrics if key.startswith("val/"))
        if self.monitor and self.monitor.startswith("val/") and logged and self.monitor not in logged:
            raise MisconfigurationException(f"{type(self).__name__}(monitor={self.monitor}): the validation logs no such metric"
                                            f"{did_you_mean(self.monitor, logged)} (it logs {', '.join(logged)})")

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        self._saves += 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        saves = self._saves
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_unsaved(trainer, saves)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        # A fit that trained and never validated (max_steps within the first epoch) has no val/nll to rank by.
        if (self.monitor and not self.best_model_path and trainer.global_step > 0 and trainer.limit_val_batches
                and not trainer.fast_dev_run and trainer.is_global_zero and trainer.state.fn == TrainerFn.FITTING):
            every, epochs = trainer.val_check_batch, trainer.check_val_every_n_epoch or 1  # Lightning's schedule
            when = (f"each comes every {every} batches here" if isinstance(every, int) and every < trainer.num_training_batches
                    else f"each comes at an epoch's end, after {trainer.num_training_batches} batches here")
            when += f", every {epochs} epochs" if epochs > 1 else ""
            log.warning("training stopped at step %d before any validation (%s): no %s and no best checkpoint, only "
                        "the final weights; to validate sooner, set the trainer's val_check_interval to fewer batches (Hydra: "
                        "trainer.val_check_interval=N; LightningCLI: --trainer.val_check_interval=N)",
                        trainer.global_step, when, self.monitor)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        saves = self._saves
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_unsaved(trainer, saves)

    def _save_last_if_unsaved(self, trainer: L.Trainer, saves: int) -> None:
        # Only where last.ckpt follows the validations alone: with every_n_train_steps the resume points are the
        # steps' (Lightning resumes an iteration-based run from one written at an epoch's end in another state than
        # the uninterrupted run's, so a run stopped there would not continue bit for bit).
        if (self.save_last and saves == self._saves and checkpoint_every_n_train_steps(self) is None
                and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking and not trainer.fast_dev_run):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
