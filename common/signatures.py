"""What a class takes and its defaults: a model's or data module's declared settings (configs/settings.py), with the
arguments a subclass of one's own adds to them (`MyVAE(beta, **kwargs)`); another class's constructor arguments (the
Trainer's, an optimizer's); each following **kwargs up the class hierarchy. Hydra's
config groups are registered from these defaults (launch/checks/hydra_config.py), and the checkpoint's settings on resume
(checkpoints/trainer/io_plugin.py) and the HPARAMS tab (callbacks/hparams.py) read them.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

from configs.settings import Settings, settings_class


def declared_settings(cls: Any) -> type[Settings] | None:
    """The settings class `cls` (or the nearest of its bases) declares in configs/settings.py; None if none does."""
    for klass in getattr(cls, "__mro__", ()):
        found = settings_class(f"{klass.__module__}.{klass.__qualname__}")
        if found is not None:
            return found
    return None


def constructor_defaults(cls: type) -> dict[str, Any]:
    """The settings `cls` takes with their defaults: the constructor arguments of its classes below the nearest that
    declares settings (configs/settings.py), then those declared settings."""
    defaults: dict[str, Any] = {}
    for init in _initializers(cls):
        parameters = inspect.signature(init).parameters.values()
        for p in parameters:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", *defaults) and p.default is not p.empty:
                defaults[p.name] = list(p.default) if isinstance(p.default, tuple) else p.default
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    declared = _declared_below(cls)
    return {**defaults, **({f.name: f.default for f in dataclasses.fields(declared) if f.name not in defaults} if declared else {})}


def settings_of(obj: Any) -> dict[str, Any]:
    """Every constructor setting of a model or data module: its defaults, overridden by what it was given."""
    given = {k: list(v) if isinstance(v, tuple) else v for k, v in getattr(obj, "hparams", {}).items() if not k.startswith("_")}
    return {**constructor_defaults(type(obj)), **given}


def constructor_hints(cls: type) -> dict[str, Any]:
    """The type hint of every setting `cls` takes, as `constructor_defaults` finds the settings."""
    hints: dict[str, Any] = {}
    for init in _initializers(cls):
        own = typing.get_type_hints(init, include_extras=False)
        parameters = inspect.signature(init).parameters.values()
        for p in parameters:
            if p.name in own and p.name not in hints and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                hints[p.name] = own[p.name]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    declared = _declared_below(cls)
    return {**hints, **({k: v for k, v in typing.get_type_hints(declared).items() if k not in hints} if declared else {})}


def _initializers(cls: Any) -> list[Any]:
    """The __init__ of each class up the hierarchy, to the first that declares settings (configs/settings.py: those
    are read from there) and without it (the caller stops after one without **kwargs); a factory function (a
    config's _target_ may name one, e.g. callbacks.progress_bar) is its own."""
    if not inspect.isclass(cls):
        return [cls]
    found = []
    for klass in cls.__mro__:
        if settings_class(f"{klass.__module__}.{klass.__qualname__}") is not None:
            break
        found += [vars(klass)["__init__"]] if "__init__" in vars(klass) else []
    return found


def _declared_below(cls: Any) -> type[Settings] | None:
    """The declared settings `cls` takes: its nearest declaring class's, when every __init__ below it passes **kwargs on."""
    takes_all = all(any(p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()) for init in _initializers(cls))
    return declared_settings(cls) if takes_all else None
