"""The check of a LightningCLI command line (`python train.py fit --OPTION VALUE ...`): the settings of the chosen
classes, given on the command line or in its --config files. Run before the imports (train.py) and once after them
(launch/cli_app.py), when the classes of class-valued options (--optimizer=Adam) and one's own are importable too."""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any, Optional

from launch.checks.arguments import PRINTS_ONLY, cli_options, values_of
from launch import CLI_SUBCOMMANDS
from launch.checks.configs import (CLI_SHORT_NAMES, COLLECTION_PACKAGES, NOT_SETTINGS, REPO, SHORT_NAME_MODULES,
                                   config_targets, declared, default_class, library_records, recorded, short_names)
from common.private_api import read_as_lightningcli
from common.registry import trusted_prefixes
from common.settings import SEED_RANGE, did_you_mean
from launch.checks.precheck import EarlyRefusal, REMOVED_TRAINER_OPTIONS, as_built, check_combination, removed_trainer_option
from launch.checks.received_config import composed, given_settings
from launch.checks.settings import SettingsError, check_group, class_hints

# The options whose value is a class (its settings follow: --optimizer=Adam --optimizer.lr=0.1), with a class for each.
CLASS_OPTIONS = {"optimizer": "Adam", "lr_scheduler": "StepLR", "model.optimizer": "Adam", "model.scheduler": "StepLR",
                 "trainer.callbacks": "LearningRateMonitor", "trainer.logger": "CSVLogger"}
# The options of LightningCLI's own (launch/cli_app.py) that are no class's setting: a bare option besides these is one.
CLI_OPTIONS = ("config", "print_config", "seed_everything", "log_dir", "ckpt_path", "fresh_weights", "help", "model",
               "data", "trainer", "checkpoint", "replicas", *CLASS_OPTIONS)
FILE_OPTIONS = (*CLI_OPTIONS, "verbose", "weights_only")  # the top-level keys of a --config file
HELP_OPTIONS = tuple(option for option in PRINTS_ONLY if option != "--print_config")  # (print_config: checked)
REPLICA_HINTS = {"seeds": Optional[list[int]], "arms": Optional[list[dict[str, Any]]]}  # --replicas.seeds, .arms


def hints_of(target: str) -> dict[str, Any] | None:
    """setting -> type hint of each setting the class at `target` takes: as configs/settings.py declares them (models,
    data modules) before the imports, else from its constructor once Lightning is imported (the Trainer's, an
    optimizer's, one's own class's; before, a library's by its recorded names, else None); LightningCLI's
    --replicas.seeds and --replicas.arms (`replicas`)."""
    hints = REPLICA_HINTS if target == "replicas" else declared(target)
    return hints or (class_hints(pkgutil.resolve_name(target)) if "lightning" in sys.modules else recorded(target))


def class_named(value: str) -> str | None:
    """The path of the class an option's value names (a class path, or a short name: `short_names`), once Lightning is
    imported; before, of a library's class a run recorded (configs.py); None where it names none (jsonargparse says so)."""
    if not re.fullmatch(r"(\w+\.)*[A-Z]\w*", value):
        return None
    if "lightning" not in sys.modules:
        paths = [value] if "." in value else [CLI_SHORT_NAMES[value]] if value in CLI_SHORT_NAMES else \
            [f"{module}.{value}" for module in SHORT_NAME_MODULES]
        return next((path for path in paths if path in library_records()), None)
    if "." not in value:
        return short_names().get(value)
    with contextlib.suppress(Exception):  # imported quietly: hydra's get_object logs every miss
        return value if inspect.isclass(pkgutil.resolve_name(value)) else None
    return None


