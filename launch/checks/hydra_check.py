"""The early check of a Hydra command line (`python train.py KEY=VALUE ...`), on the config Hydra itself composes from
it (its compose API: configs/ and the folders --config-dir adds), before torch is imported: Hydra's refusals (a config
that does not exist, a key its struct mode refuses, a `+` on a key that has a value) as one line, then each composed
job's model and data against their declared settings (configs/settings.py) and its top-level keys. Until Lightning is
imported the Trainer's settings are unknown: the trainer's keys are then added, not refused, and checked once it is
(launch/hydra_app.py runs this check again). Also Hydra's plugins and the other front end's options."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path
from typing import Any

from common.settings import expected
from launch.checks.arguments import TAKES_VALUE, values_of
from launch.checks.received_config import hydra_folders
from launch.checks.configs import CONFIGS, NOT_SETTINGS, config_targets, declared, declared_defaults, every_config
from launch.checks.precheck import OTHER_TREE, EarlyRefusal, TOP_LEVEL_SETTINGS, REMOVED_TRAINER_OPTIONS, check_combination, \
    did_you_mean, removed_trainer_option

REPLICA_SETTINGS = ("replicas.seeds", "replicas.arms")  # launch/runs/replicas.py checks their values
CONFIG_GROUPS = ("model", "data", "optimizer", "scheduler", "trainer", "logger", "callbacks", "experiment", "hydra")
CLASS_GROUPS = ("model", "data", "trainer")  # their configs hold every setting of their class (register_defaults)
FILE_GROUPS = ("callbacks", "logger", "optimizer", "scheduler", "hydra")  # their configs hold the keys their files set
MAX_JOBS_CHECKED = 16  # a sweep's jobs composed: each value of each swept key once, the first values of the others
# The TensorBoard run's directory and name are the run's layout (launch/run_layout.py), set by these top-level settings.
LAYOUT_SETTINGS = {"logger.save_dir": "log_dir", "logger.name": "run_name"}


def unknown_top_level_setting(key: str) -> str:
    return f"{key}: no such setting (the top-level ones are {', '.join(TOP_LEVEL_SETTINGS)})"


def layout_setting(key: str, value: Any) -> str:
    return (f"{key}={value}: the TensorBoard run is <log_dir>/tensorboard/<run_name>-<the model's key settings>; give "
            f"{LAYOUT_SETTINGS[key]}={value} instead")


def register_defaults() -> None:
    """The Hydra configs `model_defaults/<Class>` and `data_defaults/<Class>` (configs/settings.py's declared defaults)
    and `trainer_defaults/Trainer` (lightning.Trainer's constructor defaults once Lightning is imported, else empty),
    which configs/model/*.yaml, configs/data/*.yaml and configs/trainer/default.yaml extend: `--cfg job` shows every
    setting and `model.NAME=VALUE` needs no `+`. Also the `${every_config:...}` resolver (experiment=compare)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for group in ("model", "data"):
        for target in set(config_targets(group).values()):
            store.store(group=f"{group}_defaults", name=target.rsplit(".", 1)[-1], node=declared_defaults(target))
    trainer: dict[str, Any] = {}
    if "lightning" in sys.modules:
        from lightning import Trainer

        from common.signatures import constructor_defaults

        trainer = {k: v for k, v in constructor_defaults(Trainer).items() if k not in NOT_SETTINGS["trainer"]}
    store.store(group="trainer_defaults", name="Trainer", node=trainer)
    OmegaConf.register_new_resolver("every_config", every_config, replace=True)


# Hydra's launcher and sweeper groups: `basic` (Hydra's own), the configs of the Hydra plugins pyproject's `cluster`
# extra installs (by the plugin's name), and this project's configs/hydra/<group>/*.yaml, which extend one of those
# (`defaults: - joblib`). Hydra's composition finds the configs of whatever plugins are installed.
PLUGIN_GROUPS = {"hydra/launcher": "launcher", "hydra/sweeper": "sweeper"}
PLUGIN_PACKAGES = {"joblib": "hydra-joblib-launcher", "submitit_local": "hydra-submitit-launcher",
                   "submitit_slurm": "hydra-submitit-launcher", "optuna": "hydra-optuna-sweeper"}
CLUSTER_EXTRA = "pip install -e '.[cluster]'"
_EXTENDS = re.compile(rf"^\s*-\s*({'|'.join(PLUGIN_PACKAGES)})\s*(?:#.*)?$", re.M)


def plugin_installed(package: str) -> bool:
    """Whether the Hydra plugin distribution `package` (hydra-joblib-launcher) is importable, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"hydra_plugins.{package.replace('-', '_')}") is not None
    except (ImportError, ValueError):
        return False


def check_plugin_choice(group: str, value: str, multirun: bool) -> None:
    """`hydra/launcher=NAME` / `hydra/sweeper=NAME`: its plugin installed, in a multirun."""
    for choice in [str(v) for v in values_of(value) or []]:
        ours = CONFIGS / group / f"{choice}.yaml"
        extends = _EXTENDS.search(ours.read_text()) if ours.is_file() else None
        plugin = extends[1] if extends else choice if choice in PLUGIN_PACKAGES else None
        if plugin is not None and not plugin_installed(PLUGIN_PACKAGES[plugin]):
            raise EarlyRefusal(f"{group}={choice}: the {plugin} {PLUGIN_GROUPS[group]} plugin is not installed: "
                               f"{CLUSTER_EXTRA} (or pip install {PLUGIN_PACKAGES[plugin]})")
        if not multirun and choice != "basic":
            raise EarlyRefusal(f"{group}={choice}: a {PLUGIN_GROUPS[group]} runs the jobs of a multirun only; add -m "
                               f"(python train.py -m {group}={choice} ...)")


def command_overrides(argv: list[str]) -> list[str]:
    """The KEY=VALUE overrides of a Hydra command line, as Hydra's parser takes them (not an option or its value)."""
    overrides, skip = [], False
    for arg in argv:
        if skip or arg.startswith("-"):
            option = arg.split("=", 1)[0]
            skip = not skip and "=" not in arg and (arg in (*TAKES_VALUE, "-cd") or (len(option) > 9 and "--config-dir".startswith(option)))
            continue
        overrides.append(arg)
    return overrides


def choices_in(group: str, folders: list[Path]) -> list[str]:
    return sorted({p.stem for folder in (CONFIGS, *folders) for p in (folder / group).glob("*.yaml")})


def job_overrides(parsed: list[Any], params: dict[str, str], parser: Any) -> list[list[str]]:
    """The jobs of a sweep to compose, each a list of overrides: the first value of every swept key, then each other
    value of each swept key in turn (at most MAX_JOBS_CHECKED); the swept keys are the command line's and the sweeper's
    `params` (experiment=compare's models) it does not give. A sweep that cannot be listed (Optuna's interval) is left
    to the sweeper."""
    given = {o.get_key_element().lstrip("+~") for o in parsed}
    swept = parsed + [o for o in parser.parse_overrides([f"{k}={v}" for k, v in params.items() if k not in given])]
    choices = [[o.input_line] if not o.is_sweep_override() else
               [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_discrete_sweep() else [] for o in swept]
    first = [values[0] for values in choices if values]
    jobs = [first] + [[*first[:i], value, *first[i + 1:]] for i, values in enumerate(c for c in choices if c) for value in values[1:]]
    return jobs[:MAX_JOBS_CHECKED]


def check_hydra(argv: list[str], schema: dict[str, Any]) -> None:
    """Raise EarlyRefusal for the first mistake of a Hydra command line, each job of a sweep composed by Hydra."""
    if any(arg.split("=", 1)[0] in OTHER_TREE for arg in argv):
        return
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    parser, folders = OverridesParser.create(), hydra_folders(argv)
    given = command_overrides(argv)
    parsed = []
    for arg in given:
        try:
            parsed += parser.parse_overrides([arg])
        except HydraException as error:  # Hydra's grammar: what it expected, and where its docs say more
            raise EarlyRefusal(f"{arg}: {' '.join(str(error).split())}") from None
    flags = [arg.split("=", 1)[0] for arg in argv if arg.startswith("-")]  # Hydra's argparse takes --multi, --cfg=job, -cjob
    multirun = any(f == "-m" or (len(f) > 3 and "--multirun".startswith(f)) for f in flags) or "hydra.mode=MULTIRUN" in given
    printed = any(f.startswith(("--cfg", "-c")) for f in flags)  # only prints the config: a launcher is fine without -m
    keys = {o.get_key_element().lstrip("+~"): o for o in parsed}
    for key, override in keys.items():
        if key in PLUGIN_GROUPS:
            check_plugin_choice(key, override.input_line.split("=", 1)[1], multirun or printed)
        group, _, name = key.partition(".")
        if group == "trainer" and name in REMOVED_TRAINER_OPTIONS:
            raise EarlyRefusal(removed_trainer_option(key, override.input_line.split("=", 1)[1], cli=False))
        if key in LAYOUT_SETTINGS:
            raise EarlyRefusal(layout_setting(key, override.input_line.split("=", 1)[1]))
        if key in CONFIG_GROUPS and override.value() is None and key != "hydra":  # Hydra: "must be a string or a list"
            available = choices_in(key, folders)
            leave_out = f"{key}=none" if "none" in available else f"~{key}"
            raise EarlyRefusal(f"{key}=null: no such config in configs/{key}/; expected one of {', '.join(available)} "
                               f"({leave_out} leaves it out)")
    # A setting of a class (model, data, trainer) or a top-level one given without + is added (++) and checked below
    # against the declared settings, which also name its class and the choice that takes it; a key of a file's own
    # (callbacks, logger, optimizer, scheduler) is left to Hydra's struct mode. The Trainer's keys are unknown until
    # Lightning is imported: deleting one is left to then.
    def added(o: Any) -> bool:
        key = o.get_key_element()
        return o.type.name == "CHANGE" and "/" not in key and key.split(".")[0] not in FILE_GROUPS and key not in CONFIG_GROUPS
    overrides = [f"++{o.input_line}" if added(o) else o.input_line for o in parsed
                 if not (o.is_delete() and o.get_key_element().startswith("~trainer.") and "lightning" not in sys.modules)]
    if folders:  # --config-dir: a search path entry, as Hydra's app adds it
        searchpath = [f"file://{Path(f).resolve()}" for f in folders]
        overrides = [o for o in overrides if not o.lstrip("+").startswith("hydra.searchpath=")] + \
            [f"hydra.searchpath=[{','.join(searchpath)}]"]
    register_defaults()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a search path that does not exist: the line below, or Hydra's after the imports)
        jobs = job_overrides(parser.parse_overrides(overrides), {}, parser)
        cfg = composed(compose, jobs[0], parsed, folders, schema)
        params = cfg.hydra.sweeper.get("params") if multirun else None
        params = OmegaConf.to_container(params, resolve=True) if params else {}
        if cfg.hydra.runtime.choices.get("hydra/sweeper") == "tune" and (
                ("model" in params and "model" not in keys) or (keys.get("model") and keys["model"].is_sweep_override())):
            raise EarlyRefusal("hydra/sweeper=tune tunes one model per study: give model=NAME (every estimator in turn: "
                               f"for m in {' '.join(every_config('model', 'vqvae_prior').split(','))}; do python train.py -m "
                               "experiment=compare model=$m hydra/sweeper=tune; done)")
        for job in job_overrides(parser.parse_overrides(overrides), params, parser):
            check_job(cfg if job == jobs[0] else composed(compose, job, parsed, folders, schema), keys, folders, schema)


def composed(compose: Any, overrides: list[str], given: list[Any], folders: list[Path], schema: dict[str, Any]) -> Any:
    """The config Hydra composes from `overrides`; its refusal as one line naming the override and the fix."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf import OmegaConf

    try:
        return compose("train", overrides=overrides, return_hydra_config=True)
    except MissingConfigException as error:  # In 'train': Could not find 'model/jsaa'
        group, _, choice = str(error.missing_cfg_file).rpartition("/")
        available = list(error.options or choices_in(group, folders))
        what = f"no such {PLUGIN_GROUPS[group]}" if group in PLUGIN_GROUPS else f"no such config in configs/{group}/"
        plugins = f" (configs/{group}/ and the Hydra plugins of {CLUSTER_EXTRA})" if group in PLUGIN_GROUPS else ""
        raise EarlyRefusal(f"{group}={choice}: {what}; expected one of {', '.join(available)}{plugins}"
                           f"{did_you_mean(choice, available)}") from None
    except (ConfigCompositionException, ValueError) as error:
        text = str(error)
        added = re.match(r"Could not append to config\. An item is already at '(.+)'", text)
        missing = re.match(r"Could not override '(.+)'", text)
        if added or missing:
            key = (added or missing)[1]
            line = next(o.input_line for o in given if o.get_key_element().lstrip("+") == key)
            value = line.split("=", 1)[1]
            without = composed(compose, [o for o in overrides if o.split("=", 1)[0].lstrip("+") != key], given, folders, schema)
            group = key.partition(".")[0]
            choice = without.hydra.runtime.choices.get(group)
            where = f"configs/{group}/{choice}.yaml" if choice else "configs/train.yaml"
            target = OmegaConf.select(without, f"{group}._target_") if choice and group in CLASS_GROUPS else None
            if added:
                source = f"{where} or the defaults of {target.rsplit('.', 1)[-1]} it extends" if target else where
                raise EarlyRefusal(f"{line}: {key} already has a value ({source}), and + only adds a key that has none; "
                                   f"drop the + to set it: {key}={value}") from None
            raise EarlyRefusal(no_such_key(key, value, OmegaConf.to_container(without, resolve=False), where, schema)) from None
        raise EarlyRefusal(" ".join(text.split())) from None  # Hydra's message names the override


def no_such_key(key: str, value: str, tree: dict[str, Any], where: str, schema: dict[str, Any]) -> str:
    """The line for `key=value` where `tree` (the composed config) has no such key: a setting of the class its group
    builds, or a key of the group's config file (one it leaves out is added with +)."""
    group, _, name = key.partition(".")
    node, walked = tree, group
    if not name or group == "replicas" or not isinstance(tree.get(group), dict):
        if group == "replicas":
            return f"{key}: no such setting (the replicas' are {', '.join(REPLICA_SETTINGS)})" + did_you_mean(key, list(REPLICA_SETTINGS))
        options = [*TOP_LEVEL_SETTINGS, *REPLICA_SETTINGS, *(f"{g}.{n}" for g in CLASS_GROUPS for n in tree.get(g) or {})]
        return unknown_top_level_setting(key) + did_you_mean(key, options)
    node = tree[group]
    target = node.get("_target_") if isinstance(node, dict) else None
    hints = schema["classes"].get(target) if target else None
    if hints is not None and name.split(".")[0] not in hints:  # not a setting of the class at all
        names = [f"{group}.{n}" for n in hints]
        return f"{key}: no such setting of {target.rsplit('.', 1)[-1]}{did_you_mean(key, names) or elsewhere(schema, group, name)}"
    for part in name.split("."):
        if not isinstance(node, dict):
            break
        if part not in node:
            options = [f"{walked}.{k}" for k in node if not str(k).startswith("_")]
            what = "callback" if walked == "callbacks" else "key"
            hint = did_you_mean(f"{walked}.{part}", options) or (f" (it has {', '.join(options)})" if what == "callback" else "")
            return f"{walked}.{part}: {where} has no such {what}{hint} (one it leaves out is added with +{key}={value})"
        node, walked = node[part], f"{walked}.{part}"
    return f"{key}: {where} has no such key (one it leaves out is added with +{key}={value})"


def check_job(cfg: Any, keys: dict[str, Any], folders: list[Path], schema: dict[str, Any]) -> None:
    """One composed job: its top-level keys and values, its model and data settings as their constructors build them
    (the experiment's shared settings applied), the trainer's, optimizer's and scheduler's once their classes are
    imported. A refusal of a value the command line did not give names the experiment file that gave it."""
    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(cfg, resolve=False)
    experiment = cfg.hydra.runtime.choices.get("experiment")
    files = [f / "experiment" / f"{experiment}.yaml" for f in (CONFIGS, *folders)] if experiment else []
    source = next((f"{path}: " for path in files if path.is_file()), "")

    def refuse(key: str, line: str) -> None:
        raise EarlyRefusal(line if key in keys else f"{source}{line}")

    for key, value in tree.items():
        if key == "hydra" or key in CONFIG_GROUPS or key.startswith("_"):
            continue
        if key not in TOP_LEVEL_SETTINGS:
            refuse(key, no_such_key(key, "", tree, "", schema))
        if isinstance(value, str) and "${" in value:
            continue
        want = expected(TOP_LEVEL_SETTINGS[key], value) or \
            ("an integer in [0, 2^32 - 1]" if key == "seed" and isinstance(value, int) and not 0 <= value < 2**32 else None) or \
            ("a number of seconds > 0" if key == "ddp_timeout_s" and isinstance(value, (int, float)) and not value > 0 else None)
        if want:
            refuse(key, f"{key}={value!r}: expected {want}")
    for name in (tree.get("replicas") or {}):
        if f"replicas.{name}" not in REPLICA_SETTINGS:
            refuse(f"replicas.{name}", no_such_key(f"replicas.{name}", "", tree, "", schema))
    for name, value in (tree.get("logger") or {}).items():
        if f"logger.{name}" in LAYOUT_SETTINGS:
            refuse(f"logger.{name}", layout_setting(f"logger.{name}", value))
    for group in ("model", "data", "trainer", "optimizer", "scheduler"):
        node = tree.get(group)
        target = node.get("_target_") if isinstance(node, dict) else None
        hints = schema["classes"].get(target) if target else None
        if hints is None:
            continue
        shared = shared_settings(tree, group, cfg, keys)
        for name, value in {**node, **shared}.items():
            if name.startswith("_"):
                continue
            if name not in hints:
                refuse(f"{group}.{name}", no_such_key(f"{group}.{name}", "", tree, "", schema))
            want = None if isinstance(value, str) and "${" in value else expected(hints[name], value)
            if want:
                refuse(f"{group}.{name}", f"{group}.{name}={value!r}: expected {want}")
        if group in ("model", "data"):
            try:
                check_combination(group, target, {**node, **shared}, group)
            except EarlyRefusal as refusal:
                named = str(refusal).split(" ", 1)[0].split("=", 1)[0].rstrip(":")
                refuse(named, str(refusal))


def shared_settings(tree: dict[str, Any], group: str, cfg: Any, keys: dict[str, Any]) -> dict[str, Any]:
    """An experiment's settings for the model (launch/hydra_config.py: model_settings): `discrete_latent`'s that the
    model takes, then `per_model.<its config name>`, each unless the command line sets it."""
    if group != "model":
        return {}
    takes = declared(tree["model"].get("_target_")) or {}
    own = (tree.get("per_model") or {}).get(cfg.hydra.runtime.choices.get("model")) or {}
    shared = {k: v for k, v in (tree.get("discrete_latent") or {}).items() if k in takes}
    return {k: v for k, v in {**shared, **own}.items() if f"model.{k}" not in keys}


def elsewhere(schema: dict[str, Any], group: str, name: str) -> str:
    """'; it is a setting of JSA (model=jsa)' when another choice of the group takes `name`, else ''."""
    owners = {choice: target for choice, target in schema["choices"].get(group, {}).items()
              if name in schema["classes"].get(target, {})}
    if not owners:
        return ""
    choice, target = next(iter(owners.items()))
    return f"; it is a setting of {target.rsplit('.', 1)[-1]} ({group}={choice})"


# Hydra's own options (its argparse takes an abbreviation of any of them: --multi, --cfg).
HYDRA_OPTIONS = ("--help", "--hydra-help", "--version", "--cfg", "--resolve", "--package", "--run", "--multirun",
                 "--shell-completion", "--config-path", "--config-name", "--config-dir", "--experimental-rerun", "--info")


def check_no_cli_options(argv: list[str]) -> None:
    """A LightningCLI option without its subcommand (`python train.py --print_config`, `--model=VAE`) goes to Hydra,
    whose report is its usage text and "unrecognized arguments"."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if arg.startswith("--") and len(flag) > 2 and not any(option.startswith(flag) for option in HYDRA_OPTIONS):
            hydra = " (in Hydra, python train.py --cfg job prints the composed config)" if flag == "--print_config" else \
                " (Hydra takes key=value settings: python train.py --help)"
            raise EarlyRefusal(f"{flag} is an option of the LightningCLI front end, which needs a subcommand first: "
                               f"python train.py fit {arg}{hydra}")


def check_no_pickled_rerun(argv: list[str]) -> None:
    """Hydra's --experimental-rerun (or any abbreviation argparse expands to it) unpickles the file it is given, a
    run's .hydra/config.pickle: a stranger's file would run code. Refused, whatever the schema says."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if len(flag) > 2 and "--experimental-rerun".startswith(flag):
            raise EarlyRefusal(f"{flag}: a run's config.pickle is never unpickled here (a stranger's file could run "
                               "code); to rerun a run, pass the overrides in its .hydra/overrides.yaml")


def check_hydra_command(argv: list[str], schema: dict[str, Any], prints_only: bool) -> None:
    """Raise EarlyRefusal for the first mistake of a Hydra command line seen before the imports."""
    check_no_pickled_rerun(argv)
    check_no_cli_options(argv)
    check_hydra(argv, schema)
