"""Which dotted names a received file may lead a parser to import. jsonargparse (LightningCLI, and Lightning's
`load_from_checkpoint` through its instantiator) imports a string wherever the setting's type admits a class or a
function: a `class_path`, a Callable option (`optimizer: strangers_module.make`), a callback or logger given as a
plain string, a `LambdaCallback` hook; Hydra imports a `_target_`. Importing a module runs its code, so a received
config file or checkpoint may name, in any of those places, only the collection's packages and the Lightning and torch
classes those settings take. Standard library only: the launch side uses this before torch is imported.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Iterator

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
                           "name", "version"})
# Two or more identifiers joined by dots, as importlib takes them. Looked for after NFKC normalization, so that a
# full-width dot or a compatibility letter does not hide a name; compared with the allowed prefixes as written, so that
# a look-alike (a Cyrillic і in torch.optіm) is not allowed.
_DOTTED = re.compile(r"[^\W\d]\w*(?:\s*\.\s*[^\W\d]\w*)+")


def looks_like_import_path(text: str) -> bool:
    return bool(_DOTTED.fullmatch(unicodedata.normalize("NFKC", text).strip()))


def is_allowed_import(name: str, extra_prefixes: tuple[str, ...] = ()) -> bool:
    """Whether `name`, exactly as written, lies in one of the allowed packages (never a `__main__` module)."""
    parts = name.split(".")
    return (name.startswith(ALLOWED_IMPORT_PREFIXES + extra_prefixes) and "__main__" not in parts
            and all(part.isidentifier() and part.isascii() for part in parts))


def foreign_import_paths(value: Any, where: str, skip_keys: tuple[str, ...] = (), depth: int = 0) -> Iterator[tuple[str, str]]:
    """(key, value) for every string in a checkpoint's settings (nested mappings and lists) that a parser could import
    and that is not allowed; keys in `skip_keys` are checked elsewhere, PATH_SETTINGS are paths."""
    if depth > 32:  # deeper than any real setting: a crafted file
        yield where, "(nested more than 32 levels)"
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in skip_keys and not (key in PATH_SETTINGS and isinstance(item, str)):  # a path, not a name
                yield from foreign_import_paths(item, f"{where}.{key}", skip_keys, depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from foreign_import_paths(item, f"{where}[{index}]", skip_keys, depth + 1)
    elif isinstance(value, str) and looks_like_import_path(value) and not is_allowed_import(value):
        yield where, value
