"""The early check of a Hydra command line (`python train.py KEY=VALUE ...`): config choices, settings of the
chosen classes and of a picked experiment, `+` on a key that has a value, Hydra plugins, options of the other front end."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from launch.checks.arguments import overrides_of, values_of
from launch.checks.configs import CONFIGS, GROUPS, composed_choice, config_value, declared_defaults, default_choices, \
    every_config, read_config
from launch.checks.precheck import OTHER_TREE, EarlyRefusal, TOP_LEVEL_SETTINGS, REMOVED_TRAINER_OPTIONS, check_combination, \
    check_value, config_file_settings, did_you_mean, removed_trainer_option, unquoted
from launch.checks.received_config import hydra_folders

CONFIG_GROUPS = ("model", "data", "optimizer", "scheduler", "trainer", "logger", "callbacks", "experiment", "hydra")
REPLICA_SETTINGS = ("replicas.seeds", "replicas.arms")  # launch/runs/replicas.py checks their values
# The groups whose settings their constructors declare (Lightning's, torch's): checked once these are imported.
IMPORTED_GROUPS = ("trainer", "optimizer", "scheduler")
# The groups whose configs extend their class's defaults (launch/hydra_config.py: register_defaults): every setting of
# the class is in the composed config. Another group's config (optimizer) holds only the keys its file sets.
CLASS_DEFAULT_GROUPS = ("model", "data", "trainer")
# The TensorBoard run's directory and name are the run's layout (launch/run_layout.py), set by these top-level settings.
LAYOUT_SETTINGS = {"logger.save_dir": "log_dir", "logger.name": "run_name"}


def unknown_top_level_setting(key: str) -> str:
    """The line that refuses a top-level key nothing reads (here, and once composed in launch/hydra_run.py)."""
    return f"{key}: no such setting (the top-level ones are {', '.join(TOP_LEVEL_SETTINGS)})"


def layout_setting(key: str, value: Any) -> str:
    return (f"{key}={value}: the TensorBoard run is <log_dir>/tensorboard/<run_name>-<the model's key settings>; give "
            f"{LAYOUT_SETTINGS[key]}={value} instead")


# Hydra's launchers and sweepers: `basic` (Hydra's own), the plugins pyproject's `cluster` extra installs (each choice:
# its plugin's package), this project's configs/hydra/<group>/*.yaml, which extend one of those (`defaults: - joblib`),
# and any other installed Hydra plugin (its folder hydra_plugins/hydra_<name>_launcher).
PLUGIN_PACKAGES = {"joblib": "hydra-joblib-launcher", "submitit_local": "hydra-submitit-launcher",
                   "submitit_slurm": "hydra-submitit-launcher", "optuna": "hydra-optuna-sweeper"}
CLUSTER_EXTRA = "pip install -e '.[cluster]'"


def installed_plugins() -> list[str]:
    """The folders of the installed Hydra plugins (hydra_joblib_launcher, ...), found without importing them."""
    try:
        spec = importlib.util.find_spec("hydra_plugins")
    except (ImportError, ValueError):
        return []
    return [path.name for location in (spec.submodule_search_locations or [] if spec else []) for path in Path(location).iterdir()]


def plugin_installed(package: str) -> bool:
    """Whether the Hydra plugin distribution `package` (hydra-joblib-launcher) is installed."""
    return package.replace("-", "_") in installed_plugins()


def check_plugin_choice(group: str, value: str, multirun: bool) -> None:
    """`hydra/launcher=NAME` / `hydra/sweeper=NAME`: a config that exists, whose plugin is installed, in a multirun."""
    kind = group.rsplit("/", 1)[1]
    ours = [path.stem for path in (CONFIGS / group).glob("*.yaml")]
    known = sorted({"basic", *ours, *(name for name, package in PLUGIN_PACKAGES.items() if package.endswith(kind))})
    for choice in [str(v) for v in values_of(value) or []]:
        extends = (read_config(f"{group}/{choice}.yaml") or {}).get("defaults") or [] if choice in ours else []
        plugin = next((p for p in [choice, *extends] if isinstance(p, str) and p in PLUGIN_PACKAGES), None)
        if plugin is not None and not plugin_installed(PLUGIN_PACKAGES[plugin]):
            raise EarlyRefusal(f"{group}={choice}: the {plugin} {kind} plugin is not installed: {CLUSTER_EXTRA} "
                               f"(or pip install {PLUGIN_PACKAGES[plugin]})")
        others = [name for name in installed_plugins() if name.endswith(kind) and f"_{choice.split('_')[0]}_" in name]
        if plugin is None and choice not in known and not others:
            raise EarlyRefusal(f"{group}={choice}: no such {kind}; expected one of {', '.join(known)} "
                               f"(configs/{group}/ and the Hydra plugins of {CLUSTER_EXTRA}){did_you_mean(choice, known)}")
        if not multirun and choice != "basic":
            raise EarlyRefusal(f"{group}={choice}: a {kind} runs the jobs of a multirun only; add -m "
                               f"(python train.py -m {group}={choice} ...)")


def check_one_model_per_study(model: str | None, experiment: list[str]) -> None:
    """hydra/sweeper=tune runs one Optuna study of one model: a swept model (model=a,b, or experiment=compare's list
    of models) would make Optuna pick the model too, with another model's search space."""
    def swept_models(name: str) -> Any:  # hydra.sweeper.params.model of the experiment (or of one it extends)
        return config_value(composed_choice("experiment", name), ["hydra", "sweeper", "params", "model"])

    if (model is not None and "," in model) or (model is None and any(swept_models(e) for e in experiment)):
        compared = str(swept_models("compare"))  # `${every_config:model,LEFT_OUT...}` or a list `a,b`
        every = re.fullmatch(r"\$\{every_config:model((?:,\w+)*)\}", compared)
        compared = every_config("model", *every[1].split(",")[1:]) if every else compared
        raise EarlyRefusal("hydra/sweeper=tune tunes one model per study: give model=NAME (every estimator in turn: "
                           f"for m in {compared.replace(',', ' ')}; do python train.py -m experiment=compare "
                           "model=$m hydra/sweeper=tune; done)")


