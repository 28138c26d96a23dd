"""The settings of a composed Hydra config, checked against what their classes declare: the model's and the data
module's against configs/settings.py (before torch is imported: the early check composes each job of a command line,
launch/checks/hydra_check.py), the Trainer's, the optimizer's, the scheduler's, the logger's and each callback's against
their constructors' type hints once those are imported. Hydra passes whatever the command line says (`model.lr=abc`
arrives as the string 'abc'); a Literal lists the choices, int/float/bool/str the type, `X | None` allows null.
"""

from __future__ import annotations

import inspect
import itertools
import pkgutil
import re
import sys
import types
from typing import Any, Iterator, Union, get_args, get_origin

from common.registry import IMPORTABLE_HINT
from common.settings import SEED_RANGE, did_you_mean, expected
from common.signatures import constructor_defaults, constructor_hints
from launch.checks.configs import CONFIGS, LOGGER_FOLDERS, TRAINER_GROUPS, config_targets, declared, read_config, recorded
from launch.checks.precheck import SettingsError, as_built, check_combination, closest_in_module

# The top-level settings run() reads (configs/train.yaml; compare_* come from experiment=compare), with their types.
TOP_LEVEL_SETTINGS = {"seed": int, "ckpt_path": str | None, "run_test": bool, "log_dir": str, "ddp_timeout_s": float,
                      "run_name": str, "discrete_latent": dict | None, "per_model": dict | None,
                      "compare_backbone": dict | None, "compare_prior": dict | None, "replicas": dict | None}
CONFIG_GROUPS = ("model", "data", "optimizer", "scheduler", "trainer", "logger", "callbacks", "experiment", "hydra")
# The TensorBoard run's directory and name are the run's layout (launch/runs/run_directory.py), set by these top-level settings.
LAYOUT_SETTINGS = {"save_dir": "log_dir", "name": "run_name"}
REPLICA_SETTINGS = ["replicas.seeds", "replicas.arms"]  # what launch/runs/replicas.py reads
KINDS = {list: "a list ([a,b,...])", dict: "a mapping ({key: value, ...})"}  # what a list or mapping setting expects
BASE_CLASSES = {"model": "models.LatentVariableModel", "data": "datamodules.ImageDataModule"}  # (LightningCLI's too)


# Lightning's precisions the collection runs in (64-bit: the samplers and JSA's cache hold 32-bit tensors).
SUPPORTED_PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "32", "16", "bf16", "16-true", "bf16-true", "transformer-engine",
                        "transformer-engine-float16")


# Numbers lightning.Trainer takes and fails on once training starts (a ZeroDivisionError), or, at a negative
# gradient_clip_val, skips clipping without a word: each setting, when its value is wrong, and what is expected.
TRAINER_NUMBERS = (
    ("accumulate_grad_batches", lambda n: n < 1, "expected an integer >= 1"),
    ("check_val_every_n_epoch", lambda n: n < 1,
     "expected an integer >= 1, or null (validation by val_check_interval's batches alone)"),
    ("gradient_clip_val", lambda n: not 0 <= n < float("inf"), "expected a finite number >= 0 (0 or null: no clipping)"),
    ("val_check_interval", lambda n: n <= 0, "expected > 0, a fraction of the epoch (at most 1.0) or a number of batches"),
)


