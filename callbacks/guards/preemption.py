"""SIGTERM (how SLURM and Kubernetes preempt) and Ctrl-C save a resumable checkpoint and stop.

On Lightning's `SIGTERMException` (at the next step boundary) every rank writes `last.ckpt`, the state after the last
finished step, and the exit status is 128 + the signal's number (143, or 130 for Ctrl-C) where Lightning's is 0;
during validate or test it exits with 143 saving nothing. A second Ctrl-C interrupts at once. The message names the
command that resumes the run (`resume_command`); the run's loggers record `run/stopped_by_signal` (the signal's
number) at the steps trained, which the comparison report reads (benchmarks/compare.py).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException

from checkpoints.resume_command import resume_command
from common.private_api import sigterm_without_broadcast

log = logging.getLogger(__name__)


class _WithoutLightningsSigtermLine(logging.Filter):
    """Drops Lightning's "[rank: N] Received SIGTERM: 15" while a SaveOnPreemption callback trains: the callback's own
    message says which signal stopped the run (after Ctrl-C, SIGINT, not the SIGTERM it sends itself) and how to resume."""

    def __init__(self) -> None:
        super().__init__()
        self.active = 0  # SaveOnPreemption callbacks between on_train_start and the end of fit

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.active and "Received SIGTERM: " in record.getMessage())


_sigterm_line = _WithoutLightningsSigtermLine()
logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector").addFilter(_sigterm_line)


class SaveOnPreemption(L.Callback):
    """On SIGTERM or the first Ctrl-C: save `last.ckpt` at the next step boundary and exit with 128 + signal."""

    def __init__(self) -> None:
        self.signal: int = signal.SIGTERM
        self._previous_sigint: Any = None
        self._filtering = False  # counted in _sigterm_line.active

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After Lightning registered its SIGTERM handler; its teardown puts back the handlers of before fit.
        self.signal = signal.SIGTERM
        if threading.current_thread() is threading.main_thread():
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
            sigterm_without_broadcast(trainer)  # no collective inside the handler: under DDP it meets another rank's
        if not self._filtering:
            _sigterm_line.active += 1
            self._filtering = True

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.signal = signal.SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C: KeyboardInterrupt at once
        log.warning("Ctrl-C: stopping after this step and saving a checkpoint (press Ctrl-C again to abort at once)")
        os.kill(os.getpid(), signal.SIGTERM)  # Lightning's SIGTERM path: stop at the step boundary, all ranks

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore_sigint()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_sigint()
        if not isinstance(exception, SIGTERMException):
            return
        if trainer.state.fn != "fit":  # a stopped validate or test: nothing to resume, but no success either
            exception.code = 128 + signal.SIGTERM
            return
        path = checkpoint_directory(trainer) / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # the full state (Lightning's default, said: no log line about it)
        for logger in trainer.loggers:  # (rank 0's): the run's record says it stopped early (benchmarks/compare.py)
            logger.log_metrics({"run/stopped_by_signal": float(self.signal)}, step=trainer.global_step)
        name, config_file = signal.Signals(self.signal).name, run_config_file(trainer)  # every rank: a broadcast under DDP
        if trainer.is_global_zero:
            log.warning("%s: saved a resumable checkpoint at step %d to %s; resume with: %s", name, trainer.global_step,
                        path, resume_command(path, type(pl_module).__name__, config_file=config_file))
        exception.code = 128 + self.signal  # SystemExit's status: the run was stopped by a signal

    def _restore_sigint(self) -> None:
        if self._filtering:
            _sigterm_line.active -= 1
            self._filtering = False
        if self._previous_sigint is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None


def run_config_file(trainer: L.Trainer) -> Path | None:
    """The config.yaml LightningCLI wrote into the run (launch/cli_app.py), which holds every setting of the run."""
    return Path(trainer.log_dir) / "config.yaml" if trainer.log_dir else None


def checkpoint_directory(trainer: L.Trainer) -> Path:
    """Where the run's ModelCheckpoint writes (its `last.ckpt` is the one to resume from): its dirpath, else where
    it puts its files when it has none, as Lightning resolves it at setup (the logger's <log_dir>/checkpoints, else
    <default_root_dir>/checkpoints); a process that spawned the ranks (ddp_spawn) never ran that setup itself."""
    callback = trainer.checkpoint_callback
    if callback is not None and getattr(callback, "dirpath", None):
        return Path(callback.dirpath)
    if trainer.loggers and getattr(trainer.loggers[0], "log_dir", None):
        return Path(trainer.loggers[0].log_dir) / "checkpoints"
    return Path(trainer.default_root_dir) / "checkpoints"
