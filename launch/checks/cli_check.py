"""The early check of a LightningCLI command line (`python train.py fit --OPTION VALUE ...`): the settings of the
chosen classes, given on the command line or in its --config files."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

from launch.checks.arguments import cli_options, option_values, values_of
from launch.checks.configs import GROUPS, NOT_SETTINGS, config_targets, declared, default_classes
from common.settings import SEED_RANGE, expected
from launch.checks.precheck import EarlyRefusal, REMOVED_TRAINER_OPTIONS, check_combination, did_you_mean, no_such_setting, \
    removed_trainer_option
from launch.checks.received_config import composed, given_settings


def load() -> dict[str, Any]:
    """The settings each class of the configs (and LightningCLI's Trainer) takes, and LightningCLI's class names. Before
    the imports, those configs/settings.py declares (models, data modules); once Lightning is imported, the
    constructors' too (the Trainer's: before, LightningCLI checks them)."""
    targets = {"lightning.Trainer", *(target for group in GROUPS for target in config_targets(group).values())}
    classes = {target: hints for target in targets if (hints := declared(target) or imported_hints(target)) is not None}
    # LightningCLI's --model=NAME and --data=NAME: the classes configs/model/ and configs/data/ build (CONTRIBUTING.md)
    cli_classes = {group: {target.rsplit(".", 1)[-1]: target for target in sorted(set(config_targets(group).values()))}
                   for group in ("model", "data")}
    return {"classes": classes, "cli_classes": cli_classes}


def imported_hints(target: str) -> dict[str, Any] | None:
    """setting -> type hint of the class at `target`, from its constructor, once Lightning is imported; else None."""
    if "lightning" not in sys.modules:
        return None
    from hydra.utils import get_class

    from common.signatures import constructor_defaults, constructor_hints

    cls = get_class(target)
    return {**dict.fromkeys(constructor_defaults(cls)), **constructor_hints(cls)}


def check_cli_command(argv: list[str], prints_only: bool) -> None:
    """Raise EarlyRefusal for the first mistake of a LightningCLI command line that can be seen without the imports: a
    --config file that does not exist (jsonargparse's report names no file), a class, option or setting the chosen
    class does not take, a value of the wrong type or range; the settings of its --config files included (each in its
    place: what comes later wins, as in jsonargparse). Whether a config file is YAML is checked before
    (launch/checks/received_config.py); whether test has a checkpoint once parsed (launch/cli_app.py)."""
    if prints_only:
        return  # the help options and print_config refuse nothing
    schema = load()
    if argv[0] == "predict":  # LightningCLI offers it; no model has a predict_step or a data module a predict split
        raise EarlyRefusal("predict: the models have no prediction step; a trained model's codes, reconstructions, "
                           "samples and NLLs come from it in Python (README, Using a trained model: "
                           "<Model>.load_from_checkpoint(PATH).encode(x), ...), its test metrics from `test --ckpt_path=PATH`")
    pairs: list[tuple[str, str | None, str | None]] = []  # (--option, value, the config file that gives it or None)
    for option, value in cli_options(argv):
        if option == "--config" and value is not None and not value.lstrip().startswith("{"):
            if not Path(value).exists():
                raise EarlyRefusal(f"--config={value}: no such file")
            node = composed(Path(value), f"config file {Path(value)}")  # (as launch/checks/received_config.py reads it)
            pairs += [(f"--{key}", text, value) for key, text in given_settings(node)]
        else:
            pairs.append((option, value, None))
    given = {option: value for option, value, _ in pairs}  # (before jsonargparse asks for the scheduler's settings)
    scheduler = given.get("--lr_scheduler") or given.get("--lr_scheduler.class_path")
    if scheduler not in (None, "null") and given.get("--optimizer", given.get("--optimizer.class_path")) in (None, "null"):
        raise EarlyRefusal(scheduler_without_optimizer(scheduler))
    seed = given.get("--seed_everything")
    read = values_of(seed, cli=True) if seed is not None else [True]
    if read is None or not (isinstance(read[0], bool) or isinstance(read[0], int) and SEED_RANGE[0] <= read[0] <= SEED_RANGE[1]):
        raise EarlyRefusal(f"--seed_everything={seed}: expected an integer in [0, 2^32 - 1] (as Hydra's seed), true (a "
                           "random seed) or false (none)")
    weights_only = [(value, file) for option, value, file in pairs if option == "--weights_only"][-1:]
    if weights_only and (values_of(weights_only[0][0] or "null", cli=True) or [None])[0] is False:
        where = f"--config={weights_only[0][1]}: weights_only: false" if weights_only[0][1] else "--weights_only=false"
        raise EarlyRefusal(f"{where}: the train.py commands read a checkpoint weights-only (tensors and plain "
                           "values); a checkpoint of your own classes loads with LATENT_ZOO_TRUST=mypkg, a file you trust "
                           "in Python: <Model>.load_from_checkpoint(PATH, weights_only=False) (README, Files from someone else)")
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

    # The classes in effect, from configs/train.yaml's defaults (default_classes) to the last choice; a file's settings
    # are its classes' (jsonargparse drops them if a later option chooses another class), the command line's the last.
    chosen: dict[str, str | None] = {**default_classes(), "trainer": "lightning.Trainer"}
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
    for group in ("model", "data"):  # the ranges and combinations, as the constructor checks them: the last value read
        read = [(option[2:].removeprefix(f"{group}.").removeprefix("init_args."), values_of(text, cli=True))
                for option, value, file in pairs
                if option.startswith(f"--{group}.") and (text := unquoted(value) if file else value) is not None]
        given = {name: values[0] for name, values in read if "." not in name and values is not None}
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
        owners = [cls for cls, target in schema["cli_classes"].get(group, {}).items() if name in schema["classes"].get(target, {})]
        taken_by = (f"{owners[0]} (--{group}={owners[0]})" if shown else owners[0]) if owners else ""
        owner = chosen[group].rsplit(".", 1)[-1]
        raise EarlyRefusal(no_such_setting(given, owner, known, taken_by, "option" if shown else "setting"))
    if value is not None and name in settings:
        for read in values_of(value, cli=True) or []:
            if (want := expected(settings[name], read)) is not None:
                raise EarlyRefusal(f"{given}={read!r}: expected {want}")


def options_of_chosen_classes(argv: list[str]) -> list[str]:
    """`--group.setting` for every setting of the Trainer and of the model and data classes the command line chooses
    (`--model=VAE`; the defaults otherwise): the options a bare `--max_steps` may have meant."""
    schema, given = load(), dict(option_values(argv[1:]))
    chosen = {group: schema["cli_classes"][group].get(name, name) if (name := given.get(f"--{group}")) else default
              for group, default in default_classes().items()}
    return [f"--{group}.{setting}" for group, target in {"trainer": "lightning.Trainer", **chosen}.items()
            for setting in schema["classes"].get(target) or {}]


def scheduler_without_optimizer(scheduler: str) -> str:
    """The line that refuses --lr_scheduler without --optimizer (here, and once parsed in launch/cli_app.py: a config
    file may give either), the scheduler named by its class name."""
    scheduler = scheduler.rsplit(".", 1)[-1]
    return (f"--lr_scheduler={scheduler} without --optimizer would be ignored: LightningCLI schedules only an optimizer it "
            f"builds itself; give both: --optimizer=Adam --optimizer.lr=3e-4 --lr_scheduler={scheduler} with its settings "
            "(they replace the model's own --model.lr and --model.optimizer)")


def unquoted(value: str | None) -> str | None:
    """A config file's value to check: a quoted one is left to the full checks (jsonargparse reads '10' as 10)."""
    return None if value is not None and value.startswith('"') else value
