"""What a received file (a config or a checkpoint) may lead a parser to import: importing runs the module's code.
jsonargparse (LightningCLI, and `load_from_checkpoint` through its instantiator) imports a string wherever a setting's
type admits a class or function (a `class_path`, a Callable option, a callback or logger as a string, a
`LambdaCallback` hook), Hydra a `_target_`. So a received file may name only the collection's packages, the Lightning
and torch classes those settings take, and the user's packages listed in LATENT_ZOO_TRUST (`LATENT_ZOO_TRUST=mypkg,
my_callbacks`); as a class to build, only a registered model or data module, each registered when its class is defined
(`__init_subclass__` in models/base.py and datamodules/base.py): nothing registered (those packages not imported)
refuses every class, never admits one. The front ends' lists of models and data sets are read from here too.
Standard library only: the launch side uses it before torch is imported."""

from __future__ import annotations

import os
import re
import unicodedata

# The collection's packages, and Lightning's and torch's own classes of the kinds a model, a trainer and LightningCLI
# take (optimizers and schedulers, callbacks, loggers, strategies, plugins, profilers, accelerators). Of
# lightning.pytorch.cli only its scheduler: the rest parses command lines, which would import what their strings name.
ALLOWED_IMPORT_PREFIXES = ("models.", "datamodules.", "callbacks.", "samplers.", "torch.optim.", "lightning.pytorch.callbacks.",
                           "lightning.pytorch.loggers.", "lightning.pytorch.strategies.", "lightning.pytorch.plugins.",
                           "lightning.pytorch.profilers.", "lightning.pytorch.accelerators.",
                           "lightning.pytorch.cli.ReduceLROnPlateau")
# Settings that are paths or plain names (str or Path in every class allowed above, and LightningCLI's ckpt_path and
# log_dir): their values are never imported, and may be file names such as last.ckpt.
PATH_SETTINGS = frozenset({"ckpt_path", "log_dir", "data_dir", "default_root_dir", "dirpath", "filename", "save_dir",
                           "name", "version", "autoencoder_checkpoint"})
# Two or more identifiers joined by dots, as importlib takes them. Looked for after NFKC normalization, so that a
# full-width dot or a compatibility letter does not hide a name; compared with the allowed prefixes as written, so that
# a look-alike (a Cyrillic і in torch.optіm) is not allowed.
_DOTTED = re.compile(r"[^\W\d]\w*(?:\s*\.\s*[^\W\d]\w*)+")


TRUST_VARIABLE = "LATENT_ZOO_TRUST"


def trust_hint() -> str:
    """How to trust one's own code, with the value LATENT_ZOO_TRUST has where it is set (a typo shows)."""
    given = os.environ.get(TRUST_VARIABLE, "").strip()
    return (f"to trust your own package or module, list it in {TRUST_VARIABLE} (e.g. {TRUST_VARIABLE}=mypkg,my_callbacks"
            + (f"; it is {given!r} now" if given else "") + ")")


# What a "No module named" for one's own package means when train.py runs: Python looks beside train.py, not in the
# working directory.
IMPORTABLE_HINT = ("a package of your own is imported from train.py's folder or PYTHONPATH: export PYTHONPATH=<the folder "
                   "that holds it>, or pip install it")


def trusted_prefixes() -> tuple[str, ...]:
    """The user's own packages and modules, from LATENT_ZOO_TRUST (comma-separated dotted names): a name in one of
    them is admitted wherever the collection's are, by the front ends and by `load_from_checkpoint` alike. ValueError
    (one line) for an entry that is not a dotted name: a typo would otherwise trust nothing, or everything."""
    entries = [entry.strip() for entry in os.environ.get(TRUST_VARIABLE, "").split(",") if entry.strip()]
    if wrong := next((entry for entry in entries if not _is_module_path(entry)), None):
        raise ValueError(f"{TRUST_VARIABLE}={os.environ[TRUST_VARIABLE]}: {wrong!r} is not a package or module name; "
                         "expected comma-separated dotted names, e.g. mypkg,my_callbacks")
    return tuple(f"{entry}." for entry in entries)


def looks_like_import_path(text: str) -> bool:
    return bool(_DOTTED.fullmatch(unicodedata.normalize("NFKC", text).strip()))


def is_allowed_import(name: str, extra_prefixes: tuple[str, ...] = ()) -> bool:
    """Whether `name`, exactly as written, lies in one of the allowed packages or the trusted ones (never a `__main__`
    module)."""
    return name.startswith(ALLOWED_IMPORT_PREFIXES + trusted_prefixes() + extra_prefixes) and _is_module_path(name)


def is_trusted(name: object) -> bool:
    """Whether `name` lies in one of the user's own packages or modules (LATENT_ZOO_TRUST)."""
    return isinstance(name, str) and name.startswith(trusted_prefixes()) and _is_module_path(name)


def _is_module_path(name: str) -> bool:
    """ASCII identifiers joined by dots, as importlib takes them, none of them `__main__`."""
    parts = name.split(".")
    return "__main__" not in parts and all(part.isidentifier() and part.isascii() for part in parts)


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
