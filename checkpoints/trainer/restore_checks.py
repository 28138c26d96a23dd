"""What a checkpoint restores into a trainer, checked before Lightning or torch restores it (an altered count or buffer,
or a state of other settings, would end in a traceback deep in Lightning or train on silently); each refusal names the
checkpoint and the first wrong entry, in one line.

* `check_restored`, when the checkpoint is read (io_plugin.py): the model's state fits (names, shapes, kinds of number;
  differing settings named), the loop counts, and a restored ModelCheckpoint's paths stay inside the run's checkpoint
  directory (Lightning removes "the previous one" at its next save);
* `check_optimizers`, once the optimizers are built: the same optimizer and scheduler classes, parameter groups, and
  finite moments of each parameter's shape.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch

from checkpoints.errors import CheckpointError
from checkpoints.loader import check_fits
from common.signatures import constructor_defaults, settings_of

log = logging.getLogger(__name__)

RESTORED_PATHS = ("last_model_path", "best_model_path", "kth_best_model_path")  # ModelCheckpoint's, besides best_k_models
READ_FOR = {"fit": "resuming", "validate": "validating", "test": "testing", "predict": "predicting"}  # by trainer.state.fn


def check_restored(checkpoint: dict[str, Any], trainer: L.Trainer, path: Any) -> None:
    """Refuse a checkpoint whose model state or loop counts do not fit `trainer` (module docstring); log the settings
    that differ from the checkpoint's; drop the restored ModelCheckpoint paths outside its directory, with one line."""
    module = trainer.lightning_module
    changed = changed_settings(checkpoint, module, trainer.datamodule)
    check_fits(checkpoint["state_dict"], module.state_dict(), path, changed)
    if changed and trainer.is_global_zero:
        differences = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        log.warning("%s with changed settings (this run's values are used and recorded): %s",
                    READ_FOR.get(trainer.state.fn, "resuming"), differences)
    own = {"epoch": 0, "global_step": 0, "loops": {"fit_loop": trainer.fit_loop.state_dict()}}  # what a trainer writes
    if found := _misfit(checkpoint, own):
        raise CheckpointError(f"checkpoint {path}: its {found} is not what a training loop writes there (a count >= 0, "
                              "or a mapping): the file was altered; use another checkpoint")
    states = checkpoint.get("callbacks") or {}  # mappings (checkpoints/loader.py)
    for callback in trainer.checkpoint_callbacks:
        state = states.get(callback.state_key)
        if state is not None and getattr(callback, "dirpath", None):
            drop_paths_outside(state, callback.dirpath, path)


