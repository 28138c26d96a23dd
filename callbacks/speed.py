"""Training speed in the same tags for every model: `train/step_time_ms`, `train/samples_per_s`,
`train/epoch_time_s`.

A step's time is the wall time from the start of one training batch to the start of the next
(the step itself, logging and fetching the next batch), minus any validation run in between; at each
logging step (`trainer.log_every_n_steps`) the mean over the steps since the last one is logged. No
explicit synchronization is added (logging a Python float does copy it to the device): on a GPU the
host can run ahead of the device by a few kernels, but not for long, so the time between batches is
the device's throughput in steady state.

An epoch's time is logged only for an epoch that ran whole in this process: a run resumed from a mid-epoch
checkpoint starts inside an epoch without `on_train_epoch_start`, and the part it runs is not an epoch's time.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L

from common.log_steps import is_logging_step


class TrainingSpeed(L.Callback):
    """Logs the step time and throughput (samples per second over all devices) of training.

    One of the default callbacks of both front ends (callbacks.default_callbacks, configs/callbacks/default.yaml).
    """

    def __init__(self) -> None:
        self._last_batch_start: float | None = None
        self._epoch_start: float | None = None  # None: this process did not see the epoch start (a mid-epoch resume)
        self._paused = 0.0  # seconds of validation since the last batch started
        self._paused_in_epoch = 0.0
        self._pause_start = 0.0
        self._seconds, self._samples, self._steps = 0.0, 0, 0  # since the last logged step

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start = time.perf_counter()
        self._last_batch_start = None
        self._seconds, self._samples, self._steps = 0.0, 0, 0  # since the last logged step
        self._paused = self._paused_in_epoch = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        now = time.perf_counter()
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
        if self._epoch_start is None:
            return
        seconds = time.perf_counter() - self._epoch_start - self._paused_in_epoch
        pl_module.log("train/epoch_time_s", seconds)
        self._epoch_start = None