def check_cli_command(argv: list[str], prints_only: bool) -> None:
    """Raise EarlyRefusal for the first mistake of a LightningCLI command line that can be seen before it is parsed: a
    --config file that does not exist (jsonargparse's report names no file), a class, option or setting the chosen
    class does not take (a bare --max_steps: the option meant), a value of the wrong type or range; the settings of
    its --config files included (each in its place: what comes later wins, as in jsonargparse, which reads the command
    line `with_defaults` gives); once Lightning is imported, the settings of class-valued options and of one's own
    classes too, and those a chosen class requires. Whether a config file is YAML is checked before
    (launch/checks/received_config.py); whether test has a checkpoint once parsed (launch/cli_app.py)."""
    if prints_only and any(arg.split("=", 1)[0] in HELP_OPTIONS for arg in argv):
        return check_help_class(argv)  # the help options refuse nothing else (--print_config: every setting checked)
    if argv[0] == "predict":  # LightningCLI offers it; no model has a predict_step or a data module a predict split
        raise EarlyRefusal("predict: the models have no prediction step; a trained model's codes, reconstructions, "
                           "samples and NLLs come from it in Python (README, Using a trained model: "
                           "<Model>.load_from_checkpoint(PATH).encode(x), ...), its test metrics from `test --ckpt_path=PATH`")
    check_hydra_words(argv)
    from_checkpoint = checkpoint_without_model(argv)  # (its class is known once the checkpoint is read: cli_app.py)
    pairs: list[tuple[str, str | None, str | None]] = []  # (--option, value, the config file that gives it or None)
    for option, value in cli_options(with_defaults(argv, default_model=not from_checkpoint)):
        if option == "--config" and value is not None and not value.lstrip().startswith("{"):
            if not Path(value).exists():
                raise EarlyRefusal(f"--config={value}: no such file")
            pairs += [(option, text, value) for option, text in file_settings(Path(value))]
            for key in dict.fromkeys(setting_key(option).split(".")[0] for option, _, file in pairs if file == value):
                if key not in FILE_OPTIONS:  # (jsonargparse's refusal names neither the file nor the closest)
                    raise EarlyRefusal(f"--config={value}: {key}: no such option{did_you_mean(key, list(FILE_OPTIONS))}")
        else:
            pairs.append((option, value, None))
    given = {option: value for option, value, _ in pairs}  # (before jsonargparse asks for the scheduler's settings)
    scheduler = given.get("--lr_scheduler") or given.get("--lr_scheduler.class_path")
    optimizer = given.get("--optimizer") or given.get("--optimizer.class_path")  # (a file's mapping: its class_path)
    if scheduler not in (None, "null") and optimizer in (None, "null"):
        scheduler = scheduler.rsplit(".", 1)[-1]  # named by its class name
        raise EarlyRefusal(f"--lr_scheduler={scheduler} without --optimizer would be ignored: LightningCLI schedules only an "
                           f"optimizer it builds itself; give both: --optimizer=Adam --optimizer.lr=3e-4 "
                           f"--lr_scheduler={scheduler} with its settings (they replace the model's own --model.lr and "
                           "--model.optimizer)")
    for own in ("--model.optimizer", "--model.scheduler"):  # (the model's configure_optimizers is replaced)
        value = given.get(own) or given.get(f"{own}.class_path")
        if optimizer not in (None, "null") and value not in (None, "null"):
            raise EarlyRefusal(f"{own}={value} with --optimizer={optimizer}: LightningCLI's --optimizer and --lr_scheduler "
                               f"replace the model's own optimizer and scheduler, so {own} would be ignored; give one of "
                               "the two (--lr_scheduler for --optimizer's schedule)")
    settings = {setting_key(option): value for option, value, _ in pairs}
    if optimizer not in (None, "null") and settings.get("model.lr") is not None:
        raise EarlyRefusal(f"--model.lr={settings['model.lr']} with --optimizer={optimizer}: the run trains with the "
                           f"learning rate of --optimizer, not the model's; give --optimizer.lr={settings['model.lr']}")
    save_dir = settings.get("trainer.logger.save_dir")
    if any(option == "--log_dir" and file is None for option, _, file in pairs) and save_dir is not None:
        raise EarlyRefusal(f"--log_dir={settings['log_dir']} with --trainer.logger.save_dir={save_dir}: a logger of one's "
                           "own writes under its save_dir, so --log_dir would be ignored; give one of the two")
    if str(settings.get("trainer.enable_checkpointing")).lower() == "false":
        if kept := next((key for key in settings if key.startswith("checkpoint.")), None):
            raise EarlyRefusal(f"--{kept}={settings[kept]} with --trainer.enable_checkpointing=false: no checkpoint is saved, "
                               "so it would be ignored; give one of the two")
    seed, seed_file = next(((value, file) for option, value, file in reversed(pairs) if option == "--seed_everything"),
                           (None, None))
    read = values_of(seed, cli=True) if seed is not None else [True]
    if read is None or not (isinstance(read[0], bool) or isinstance(read[0], int) and SEED_RANGE[0] <= read[0] <= SEED_RANGE[1]):
        raise EarlyRefusal(f"{as_given('--seed_everything', seed, seed_file)}: expected an integer in [0, 2^32 - 1] "
                           "(as Hydra's seed), true (a random seed) or false (none)")
    weights_only = [(value, file) for option, value, file in pairs if option == "--weights_only"][-1:]
    if weights_only and (values_of(weights_only[0][0] or "null", cli=True) or [None])[0] is False:
        raise EarlyRefusal(f"{as_given('--weights_only', 'false', weights_only[0][1])}: the train.py commands read a "
                           "checkpoint weights-only (tensors and plain values); a checkpoint of your own classes loads with LATENT_ZOO_TRUST=mypkg, a file you trust "
                           "in Python: <Model>.load_from_checkpoint(PATH, weights_only=False) (README, Files from someone else)")

    # The classes in effect, from the defaults `with_defaults` gives to the last choice; a file's settings are its
    # classes' (jsonargparse drops them if a later option chooses another class).
    chosen: dict[str, str | None] = {"trainer": "lightning.Trainer", "replicas": "replicas",
                                     **({"model": None} if from_checkpoint else {})}

    def choose(option: str, value: str | None, file: str | None) -> None:
        """The class `--model=NAME` (a file's `model: NAME`, `class_path: NAME`), `--optimizer=NAME`, ... chooses: for
        the model and the data, one of those configs/model/ and configs/data/ build (CONTRIBUTING.md) or one's own;
        None: left to jsonargparse."""
        group, name = setting_key(option).removesuffix(".class_path"), (value or "").strip('"')  # (a file's quoted name)
        if value is None or group not in ("model", "data", *CLASS_OPTIONS):
            return
        paths = set(config_targets(group).values()) if group in ("model", "data") else set()
        if paths:
            check_class_name(as_given(option, name, file), group, name)
        # one of those by its name or path, else a class of one's own once importable; '{"class_path": ...}'
        chosen[group] = next((path for path in paths if name in (path, path.rsplit(".", 1)[-1])), None) or class_named(name)
        if chosen[group] is None and group in CLASS_OPTIONS and not own_code and (names := unknown_short_name(name)):
            raise EarlyRefusal(f"{as_given(option, name, file)}: {no_such_class(name, names)} {help_pointer(argv[0])}")

    own_code = bool(trusted_prefixes()) or any(  # a dotted class path of one's own: its package may define a short name
        value and re.fullmatch(r"(\w+\.)+[A-Z]\w*", value.strip('"'))
        and not value.strip('"').startswith((*COLLECTION_PACKAGES, *SHORT_NAME_MODULES, "lightning.", "torch.")) for _, value, _ in pairs)

    # A file's settings are checked against every class it chooses; each option of the command line against the classes
    # chosen up to it (a key of its own: object()).
    for _, run in itertools.groupby(pairs, key=lambda pair: pair[2] or object()):
        run = list(run)
        for option, value, file in run:
            choose(option, value, file)
        for option, value, file in run:
            try:
                check_cli_setting(option, unquoted(value) if file else value, chosen, "" if file else "--")
            except SettingsError as refusal:  # (check_group's too) a file's setting: named with its file
                raise EarlyRefusal(f"--config={file}: {refusal}" if file else str(refusal)) from None
    for option, value, file in pairs:  # a bare option: the closest setting of the classes chosen last
        if file is None and "." not in setting_key(option) and setting_key(option) not in CLI_OPTIONS:
            check_bare_option(option, value, chosen, argv[0])
    if "lightning" in sys.modules:  # (what a class requires: its constructor's signature)
        check_required(pairs, chosen)
    read = {group: {key[len(group) + 1:]: values_of(text, cli=True) for option, value, file in pairs
                    if (key := setting_key(option)).startswith(f"{group}.")
                    and (text := unquoted(value) if file else value) is not None} for group in ("model", "data")}
    given = {group: {name: values[0] for name, values in read[group].items() if values} for group in read}
    resumed = settings.get("ckpt_path") not in (None, "null")  # (its settings are the checkpoint's, read once parsed)
    for group in ("data", "model"):  # the ranges and combinations, as the constructor checks them: the last value given
        check_combination(group, chosen[group], given[group] if group == "data" or resumed else
                          as_built(given["model"], chosen["data"], given["data"]), f"--{group}")


