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
import sys
from pathlib import Path
from typing import Any

from launch.checks.arguments import option_values, overrides_of, values_of
from launch.checks.paths import PathRefusal, check_paths
from launch.checks.received_config import ConfigRefusal, composed, given_settings
from common.settings import expected
from launch.checks.configs import CONFIGS, GROUPS, check_declared, cli_classes, config_targets, declared, \
    default_choices

# The top-level settings run() reads (configs/train.yaml; compare_* come from experiment=compare), with their types.
TOP_LEVEL_SETTINGS = {"seed": int, "ckpt_path": str | None, "run_test": bool, "log_dir": str, "ddp_timeout_s": float,
                      "run_name": str, "discrete_latent": dict | None, "per_model": dict | None,
                      "compare_backbone": dict | None, "compare_prior": dict | None, "replicas": dict | None}


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


# Options after which nothing runs (help, a printed config): no file, directory or DATA_DIR is looked at.
PRINTS_ONLY = {True: ("-h", "--help", "--print_config", "--model.help", "--data.help"),  # LightningCLI (its -c is --config)
               False: ("-h", "--help", "--cfg", "-c", "--info", "-i", "--hydra-help", "--shell-completion", "-sc")}


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
        if cli:
            from launch.checks.cli_check import check_cli_command as check
        else:
            from launch.checks.hydra_check import check_hydra_command as check
        check(argv, schema, prints_only)
        if not prints_only and not any(arg.split("=", 1)[0] in OTHER_TREE for arg in argv):
            check_paths(argv, cli, data_class_of(argv, cli, schema))
    except (EarlyRefusal, PathRefusal) as refusal:
        return str(refusal)
    return None

