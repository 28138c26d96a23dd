"""What configs/ declares, read as YAML without torch or Hydra: each config group's choices, a config file merged over
its defaults list as Hydra composes it, the class each choice builds, and the settings each class declares
(configs/settings.py) or, for a library's class, a run recorded: what the early checks check a command line against."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import pkgutil
import typing
from pathlib import Path
from typing import Any

from common.files import write_file
from common.signatures import constructor_defaults, constructor_hints
from configs.settings import MODEL_ARGUMENTS, settings_class

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
# lightning.Trainer's settings that are config groups of their own in Hydra, and how to give them there.
TRAINER_GROUPS = {"logger": "logger=tensorboard, logger=csv or logger=none",
                  "callbacks": "callbacks=NAME (configs/callbacks/), callbacks.NAME.KEY=VALUE, ~callbacks.NAME"}
# Constructor arguments that are not settings: the front ends pass them (registered defaults leave them out).
NOT_SETTINGS = {"model": MODEL_ARGUMENTS, "trainer": tuple(TRAINER_GROUPS)}
TENSORBOARD = "tensorboard"  # <log_dir>/tensorboard: every TensorBoard run, one `tensorboard --logdir` for all
CSV = "csv"  # <log_dir>/csv: every CSV run
# The loggers a run's layout places (launch/runs/run_directory.py), by class path: each one's folder under <log_dir>.
LOGGER_FOLDERS = {"lightning.pytorch.loggers.TensorBoardLogger": TENSORBOARD, "lightning.pytorch.loggers.CSVLogger": CSV}


def read_config(name: str) -> dict[str, Any]:
    """configs/<name> as YAML; {} where it is missing or not a plain YAML mapping (then Hydra decides)."""
    import yaml

    try:
        found = config_file(name)
    except (OSError, yaml.YAMLError):
        return {}
    return found if isinstance(found, dict) else {}


def config_target(group: str, choice: str) -> Any:
    """The class configs/<group>/<choice>.yaml builds, as Hydra composes it: its own `_target_` (under `group:` or at
    the top), else that of the last file of its group its defaults list names (dvae_gumbel: dvae's)."""
    own = read_config(f"{group}/{choice}.yaml")
    parents = [parent for parent in own.get("defaults") or [] if isinstance(parent, str) and parent != "_self_"]
    return config_value(own, [group, "_target_"]) or config_value(own, ["_target_"]) or \
        next(filter(None, (config_target(group, parent) for parent in reversed(parents))), None)


def config_value(node: Any, path: list[str]) -> Any:
    """The value at `path` in a config read as YAML, or None where there is none."""
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def default_choices() -> dict[str, str | None]:
    """group -> the default choice of configs/train.yaml's defaults list (`- model: jsa`)."""
    defaults = read_config("train.yaml").get("defaults") or []
    return {group: choice for entry in defaults if isinstance(entry, dict) for group, choice in entry.items()}


def config_targets(group: str) -> dict[str, str]:
    """choice -> the class its config builds, for configs/<group>/*.yaml (a model's and a data module's under their group)."""
    targets = {path.stem: config_target(group, path.stem) for path in sorted((CONFIGS / group).glob("*.yaml"))}
    return {choice: target for choice, target in targets.items() if isinstance(target, str)}


def every_config(group: str, *left_out: str) -> str:
    """`${every_config:GROUP,NAME,...}` in a config (launch/checks/hydra_config.py registers it): the choices of configs/GROUP/
    but those named, as a sweep ("a,b,c"). experiment=compare's models, so that a new model's config joins the
    comparison with no edit there (Hydra's `glob(*,exclude=...)` would too, but the Optuna sweeper refuses a glob)."""
    return ",".join(path.stem for path in sorted((CONFIGS / group).glob("*.yaml")) if path.stem not in left_out)


def declared(target: str | None) -> dict[str, Any] | None:
    """setting -> type hint of the class at `target` (`models.JSA`), as configs/settings.py declares them; None for a
    class that declares none there (the Trainer, an optimizer: `recorded`, and checked once imported)."""
    found = settings_class(target) if target else None
    return typing.get_type_hints(found) if found is not None else None


# The libraries whose classes a command line configures (lightning.Trainer, torch's optimizers and schedulers, Lightning's
# loggers and callbacks): only their constructors know their settings, so each run records the names once it has imported Lightning
# (`record_library_settings`), in the user's cache, one file per installed Lightning and torch, and the early checks
# refuse a typo of them before the imports; until a run has, the check after the imports judges them. Names only:
# nothing recorded is imported or run.
LIBRARIES = ("lightning", "torch")
# Where LightningCLI finds a class given by its short name (--optimizer=Adam, --trainer.logger=CSVLogger).
SHORT_NAME_MODULES = ("torch.optim", "torch.optim.lr_scheduler", "lightning.pytorch.loggers", "lightning.pytorch.callbacks")
# The collection's packages: a short class name may name a class of theirs (--trainer.callbacks+=TrainingSpeed).
COLLECTION_PACKAGES = ("models.", "datamodules.", "callbacks.", "samplers.", "launch.", "common.", "checkpoints.")
# LightningCLI's own classes its short names find first (its ReduceLROnPlateau takes the monitor torch's lacks).
CLI_SHORT_NAMES = {"ReduceLROnPlateau": "lightning.pytorch.cli.ReduceLROnPlateau"}


def library_records_file() -> Path | None:
    """$XDG_CACHE_HOME/latent-zoo/settings-<key>.json (~/.cache by default), the key naming the installed libraries by
    their files' modification times (a new install, a new file); None where one is not installed, or no cache folder
    is known (no $XDG_CACHE_HOME and no home directory: a container's user without one)."""
    specs = [importlib.util.find_spec(name) for name in LIBRARIES]
    if any(spec is None or spec.origin is None for spec in specs):
        return None
    key = "-".join(str(os.stat(spec.origin).st_mtime_ns) for spec in specs)
    try:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # (Path.home: no $HOME and no passwd entry)
        return None
    return cache / "latent-zoo" / f"settings-{key}.json"


@functools.cache
def library_records() -> dict[str, list[str]]:
    """class path -> its setting names, as recorded; {} where nothing (readable) is."""
    try:
        found = json.loads(library_records_file().read_text())  # (None: no file to read, an AttributeError)
    except (OSError, ValueError, AttributeError):
        return {}
    return {target: names for target, names in found.items()
            if isinstance(names, list) and all(isinstance(name, str) for name in names)} if isinstance(found, dict) else {}


def recorded(target: str | None) -> dict[str, Any] | None:
    """setting -> Any (its value is judged once imported) of the class at `target`, where its names are recorded."""
    names = library_records().get(target) if isinstance(target, str) else None
    return dict.fromkeys(names, Any) if names is not None else None


def short_names() -> dict[str, str]:
    """Once imported: name -> path of each class LightningCLI finds by its short name: the public classes the libraries
    define in SHORT_NAME_MODULES (not a name a module imports from elsewhere, such as lr_scheduler's Counter), then the
    collection's optimizers, schedulers, callbacks and loggers (--optimizer=SGLD)."""
    import lightning.pytorch as pl
    import torch

    names: dict[str, str] = dict(CLI_SHORT_NAMES)
    for module in SHORT_NAME_MODULES:
        for name, value in vars(pkgutil.resolve_name(module)).items():
            if isinstance(value, type) and not name.startswith("_") and value.__module__.split(".")[0] in LIBRARIES:
                names.setdefault(name, f"{module}.{name}")
    bases = [torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, pl.Callback, pl.loggers.Logger]
    while bases:
        cls = bases.pop()
        bases += cls.__subclasses__()
        if cls.__module__.startswith(COLLECTION_PACKAGES):
            names.setdefault(cls.__name__, f"{cls.__module__}.{cls.__qualname__}")
    return names


def record_library_settings() -> None:
    """Once Lightning is imported: record the setting names of the libraries' classes where they are not yet: the
    Trainer, each class LightningCLI finds by its short name (`short_names`), and the classes of configs/'s optimizer,
    scheduler and logger choices. A class whose constructor cannot be read, or a cache that cannot be written, is left
    unrecorded: the check after the imports still judges its settings."""
    path = library_records_file()
    if path is None:
        return
    targets = {"lightning.Trainer", *short_names().values(), *LOGGER_FOLDERS,
               *(target for group in ("optimizer", "scheduler") for target in config_targets(group).values())}
    names = {}
    for target in (target for target in targets - library_records().keys() if target.split(".")[0] in LIBRARIES):
        with contextlib.suppress(Exception):  # (a library's constructor this version cannot introspect)
            cls = pkgutil.resolve_name(target)
            names[target] = sorted({*constructor_hints(cls), *constructor_defaults(cls)})
    if not names:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, json.dumps({**library_records(), **names}, indent=0, sort_keys=True))
    except OSError:
        return
    library_records.cache_clear()


@functools.cache
def config_file(name: str) -> dict[str, Any]:
    """configs/<name> as written (interpolations unresolved), e.g. config_file("callbacks/default.yaml"): the defaults
    both front ends read (LightningCLI takes these values as its defaults)."""
    import yaml

    return yaml.load((CONFIGS / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def seed() -> int:
    return config_file("train.yaml")["seed"]


def log_dir() -> str:
    return config_file("train.yaml")["log_dir"]


def ddp_timeout_s() -> float:
    return config_file("train.yaml")["ddp_timeout_s"]


def default_class(group: str) -> str:
    """The class name of a config group's default choice (JSA, MNISTDataModule), as LightningCLI names it."""
    return config_targets(group)[default_choices()[group]].rsplit(".", 1)[-1]