def with_defaults(args: list[str], default_model: bool = True) -> list[str]:
    """JSA on MNIST unless told otherwise, as in the Hydra front end: given as the first arguments, which a later
    choice (on the command line or in a config file) replaces with that class's own defaults (a parser default would
    carry the default class's settings over to it); and a class the command line chooses put before the first of its
    settings (jsonargparse reads `--model.latent_dim=8 --model=VAE`'s setting against the class chosen before it,
    which has none). The check walks it as the parser reads it (without the default model where the checkpoint
    names it: `checkpoint_without_model`)."""
    if any(arg in ("-h", "--help") for arg in args):
        return args
    first, args = (args[:1], list(args[1:])) if args and args[0] in CLI_SUBCOMMANDS else ([], list(args))
    for key in ("model", "data"):
        chosen = [i for i, arg in enumerate(args) if arg.startswith(f"--{key}=")]
        settings = [i for i, arg in enumerate(args) if arg.startswith(f"--{key}.") and not arg.startswith(f"--{key}.help")]
        if chosen and settings and settings[0] < chosen[0]:
            args.insert(settings[0], args.pop(chosen[0]))
    keys = ("model", "data") if default_model else ("data",)
    return [*first, *(f"--{key}={default_class(key)}" for key in keys), *args]


def checkpoint_without_model(argv: list[str]) -> str | None:
    """The --ckpt_path of a command line that names no model (`test --ckpt_path=PATH --model.test_num_samples=100`):
    the model is the class that wrote the checkpoint, whose options its --model.* options are; else None."""
    options = dict(cli_options(argv))
    named = "--model" in options or "--model.class_path" in options
    return None if named or options.get("--ckpt_path") == "null" else options.get("--ckpt_path")


