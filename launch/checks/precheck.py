"""The command line checked before the heavy imports: an unknown option, a config that does not exist, a value of the
wrong type or out of its declared range, a checkpoint or --config file that is missing or not YAML, a run directory
that is a file, an empty DATA_DIR: one `error:` line with the closest valid names, in both front ends, the settings of
LightningCLI's --config files and of a Hydra experiment included. A model's and a data module's settings are checked
against configs/settings.py before the imports; the Trainer's, an optimizer's and a scheduler's once Lightning is
imported (the front ends check again then). What this module cannot judge (an interpolation, a list, a quoted value
in a file) passes: the constructors still check everything.
"""

from __future__ import annotations

import difflib
import itertools
import re
import sys
from pathlib import Path
from typing import Any

from launch.checks.arguments import option_values, overrides_of, scalar, values_of
from launch.checks.paths import PathRefusal, check_paths
from launch.checks.received_config import ConfigRefusal, composed, given_settings, hydra_folders
from common.settings import expected
from launch.checks.configs import CONFIGS, GROUPS, NOT_SETTINGS, check_declared, cli_classes, config_targets, declared, \
    declared_defaults, default_choices, every_config

# The top-level settings run() reads (configs/train.yaml; compare_* come from experiment=compare), with their types.
TOP_LEVEL_SETTINGS = {"seed": int, "ckpt_path": str | None, "run_test": bool, "log_dir": str, "ddp_timeout_s": float,
                      "run_name": str, "discrete_latent": dict | None, "per_model": dict | None,
                      "compare_backbone": dict | None, "compare_prior": dict | None, "replicas": dict | None}
REPLICA_SETTINGS = ("replicas.seeds", "replicas.arms")  # launch/runs/replicas.py checks their values


def unknown_top_level_setting(key: str) -> str:
    """The line that refuses a top-level key nothing reads (here, and after the imports in launch/hydra_config.py)."""
    return f"{key}: no such setting (the top-level ones are {', '.join(TOP_LEVEL_SETTINGS)})"
CONFIG_GROUPS = ("model", "data", "optimizer", "scheduler", "trainer", "logger", "callbacks", "experiment", "hydra")
# Hydra options after which the config tree is another one, or that take the next word as their value.
OTHER_TREE = ("--config-name", "-cn", "--config-path", "-cp", "--info", "-i", "--hydra-help", "--shell-completion", "-sc")


class EarlyRefusal(ValueError):
    """A command-line mistake found before the imports (the message is the whole `error:` line)."""


def did_you_mean(word: str, candidates: list[str]) -> str:
    """'; did you mean X?' for the candidate whose last part is closest to `word`'s (the same last part first)."""
    def leaf(name: str) -> str:
        return name.rsplit(".", 1)[-1]

    same = [c for c in candidates if leaf(c) == leaf(word) and c != word]
    by_leaf = {leaf(c): c for c in candidates}
    # A name cut short (max_ep) means the one it begins (max_epochs), not one a few letters away (max_steps).
    begun = [name for name in by_leaf if name.startswith(leaf(word)) and name != leaf(word)] if leaf(word) else []
    close = same or [by_leaf[m] for m in difflib.get_close_matches(leaf(word), begun, n=1, cutoff=0)] or \
        [by_leaf[m] for m in difflib.get_close_matches(leaf(word), list(by_leaf), n=1, cutoff=0.75)]
    return f"; did you mean {close[0]}?" if close else ""


def check_value(option: str, value_text: str, specs: list[dict[str, Any]], cli: bool = False) -> None:
    """Refuse a value that fits none of the classes that take the setting (each spec: that class's settings)."""
    values = values_of(value_text, cli)
    for value in values or []:
        failures = [expected(settings[option.rsplit(".", 1)[-1]], value) for settings in specs]
        if failures and all(failures):
            raise EarlyRefusal(f"{option}={value!r}: expected {failures[0]}")




# Hydra's launcher and sweeper groups: `basic` (Hydra's own), the configs of the Hydra plugins pyproject's `cluster`
# extra installs (by the plugin's name), this project's configs/hydra/<group>/*.yaml, which extend one of those
# (`defaults: - joblib`), and whatever other installed Hydra plugins register.
PLUGIN_GROUPS = {"hydra/launcher": "launcher", "hydra/sweeper": "sweeper"}
PLUGIN_PACKAGES = {"joblib": "hydra-joblib-launcher", "submitit_local": "hydra-submitit-launcher",
                   "submitit_slurm": "hydra-submitit-launcher", "optuna": "hydra-optuna-sweeper"}
