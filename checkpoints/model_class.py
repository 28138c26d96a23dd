"""Which model wrote a checkpoint, and refusing to load it into another: the class is stamped into every checkpoint
(`stamp_classes`, by SafeCheckpoints, checkpoints/trainer.py) and checked once before any state is loaded, with
the command that resumes it with the right model; the data module's class likewise; `load_checked`, the checks
`load_from_checkpoint` makes."""

from __future__ import annotations

import os
import pkgutil
import types
from typing import Any, Callable

from checkpoints.errors import CheckpointError
from checkpoints.loader import check_fits, load_checkpoint_file
from checkpoints.resume_command import resume_command
from common.registry import LIGHTNING_INSTANTIATOR, TRUST_VARIABLE, is_trusted, qualified_name, registered
from common.signatures import constructor_defaults


def stamp_classes(checkpoint: dict[str, Any], module: Any, datamodule: Any) -> None:
    """The checkpoint names the class that wrote it, the way LightningCLI does, so that `python train.py test
    --ckpt_path=...` and `load_from_checkpoint` rebuild it from any checkpoint, whichever front end wrote it; and the
    data module it was trained on. A replicated process names what it wraps (its `model_class`, ReplicaData's
    `data_class`), as a single run of the replica would."""
    model_class = getattr(module, "model_class", type(module))
    checkpoint["model_class"] = qualified_name(model_class)
    hparams = checkpoint.setdefault("hyper_parameters", {})
    hparams.setdefault("_class_path", qualified_name(model_class))
    hparams.setdefault("_instantiator", LIGHTNING_INSTANTIATOR)
    if datamodule is not None:
        checkpoint["data_class"] = qualified_name(getattr(datamodule, "data_class", type(datamodule)))


def load_checked(load: Callable[..., Any], cls: type, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
    """`load(checkpoint_path, *args, **kwargs)` (Lightning's `cls.load_from_checkpoint`) after the checks every reader
    makes: a local file through the safe loader (checksum, weights only, registered classes; a stream read and put back
    where it was), written by `cls` (before `cls` is built from another class's hyperparameters); then the kinds of
    number of the loaded state. The collection's checkpoints hold plain types only, so the read unpickles no code; only
    the caller's own `weights_only=False` trusts the file. The collection's data modules are registered first: a
    checkpoint names the one it was trained on, and a script that loads a model may never have imported them."""
    import datamodules  # noqa: F401  (registers them: common/registry.py)

    trusted = kwargs.get("weights_only") is False
    kwargs["weights_only"] = not trusted
    checkpoint = load_checkpoint_file(checkpoint_path, trusted=trusted)
    check_model_class(checkpoint, cls, checkpoint_path if isinstance(checkpoint_path, (str, os.PathLike)) else None, None)
    model = load(checkpoint_path, *args, **kwargs)
    check_fits(checkpoint["state_dict"], model.state_dict(), None)
    return model


def check_model_class(checkpoint: dict[str, Any], cls: type, ckpt_path: Any = None, subcommand: str | None = "fit") -> None:
    """Refuse to resume (or evaluate) `cls` from a checkpoint another model wrote, with the command that resumes it
    with that model: `python train.py model=vae ckpt_path=PATH` (Hydra), `... fit --model=VAE --ckpt_path=PATH` (CLI;
    `test --model=VAE ...` when it was `test` that was refused); subcommand None: the loader to use in Python."""
    found = checkpoint.get("model_class")
    if found is None or found == qualified_name(cls):
        return
    name = found.rsplit(".", 1)[-1]
    written = f"{f'checkpoint {ckpt_path}' if ckpt_path else 'this checkpoint'} was written by {found}, not {qualified_name(cls)}"
    written_by = next((model for model in registered("model") if qualified_name(model) == found), None)
    if subcommand is None:
        raise CheckpointError(f"{written}; load it with {name}.load_from_checkpoint")
    verb = "resume" if subcommand == "fit" else subcommand
    if written_by is None:  # a class of one's own (its package trusted, or the loader would have refused the file)
        from hydra.core.hydra_config import HydraConfig

        extended = extended_model(found)
        config = config_name_of(extended, checkpoint) if extended else "<the config of the model it extends>"
        hydra = f"python train.py model={config} model._target_={found} ckpt_path={ckpt_path or 'PATH'}"
        cli = f"python train.py {subcommand} --model={found} --ckpt_path={ckpt_path or 'PATH'}"
        first, other = (hydra, f"LightningCLI: {cli}") if HydraConfig.initialized() else (cli, f"Hydra: {hydra}")
        raise CheckpointError(f"{written}, a class of your own: {verb} it with that class, {first} ({other}; its package "
                              f"in {TRUST_VARIABLE})")
    command = resume_command(ckpt_path or "PATH", name, config_name_of(written_by, checkpoint), subcommand)
    raise CheckpointError(f"{written}: {verb} it with the model that wrote it: {command} (in Python: {name}.load_from_checkpoint)")


def config_name_of(model: type, checkpoint: dict[str, Any]) -> str:
    """The Hydra config of the collection's `model`; a property (DiscreteVAE: dvae or dvae_gumbel) of its settings, read
    from the checkpoint's (a setting not recorded is the class's default)."""
    config_name = model.config_name
    if isinstance(config_name, property):
        settings = {**constructor_defaults(model), **(checkpoint.get("hyper_parameters") or {})}
        config_name = config_name.fget(types.SimpleNamespace(**settings))
    return config_name


def extended_model(path: str) -> type | None:
    """The collection's model class that the class at `path`, one of the user's own packages (LATENT_ZOO_TRUST),
    extends; None where it is not importable, not trusted or extends none."""
    try:
        cls = pkgutil.resolve_name(path) if is_trusted(path) else None
    except (ImportError, AttributeError, ValueError):
        return None
    return next((base for base in getattr(cls, "__mro__", ()) if base in set(registered("model"))), None)


def check_data_class(checkpoint: dict[str, Any], datamodule: Any, ckpt_path: Any, cli: bool) -> None:
    """Refuse to resume or evaluate a checkpoint on other data than it was trained on (the class its SafeCheckpoints
    stamped), which would log another data set's numbers into its run: one line with the choice that gives its data."""
    found, given = checkpoint.get("data_class"), getattr(datamodule, "data_class", type(datamodule))
    if found is None or datamodule is None or found == qualified_name(given):
        return
    written_by = next((data for data in registered("data") if qualified_name(data) == found), None)
    choice = (f"--data={found.rsplit('.', 1)[-1] if written_by else found}" if cli
              else f"data={written_by.config_name}" if written_by else f"data._target_={found}")
    raise CheckpointError(f"checkpoint {ckpt_path} was trained on {found}, not {qualified_name(given)}: give "
                          f"{choice} (to evaluate the model on other data, load it in Python: <Model>.load_from_checkpoint)")
