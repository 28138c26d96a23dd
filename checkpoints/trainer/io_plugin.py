"""Lightning's checkpoint I/O plugin, for every save, load and removal the trainer makes: atomic checksummed writes
(checkpoints/file_format.py); the checked read (checkpoints/loader.py), held to the trainer it restores into before
anything is restored (checkpoints/trainer/restore_checks.py); removals only of checkpoint files inside the run's
checkpoint directories (never a directory, never through a link to elsewhere)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lightning.fabric.plugins import TorchCheckpointIO

from checkpoints.errors import CheckpointError
from checkpoints.file_format import CHECKSUM_SUFFIX, save_checkpoint_file
from checkpoints.loader import load_checkpoint_file
from checkpoints.model_class import check_model_class
from checkpoints.trainer.restore_checks import check_restored, lies_inside

log = logging.getLogger(__name__)


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
        if "://" in str(path):
            return super().remove_checkpoint(path)
        target = Path(path).resolve()
        # Without a trainer (the plugin used on its own), a file named like a checkpoint only.
        directories = ([c.dirpath for c in self.trainer.checkpoint_callbacks if getattr(c, "dirpath", None)]
                       if self.trainer is not None else [target.parent] * target.name.endswith(".ckpt"))
        if not target.is_file() or not any(lies_inside(target, directory) for directory in directories):
            log.warning("not removing %s: it is not a checkpoint file inside the run's checkpoint directory", path)
            return
        target.unlink()  # safe: resolved, a regular file, inside the run's checkpoint directory (checked above)
        if (checksum_file := target.with_name(target.name + CHECKSUM_SUFFIX)).is_file():
            checksum_file.unlink()  # safe: beside the checkpoint just removed, in the same checked directory (a link: the link only)

