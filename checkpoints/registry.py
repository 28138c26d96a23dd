"""The classes a checkpoint may name, and so the only ones ever imported from one (importing a module runs its code):
the collection's models and data modules, each registering itself when its class is defined (`__init_subclass__` in
models/base.py and datamodules/base.py; importing the package imports every module), and Lightning's instantiator.
Kept here, filled from there, so that checkpoints/ imports neither: nothing registered (those packages not imported)
refuses every class, never admits one. A class of the user's own packages listed in LATENT_ZOO_TRUST
(checkpoints/import_paths.py) is admitted too, before its module is imported (a subclass of a model, say). The front
ends' lists of models and data sets are read from here too."""

from __future__ import annotations

from checkpoints.import_paths import is_trusted

LIGHTNING_INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"
_REGISTERED: dict[str, dict[str, type]] = {"model": {}, "data": {}}  # kind -> {class path or short name: class}


def qualified_name(cls: type) -> str:
    """`package.module.Class`: how a checkpoint names a class (its model, its optimizers)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register(kind: str, *classes: type) -> None:
    """Admit `classes` as checkpoint-nameable `kind` ("model" or "data"), under `package.module.Class` and the
    package's short `package.Class` (as LightningCLI and the configs name them)."""
    for cls in classes:
        _REGISTERED[kind].update({qualified_name(cls): cls, f"{cls.__module__.split('.', 1)[0]}.{cls.__name__}": cls})


def registered(kind: str) -> list[type]:
    return list(dict.fromkeys(_REGISTERED[kind].values()))


def is_registered(name: object, kind: str | None = None) -> bool:
    """Whether a class path a checkpoint names is a registered `kind` (any kind: also Lightning's instantiator), or
    lies in a package the user trusts (LATENT_ZOO_TRUST)."""
    return ((kind is None and name == LIGHTNING_INSTANTIATOR) or is_trusted(name)
            or (isinstance(name, str) and any(name in _REGISTERED[k] for k in ([kind] if kind else _REGISTERED))))