def file_settings(path: Path) -> list[tuple[str, str | None]]:
    """(--dotted.key, value) of each setting of a --config file, read as launch/checks/received_config.py reads it."""
    return [(f"--{key}", text) for key, text in given_settings(composed(path, f"config file {path}"))]


def as_given(option: str, value: Any, file: str | None) -> str:
    """An option and its value as the user wrote them: `--seed_everything=-5`, or in a config file
    `--config=FILE: seed_everything: -5`."""
    return f"--config={file}: {option[2:]}: {value}" if file else f"{option}={value}"


def setting_key(option: str) -> str:
    """An option's setting as a dotted key, without --, + and init_args: --model.init_args.lr -> model.lr."""
    return ".".join(part for part in option[2:].rstrip("+").split(".") if part != "init_args")


def check_cli_setting(option: str, value: str | None, chosen: dict[str, str | None], shown: str) -> None:
    """One `--group.name VALUE` of a LightningCLI command (named `<shown>group.name`: `--` on the command line, none in a
    config file) against the chosen classes: a name the class does not take, or a value of the wrong type; a
    class-valued option's setting before its class."""
    key, given = setting_key(option), shown + option[2:].rstrip("+")  # as written: --model.x, model.init_args.x
    owner = next((group for group in CLASS_OPTIONS if key.startswith(f"{group}.")), None)
    if owner is not None and owner not in chosen:
        raise EarlyRefusal(f"{given}: give its class first ({shown}{owner}=CLASS, e.g. {CLASS_OPTIONS[owner]}), then its "
                           "settings")
    group = max((group for group in chosen if key.startswith(f"{group}.")), key=len, default=None)
    if group is None or chosen[group] is None:
        return
    name = key[len(group) + 1:]
    if group == "trainer" and name in REMOVED_TRAINER_OPTIONS:
        raise EarlyRefusal(removed_trainer_option(f"{shown}{group}.{name}", value, cli=bool(shown)))
    settings = hints_of(chosen[group])
    if settings is None or "." in name or name in ("class_path", "dict_kwargs", "help"):
        return
    # LightningCLI exposes these too (--model.optimizer, ...); the check Hydra's composed settings get (settings.py)
    hints = {**settings, **{key: Any for key in NOT_SETTINGS.get(group, ()) if key not in settings}}
    check_group(chosen[group].rsplit(".", 1)[-1], hints, {name: ... if value is None else read_value(value)},
                given.rpartition(".")[0], shown)