def check_trainer_values(settings: dict[str, Any], prefix: str, devices: bool = True) -> None:
    """What lightning.Trainer accepts but cannot run, or refuses without naming the option: an accelerator this machine
    lacks (with `devices`: where the run is), a precision the collection does not run in, barebones mode (no logging, no
    checkpoints), a plugin named by a string
    (Lightning reads its letters as plugins), a max_time that is not DD:HH:MM:SS, and TRAINER_NUMBERS."""
    import torch

    accelerator = settings.get("accelerator")
    available = {"gpu": torch.cuda.is_available(), "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if devices and isinstance(accelerator, str) and not available.get(accelerator, True):
        raise SettingsError(f"{prefix}.accelerator={accelerator}: no such device is visible here; use {prefix}.accelerator=cpu "
                            "(or auto)")
    for name, wrong, want in TRAINER_NUMBERS:
        if isinstance(value := settings.get(name), (int, float)) and wrong(value):
            raise SettingsError(f"{prefix}.{name}={value}: {want}")
    precision = settings.get("precision")
    if precision is not None and str(precision) not in SUPPORTED_PRECISIONS:
        why = " (the samplers and JSA's cache hold 32-bit tensors)" if "64" in str(precision) else ""
        raise SettingsError(f"{prefix}.precision={precision}: expected 32-true, 16-mixed or bf16-mixed{why} (or "
                            f"{', '.join(SUPPORTED_PRECISIONS[3:])})")
    if settings.get("barebones") is True:  # (Lightning's own refusal names the first of the settings in turn)
        raise SettingsError(f"{prefix}.barebones=true: the models log their metrics with self.log and every run saves "
                            "checkpoints, which barebones mode forbids; leave it out")
    plugins = settings.get("plugins")
    if isinstance(plugins, str) or isinstance(plugins, list) and any(isinstance(plugin, str) for plugin in plugins):
        raise SettingsError(f"{prefix}.plugins={plugins}: expected a plugin built from its class ({{_target_: CLASS, ...}}: "
                            "lightning.pytorch.plugins' environments, precision, io), a list of them, or null")
    max_time = settings.get("max_time")
    if isinstance(max_time, dict) and any(isinstance(v, (int, float)) and v < 0 for v in max_time.values()):
        raise SettingsError(f"{prefix}.max_time={max_time}: expected a time of at least 0 (days, hours, minutes, seconds)")
    if isinstance(max_time, str) and not re.fullmatch(r"\s*\d+:\d+:\d+:\d+\s*", max_time):
        raise SettingsError(f"{prefix}.max_time={max_time}: expected DD:HH:MM:SS, e.g. 00:12:00:00 for 12 hours (or null)")


def class_hints(cls: Any) -> dict[str, Any]:
    """setting -> type hint (Any where it has none) of each setting `cls`'s constructor takes (common/signatures.py)."""
    hints = constructor_hints(cls)
    return {**hints, **{name: Any for name in constructor_defaults(cls) if name not in hints}}


def check_settings(cls: Any, settings: dict[str, Any], prefix: str) -> None:
    """Raise SettingsError naming the first `prefix.key` whose name or value does not fit `cls`'s constructor."""
    hints = class_hints(cls)  # a factory function with **kwargs takes any key (a class's: followed up its hierarchy)
    if not inspect.isclass(cls) and any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values()):
        hints.update({key: Any for key in settings if key not in hints})
    check_group(cls.__name__, hints, settings, prefix)


def check_group(owner: str, hints: dict[str, Any], settings: dict[str, Any], prefix: str, option: str = "") -> None:
    """Raise SettingsError naming the first `prefix.key` of `settings` that `owner`'s settings (`hints`: name -> type
    hint) do not hold, with the closest, else the class of another config of its group that takes it ('it is a setting
    of JSA (model=jsa)'), or whose value does not fit its hint. `option`: '--' for LightningCLI's options (`--model.x`,
    'JSA (--model=JSA)'), '' for a setting (`model.x`)."""
    what, group = "option" if option else "setting", prefix.lstrip("-").split(".", 1)[0]
    for key, value in settings.items():
        if key.startswith("_") or isinstance(value, str) and "${" in value:  # (an interpolation: resolved later)
            continue
        if key not in hints:
            owners = [(choice, target.rsplit(".", 1)[-1]) for choice, target in config_targets(group).items()
                      if key in (declared(target) or {})]
            taken_by = owners and f"; it is {'an' if option else 'a'} {what} of {owners[0][1]} ({option}{group}=" \
                                  f"{owners[0][1] if option else owners[0][0]})"
            meant = did_you_mean(f"{prefix}.{key}", [f"{prefix}.{name}" for name in hints])
            raise SettingsError(f"{prefix}.{key}: no such {what} of {owner}{meant or taken_by or ''}")
        if (wrong := misfit(hints[key], value)) is not None:
            raise SettingsError(f"{prefix}.{key}={wrong[0]!r}: expected {wrong[1]}")