CLUSTER_EXTRA = "pip install -e '.[cluster]'"
_STORED = re.compile(r"""group\s*=\s*["'](hydra/(?:launcher|sweeper))["']\s*,\s*name\s*=\s*["'](\w+)["']""")
_EXTENDS = re.compile(rf"^\s*-\s*({'|'.join(PLUGIN_PACKAGES)})\s*(?:#.*)?$", re.M)


def installed_plugin_choices() -> dict[str, set[str]]:
    """group -> the choices the installed Hydra plugins register (their ConfigStore calls, read as text: no imports)."""
    import importlib.util

    found: dict[str, set[str]] = {group: set() for group in PLUGIN_GROUPS}
    try:
        spec = importlib.util.find_spec("hydra_plugins")
    except (ImportError, ValueError):
        return found
    for location in (spec.submodule_search_locations or []) if spec else []:
        for source in Path(location).glob("*/*.py"):
            for group, name in _STORED.findall(source.read_text(errors="replace")):
                found[group].add(name)
    return found


def plugin_installed(package: str) -> bool:
    """Whether the Hydra plugin distribution `package` (hydra-joblib-launcher) is importable, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"hydra_plugins.{package.replace('-', '_')}") is not None
    except (ImportError, ValueError):
        return False


def check_plugin_choice(group: str, value: str, multirun: bool) -> None:
    """`hydra/launcher=NAME` / `hydra/sweeper=NAME`: a config that exists, whose plugin is installed, in a multirun."""
    kind = PLUGIN_GROUPS[group]
    ours = {p.stem: p for p in (CONFIGS / group).glob("*.yaml")}
    installed = installed_plugin_choices()[group]
    for choice in [str(v) for v in values_of(value) or []]:
        extends = _EXTENDS.search(ours[choice].read_text()) if choice in ours else None
        plugin = extends[1] if extends else choice if choice in PLUGIN_PACKAGES else None
        if plugin is not None and not plugin_installed(PLUGIN_PACKAGES[plugin]):
            package = PLUGIN_PACKAGES[plugin]
            raise EarlyRefusal(f"{group}={choice}: the {plugin} {kind} plugin is not installed: {CLUSTER_EXTRA} "
                               f"(or pip install {package})")
        if plugin is None and choice not in ("basic", *ours, *installed):
            plugins = [name for name, package in PLUGIN_PACKAGES.items() if package.endswith(kind)]  # installed or not
            available = sorted({"basic", *ours, *plugins, *installed})
            raise EarlyRefusal(f"{group}={choice}: no such {kind}; expected one of {', '.join(available)} "
                               f"(configs/{group}/ and the Hydra plugins of {CLUSTER_EXTRA}){did_you_mean(choice, available)}")
        if not multirun and choice != "basic":
            raise EarlyRefusal(f"{group}={choice}: a {kind} runs the jobs of a multirun only; add -m "
                               f"(python train.py -m {group}={choice} ...)")


def check_one_model_per_study(model: str | None, experiment: list[str]) -> None:
    """hydra/sweeper=tune runs one Optuna study of one model: a swept model (model=a,b, or experiment=compare's list
    of models) would make Optuna pick the model too, with another model's search space."""
    def sweeps_models(name: str) -> bool:  # the experiment, or one it extends (compare_quick: defaults: [compare])
        import yaml

        path = CONFIGS / "experiment" / f"{name}.yaml"
        text = path.read_text() if path.is_file() else ""
        if re.search(r"^\s+params:\s*\n\s+model:", text, re.M):
            return True
        try:
            extends = (yaml.safe_load(text) or {}).get("defaults") or []
        except yaml.YAMLError:
            return False
        return any(isinstance(parent, str) and parent not in ("_self_", name) and sweeps_models(parent) for parent in extends)

    if (model is not None and "," in model) or (model is None and any(sweeps_models(e) for e in experiment)):
        raise EarlyRefusal("hydra/sweeper=tune tunes one model per study: give model=NAME (every estimator in turn: "
                           f"for m in {' '.join(compared_models())}; do python train.py -m experiment=compare "
                           "model=$m hydra/sweeper=tune; done)")


