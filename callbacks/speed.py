"""Training speed in the same tags for every model: `train/step_time_ms`, `train/samples_per_s`, `train/epoch_time_s`.

A step's time is the wall time from one training batch's start to the next's, minus any validation between them. Nothing
is synchronized: the host runs only a few kernels ahead of a GPU, so in steady state this is the device's throughput.
An epoch's time is logged only for an epoch run whole in this process (not resumed mid-epoch, nor cut short).
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L

from common.log_steps import is_logging_step


class TrainingSpeed(L.Callback):
    """Logs the step time and throughput (samples per second over all devices) of training.

    One of the default callbacks of both front ends (launch/run_builder.py: default_callbacks, configs/callbacks/default.yaml).
    """

    def __init__(self) -> None:
        self._last_batch_start: float | None = None
        self._epoch_start: float | None = None  # None: this process did not see the epoch start (a mid-epoch resume)
        self._batches_run = 0  # the epoch's batches that ran in this process
        self._paused = 0.0  # seconds of validation since the last batch started
        self._paused_in_epoch = 0.0
        self._pause_start = 0.0
        self._seconds, self._samples, self._steps = 0.0, 0, 0  # since the last logged step

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start, self._batches_run = time.perf_counter(), 0
        self._last_batch_start = None
        self._seconds, self._samples, self._steps = 0.0, 0, 0  # since the last logged step
        self._paused = self._paused_in_epoch = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        now = time.perf_counter()
        self._batches_run += 1
        if self._last_batch_start is not None:
            self._seconds += now - self._last_batch_start - self._paused
            self._samples += batch[0].shape[0] * trainer.world_size
            self._steps += 1
            if is_logging_step(trainer):  # the mean over the steps since the last logged one (common/log_steps.py)
                pl_module.log("train/step_time_ms", 1e3 * self._seconds / self._steps)
                pl_module.log("train/samples_per_s", self._samples / self._seconds)
                self._seconds, self._samples, self._steps = 0.0, 0, 0
        self._last_batch_start, self._paused = now, 0.0

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._pause_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            paused = time.perf_counter() - self._pause_start
            self._paused += paused
            self._paused_in_epoch += paused

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Validation at the end of an epoch runs before this hook: leave it out of the epoch's time.
        if self._epoch_start is None or self._batches_run < trainer.num_training_batches:
            return
        seconds = time.perf_counter() - self._epoch_start - self._paused_in_epoch
        pl_module.log("train/epoch_time_s", seconds)
        self._epoch_start = None