def check_bare_option(option: str, value: str | None, chosen: dict[str, str | None], subcommand: str) -> None:
    """A bare option that is a chosen class's setting without its group (--max_steps): the option it means. One that
    is none is left to the parser, which refuses it."""
    options = [f"--{group}.{name}" for group, target in chosen.items() if target and "." not in group
               for name in hints_of(target) or {}]
    meant = did_you_mean(option, options) if option != "--seed" else \
        "; did you mean --seed_everything (the run's seed, Hydra's seed)?"  # (--data.seed seeds the data alone)
    if meant:
        raise EarlyRefusal(f"unrecognized arguments: {option}{'' if value is None else f'={value}'}{meant} "
                           f"{help_pointer(subcommand)}")




def unknown_short_name(name: str) -> list[str] | None:
    """Before the imports, once a run has recorded the libraries' classes (launch/checks/configs.py): the short names
    LightningCLI would know, the collection's classes among them, where `name` (--optimizer=Adamw) is none of them; None
    where it may name a class (or a dotted path: one's own), or no record tells."""
    records = [path for path in library_records() if path.rpartition(".")[0] in SHORT_NAME_MODULES]
    if "lightning" in sys.modules or not records or not re.fullmatch(r"[A-Z]\w*", name):
        return None
    names = {path.rsplit(".", 1)[-1] for path in records} | collection_classes()
    return None if name in names else sorted(names)


@functools.cache
def collection_classes() -> set[str]:
    """The names of the classes the collection's packages define, read from their source (nothing imported)."""
    folders = [REPO / package.rstrip(".") for package in COLLECTION_PACKAGES]
    return {name for folder in folders for path in folder.rglob("*.py")
            for name in re.findall(r"^\s*class (\w+)", path.read_text(errors="replace"), re.M)}


def no_such_class(name: str, names: list[str]) -> str:
    """Why a short class name names none, the closest of `names` (those LightningCLI finds by name), and how classes
    are named: in both passes, before the imports (`unknown_short_name`) and after (launch/cli_app.py)."""
    return (f"no such class{did_you_mean(name, names) or '.'} Torch's optimizers and schedulers and Lightning's loggers "
            "and callbacks go by name, one's own classes by their dotted path")


def check_class_name(given: str, group: str, name: str) -> None:
    """`name` (--model=NAME, --model.help NAME) is one of the classes configs/<group>/ builds, by its name; a dotted
    path (one's own class) or a mapping is left to jsonargparse. `given`: the option as the refusal names it."""
    names = sorted({path.rsplit(".", 1)[-1] for path in config_targets(group).values()})
    if name not in names and "." not in name and not name.lstrip().startswith("{"):
        raise EarlyRefusal(f"{given} is not one of {', '.join(names)}{did_you_mean(name, names)} (a class of your own goes "
                           f"by its dotted path: mypkg.mymodule.{name})")


