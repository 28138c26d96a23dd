"""What a class takes and its defaults: a model's or data module's declared settings (configs/settings.py), with the
arguments a subclass of one's own adds to them (`MyVAE(beta, **kwargs)`); another class's constructor arguments (the
Trainer's, an optimizer's); each following **kwargs up the class hierarchy. Hydra's
config groups are registered from these defaults (launch/checks/hydra_config.py), and the checkpoint's settings on resume
(checkpoints/trainer.py) and the HPARAMS tab (callbacks/hparams.py) read them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
import typing
from typing import Any

from configs.settings import Settings, settings_class


def _declared_by(klass: type) -> type[Settings] | None:
    """The settings `klass` declares: by its name in configs/settings.py (`models.JSA` -> JSASettings) or, for a class of
    one's own, in its own module (`mypkg.binvae.BinaryVAE` -> mypkg.binvae.BinaryVAESettings); else as the type of its
    constructor's `settings` argument (a base such as CategoricalLatentModel(settings: CategoricalSettings, ...), which
    a subclass of one's own may extend with arguments of its own); None if none."""
    found = settings_class(f"{klass.__module__}.{klass.__qualname__}") \
        or getattr(sys.modules.get(klass.__module__), f"{klass.__name__}Settings", None)
    if found is None and "__init__" in vars(klass):
        with contextlib.suppress(Exception):  # hints that do not resolve: none declared
            found = typing.get_type_hints(vars(klass)["__init__"]).get("settings")
    return found if isinstance(found, type) and issubclass(found, Settings) else None


# What a checkpoint read weights-only holds: a module or a function given to a constructor is not saved.
PLAIN_VALUES = (bool, int, float, str, type(None), list, tuple, dict)


def own_arguments(obj: Any, frame: Any, declared: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The plain-valued arguments that the constructors of `obj` on the call stack above `frame` take besides the
    `declared` settings and `exclude`: those a subclass of one's own adds (`MyVAE(beta, **kwargs)`), read as Lightning's
    save_hyperparameters() reads them, so that they are saved, shown and restored like the declared ones."""
    from lightning.pytorch.utilities.parsing import collect_init_args

    return {name: value for arguments in collect_init_args(frame, [], classes=(type(obj),)) for name, value in arguments.items()
            if name not in declared and name not in ("settings", *exclude) and isinstance(value, PLAIN_VALUES)}


class SavesItsSettings:
    """A model or data module whose constructor saves every setting (`save_settings`), a subclass's own too
    (`own_arguments`): a subclass's `self.save_hyperparameters()`, Lightning's usual idiom, then changes nothing, where
    Lightning's would replace them with its constructor's arguments (an optimizer among them, which no checkpoint may
    hold, and Nones since resolved)."""

    def save_settings(self, settings: dict[str, Any]) -> None:
        super().save_hyperparameters(settings)  # type: ignore[misc]

    def save_hyperparameters(self, *args: Any, **kwargs: Any) -> None:
        """Nothing more to save: the constructor saved every setting. Naming some of them changes nothing; anything
        else (values that are not constructor arguments, which no checkpoint could give back to the constructor;
        `ignore`, `logger`) cannot be honoured, and is refused rather than dropped."""
        saved = getattr(self, "hparams", {})
        other = [arg for arg in args if not (isinstance(arg, str) and arg in saved)]
        if other or kwargs:
            given = ", ".join([*map(repr, other), *(f"{key}={value!r}" for key, value in kwargs.items())])
            raise ValueError(f"{type(self).__name__}.save_hyperparameters({given}): every setting of the constructor is "
                             "saved already (its own arguments too), and a checkpoint restores only those; call it "
                             "without arguments, or make the value a constructor argument")


def constructor_defaults(cls: type) -> dict[str, Any]:
    """The settings `cls` takes with their defaults: its constructors' arguments (`_constructors`), then the declared
    settings they pass **kwargs on to."""
    inits, declared = _constructors(cls)
    defaults: dict[str, Any] = {}
    for p in (p for init in inits for p in inspect.signature(init).parameters.values()):
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", *defaults) and p.default is not p.empty:
            defaults[p.name] = list(p.default) if isinstance(p.default, tuple) else p.default
    return {**defaults, **({f.name: f.default for f in dataclasses.fields(declared) if f.name not in defaults} if declared else {})}


def settings_of(obj: Any) -> dict[str, Any]:
    """Every constructor setting of a model or data module: its defaults, overridden by what it was given."""
    given = {k: list(v) if isinstance(v, tuple) else v for k, v in getattr(obj, "hparams", {}).items() if not k.startswith("_")}
    return {**constructor_defaults(type(obj)), **given}


def constructor_hints(cls: type) -> dict[str, Any]:
    """The type hint of every setting `cls` takes, as `constructor_defaults` finds the settings."""
    inits, declared = _constructors(cls)
    hints: dict[str, Any] = {}
    for init in inits:
        try:
            own = typing.get_type_hints(init, include_extras=False)
        except NameError:  # an annotation its module cannot resolve (torch's MultiStepLR: Iterable): any value
            own = dict.fromkeys(inspect.signature(init).parameters, Any)
        for p in inspect.signature(init).parameters.values():
            if p.name in own and p.name not in hints and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                hints[p.name] = own[p.name]
    return {**hints, **({k: v for k, v in typing.get_type_hints(declared).items() if k not in hints} if declared else {})}


def _constructors(cls: Any) -> tuple[list[Any], type[Settings] | None]:
    """The __init__ of each class up `cls`'s hierarchy while each passes **kwargs on (a factory function, which a
    config's _target_ may name, e.g. callbacks.progress_bar: itself), to the first class that declares settings
    (`_declared_by`), and those settings; None when the chain ends before one (a subclass of one's own without
    **kwargs) or there is none (the Trainer, an optimizer)."""
    if not inspect.isclass(cls):
        return [cls], None
    inits: list[Any] = []
    for klass in cls.__mro__:
        declared = _declared_by(klass)
        if declared is not None:
            return inits, declared
        if "__init__" in vars(klass):
            inits.append(vars(klass)["__init__"])
            if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(inits[-1]).parameters.values()):
                return inits, None
    return inits, None