def compared_models() -> list[str]:
    """experiment=compare's models, as its sweep names them: `${every_config:model,LEFT_OUT...}` or a list `a,b`."""
    found = re.search(r"^[ \t]+model:[ \t]*(\S+)", (CONFIGS / "experiment" / "compare.yaml").read_text(), re.M)
    swept = found[1] if found else ""
    every = re.fullmatch(r"\$\{every_config:model((?:,\w+)*)\}", swept)
    return (every_config("model", *every[1].split(",")[1:]) if every else swept).split(",")


def experiment_files(argv: list[str], experiment: list[str]) -> list[str]:
    """The experiment files a Hydra command picks, from configs/experiment/ and the folders it adds (--config-dir), that
    set global settings (`# @package _global_`, as configs/experiment/'s do)."""
    found = [folder / "experiment" / f"{name}.yaml" for name in experiment for folder in (CONFIGS, *hydra_folders(argv))]
    return [str(path) for path in found if path.is_file() and "@package _global_" in path.read_text(errors="replace")[:2000]]


def check_hydra(argv: list[str], schema: dict[str, Any]) -> None:
    """Raise EarlyRefusal for the first mistake of a Hydra command line that can be seen without the imports."""
    if any(arg.split("=", 1)[0] in OTHER_TREE for arg in argv):
        return
    overrides = overrides_of(argv)
    # Hydra's argparse takes abbreviations (--multi) and joined values (--cfg=job, -cjob). --cfg only prints the
    # config: a sweeper or launcher is fine there without -m.
    flags = [arg.split("=", 1)[0] for arg in argv if arg.startswith("-")]
    multirun = any(f == "-m" or (len(f) > 3 and "--multirun".startswith(f)) or f.startswith(("--cfg", "-c"))
                   for f in flags) or ("hydra.mode", "MULTIRUN") in overrides
    for key, value in overrides:
        if key in PLUGIN_GROUPS:
            check_plugin_choice(key, value, multirun)

    choices = {group: [choice] for group, choice in default_choices().items()}
    for key, value in overrides:
        if key in CONFIG_GROUPS and key != "hydra":
            available = sorted({p.stem for folder in (CONFIGS, *hydra_folders(argv)) for p in (folder / key).glob("*.yaml")})
            read = values_of(value)  # quotes and spaces are Hydra's syntax, not part of the name
            wanted = [str(v) if v is not None else "null" for v in read] if read is not None else []
            for choice in wanted:
                if choice not in available and not (key == "experiment" and choice in ("null", "")):
                    # Hydra leaves a group out with ~group (it refuses group=null from the command line)
                    leave_out = (f" ({key}=none leaves it out)" if "none" in available else f" (~{key} leaves it out)") \
                        if choice in ("null", "none", "None", "false") else ""
                    raise EarlyRefusal(f"{key}={choice}: no such config in configs/{key}/; expected one of "
                                       f"{', '.join(available)}{did_you_mean(choice, available)}{leave_out}")
            choices[key] = wanted or [None]
    experiment = [c for c in choices.get("experiment", [None]) if c not in (None, "null", "")]
    if ("hydra/sweeper", "tune") in overrides:
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
    if not experiment:  # (an experiment may set more)
        for arg in argv:
            if arg.startswith("+") and not arg.startswith("++") and "=" in arg:
                check_append(*arg[1:].split("=", 1), choices, schema)
    def check_setting(key: str, value: str | None, in_file: bool = False) -> None:
        """One `key=value` of the command line, or one setting of a picked experiment file (its value read as YAML)."""
        group, dot, name = key.partition(".")
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
            owner = ", ".join(sorted({schema_name(schema, group, choice) for choice in choices.get(group, [])} - {None}))
            owned = owner and (not experiment or group == "trainer")  # an experiment may choose another model
            raise EarlyRefusal(f"{key}: no such setting{f' of {owner}' if owned else ''}"
                               f"{did_you_mean(key, names) or elsewhere(schema, group, name)}")
        if group not in CLASS_DEFAULT_GROUPS and key not in appended and not in_file:
            check_config_key(key, value or "V", group, choices.get(group, [None]))  # a setting its file leaves out
        if value is not None:
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
    for group in ("model", "data"):  # the ranges and combinations, as the constructor checks them
        picked = choices.get(group, [None])
        if len(picked) == 1 and picked[0] not in (None, "null") and not (group == "model" and experiment):
            composed = composed_choice(group, picked[0]) or {}
            in_file = composed.get(group, {}) if isinstance(composed.get(group), dict) else {}
            check_combination(group, schema["choices"][group].get(picked[0]), {**in_file, **given.get(group, {})}, group)