def changed_settings(checkpoint: dict[str, Any], module: L.LightningModule, datamodule: Any = None) -> dict[str, tuple[Any, Any]]:
    """"model.NAME" / "data.NAME" -> (the checkpoint's value, this run's value) for every setting that differs."""
    defaults = constructor_defaults(type(module))  # a setting left out of either is its default
    saved = {**defaults, **(checkpoint.get("hyper_parameters") or {})}
    changed = {f"model.{key}": (saved[key], value) for key, value in settings_of(module).items()
               if key in saved and not key.startswith("_") and not same(saved[key], value)}
    saved_data, data = checkpoint.get("datamodule_hyper_parameters"), getattr(datamodule, "hparams", None)
    if saved_data and data:  # (none if either has no record)
        changed.update({f"data.{key}": (saved_data[key], value) for key, value in data.items()
                        if key in saved_data and not same(saved_data[key], value)})
    return changed


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return bool(torch.equal(torch.as_tensor(a), torch.as_tensor(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):  # saved lists may come back as tuples
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if callable(a) or callable(b):  # an optimizer factory: rebuilt each run, compared by what it says
        return repr(a) == repr(b)
    try:
        return bool(a == b)
    except Exception:  # values that cannot be compared: not reported
        return True


def _misfit(saved: Any, own: Any, where: str = "") -> str | None:
    """The first key path at which `saved` is not what the trainer's `own` state holds there (a mapping, or a count
    >= 0): Lightning would fail on it with a traceback, or count from a negative step."""
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not isinstance(own, dict):
        return where if count(own) and not (count(saved) and saved >= 0) else None
    if not isinstance(saved, dict):
        return where
    return next(filter(None, (_misfit(saved[key], value, f"{where}.{key}" if where else key)
                              for key, value in own.items() if key in saved)), None)


def lies_inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether `path`, with `..` and links resolved, lies strictly below `directory` (also resolved)."""
    return Path(directory).resolve() in Path(path).resolve().parents


def drop_paths_outside(state: dict[str, Any], directory: str, source: Any) -> None:
    """Empty the paths of a restored ModelCheckpoint state, `best_k_models` included, when one is not a file name
    inside `directory`: Lightning would remove it at the next save, or load it as "the best"."""
    best = state.get("best_k_models", {})
    named = [state.get(key, "") for key in RESTORED_PATHS] + (list(best) if isinstance(best, dict) else [best])
    outside = [path for path in named if not isinstance(path, str) or (path != "" and not lies_inside(path, directory))]
    if outside:
        state.update({key: "" for key in RESTORED_PATHS}, best_k_models={})
        log.warning("checkpoint %s: its ModelCheckpoint state names %s outside this run's checkpoint directory %s; "
                    "ignored (nothing there is removed or loaded)", source, repr(outside[0])[:200], directory)


def class_names(objects: Any) -> list[str]:
    return [f"{type(o).__module__}.{type(o).__qualname__}" for o in objects]


def check_optimizers(checkpoint: dict[str, Any], trainer: L.Trainer) -> None:
    """Refuse to restore the checkpoint's optimizer states into `trainer`'s built optimizers of another class, other
    parameter groups, or a scheduler of another class (whose restored state would apply without a word); or a moment
    that is not finite or not of its parameter's shape (a traceback at the first step, or every weight spoiled)."""
    path = trainer.ckpt_path
    saved, current = checkpoint.get("optimizer_classes"), class_names(trainer.optimizers)
    if saved is not None and saved != current:
        raise CheckpointError(f"the checkpoint holds the state of optimizer {', '.join(saved)}, this run uses "
                              f"{', '.join(current)}: resume with the checkpoint's optimizer, or start a new run")
    saved, current = checkpoint.get("lr_scheduler_classes"), class_names(c.scheduler for c in trainer.lr_scheduler_configs)
    if saved is not None and saved != current:
        raise CheckpointError(f"the checkpoint's run scheduled its learning rate with {', '.join(saved) or 'no scheduler'}, "
                              f"this run with {', '.join(current) or 'no scheduler'}: resume with the checkpoint's scheduler "
                              "(scheduler=..., --model.scheduler=...), or start a new run")
    states = checkpoint.get("optimizer_states")
    if states is None:  # a checkpoint of the weights alone: Lightning restores no optimizer
        return
    saved = [[len(group["params"]) for group in state["param_groups"]] for state in states]
    built = [[len(group["params"]) for group in optimizer.param_groups] for optimizer in trainer.optimizers]
    if saved != built:
        raise CheckpointError(f"checkpoint {path}: its optimizer_states hold {saved} parameters group by group, "
                              f"this run's optimizers {built}: the file was altered, or written for other settings")
    names = {id(p): name for name, p in trainer.lightning_module.named_parameters()}
    for state, optimizer in zip(states, trainer.optimizers):
        params = [param for group in optimizer.param_groups for param in group["params"]]
        for index, buffers in state["state"].items():
            param = params[index] if 0 <= index < len(params) else None  # (ints: checkpoints/loader.py)
            for key, value in buffers.items():
                where = f"checkpoint {path}: the optimizer's {key} of {names.get(id(param), f'parameter {index}')}"
                if isinstance(value, torch.Tensor) and value.dim() > 0 and (param is None or value.shape != param.shape):
                    raise CheckpointError(f"{where} has shape {tuple(value.shape)}, the parameter "
                                          f"{tuple(param.shape) if param is not None else 'none'}: the file was altered, "
                                          "or written for other settings")
                if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
                    raise CheckpointError(f"{where} holds NaN or inf: resuming would spoil the weights at the first step; "
                                          "use an earlier checkpoint")
