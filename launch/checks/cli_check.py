"""The early check of a LightningCLI command line (`python train.py fit --OPTION VALUE ...`): the settings of the
chosen classes, given on the command line or in its --config files, and the subcommands that need a checkpoint."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from launch.checks.arguments import option_values, scalar, values_of
from launch.checks.configs import NOT_SETTINGS, default_choices
from launch.checks.precheck import EarlyRefusal, REMOVED_TRAINER_OPTIONS, check_combination, \
    check_value, config_file_settings, did_you_mean, removed_trainer_option, unquoted

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


def check_cli_command(argv: list[str], schema: dict[str, Any], prints_only: bool) -> None:
    """Raise EarlyRefusal for the first mistake of a LightningCLI command line seen before the imports."""
    if not prints_only:
        check_config_files(argv)
        if not any(arg in ("-c", "--config") or arg.startswith(("-c=", "--config=")) for arg in argv):
            check_weights_to_evaluate(argv)  # (a config file may give ckpt_path: checked once parsed)
            check_scheduler_has_optimizer(argv)  # (or an optimizer)
    check_cli(argv, schema)