# The TensorBoard run's directory and name are the run's layout (launch/run_layout.py), set by these top-level settings.
LAYOUT_SETTINGS = {"logger.save_dir": "log_dir", "logger.name": "run_name"}


def layout_setting(key: str, value: str) -> str:
    return (f"{key}={value}: the TensorBoard run is <log_dir>/tensorboard/<run_name>-<the model's key settings>; give "
            f"{LAYOUT_SETTINGS[key]}={value} instead")


# Trainer options of Lightning 1.x that Lightning 2 removed, which old scripts and tutorials still give: what replaces
# each ({value}: the value given).
REMOVED_TRAINER_OPTIONS = {
    "gpus": "trainer.accelerator=gpu trainer.devices={value}",
    "num_processes": "trainer.accelerator=cpu trainer.devices={value}",
    "tpu_cores": "trainer.accelerator=tpu trainer.devices={value}",
    "auto_select_gpus": "trainer.devices=auto",
    "resume_from_checkpoint": "ckpt_path={value}",
}


def removed_trainer_option(option: str, value: str | None, cli: bool) -> str:
    """'trainer.gpus: no such setting of Trainer (Lightning 2 removed it); use trainer.accelerator=gpu trainer.devices=1'."""
    use = REMOVED_TRAINER_OPTIONS[option.rsplit(".", 1)[-1]].format(value=value if value is not None else "N")
    if cli:
        use = " ".join(f"--{part}" for part in use.split())
    return f"{option}: no such {'option' if cli else 'setting'} of Trainer (Lightning 2 removed it); use {use}"


# The groups whose configs extend their class's defaults (launch/hydra_config.py: register_defaults): every setting of
# the class is in the composed config. Another group's config (optimizer) holds only the keys its file sets.
CLASS_DEFAULT_GROUPS = ("model", "data", "trainer")


def check_append(key: str, value: str, choices: dict[str, list[str | None]], schema: dict[str, Any]) -> None:
    """`+KEY=V` adds a key the config does not have; Hydra refuses it for a key that already has a value (after the
    imports, in six lines), where `KEY=V` is what was meant."""
    group, dot, name = key.split("@", 1)[0].partition(".")
    if not dot:
        set_by = "configs/train.yaml" if _config_value(composed_choice(".", "train") or {}, [group]) is not None else None
    else:
        picked = choices.get(group, [None])
        if len(picked) != 1 or picked[0] in (None, "null"):
            return
        composed = composed_choice(group, picked[0]) or {}
        in_file = _config_value(composed.get(group, composed) if group in ("model", "data") else composed, name.split("."))
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


def _config_value(node: Any, path: list[str]) -> Any:
    """The value at `path` in a config read as YAML, or None where there is none."""
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def composed_choice(group: str, choice: str) -> dict[str, Any] | None:
    """configs/<group>/<choice>.yaml merged over the files of its defaults list, as Hydra composes it; None where a
    file is missing or not plain YAML (then Hydra decides)."""
    import yaml

    path = CONFIGS / group / f"{choice}.yaml"
    try:
        own = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    merged: dict[str, Any] = {}
    for parent in own.pop("defaults", None) or []:
        base = composed_choice(group, parent) if isinstance(parent, str) and parent != "_self_" else {}
        if base is None:
            return None
        merged = _merged(merged, base)
    return _merged(merged, own)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


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
    owners = {choice: target for choice, target in schema["choices"].get(group, {}).items()
              if name in schema["classes"].get(target, {})}
    if not owners:
        return ""
    choice, target = next(iter(owners.items()))
    return f"; it is a setting of {target.rsplit('.', 1)[-1]} ({group}={choice})"


def schema_name(schema: dict[str, Any], group: str, choice: str | None) -> str | None:
    target = "lightning.Trainer" if group == "trainer" else schema["choices"].get(group, {}).get(choice or "")
    return target.rsplit(".", 1)[-1] if target else None


