"""Which model wrote a checkpoint, and refusing to load it into another: the class is stamped into every checkpoint
(`stamp_model_class`) and checked before any state is loaded, with the command that resumes it with the right model."""

from __future__ import annotations

import types
from typing import Any

import torch

from checkpoints.errors import CheckpointError
from checkpoints.loader import load_checkpoint_file, refuse_unregistered_classes
from checkpoints.registry import registered
from checkpoints.resume_command import resume_command


def stamp_model_class(checkpoint: dict[str, Any], cls: type) -> None:
    """The checkpoint names the class that wrote it, and names it the way LightningCLI does, so that `python train.py
    test --ckpt_path=...` and `load_from_checkpoint` rebuild it from any checkpoint, whichever front end wrote it."""
    checkpoint["model_class"] = _qualified_name(cls)
    hparams = checkpoint.setdefault("hyper_parameters", {})
    hparams.setdefault("_class_path", _qualified_name(cls))
    hparams.setdefault("_instantiator", "lightning.pytorch.cli.instantiate_module")


def check_loaded_class(checkpoint_path: Any, cls: type, trusted: bool) -> None:
    """`cls.load_from_checkpoint(checkpoint_path)` on a checkpoint another class wrote: one line naming the loader to
    use, before the class is built from the other's hyperparameters. A local file is read through the safe loader
    (checksum, weights only, registered classes); a stream is read and put back where it was. The collection's data
    modules are registered first: a checkpoint names the one it was trained on, and a script that loads a model
    may never have imported them."""
    import datamodules  # noqa: F401  (registers them: checkpoints/registry.py)

    if hasattr(checkpoint_path, "seek"):
        start = checkpoint_path.tell()
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=not trusted)  # safe: True unless the caller wrote weights_only=False
        checkpoint_path.seek(start)
        if not trusted:  # (a local file is checked in load_checkpoint_file)
            refuse_unregistered_classes(checkpoint, "given as a stream")
    else:
        checkpoint = load_checkpoint_file(checkpoint_path, trusted=trusted)
    found = checkpoint.get("model_class")
    if found is not None and found != _qualified_name(cls):
        raise CheckpointError(f"this checkpoint was written by {found}, not {_qualified_name(cls)}; load it with "
                              f"{found.rsplit('.', 1)[-1]}.load_from_checkpoint")


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def check_model_class(checkpoint: dict[str, Any], cls: type, ckpt_path: Any = None, subcommand: str = "fit") -> None:
    """Refuse to resume (or evaluate) `cls` from a checkpoint another model wrote, with the command that resumes it
    with that model: `python train.py model=vae ckpt_path=PATH` (Hydra), `... fit --model=VAE --ckpt_path=PATH` (CLI;
    `test --model=VAE ...` when it was `test` that was refused)."""
    found = checkpoint.get("model_class")
    if found is None or found == _qualified_name(cls):
        return
    name = found.rsplit(".", 1)[-1]
    checkpoint_name = f"checkpoint {ckpt_path}" if ckpt_path else "this checkpoint"
    written_by = next((model for model in registered("model") if _qualified_name(model) == found), None)
    if written_by is None:  # not one of the collection's models (never imported): nothing to resume it with here
        raise CheckpointError(f"{checkpoint_name} was written by {found}, not {_qualified_name(cls)}, and "
                              "that is not one of the collection's models")
    config_name = written_by.config_name
    if not isinstance(config_name, str):  # a property (DiscreteVAE: dvae or dvae_gumbel): of the checkpoint's settings
        try:
            config_name = config_name.fget(types.SimpleNamespace(**(checkpoint.get("hyper_parameters") or {})))
        except AttributeError:  # a setting it reads is not recorded
            config_name = name.lower()
    verb = "resume" if subcommand == "fit" else subcommand
    raise CheckpointError(f"{checkpoint_name} was written by {found}, not {_qualified_name(cls)}: {verb} it "
                          f"with the model that wrote it: {resume_command(ckpt_path or 'PATH', name, config_name, subcommand)} "
                          f"(in Python: {name}.load_from_checkpoint)")