def experiment_files(argv: list[str], experiment: list[str]) -> list[str]:
    """The experiment files a Hydra command picks, from configs/experiment/ and the folders it adds (--config-dir), that
    set global settings (`# @package _global_`, as configs/experiment/'s do)."""
    found = [folder / "experiment" / f"{name}.yaml" for name in experiment for folder in (CONFIGS, *hydra_folders(argv))]
    return [str(path) for path in found if path.is_file() and "@package _global_" in path.read_text(errors="replace")[:2000]]


def check_hydra(argv: list[str], schema: dict[str, Any], only: tuple[str, ...] | None = None) -> None:
    """Raise EarlyRefusal for the first mistake of a Hydra command line that can be seen without the imports; with
    `only`, of those groups' settings alone (IMPORTED_GROUPS, once imported: the rest was checked before)."""
    if any(arg.split("=", 1)[0] in OTHER_TREE for arg in argv):
        return
    overrides = overrides_of(argv)
    # Hydra's argparse takes abbreviations (--multi) and joined values (--cfg=job, -cjob). --cfg only prints the
    # config: a sweeper or launcher is fine there without -m.
    flags = [arg.split("=", 1)[0] for arg in argv if arg.startswith("-")]
    multirun = any(f == "-m" or (len(f) > 3 and "--multirun".startswith(f)) or f.startswith(("--cfg", "-c"))
                   for f in flags) or ("hydra.mode", "MULTIRUN") in overrides
    for key, value in overrides:
        if key in ("hydra/launcher", "hydra/sweeper") and only is None:
            check_plugin_choice(key, value, multirun)

    choices = {group: [choice] for group, choice in default_choices().items()}
    for key, value in overrides:
        if key in CONFIG_GROUPS and key != "hydra":
            folders = [CONFIGS, *hydra_folders(argv)]
            available = sorted({p.stem for folder in folders for p in (folder / key).glob("*.yaml")})
            searched = " or ".join(f"{folder / key}/" if folder != CONFIGS else f"configs/{key}/" for folder in folders)
            read = values_of(value)  # quotes and spaces are Hydra's syntax, not part of the name
            wanted = [str(v) if v is not None else "null" for v in read] if read is not None else []
            for choice in wanted:
                if choice not in available and not (key == "experiment" and choice in ("null", "")):
                    # Hydra leaves a group out with ~group (it refuses group=null from the command line)
                    leave_out = (f" ({key}=none leaves it out)" if "none" in available else f" (~{key} leaves it out)") \
                        if choice in ("null", "none", "None", "false") else ""
                    raise EarlyRefusal(f"{key}={choice}: no such config in {searched}; expected one of "
                                       f"{', '.join(available)}{did_you_mean(choice, available)}{leave_out}")
            choices[key] = wanted or [None]
    experiment = [c for c in choices.get("experiment", [None]) if c not in (None, "null", "")]
    if ("hydra/sweeper", "tune") in overrides and only is None:
        check_one_model_per_study(dict(overrides).get("model"), experiment)

    def settings_of(group: str) -> list[dict[str, Any]] | None:
        """The settings of every class `group` may build in this command; None where one is unknown or stale."""
        picked = choices.get(group, [None])
        if group == "model" and experiment:  # an experiment may choose the models itself
            picked = list(schema["choices"]["model"])
        targets = [schema["choices"][group].get(choice) for choice in picked] if group != "trainer" else ["lightning.Trainer"]
        if any(target is None or target not in schema["classes"] for target in targets):
            return None
        return [schema["classes"][target] for target in targets]

    def all_options() -> list[str]:
        options = [*TOP_LEVEL_SETTINGS, *REPLICA_SETTINGS]
        for group in GROUPS:
            for settings in settings_of(group) or []:
                options += [f"{group}.{name}" for name in settings]
        return sorted(set(options))

    appended = {arg.lstrip("+").partition("=")[0] for arg in argv if arg.startswith("+")}
    if not experiment and only is None:  # (an experiment may set more)
        for arg in argv:
            if arg.startswith("+") and not arg.startswith("++") and "=" in arg:
                check_append(*arg[1:].split("=", 1), choices, schema)
    def check_setting(key: str, value: str | None, in_file: bool = False) -> None:
        """One `key=value` of the command line, or one setting of a picked experiment file (its value read as YAML)."""
        group, dot, name = key.partition(".")
        if only is not None and group not in only:
            return
        if key in LAYOUT_SETTINGS:
            raise EarlyRefusal(layout_setting(key, value))
        if group in ("callbacks", "logger") and dot and key not in appended and not experiment:
            check_config_key(key, value, group, choices.get(group, [None]))
            return
        if key in CONFIG_GROUPS or group in ("hydra", "callbacks", "logger", "defaults") or key.startswith("hydra/"):
            return
        if group == "replicas" and dot:
            if key not in REPLICA_SETTINGS:
                raise EarlyRefusal(f"{key}: no such setting (the replicas' are {', '.join(REPLICA_SETTINGS)})"
                                   + did_you_mean(key, list(REPLICA_SETTINGS)))
            return
        if not dot:
            if key not in TOP_LEVEL_SETTINGS and not key.startswith("_"):
                raise EarlyRefusal(unknown_top_level_setting(key) + did_you_mean(key, all_options()))
            if key in TOP_LEVEL_SETTINGS and value is not None:
                check_value(key, value, [TOP_LEVEL_SETTINGS], cli=in_file)
            return
        if group == "trainer" and name in REMOVED_TRAINER_OPTIONS:
            raise EarlyRefusal(removed_trainer_option(key, value, cli=False))
        specs = settings_of(group) if group in GROUPS and "." not in name and not name.startswith("_") else None
        if specs is None:
            return
        if not any(name in settings for settings in specs):
            names = sorted({f"{group}.{n}" for settings in specs for n in settings})
            owner = ", ".join(sorted({class_name(schema, group, choice) for choice in choices.get(group, [])} - {None}))
            owned = owner and (not experiment or group == "trainer")  # an experiment may choose another model
            raise EarlyRefusal(f"{key}: no such setting{f' of {owner}' if owned else ''}"
                               f"{did_you_mean(key, names) or elsewhere(schema, group, name)}")
        # Every class the command line sweeps must take it: Hydra would refuse the job of one that does not, in several
        # lines and after the jobs before it ran (an experiment may choose the models itself: those are not known here).
        lacking = [class_name(schema, group, choice) for choice, settings in zip(choices.get(group, []), specs)
                   if name not in settings] if not (experiment and group == "model") else []
        if lacking:
            raise EarlyRefusal(f"{key}: no such setting of {', '.join(lacking)}, which {group}={','.join(choices[group])} "
                               f"sweeps{elsewhere(schema, group, name)}; give it in a multirun of the {group}s that take it")
        if group not in CLASS_DEFAULT_GROUPS and key not in appended and not in_file:
            check_config_key(key, value or "V", group, choices.get(group, [None]))  # a setting its file leaves out
        if value is not None and only is None:  # (after the imports, values are checked once composed)
            check_value(key, value, [settings for settings in specs if name in settings], cli=in_file)
            read = values_of(value, in_file)
            if read is not None and len(read) == 1 and group in ("model", "data"):
                given.setdefault(group, {})[name] = read[0]

    given: dict[str, dict[str, Any]] = {}
    for key, value in overrides:
        check_setting(key, value)
    for path in experiment_files(argv, experiment):  # YAML as OmegaConf reads it: YAML 1.1, as LightningCLI's values
        for key, value in config_file_settings(path):
            try:
                check_setting(key, unquoted(value), in_file=True)
            except EarlyRefusal as refusal:
                raise EarlyRefusal(f"{path}: {refusal}") from None
    for group in ("model", "data") if only is None else ():  # the ranges and combinations, as the constructor checks them
        picked = choices.get(group, [None])
        if len(picked) == 1 and picked[0] not in (None, "null") and not (group == "model" and experiment):
            composed = composed_choice(group, picked[0]) or {}
            in_file = composed.get(group, {}) if isinstance(composed.get(group), dict) else {}
            check_combination(group, schema["choices"][group].get(picked[0]), {**in_file, **given.get(group, {})}, group)