def check_cli(argv: list[str], schema: dict[str, Any]) -> None:
    """Raise EarlyRefusal for the first mistake of a LightningCLI command line that can be seen without the imports,
    the settings of its --config files included (each in its place: what comes later wins, as in jsonargparse)."""
    if any(o in ("--help", "--print_config", "--model.help", "--data.help") for o, _ in option_values(argv[1:])) or any(
            a.startswith("-h") for a in argv):
        return  # the help options and print_config refuse nothing
    pairs: list[tuple[str, str | None, str | None]] = []  # (--option, value, the config file that gives it or None)
    for option, value in option_values([f"--config={a[2:].removeprefix('=')}" if a.startswith("-c") and a != "-c" else
                                        "--config" if a == "-c" else a for a in argv[1:]]):
        if option == "--config" and value is not None and not value.lstrip().startswith("{"):
            pairs += [(f"--{key}", text, value) for key, text in config_file_settings(value)]
        else:
            pairs.append((option, value, None))
    registered = schema["cli_classes"]

    def class_of(group: str, option: str, name: str, file: str | None) -> str | None:
        """The class `--model=NAME` (or a file's `model: NAME`, `class_path: NAME`) chooses; None: left to jsonargparse."""
        name = name.strip('"')  # (a file's quoted name)
        targets = {**registered[group], **{path: path for path in registered[group].values()}}
        if name.lstrip().startswith("{") or ("." in name and name not in targets):
            return None  # --model='{"class_path": ...}', or a class of the user's own package
        if name not in targets:
            names = sorted(registered[group])
            raise EarlyRefusal(f"{f'--config={file}: {option[2:]}: {name}' if file else f'{option}={name}'} is not one of "
                               f"{', '.join(names)}{did_you_mean(name, names)}")
        return targets[name]

    # The classes in effect, from configs/train.yaml's defaults (rules.default_class) to the last choice; a file's settings
    # are its classes' (jsonargparse drops them if a later option chooses another class), the command line's the last.
    chosen: dict[str, str | None] = {group: schema["choices"][group][default_choices()[group]] for group in ("model", "data")}
    chosen["trainer"] = "lightning.Trainer"
    for file, run in itertools.groupby(pairs, key=lambda pair: pair[2]):  # the command line's options between files, a file's
        run = list(run)
        for option, value, _ in run:
            group = option[2:].removesuffix(".class_path")
            if group in ("model", "data") and value is not None:
                chosen[group] = class_of(group, option, value, file)
        for option, value, _ in run if file is not None else []:
            try:
                check_cli_setting(option, unquoted(value), chosen, schema, shown="")
            except EarlyRefusal as refusal:
                raise EarlyRefusal(f"--config={file}: {refusal}") from None
    for option, value, file in pairs:
        if file is None:
            check_cli_setting(option, value, chosen, schema, shown="--")
    for group in ("model", "data"):  # the ranges and combinations, as the constructor checks them
        given = {}
        for option, value, file in pairs:
            name = option[2:].removeprefix(f"{group}.").removeprefix("init_args.")
            text = unquoted(value) if file else value
            read = values_of(text, cli=True) if text is not None else None
            if option.startswith(f"--{group}.") and "." not in name and read is not None:
                given[name] = read[0]
        check_combination(group, chosen[group], given, f"--{group}")


def check_cli_setting(option: str, value: str | None, chosen: dict[str, str | None], schema: dict[str, Any], shown: str) -> None:
    """One `--group.name VALUE` of a LightningCLI command (named `<shown>group.name`: `--` on the command line, none in a
    config file) against the chosen classes: a name the class does not take, or a value of the wrong type."""
    group, dot, name = option[2:].rstrip("+").partition(".")
    if not dot or group not in chosen or chosen[group] is None:
        return
    name = name.removeprefix("init_args.")
    if group == "trainer" and name in REMOVED_TRAINER_OPTIONS:
        raise EarlyRefusal(removed_trainer_option(f"{shown}{group}.{name}", value, cli=bool(shown)))
    settings = schema["classes"].get(chosen[group])
    if settings is None or "." in name or name in ("class_path", "init_args", "dict_kwargs", "help"):
        return
    known = [*settings, *NOT_SETTINGS.get(group, ())]  # LightningCLI exposes these too (--model.optimizer, ...)
    given = shown + option[2:].rstrip("+")  # as written: --model.mis_steps, model.init_args.mis_steps
    if name not in known:
        candidates = [f"{given.rsplit('.', 1)[0]}.{n}" for n in known]
        owners = [cls for cls, target in schema["cli_classes"].get(group, {}).items() if name in schema["classes"].get(target, {})]
        what = "option" if shown else "setting"
        hint = f"; it is {'an' if shown else 'a'} {what} of {owners[0]}" if owners else ""
        hint += f" (--{group}={owners[0]})" if owners and shown else ""
        raise EarlyRefusal(f"{given}: no such {what} of {chosen[group].rsplit('.', 1)[-1]}{did_you_mean(given, candidates) or hint}")
    if value is not None and name in settings:
        check_value(given, value, [settings], cli=True)