def misfit(hint: Any, value: Any) -> tuple[Any, str] | None:
    """(the value, or the item of a list or mapping, that does not fit the type hint, what was expected), or None;
    `...`: a value not read (left to the parser)."""
    union = get_origin(hint) in (Union, types.UnionType)
    kinds = [kind for kind in (get_args(hint) if union else (hint,)) if kind is not type(None)]
    if value is ... or (value is None and union and len(kinds) < len(get_args(hint))):
        return None
    if len(kinds) == 1 and get_origin(kinds[0]) in KINDS:  # a list or a mapping: of the kind, then each item
        kind, item = get_origin(kinds[0]), get_args(kinds[0])[-1]
        if not isinstance(value, kind):
            return value, KINDS[kind]
        return next(filter(None, (misfit(item, part) for part in (value if kind is list else value.values()))), None)
    want = None if hint is Any else expected(hint, value)
    return (value, want) if want is not None else None


def check_replaced_class(cfg: Any, group: str, settings: dict[str, Any], takes: Any, cls: Any = None) -> None:
    """`group._target_=X` over a config that builds another class (model._target_=models.VAE over the default
    model=jsa): a setting that config gives its class and X does not take is refused naming the config to choose with
    X, the one of X's class or of a class X subclasses."""
    from omegaconf import OmegaConf

    choice, target = OmegaConf.select(cfg, f"hydra.runtime.choices.{group}"), settings.get("_target_")
    targets = config_targets(group)
    chosen = targets.get(choice or "")
    if chosen is None or chosen == target:
        return
    from_config = [key for key in settings
                   if not key.startswith("_") and key not in takes and key in (declared(chosen) or {})]
    if from_config:
        bases = getattr(cls, "__mro__", ())  # once imported: the config of the nearest class it subclasses

        def nearness(path: str) -> int | None:
            found = pkgutil.resolve_name(path) if bases and path.split(".")[0] in sys.modules else None
            return -1 if path == target else bases.index(found) if found in bases else None
        ranked = [(rank, name) for name, path in targets.items() if (rank := nearness(path)) is not None]
        kin = min(ranked, default=(0, "NAME"))[1]
        raise SettingsError(f"{group}.{from_config[0]}: a setting of {chosen.rsplit('.', 1)[-1]} that "
                            f"configs/{group}/{choice}.yaml gives and {group}._target_={target} does not take; choose the "
                            f"config of its kind with it: {group}={kin} {group}._target_={target}")


