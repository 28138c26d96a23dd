"""Resuming with settings that differ from the checkpoint's: train with what the run records, or refuse.

A resumed run is built from this run's settings (and records them); Lightning then loads the checkpoint into it.
* shapes: a setting that changes a tensor cannot take the checkpoint's state; `state_mismatch` turns torch's refusal
  into one line naming the settings that differ;
* the optimizer: Lightning restores its hyperparameters too, so `ResumeSettings` sets each back to this run's value
  and logs what changed; another optimizer class, or another scheduler (whose learning rate is restored), is refused.
The data module's changed settings are logged the same way (its loader resumes at the same example:
datamodules/resumable.py).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import lightning as L
import torch

from checkpoints.errors import CheckpointError
from common.signatures import constructor_defaults, settings_of

log = logging.getLogger(__name__)

# Optimizer constructor flags that choose an implementation, not a hyperparameter of the update.
IMPLEMENTATION_FLAGS = {"foreach", "fused", "capturable", "differentiable", "maximize"}


def changed_settings(checkpoint: dict[str, Any], module: L.LightningModule, datamodule: Any = None) -> dict[str, tuple[Any, Any]]:
    """"model.NAME" / "data.NAME" -> (the checkpoint's value, this run's value) for every setting that differs."""
    defaults = constructor_defaults(type(module))  # a setting left out of either is its default
    saved = {**defaults, **(checkpoint.get("hyper_parameters") or {})}
    changed = {f"model.{key}": (saved[key], value) for key, value in settings_of(module).items()
               if key in saved and not key.startswith("_") and not _same(saved[key], value)}
    saved_data, data = checkpoint.get("datamodule_hyper_parameters"), getattr(datamodule, "hparams", None)
    if saved_data and data:  # (none if either has no record)
        changed.update({f"data.{key}": (saved_data[key], value) for key, value in data.items()
                        if key in saved_data and not _same(saved_data[key], value)})
    return changed


def state_mismatch(error: RuntimeError, changed: dict[str, tuple[Any, Any]], path: Any = None) -> Exception:
    """torch's "Error(s) in loading state_dict" (missing, unexpected or reshaped tensors) as one line that
    names the checkpoint (`path`, where known) and the settings that differ from the checkpoint's; any other error unchanged."""
    text = str(error)
    if "Error(s) in loading state_dict" not in text:
        return error
    details = [_shorter(line.strip().rstrip(".")) for line in text.splitlines()[1:] if line.strip()]
    summary = "; ".join(details)
    summary = summary if len(summary) <= 300 else summary[:300] + " ..."
    settings = ", ".join(f"{k}={old!r} -> {new!r}" for k, (old, new) in changed.items())
    return CheckpointError(
        f"{f'checkpoint {path}' if path else 'the checkpoint'} does not fit this model ({summary}): "
        + (f"the settings differ from the checkpoint's ({settings}); " if settings else "")
        + "resume with the checkpoint's settings, or start a new run without ckpt_path")


def _shorter(detail: str) -> str:
    """"size mismatch for w: copying a param with shape torch.Size([2, 3]) from checkpoint, the shape in
    current model is torch.Size([4, 3])" -> "w (2, 3) in the checkpoint, (4, 3) here"."""
    match = re.match(r"size mismatch for (\S+): .*?torch\.Size\(\[(.*?)\]\).*?torch\.Size\(\[(.*?)\]\)", detail)
    return f"{match[1]} ({match[2]}) in the checkpoint, ({match[3]}) here" if match else detail


def optimizer_names(optimizers: list[Any]) -> list[str]:
    return [f"{type(o).__module__}.{type(o).__qualname__}" for o in optimizers]


def scheduler_names(trainer: L.Trainer) -> list[str]:
    return optimizer_names([config.scheduler for config in trainer.lr_scheduler_configs])


class ResumeSettings(L.Callback):
    """Logs the settings a resumed run changes, applies this run's optimizer hyperparameters, and refuses
    to load one optimizer's state into another."""

    def __init__(self) -> None:
        self._saved_optimizers: list[str] | None = None
        self._saved_schedulers: list[str] | None = None
        self._resumed = False

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint["optimizer_classes"] = optimizer_names(trainer.optimizers)
        checkpoint["lr_scheduler_classes"] = scheduler_names(trainer)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        changed = changed_settings(checkpoint, pl_module, trainer.datamodule)
        if changed and trainer.is_global_zero:
            log.warning("resuming with changed settings (this run's values are used and recorded): %s",
                        ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items()))
        self._saved_optimizers = checkpoint.get("optimizer_classes")
        self._saved_schedulers = checkpoint.get("lr_scheduler_classes")
        self._resumed = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After Lightning restored the optimizers: `defaults` still holds what this run's constructor got.
        if not self._resumed:
            return
        current = optimizer_names(trainer.optimizers)
        if self._saved_optimizers is not None and self._saved_optimizers != current:
            raise CheckpointError(
                f"the checkpoint holds the state of optimizer {', '.join(self._saved_optimizers)}, this run uses "
                f"{', '.join(current)}: resume with the checkpoint's optimizer, or start a new run")
        schedulers = scheduler_names(trainer)
        if self._saved_schedulers is not None and self._saved_schedulers != schedulers:
            raise CheckpointError(
                f"the checkpoint's run scheduled its learning rate with {', '.join(self._saved_schedulers) or 'no scheduler'}, "
                f"this run with {', '.join(schedulers) or 'no scheduler'}: resume with the checkpoint's scheduler "
                "(scheduler=..., --model.scheduler=...), or start a new run")
        scheduled = {"lr"} if schedulers else set()  # the restored scheduler's, as it left it
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                for key, value in optimizer.defaults.items():
                    if key in IMPLEMENTATION_FLAGS | scheduled or key not in group or _same(group[key], value):
                        continue
                    if trainer.is_global_zero:
                        log.warning("resuming: optimizer %s %r (checkpoint) -> %r (this run)", key, group[key], value)
                    group[key] = value
        self._resumed = False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return bool(torch.equal(torch.as_tensor(a), torch.as_tensor(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):  # saved lists may come back as tuples
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if callable(a) or callable(b):  # an optimizer factory: rebuilt each run, compared by what it says
        return repr(a) == repr(b)
    try:
        return bool(a == b)
    except Exception:  # values that cannot be compared (an optimizer factory): not reported
        return True