def check_combination(group: str, target: str | None, values: dict[str, Any], shown: str) -> None:
    """The settings of the class at `target` built from `values` as its constructor builds them (configs/settings.py);
    its refusal named `<shown>.<setting>` (`model.mis_steps`, `--model.mis_steps`). A value left to resolve later (an
    interpolation) is left out."""
    values = {name: value for name, value in values.items() if not (isinstance(value, str) and "${" in value)}
    try:
        check_declared(target, values)
    except ValueError as error:
        text = str(error)
        named = text.split(" ", 1)[0].split("=", 1)[0] in (declared(target) or {})
        raise EarlyRefusal(f"{shown}.{text}" if named else f"{shown}: {text}") from None


def unquoted(value: str | None) -> str | None:
    """A config file's value to check: a quoted one is left to the full checks (jsonargparse reads '10' as 10)."""
    return None if value is not None and value.startswith('"') else value


def config_file_settings(name: str) -> list[tuple[str, str | None]]:
    """The settings a config file gives, read as received_config.py reads it (launch/checks/received_config.py)."""
    try:
        return given_settings(composed(Path(name), "config file"))
    except ConfigRefusal as refusal:
        raise EarlyRefusal(str(refusal)) from None


# `validate`/`test` evaluate the weights of --ckpt_path; without one they would evaluate untrained weights (hours of
# importance sampling for a meaningless number) unless this flag says that is what is wanted.
FRESH_WEIGHTS_OPTION = "--fresh_weights"


def untrained_evaluation(subcommand: str) -> str:
    """The line that refuses `validate`/`test` without --ckpt_path (here, and once parsed in launch/cli_app.py)."""
    return (f"{subcommand} without --ckpt_path would {subcommand} untrained weights: give the checkpoint of a run, "
            f"--ckpt_path=logs/tensorboard/<run>/version_N/checkpoints/last.ckpt, or {FRESH_WEIGHTS_OPTION}=true to "
            f"{subcommand} a freshly initialized model")


def scheduler_without_optimizer(scheduler: str) -> str:
    """The line that refuses --lr_scheduler without --optimizer (here, and once parsed in launch/cli_app.py)."""
    return (f"--lr_scheduler={scheduler} without --optimizer would be ignored: LightningCLI schedules only an optimizer it "
            f"builds itself; give both: --optimizer=Adam --optimizer.lr=3e-4 --lr_scheduler={scheduler} with its settings "
            "(they replace the model's own --model.lr and --model.optimizer)")


def check_scheduler_has_optimizer(argv: list[str]) -> None:
    given = dict(option_values(argv[1:]))
    scheduler = given.get("--lr_scheduler") or given.get("--lr_scheduler.class_path")
    if scheduler not in (None, "null") and given.get("--optimizer", given.get("--optimizer.class_path")) in (None, "null"):
        raise EarlyRefusal(scheduler_without_optimizer(scheduler))


def check_weights_to_evaluate(argv: list[str]) -> None:
    """`python train.py test` (or validate) with neither --ckpt_path nor --fresh_weights=true. A config file may give
    ckpt_path: then the parsed config is checked (launch/cli_app.py)."""
    if argv[:1] not in (["validate"], ["test"]):
        return
    given = dict(option_values(argv[1:]))
    ok, fresh = scalar(given.get(FRESH_WEIGHTS_OPTION) or "false", cli=True)
    if given.get("--ckpt_path") not in (None, "null", "None", "") or (ok and fresh is True):
        return
    raise EarlyRefusal(untrained_evaluation(argv[0]))


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


# Options after which nothing runs (help, a printed config): no file, directory or DATA_DIR is looked at.
PRINTS_ONLY = {True: ("-h", "--help", "--print_config", "--model.help", "--data.help"),  # LightningCLI (its -c is --config)
               False: ("-h", "--help", "--cfg", "-c", "--info", "-i", "--hydra-help", "--shell-completion", "-sc")}