def check_help_class(argv: list[str]) -> None:
    """--model.help NAME (--data.help): a class of the collection's by its name (one's own by its dotted path)."""
    for option, value in cli_options(argv):
        if option in ("--model.help", "--data.help") and value:
            check_class_name(f"{option}={value}", option[2:].removesuffix(".help"), value)


def check_hydra_words(argv: list[str]) -> None:
    """A Hydra override or mode after a subcommand (fit model=jsa, fit -m ...): not an option of LightningCLI's; both
    spellings offered."""
    modes = [arg for arg in argv[1:] if arg in ("-m", "--multirun") or arg.split("=", 1)[0] == "--cfg"]
    if modes:
        raise EarlyRefusal(f"{modes[0]}: an option of Hydra's front end, which takes no subcommand: python train.py "
                           f"{' '.join(argv[1:])}")
    words = [arg for index, arg in enumerate(argv[1:], 1) if re.fullmatch(r"[+~]*[\w.]+=.*", arg)
             and not (argv[index - 1].startswith("-") and "=" not in argv[index - 1])]  # (not `--option VALUE`'s value)
    if words:
        key, value = words[0].lstrip("+~").split("=", 1)
        target = config_targets(key).get(value) if key in ("model", "data") else None
        cli = f"--{key}={target.rsplit('.', 1)[-1] if target else value}"
        hydra = f", or drop the subcommand for Hydra's front end: python train.py {' '.join(words)}" \
            if argv[0] == "fit" else ""
        raise EarlyRefusal(f"{words[0]}: a Hydra setting, which LightningCLI does not take: give {cli} after "
                           f"{argv[0]}{hydra}")


def help_pointer(subcommand: str) -> str:
    """What ends each line that refuses an option of the parser's: where the options are listed."""
    return f"(python train.py {subcommand} --help lists the options)"


def read_value(text: str) -> Any:
    """An option's value as jsonargparse reads it, or ... where it cannot be read here."""
    if text.lstrip().startswith(("[", "{")):
        import yaml

        with contextlib.suppress(yaml.YAMLError):
            return read_as_lightningcli(text)
        return ...
    read = values_of(text, cli=True)
    return read[0] if read is not None else ...


def check_required(pairs: list[tuple[str, str | None, str | None]], chosen: dict[str, str | None]) -> None:
    """Each class a class-valued option chooses (once importable) given every setting its constructor requires: the
    option to give, as jsonargparse's "the following arguments are required: T_max" does not name it."""
    for group in (group for group in CLASS_OPTIONS if chosen.get(group)):
        keys = [setting_key(option) for option, _, _ in pairs]
        at = max(index for index, key in enumerate(keys) if key.removesuffix(".class_path") == group)
        given = {key[len(group) + 1:] for key in keys[at + 1:] if key.startswith(f"{group}.")}
        parameters = list(inspect.signature(pkgutil.resolve_name(chosen[group])).parameters.values())
        # (an optimizer's first argument, its parameters, and a scheduler's, its optimizer, are given by the caller)
        wanted = [p.name for p in parameters[not group.startswith("trainer."):]
                  if p.default is p.empty and p.name not in given and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if wanted:
            option, value, file = pairs[at]
            options = [f"--{group}.{name}" for name in wanted]
            raise EarlyRefusal(f"{', '.join(options)}: required by {chosen[group].rsplit('.', 1)[-1]} "
                               f"({f'--config={file}: ' if file else ''}{option}={value}); give "
                               f"{' '.join(f'{name}=VALUE' for name in options)}")


def unquoted(value: str | None) -> str | None:
    """A config file's value to check: a quoted one is left to the full checks (jsonargparse reads '10' as 10)."""
    return None if value is not None and value.startswith('"') else value