def check_append(key: str, value: str, choices: dict[str, list[str | None]], schema: dict[str, Any]) -> None:
    """`+KEY=V` adds a key the config does not have; Hydra refuses it for a key that already has a value (after the
    imports, in six lines), where `KEY=V` is what was meant."""
    group, dot, name = key.split("@", 1)[0].partition(".")
    if not dot:
        set_by = "configs/train.yaml" if config_value(composed_choice(".", "train") or {}, [group]) is not None else None
    else:
        picked = choices.get(group, [None])
        if len(picked) != 1 or picked[0] in (None, "null"):
            return
        composed = composed_choice(group, picked[0]) or {}
        in_file = config_value(composed.get(group, composed) if group in ("model", "data") else composed, name.split("."))
        target = schema["choices"].get(group, {}).get(picked[0]) if group in GROUPS else None
        if in_file is not None:
            set_by = f"configs/{group}/{picked[0]}.yaml"
        elif "." not in name and group in CLASS_DEFAULT_GROUPS and declared_defaults(target).get(name) is not None:
            set_by = f"the default of {target.rsplit('.', 1)[-1]}"
        else:
            set_by = None
    if set_by is not None:
        raise EarlyRefusal(f"+{key}={value}: {key} already has a value ({set_by}), and + only adds a key that has none; "
                           f"drop the + to set it: {key}={value}")