def check_composed(cfg: Any, model: dict[str, Any] | None = None, classes: bool = True, devices: bool = True) -> None:
    """Every setting of a composed config, before anything is seeded, built or written: the top-level ones (a key
    nothing reads, from `+key=value` or a file, is refused, not ignored), the model's (`model`: with an experiment's
    shared settings applied, launch/hydra_app.py) and the data module's, and with `classes`, once Lightning is imported,
    each other group's against its class's constructor; with `devices`, the accelerator against this machine's (a
    multirun's launcher may run the jobs on others). Raises SettingsError naming the first setting refused."""
    from omegaconf import OmegaConf

    unknown = [key for key in cfg if key not in (*TOP_LEVEL_SETTINGS, *CONFIG_GROUPS)]
    if unknown:
        options = [*TOP_LEVEL_SETTINGS, *CONFIG_GROUPS, *(f"{group}.{key}" for group in ("model", "data", "trainer")
                                                          for key in cfg.get(group) or {})]
        raise SettingsError(f"{unknown[0]}: no such setting (the top-level ones are {', '.join(TOP_LEVEL_SETTINGS)})"
                            f"{did_you_mean(unknown[0], options)}")
    top_level = {key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
                 for key in TOP_LEVEL_SETTINGS if key in cfg}
    for key, value in top_level.items():
        if (want := expected(TOP_LEVEL_SETTINGS[key], value)) is not None:
            raise SettingsError(f"{key}={value!r}: expected {want}")
    if isinstance(top_level.get("seed"), int) and not SEED_RANGE[0] <= top_level["seed"] <= SEED_RANGE[1]:
        raise SettingsError(f"seed={top_level['seed']}: expected an integer in [0, 2^32 - 1]")
    if top_level.get("ckpt_path") == "":
        raise SettingsError("ckpt_path=: an empty path; give the checkpoint to start from, or leave ckpt_path out (null) "
                            "for a new run")
    models = config_targets("model")
    for choice, shared in (top_level.get("per_model") or {}).items():  # each model's own, whichever model runs
        if choice not in models:
            raise SettingsError(f"per_model.{choice}: no such model config; expected one of {', '.join(models)}"
                                f"{did_you_mean(choice, list(models))}")
        if isinstance(shared, dict) and (names := declared(models[choice])):
            check_group(models[choice].rsplit(".", 1)[-1], names, shared, f"per_model.{choice}")
    taken = sorted({name for target in models.values() for name in declared(target) or {}})
    for key in top_level.get("discrete_latent") or {}:  # given to every model with a discrete latent
        if key not in taken:
            raise SettingsError(f"discrete_latent.{key}: no such setting of a model"
                                f"{did_you_mean(f'discrete_latent.{key}', [f'discrete_latent.{k}' for k in taken])}")
    if isinstance(top_level.get("ddp_timeout_s"), (int, float)) and not top_level["ddp_timeout_s"] > 0:
        raise SettingsError(f"ddp_timeout_s={top_level['ddp_timeout_s']}: expected a number of seconds > 0")
    for key in (f"replicas.{key}" for key in cfg.get("replicas") or {}):
        if key not in REPLICA_SETTINGS:
            raise SettingsError(f"{key}: no such setting (the replicas' are {', '.join(REPLICA_SETTINGS)})"
                                f"{did_you_mean(key, REPLICA_SETTINGS)}")
    for key in TRAINER_GROUPS.keys() & set(cfg.get("trainer") or {}):
        raise SettingsError(f"trainer.{key}: chosen by the {key} group, not among the trainer's settings: "
                            f"{TRAINER_GROUPS[key]}")
    check_classes_chosen(cfg)
    logger = OmegaConf.to_container(cfg.logger, resolve=False) if cfg.get("logger") else {}
    for key in LAYOUT_SETTINGS:
        if key in logger:
            folder = LOGGER_FOLDERS.get(logger.get("_target_"), "tensorboard")
            raise SettingsError(f"logger.{key}={logger[key]}: the run is logged to <log_dir>/{folder}/<run_name>-<the "
                                f"model's key settings>; give {LAYOUT_SETTINGS[key]}={logger[key]} instead")
    if logger and logger.get("_target_") not in LOGGER_FOLDERS:
        raise SettingsError(f"logger._target_={logger.get('_target_')}: a run is logged by the loggers its layout places: "
                            f"{', '.join(path.rsplit('.', 1)[-1] for path in LOGGER_FOLDERS)} (logger=tensorboard, logger=csv), "
                            "or none (logger=none)")
    groups = {"model": model if model is not None else OmegaConf.to_container(cfg.model, resolve=True),
              "data": OmegaConf.to_container(cfg.data, resolve=True)}
    for key in ("optimizer", "scheduler"):  # LightningCLI's --model.optimizer: in Hydra, a group of its own
        if key in groups["model"]:
            raise SettingsError(f"model.{key}: the {key} group chooses it ({key}=NAME: "
                                f"{', '.join(config_targets(key))} in configs/{key}/), and {key}.KEY=VALUE its settings")
    for group, settings in groups.items():  # against configs/settings.py: each setting, then built by its constructor
        if names := declared(target := settings.get("_target_")):
            check_replaced_class(cfg, group, settings, names)
            check_group(target.rsplit(".", 1)[-1], names, settings, group)
        resumed = cfg.get("ckpt_path") is not None  # (its settings are the checkpoint's, read once imported)
        check_combination(group, target, settings if group == "data" or resumed else
                          as_built(settings, groups["data"].get("_target_"), groups["data"]), group)
    if not classes:
        return
    if "lightning" not in sys.modules:  # the other classes' settings are their constructors', known once imported; the
        for group, settings in other_groups(cfg):  # libraries' by the names a run recorded (configs.py)
            try:
                if (names := recorded(settings.get("_target_"))) is not None:
                    check_group(settings["_target_"].rsplit(".", 1)[-1], names, settings, group)
            except SettingsError as error:
                raise with_fix(error, group, cfg) from None
        return
    for group, settings in itertools.chain(groups.items(), other_groups(cfg)):
        target = settings["_target_"]
        if group == "trainer":
            check_trainer_values(settings, "trainer", devices)  # what the Trainer takes but cannot run
        try:  # (Hydra's get_object logs a miss in three lines before raising)
            cls = pkgutil.resolve_name(target)
        except (ImportError, AttributeError, ValueError, TypeError) as error:  # one's own misspelled: +callbacks.mine._target_=mypkg.Typo; a list
            package_missing = isinstance(error, ModuleNotFoundError) and error.name == target.split(".")[0]
            hint = f"; {IMPORTABLE_HINT}" if package_missing else closest_in_module(target) if isinstance(error, AttributeError) else ""
            raise SettingsError(f"{group}._target_={target}: {error}{hint}") from None
        base = BASE_CLASSES.get(group)
        if base is not None and not (isinstance(cls, type) and issubclass(cls, pkgutil.resolve_name(base))):
            raise SettingsError(f"{group}._target_={target}: not a subclass of {base}, which the run builds and names it "
                                f"through; a {'data module' if group == 'data' else group} of one's own subclasses it or one of "
                                "the collection's (README, Your own code)")
        if group in ("model", "data"):
            if declared(target) is not None:
                continue  # checked above
            check_replaced_class(cfg, group, settings, class_hints(cls), cls)
        try:
            check_settings(cls, settings, group)
        except SettingsError as error:
            raise with_fix(error, group, cfg) from None