# What Lightning takes for ckpt_path besides a file (the last or best checkpoint of the run, SLURM's, a registry's).


def check_config_files(argv: list[str]) -> None:
    """LightningCLI's `--config FILE` (-c): a file that exists and is YAML, or one line naming it, where and the fix
    (jsonargparse's report names neither)."""
    import yaml

    files = [value for option, value in option_values(argv[1:]) if option == "--config"]
    files += [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-c"] + [a[3:] for a in argv if a.startswith("-c=")]
    for name in files:
        if name is None or name.lstrip().startswith("{"):  # --config='{"trainer": ...}': YAML given inline, not a file
            continue
        path = Path(name)
        if not path.is_file():
            raise EarlyRefusal(f"--config={name}: no such file" + (" (a directory)" if path.is_dir() else ""))
        try:
            yaml.safe_load(path.read_text())
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise EarlyRefusal(f"--config={name}: not valid YAML at {where}{problem}; fix the file there (often the "
                               "indentation, a missing space after ':' or an unclosed quote or bracket); "
                               f"python train.py {argv[0]} --print_config prints a valid config to start from") from None
        except (OSError, UnicodeDecodeError) as error:
            raise EarlyRefusal(f"--config={name}: cannot be read ({error})") from None


def data_class_of(argv: list[str], cli: bool, schema: dict[str, Any] | None) -> str | None:
    """The data module class the command uses (MNISTDataModule), for a message; None where unknown."""
    if cli:
        return (dict(option_values(argv[1:])).get("--data") or "MNISTDataModule").rsplit(".", 1)[-1]
    choice = dict(overrides_of(argv)).get("data") or default_choices().get("data")
    target = (schema or {}).get("choices", {}).get("data", {}).get(choice or "")
    return target.rsplit(".", 1)[-1] if target else None


def load() -> dict[str, Any]:
    """Each group's choices and the class each builds, the settings each class takes, and LightningCLI's class names.
    Before the imports, the settings configs/settings.py declares (models, data modules); once Lightning is imported
    (the front ends check the command line again then), the constructors' of the other classes too (the Trainer,
    the optimizers and schedulers)."""
    choices = {group: config_targets(group) for group in GROUPS}
    choices["trainer"] = {path.stem: "lightning.Trainer" for path in (CONFIGS / "trainer").glob("*.yaml")}
    classes = {target: hints for targets in choices.values() for target in targets.values()
               if (hints := declared(target) or imported_hints(target)) is not None}
    return {"choices": choices, "classes": classes, "cli_classes": cli_classes()}


def imported_hints(target: str) -> dict[str, Any] | None:
    """setting -> type hint of the class at `target`, from its constructor, once Lightning is imported; else None."""
    if "lightning" not in sys.modules:
        return None
    from hydra.utils import get_class

    from common.signatures import constructor_defaults, constructor_hints

    cls = get_class(target)
    return {**dict.fromkeys(constructor_defaults(cls)), **constructor_hints(cls)}


def refuse_early(argv: list[str], cli: bool) -> str | None:
    """The `error:` line for a mistake seen before the imports, or None (then the full checks decide)."""
    schema = load()
    prints_only = any(arg.split("=", 1)[0] in PRINTS_ONLY[cli] or (not cli and arg.startswith("-c") and not arg.startswith("--"))
                      for arg in argv)  # Hydra's -cjob is --cfg job
    try:
        if not cli:
            check_no_pickled_rerun(argv)
            check_no_cli_options(argv)
        if cli and not prints_only:
            check_config_files(argv)
            if not any(arg in ("-c", "--config") or arg.startswith(("-c=", "--config=")) for arg in argv):
                check_weights_to_evaluate(argv)  # (a config file may give ckpt_path: checked once parsed)
                check_scheduler_has_optimizer(argv)  # (or an optimizer)
        if schema is not None:
            (check_cli if cli else check_hydra)(argv, schema)
        if not prints_only and not any(arg.split("=", 1)[0] in OTHER_TREE for arg in argv):
            check_paths(argv, cli, data_class_of(argv, cli, schema))
    except (EarlyRefusal, PathRefusal) as refusal:
        return str(refusal)
    return None

