"""The one way a checkpoint is read: verified first (checkpoints/file_format.py: checksum, declared sizes) under a
shared lock on its directory, so that no save of the same path lands in between; read with `weights_only=True`, since
unpickling can run code; the class paths its settings name held to the collection's and the user's own packages listed
in LATENT_ZOO_TRUST (checkpoints/registry.py, checkpoints/import_paths.py) unless the caller trusts the file in code;
its structure checked once for every reader (checkpoints/structure.py: mappings where Lightning expects them, dense
tensors of real or integer numbers, finite weights). A command reads its checkpoint once: the builder hands what it
read to the trainer's restore (launch/run_builder.py, checkpoints/trainer/io_plugin.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from checkpoints.errors import CheckpointError
from checkpoints.file_format import directory_lock, verify_checkpoint_file
from checkpoints.import_paths import PATH_SETTINGS, TRUST_HINT, is_allowed_import, looks_like_import_path
from checkpoints.registry import is_registered
from checkpoints.structure import check_structure, walk
from common.private_api import lightning_load


def load_checkpoint_file(path: str | os.PathLike, map_location: Any = "cpu", trusted: bool = False) -> dict[str, Any]:
    """The checkpoint at `path`, verified and read weights only (module docstring); a file torch cannot read is a
    CheckpointError naming it. `trusted`: the caller trusts the file in code (`load_from_checkpoint(path,
    weights_only=False)`). Only local files: a URL is refused, so nothing is fetched and unpickled that nobody has
    looked at; and so is a stream (it has no checksum beside it)."""
    if "://" in str(path) or hasattr(path, "read"):
        raise CheckpointError(f"checkpoint {path} is a {'stream' if hasattr(path, 'read') else 'URL'}: checkpoints are read "
                              "from local files only; save or download it, make sure you trust where it came from, and "
                              "give the local path")
    try:
        with directory_lock(Path(path).parent, exclusive=False):  # no save of this path in between
            verify_checkpoint_file(path)
            checkpoint = lightning_load(path, map_location=map_location, weights_only=not trusted)
    except CheckpointError:
        raise
    except Exception as error:  # truncated zip, pickled garbage, code planted in the pickle, not a checkpoint at all
        text = str(error).strip()
        # torch's weights_only refusal wraps the real reason in advice about weights_only that does not apply here
        text = text.rsplit("WeightsUnpickler error:", 1)[-1].strip() if "WeightsUnpickler error:" in text else text
        reason = " ".join(text.split())[:160] if text else type(error).__name__
        raise CheckpointError(f"checkpoint {path} is not a readable checkpoint ({type(error).__name__}: {reason}); it is "
                              "truncated, was not written by torch.save, or holds objects other than tensors and plain "
                              "values (which are never unpickled: they could run code)") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} holds no model state (no 'state_dict'): it is not a Lightning checkpoint")
    check_structure(checkpoint, path)
    if not trusted:
        refuse_unregistered_classes(checkpoint, path)
    return checkpoint


# Keys under which a checkpoint's hyperparameters name something to import: jsonargparse's `class_path` (LightningCLI
# rebuilds the model from them, nested settings included), Hydra's `_target_`, Lightning's `_class_path` and
# `_instantiator` (load_from_checkpoint imports the latter by name).
IMPORTED_KEYS = ("class_path", "_class_path", "_target_", "_instantiator")


def refuse_unregistered_classes(checkpoint: dict[str, Any], path: Any) -> None:
    """CheckpointError naming the first class path in the checkpoint's hyperparameters (at any depth: under
    `optimizer`, `prior`, ...) that is not a registered component, or the first other dotted string that is not the
    collection's, Lightning's or torch.optim's: jsonargparse imports one wherever the setting's type takes a function
    or a class (`optimizer: strangers_module.make`), when LightningCLI or load_from_checkpoint builds the model from
    these settings (checkpoints/import_paths.py). Nothing is imported to find out."""
    for section in ("hyper_parameters", "datamodule_hyper_parameters"):
        for where, key, name in walk(checkpoint.get(section), section):
            if key in IMPORTED_KEYS and not is_registered(name):
                raise CheckpointError(f"checkpoint {path}: {where} names {str(name)[:120]!r}, which is not one of the "
                                      f"collection's models or data modules; it is not imported (importing runs code); {TRUST_HINT}")
            if key not in IMPORTED_KEYS and key not in PATH_SETTINGS and isinstance(name, str) \
                    and looks_like_import_path(name) and not is_allowed_import(name):
                raise CheckpointError(f"checkpoint {path}: {where} is {name[:120]!r}, a dotted name that is not one of the "
                                      f"collection's, Lightning's or torch.optim's; it is not imported (importing runs code); {TRUST_HINT}")