def check_classes_chosen(cfg: Any) -> None:
    """Settings without the class that would take them, which the run would build as a plain mapping: a group's over a
    choice of none (+scheduler.gamma=0.5 over scheduler=none), or a callback's that no config of callbacks/ in use
    names (+callbacks.posterior_samples.burn_in=5 without callbacks=sgmcmc); refused naming the configs that have one."""
    from omegaconf import OmegaConf

    choices = OmegaConf.select(cfg, "hydra.runtime.choices") or {}
    for group in ("optimizer", "scheduler", "logger"):
        settings = cfg.get(group)
        if OmegaConf.is_dict(settings) and len(settings) and "_target_" not in settings:
            key, offered = next(iter(settings)), ", ".join(f"{group}={choice}" for choice in config_targets(group))
            raise SettingsError(f"{group}.{key}: {group}={choices.get(group, 'none')} chooses no class to take it; "
                                f"choose one with it ({offered})")
    for name, callback in (cfg.get("callbacks") or {}).items():
        if OmegaConf.is_dict(callback) and "_target_" not in callback:
            has = [path.stem for path in sorted((CONFIGS / "callbacks").glob("*.yaml"))
                   if name in read_config(f"callbacks/{path.name}")]
            where = f"callbacks={has[0]} adds it" if has else f"one of one's own is added with +callbacks.{name}._target_=CLASS"
            others = [f"callbacks.{other}" for other, c in cfg.callbacks.items() if OmegaConf.is_dict(c) and "_target_" in c]
            listed = did_you_mean(f"callbacks.{name}", others) or f" (it has {', '.join(others)})"
            raise SettingsError(f"callbacks.{name}: configs/callbacks/{choices.get('callbacks', 'default')}.yaml has no such "
                                f"callback{listed}; {where}")


def with_fix(error: SettingsError, group: str, cfg: Any) -> SettingsError:
    """A class's refused setting with its fix: a value that an interpolation gave (scheduler=cosine's T_max:
    ${trainer.max_epochs}) named with it and the setting to give; for a logger, logger._target_=... given over another
    logger's settings."""
    from omegaconf import OmegaConf

    text, key, node = str(error), re.match(rf"{re.escape(group)}\.(\w+)=", str(error)), OmegaConf.select(cfg, group)
    source = OmegaConf.to_container(node, resolve=False).get(key[1]) if key and OmegaConf.is_dict(node) else None
    if isinstance(source, str) and "${" in source:
        text += f" (it is {source} in the config; give {group}.{key[1]}=VALUE)"
    return SettingsError(f"{text} (logger=csv and logger=tensorboard choose a logger with its own settings)"
                         if group == "logger" else text)


def other_groups(cfg: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """The settings of the trainer, optimizer, scheduler, logger and each callback, resolved as they are checked: after
    the model's and the data module's classes are found (the optimizer's ${model.lr} does not resolve where a class of
    one's own did not import, which is the mistake to name)."""
    from omegaconf import OmegaConf

    for group in ("trainer", "optimizer", "scheduler", "logger"):
        if cfg.get(group):
            yield group, OmegaConf.to_container(cfg[group], resolve=True)
    for name, callback in (OmegaConf.to_container(cfg.callbacks, resolve=True) if cfg.get("callbacks") else {}).items():
        if isinstance(callback, dict) and "_target_" in callback:
            yield f"callbacks.{name}", callback
