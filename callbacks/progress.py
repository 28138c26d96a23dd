"""Progress that reads well where the output goes: Lightning's TQDM bars on a terminal, and plain
lines (no escape codes, no carriage returns) in a log file or a pipe, with an estimate of the time
left for training epochs and for the (long) importance-sampled test stage."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar


def progress_bar(refresh_seconds: float = 30.0) -> ProgressBar:
    """TQDM bars when standard output is a terminal, plain lines otherwise."""
    return LossTQDMProgressBar() if sys.stdout.isatty() else LineProgressBar(refresh_seconds)


class ShowsTrainingLoss:
    """The bar's metrics plus `train/loss`, read from the trainer's callback metrics when the bar is drawn.

    Models log `train/loss` without prog_bar=True: Lightning converts every prog_bar metric to a Python float
    after every training step, a host sync on a GPU; a bar reads it only when it refreshes."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the last 4 characters of the version ("on_0"): the run directory says it whole
        loss = trainer.callback_metrics.get("train/loss")
        return {"train/loss": float(loss), **metrics} if loss is not None else metrics


class LossTQDMProgressBar(ShowsTrainingLoss, TQDMProgressBar):
    """Lightning's TQDM bars with the training loss; after a mid-epoch resume the bar shows the epoch, its length and
    a rate (hence the time left) over the batches this process ran."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        # On a resume from a mid-epoch checkpoint Lightning does not call on_train_epoch_start: start the epoch here.
        self._resumed_mid_epoch = trainer.fit_loop.restarted_mid_epoch
        if self._resumed_mid_epoch:
            self.on_train_epoch_start(trainer, pl_module)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if getattr(self, "_resumed_mid_epoch", False):  # the batches before batch_idx ran in an earlier process
            self.train_progress_bar.initial = self.train_progress_bar.n = batch_idx
            self._resumed_mid_epoch = False


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


class LineProgressBar(ShowsTrainingLoss, ProgressBar):
    """One line at most every `refresh_seconds` per stage, and one when a stage ends."""

    def __init__(self, refresh_seconds: float = 30.0) -> None:
        super().__init__()
        if refresh_seconds < 0:
            raise ValueError(f"refresh_seconds must be >= 0, got {refresh_seconds}")
        self.refresh_seconds = refresh_seconds
        self._enabled = True
        self._start = self._last = 0.0
        self._done = 0  # batches of the current stage
        self._train_start, self._train_done, self._resumed_at = time.monotonic(), 0, 0
        self._resumed_mid_epoch = False

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _begin(self) -> None:
        self._start = self._last = time.monotonic()
        self._done = 0

    def _report(self, what: str, done: int, total: int | float, extra: Callable[[], str] | None = None, force: bool = False,
                start: float | None = None, done_before: int = 0) -> None:
        """`extra` (the metrics) is called only when a line is printed: reading the progress-bar metrics converts
        them to Python floats, a host sync that must not happen at every step."""
        now = time.monotonic()
        if not self._enabled or not (force or now - self._last >= self.refresh_seconds):
            return
        self._last = now
        elapsed = now - (self._start if start is None else start)
        line = f"{what}: {done}/{total if total != float('inf') else '?'} batches, {_clock(elapsed)} elapsed"
        if done_before < done < total != float("inf"):  # the rate over the batches this process ran
            line += f", about {_clock(elapsed / (done - done_before) * (total - done))} left"
        text = extra() if extra else ""
        print(line + (f"  {text}" if text else ""), flush=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # On a resume from a mid-epoch checkpoint Lightning does not call on_train_epoch_start: start the epoch here.
        self._resumed_mid_epoch = trainer.fit_loop.restarted_mid_epoch
        if self._resumed_mid_epoch:
            self.on_train_epoch_start(trainer, pl_module)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if self._resumed_mid_epoch:  # the batches before batch_idx ran in an earlier process: no part of the rate
            self._train_done = self._resumed_at = batch_idx
            self._resumed_mid_epoch = False

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin()
        self._train_start, self._train_done, self._resumed_at = self._start, 0, 0

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._train_done = batch_idx + 1
        self._report(self._epoch(trainer), self._train_done, self.total_train_batches, lambda: self._metrics(trainer, pl_module),
                     start=self._train_start, done_before=self._resumed_at)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        done, what, total = getattr(self, "_train_done", 0), self._epoch(trainer) + " done", self.total_train_batches
        if done < total != float("inf") and 0 <= trainer.max_steps <= trainer.global_step:  # the epoch was cut short
            what = f"{self._epoch(trainer)} ended by the trainer's max_steps={trainer.max_steps}"
        else:
            total = done
        self._report(what, done, total, lambda: self._metrics(trainer, pl_module), force=True, start=self._train_start,
                     done_before=done)  # the epoch has ended: no time left to estimate

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin()

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.has_dataloader_changed(dataloader_idx)  # tracks the loader whose batches are counted

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._done = batch_idx + 1
        self._report("validation", self._done, self.total_val_batches_current_dataloader)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.reset_dataloader_idx_tracker()
        if not trainer.sanity_checking:
            self._report("validation done", self._done, self._done, lambda: self._metrics(trainer, pl_module, "val/"), force=True)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin()

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.has_dataloader_changed(dataloader_idx)

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._done = batch_idx + 1
        self._report("test", self._done, self.total_test_batches_current_dataloader)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.reset_dataloader_idx_tracker()
        self._report("test done", self._done, self._done, lambda: self._metrics(trainer, pl_module, "test/"), force=True)

    @staticmethod
    def _epoch(trainer: L.Trainer) -> str:
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else "?"
        return f"epoch {trainer.current_epoch + 1}/{total}"

    def _metrics(self, trainer: L.Trainer, pl_module: L.LightningModule, prefix: str = "") -> str:
        metrics = self.get_metrics(trainer, pl_module)
        return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items() if k.startswith(prefix) and k != "v_num")
