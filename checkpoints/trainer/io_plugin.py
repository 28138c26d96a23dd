"""Lightning's checkpoint I/O plugin, for every save, load and removal the trainer makes: atomic checksummed writes
(checkpoints/file_format.py); removals of checkpoint files only (never a directory, never through a link); the checked
read (checkpoints/loader.py), then what it restores held to the trainer before Lightning restores it (else a traceback
deep in Lightning, or silent training on a wrong state), one line naming the first wrong entry: the model class, the
model's state (the settings that differ named and logged), the loop counts, a ModelCheckpoint's paths kept inside the
run's checkpoint directory. The optimizers' states are checked once they are built (safe_checkpoints.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.plugins import TorchCheckpointIO

from checkpoints.errors import CheckpointError
from checkpoints.file_format import CHECKSUM_SUFFIX, save_checkpoint_file
from checkpoints.loader import check_fits, load_checkpoint_file
from checkpoints.model_class import check_model_class
from common.signatures import constructor_defaults, settings_of

log = logging.getLogger(__name__)

RESTORED_PATHS = ("last_model_path", "best_model_path", "kth_best_model_path")  # ModelCheckpoint's, besides best_k_models
READ_FOR = {"fit": "resuming", "validate": "validating", "test": "testing", "predict": "predicting"}  # by trainer.state.fn


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O with atomic, checksummed writes and verified, checked reads (local paths)."""

    def __init__(self, read: tuple[Any, dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.read = read  # (path, checkpoint): what the builder read and checked already (launch/run_builder.py)
        self.trainer: Any = None  # the trainer it serves (set by SafeCheckpoints); None: the plugin used on its own

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if "://" in str(path):  # object storage: its uploads are atomic already
            return super().save_checkpoint(checkpoint, path, storage_options)
        save_checkpoint_file(checkpoint, path)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        # Every read the trainer makes (resume, test/validate ckpt_path) is the safe one; only an explicit
        # `weights_only=False` given to the trainer in code trusts the file. The checkpoint the builder read is handed
        # over once, not read again; onto the CPU: the restore copies every tensor to where its module or optimizer lives.
        module = getattr(self.trainer, "lightning_module", None)
        if self.read is not None and weights_only is not False and Path(self.read[0]).resolve() == Path(path).resolve():
            checkpoint, self.read = self.read[1], None
        else:
            checkpoint = load_checkpoint_file(path, map_location or "cpu", trusted=weights_only is False)
            if module is not None:
                check_model_class(checkpoint, getattr(module, "model_class", type(module)), path, self.trainer.state.fn.value)
        if "pytorch-lightning_version" not in checkpoint:  # Lightning's migration would end in a KeyError
            raise CheckpointError(f"checkpoint {path} holds a model's weights only, not a Lightning checkpoint (no "
                                  "'pytorch-lightning_version'); the trainer cannot resume or test from it. In Python: "
                                  "model.load_state_dict(torch.load(path, weights_only=True)['state_dict'])")
        if module is not None:
            check_restored(checkpoint, self.trainer, path)
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        # Lightning removes only paths its ModelCheckpoint made or restored, and a restored one lies inside the run's
        # checkpoint directory (drop_paths_outside); what is removed is a regular file, not a link.
        if "://" in str(path):
            return super().remove_checkpoint(path)
        target = Path(path)
        if target.is_symlink() or not target.is_file():
            log.warning("not removing %s: it is not a checkpoint file (a link, a directory or nothing)", path)
            return
        target.unlink()  # safe: a regular file that is no link, inside the run's checkpoint directory (above)
        Path(f"{target}{CHECKSUM_SUFFIX}").unlink(missing_ok=True)  # safe: beside it (a link: the link only)


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
    # a setting left out of either is its default
    saved = {**constructor_defaults(type(module)), **(checkpoint.get("hyper_parameters") or {})}
    changed = {f"model.{key}": (saved[key], value) for key, value in settings_of(module).items()
               if key in saved and not key.startswith("_") and not same(saved[key], value)}
    saved_data, data = checkpoint.get("datamodule_hyper_parameters"), getattr(datamodule, "hparams", None)
    if saved_data and data:  # (none if either has no record)
        changed.update({f"data.{key}": (saved_data[key], value) for key, value in data.items()
                        if key in saved_data and not same(saved_data[key], value)})
    return changed


def same(a: Any, b: Any) -> bool:
    """Whether a setting (or an optimizer hyperparameter, a number or a 0-d tensor) holds the same value in both."""
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