def check_config_key(key: str, value: str, group: str, picked: list[str | None]) -> None:
    """`callbacks.NAME.KEY=V` or `logger.KEY=V` without `+`: Hydra takes only the keys its config file sets (struct
    mode) and refuses any other in several lines; refused here in one, with the likely key or the `+` that adds it."""
    if len(picked) != 1 or picked[0] in (None, "null"):
        return
    node: Any = composed_choice(group, picked[0])
    walked = group
    for part in key.split(".")[1:]:
        if not isinstance(node, dict):
            return
        if part not in node:
            where = f"configs/{group}/{picked[0]}.yaml"
            options = [f"{walked}.{k}" for k in node if not str(k).startswith("_")]
            what = "callback" if walked == "callbacks" else "key"
            hint = did_you_mean(f"{walked}.{part}", options) or (f" (it has {', '.join(options)})" if what == "callback" else "")
            raise EarlyRefusal(f"{walked}.{part}: {where} has no such {what}{hint} (one it leaves out is added with "
                               f"+{key}={value})")
        node, walked = node[part], f"{walked}.{part}"




def elsewhere(schema: dict[str, Any], group: str, name: str) -> str:
    """'; it is a setting of JSA (model=jsa)' when another choice of the group takes `name`, else ''."""
    owners = [(choice, target) for choice, target in schema["choices"].get(group, {}).items()
              if name in schema["classes"].get(target, {})]
    return f"; it is a setting of {owners[0][1].rsplit('.', 1)[-1]} ({group}={owners[0][0]})" if owners else ""


def class_name(schema: dict[str, Any], group: str, choice: str | None) -> str | None:
    target = "lightning.Trainer" if group == "trainer" else schema["choices"].get(group, {}).get(choice or "")
    return target.rsplit(".", 1)[-1] if target else None


# Hydra's own options (its argparse takes an abbreviation of any of them: --multi, --cfg).
HYDRA_OPTIONS = ("--help", "--hydra-help", "--version", "--cfg", "--resolve", "--package", "--run", "--multirun",
                 "--shell-completion", "--config-path", "--config-name", "--config-dir", "--experimental-rerun", "--info")


def check_hydra_command(argv: list[str], schema: dict[str, Any], prints_only: bool) -> None:
    """Raise EarlyRefusal for the first mistake of a Hydra command line seen before the imports: Hydra's
    --experimental-rerun (or an abbreviation argparse expands to it), which unpickles the file it is given (a stranger's
    file would run code); a LightningCLI option without its subcommand, which Hydra answers with its usage text; then
    the overrides (check_hydra)."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if len(flag) > 2 and "--experimental-rerun".startswith(flag):
            raise EarlyRefusal(f"{flag}: a run's config.pickle is never unpickled here (a stranger's file could run "
                               "code); to rerun a run, pass the overrides in its .hydra/overrides.yaml")
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if arg.startswith("--") and len(flag) > 2 and not any(option.startswith(flag) for option in HYDRA_OPTIONS):
            hydra = " (in Hydra, python train.py --cfg job prints the composed config)" if flag == "--print_config" else \
                " (Hydra takes key=value settings: python train.py --help)"
            raise EarlyRefusal(f"{flag} is an option of the LightningCLI front end, which needs a subcommand first: "
                               f"python train.py fit {arg}{hydra}")
    check_hydra(argv, schema)
