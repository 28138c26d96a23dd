"""What a class's constructor says: its arguments' defaults and type hints, following **kwargs up the class
hierarchy. The constructors are the one source of settings: Hydra's config groups are registered from these defaults
(launch/hydra_config.py), LightningCLI reads the same signatures, and the settings checks (launch/checks/settings.py), the
settings schema (launch/checks/schema.py) and the checkpoint's settings on resume (checkpoints/trainer/resume_settings.py) use them.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any


def constructor_defaults(cls: type) -> dict[str, Any]:
    """The constructor arguments of `cls` with their defaults, following **kwargs up the class hierarchy
    (the one source of defaults: Hydra's configs are built from it, LightningCLI reads the same signatures)."""
    defaults: dict[str, Any] = {}
    for init in _initializers(cls):
        parameters = inspect.signature(init).parameters.values()
        for p in parameters:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", *defaults) and p.default is not p.empty:
                defaults[p.name] = list(p.default) if isinstance(p.default, tuple) else p.default
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return defaults


def settings_of(obj: Any) -> dict[str, Any]:
    """Every constructor setting of a model or data module: its defaults, overridden by what it was given."""
    given = {k: list(v) if isinstance(v, tuple) else v for k, v in getattr(obj, "hparams", {}).items() if not k.startswith("_")}
    return {**constructor_defaults(type(obj)), **given}


def constructor_hints(cls: type) -> dict[str, Any]:
    """The type hint of every constructor argument of `cls`, following **kwargs up the class hierarchy."""
    hints: dict[str, Any] = {}
    for init in _initializers(cls):
        own = typing.get_type_hints(init, include_extras=False)
        parameters = inspect.signature(init).parameters.values()
        for p in parameters:
            if p.name in own and p.name not in hints and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                hints[p.name] = own[p.name]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return hints


def _initializers(cls: Any) -> list[Any]:
    """The __init__ of each class up the hierarchy (the caller stops after one without **kwargs); a factory function
    (a config's _target_ may name one, e.g. callbacks.progress_bar) is its own."""
    if not inspect.isclass(cls):
        return [cls]
    return [vars(klass)["__init__"] for klass in cls.__mro__ if "__init__" in vars(klass)]
