"""The LightningCLI front end: `python train.py {fit,validate,test} [--OPTION VALUE ...]`, on the same classes
and with the same defaults and run rules as the Hydra front end (launch/run_builder.py), its parser's reports turned into
one line naming the option as given."""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn, Optional, Union

from hydra.utils import get_class
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from callbacks.validation_checkpoint import ValidationCheckpoint
from checkpoints.errors import CheckpointError
from checkpoints.loader import load_checkpoint_file
from common.lightning_files import RunConfigFile
from common.registry import IMPORTABLE_HINT
from datamodules import ImageDataModule  # (the package registers the subclasses for --data=NAME)
from launch import CLI_SUBCOMMANDS as SUBCOMMANDS
from launch.checks.arguments import PRINTS_ONLY, cli_options, option_values
from launch.checks.cli_check import (REPLICA_HINTS, check_cli_command, checkpoint_without_model, file_settings, help_pointer,
                                     no_such_class, setting_key, with_defaults)
from launch.checks.configs import log_dir as default_log_dir, seed as default_seed, short_names
from launch.checks.early import exit_with
from launch.checks.precheck import closest_in_module
from launch.checks.settings import SettingsError, check_trainer_values
from launch.errors import argument_named, user_errors_as_one_line
from launch.run_builder import (RESUMED, RunDescription, apply_rules, build, checkpoint_settings, default_callbacks,
                                resumed_seed, resumed_settings, running, trainer_defaults)
from launch.runs.run_directory import note_existing_directories, run_name
from models import LatentVariableModel  # (the package registers the subclasses for --model=NAME)
from models.components.optimizers import FactoryRefusal, check_optimizer_factory, check_scheduler_factory


# The lines of jsonargparse's report that say where, not what (_one_line)
REPORT_NOISE = ("Does not validate", "Subtypes:", "Errors:", "Given value", "Problem with given class_path", "Parser key",
                "Expected a <class 'NoneType'>", "Not a valid subclass of", "Subclass types expect", "a class path (str)",
                "a dict with", "a dict without")


class Parser(LightningArgumentParser):
    """Refuses an abbreviated option; reports what the check before parsing (`main`) leaves to it in one line;
    validate's and test's parsers (parser_kwargs `evaluates`) take --fresh_weights."""

    def __init__(self, *args: Any, evaluates: str | None = None, **kwargs: Any) -> None:
        # argparse takes --trainer.max_epoch as an abbreviation of --trainer.max_epochs: a typo would run silently.
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})
        if evaluates:  # not a Trainer.test argument: LightningCLI does not pass it on
            self.add_argument("--fresh_weights", type=bool, default=False,
                              help=f"{evaluates} the freshly initialized weights of the model (no --ckpt_path): "
                                   "refused without this flag, as a forgotten --ckpt_path")

    def add_method_arguments(self, class_type: type, method_name: str, *args: Any, **kwargs: Any) -> list[str]:
        # --ckpt_path with a help of its own: Lightning's offers names of the trainer's own run, which a command has not
        kwargs["skip"] = {*(kwargs.get("skip") or ()), "ckpt_path"}
        added = super().add_method_arguments(class_type, method_name, *args, **kwargs)
        self.add_argument("--ckpt_path", type=Optional[str], default=None,
                          help=f"the checkpoint to {'resume' if method_name == 'fit' else method_name}: a .ckpt file a run "
                               "wrote, e.g. logs/tensorboard/<run>/version_N/checkpoints/last.ckpt (Lightning's names "
                               "last, best, hpc and registry are refused: this command starts a run of its own)")
        return [*added, "ckpt_path"]

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:  # one line, not usage + a nested report
        given = CollectionCLI.command
        if bare := re.match(r"argument (--[\w.]+)\S*: expected one argument", message):  # (--model for --model.mis_steps)
            option = next((o for o, v in option_values(given) if v is None and o.startswith(bare[1])), bare[1])
            message = f"{option}: expected a value ({option}=VALUE)"
        exit_with(f"{_no_class(message, given) or _one_line(message, given)} {help_pointer(given[0])}")


class CollectionCLI(LightningCLI):
    """LightningCLI with the Hydra front end's defaults and rules (launch/run_builder.py)."""

    command: list[str] = ["fit"]  # the arguments as the user gave them, its subcommand first, set by main()
    checkpoint: dict[str, Any] | None = None  # --ckpt_path's content, read once (main, or parse_arguments)
    read_from: str | None = None  # the --ckpt_path it was read from

    def subcommands(self) -> dict[str, set[str]]:  # (a static method of LightningCLI's, called on the instance)
        """The subcommand this command line runs, alone: LightningCLI would build a parser for each of the others too."""
        return {self.command[0]: LightningCLI.subcommands()[self.command[0]]}

    def add_default_arguments_to_parser(self, parser: Any) -> None:  # (its range checked before parsing: cli_check.py)
        parser.add_argument("--seed_everything", type=Union[bool, int], default=self.seed_everything_default,
                            help="the seed of the run, in [0, 2^32 - 1] (as Hydra's seed); true: a random one; false: none")

    def add_arguments_to_parser(self, parser: Any) -> None:
        # The model is built for the data's image shape, as in the Hydra front end.
        parser.link_arguments("data.image_shape", "model.init_args.data_shape", apply_on="instantiate")
        # The defaults of the Hydra configs (launch/run_builder.py): checkpointing (last + best on val/nll), the trainer
        # settings, and the other callbacks, as parser defaults: shown by --print_config, replaceable with
        # --trainer.callbacks=..., extended with --trainer.callbacks+=...
        parser.add_argument("--log_dir", type=str, default=default_log_dir(),
                            help="root of everything a run writes: TensorBoard runs under <log_dir>/tensorboard (as Hydra's log_dir)")
        parser.add_argument("--replicas.seeds", type=REPLICA_HINTS["seeds"], default=None,
                            help="train this configuration for these seeds in one process, each replica a run of its own "
                                 "(docs/replicas.md), e.g. [0,1,2,3]")
        parser.add_argument("--replicas.arms", type=REPLICA_HINTS["arms"], default=None,
                            help="settings replicas of one seed may differ in, one replica per seed and arm, e.g. "
                                 "'[{}, {cache_start_epoch: 300}]' (JSA: cache_start_epoch, cache_refresh)")
        # A group of its own, not one of LightningCLI's callback keys: instantiate_trainer adds it to the callbacks, which
        # the builder may drop it from (trainer.enable_checkpointing=false).
        parser.add_class_arguments(ValidationCheckpoint, "checkpoint", fail_untyped=False, sub_configs=True)
        parser.set_defaults({**{f"checkpoint.{key}": value for key, value in checkpoint_settings().items()},
                             **{f"trainer.{key}": value for key, value in trainer_defaults().items()},
                             "trainer.callbacks": [{"class_path": f"{type(c).__module__}.{type(c).__name__}"}
                                                   for c in default_callbacks()]})

    def parse_arguments(self, parser: Any, args: Any) -> None:
        """The command line `args` with the default classes (cli_check.with_defaults; the model, where it names none, the
        one that wrote --ckpt_path's checkpoint: main), then the settings of that checkpoint under those the command line
        gives, from its one safe read (the registered-classes check included),
        handed on to the builder. --ckpt_path is held aside until before_instantiate_classes: LightningCLI would read the file
        a second time (past its checksum) and put the checkpoint's settings over the command line's."""
        self.config = parser.parse_args(with_defaults(args))
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else {}
        self.ckpt_path = config.get("ckpt_path")
        if not self.ckpt_path:
            return
        if self.read_from != self.ckpt_path:
            self.checkpoint, self.read_from = load_checkpoint_file(self.ckpt_path), self.ckpt_path
        config.ckpt_path, checkpoint = None, self.checkpoint
        seed = config.get("seed_everything")  # the checkpoint's where none is given (launch/run_builder.py), before LightningCLI seeds
        if not isinstance(seed, bool):
            config.seed_everything = resumed_seed(seed, self.seed_given() or seed != default_seed(), checkpoint)
        # The checkpoint's model class where the command line names none (`test --ckpt_path=...`), and its settings
        # under those the command line or its -c files give.
        written_by = None if dict(option_values(self.command)).get("--model") else model_class_of(checkpoint)
        in_files = config_settings(self.command)
        for group, class_path in (("data", config.data.class_path), ("model", written_by or config.model.class_path)):
            given = _given([*option_values(self.command), *in_files], group)
            settings = {}
            with contextlib.suppress(ImportError):  # a class that does not import: the parser names it below
                settings = resumed_settings(checkpoint, group, get_class(class_path), given, self.ckpt_path)
            if settings or class_path != config[group].class_path:
                self.config = parser.parse_object({subcommand: {group: {"class_path": class_path, "init_args": settings}}},
                                                  self.config)

    def seed_given(self) -> bool:
        """Whether the command line gives --seed_everything (a config file's counts where it is not the default)."""
        return dict(option_values(self.command)).get("--seed_everything") is not None

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        if self.subcommand:
            config.ckpt_path = self.ckpt_path
        if self.subcommand in ("validate", "test") and not config.get("ckpt_path") and not config.get("fresh_weights"):
            raise SettingsError(f"{self.subcommand} without --ckpt_path would {self.subcommand} untrained weights: give the "
                                "checkpoint of a run, --ckpt_path=logs/tensorboard/<run>/version_N/checkpoints/last.ckpt, or "
                                f"--fresh_weights=true to {self.subcommand} a freshly initialized model")
        # The run rules, as in the Hydra front end (launch/run_builder.py: apply_rules); a seed_everything from a -c
        # file counts as given where it differs from the default.
        seed = config.seed_everything
        apply_rules({group: config[group].init_args for group in ("data", "model")},
                    {group: get_class(config[group].class_path) for group in ("data", "model")},
                    seed if self.seed_given() or seed != default_seed() else None, self.seed_given(),
                    lambda group, key: key in _given(option_values(self.command), group))
        note_existing_directories(config.get("log_dir") or default_log_dir())  # as parsed: a -c file may set it

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        """The trainer of the run this namespace describes, by the builder the Hydra front end calls too
        (launch/run_builder.py), which builds it with LightningCLI's own (adding SaveConfigCallback's config.yaml)."""
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        trainer_config = {**config.trainer, **kwargs}
        check_trainer_values(trainer_config, "--trainer")
        # The --checkpoint group's ModelCheckpoint (a parser group, built always) joins the trainer's callbacks.
        given = trainer_config.get("callbacks") or []
        given = given if isinstance(given, list) else [given]  # --trainer.callbacks=NAME gives one callback, not a list
        kinds = [type(c).__name__ for c in given]
        if twice := next((kind for kind in kinds if kinds.count(kind) > 1), None):  # (--trainer.callbacks+= a default's)
            raise SettingsError(f"--trainer.callbacks: {twice} twice (the defaults hold one: python train.py fit "
                                "--print_config); for other settings of it, give the callbacks as a list, which replaces "
                                "the defaults: --trainer.callbacks='[...]' or trainer.callbacks in a -c file")
        trainer_config["callbacks"] = [*given, config.checkpoint]
        replicas = dict(config.get("replicas") or {})
        if replicas.get("seeds") is not None and self.subcommand != "fit":
            raise SettingsError(f"--replicas.seeds with {self.subcommand}: {self.subcommand} each replica's checkpoint on its "
                                f"own (python train.py {self.subcommand} --ckpt_path=<its run>/checkpoints/last.ckpt)")
        run = RunDescription(
            model=self.model, datamodule=self.datamodule, trainer=trainer_config, front_end="cli",
            log_dir=str(config.get("log_dir") or default_log_dir()),
            name=run_name(f"{self.model.config_name}-{self.datamodule.config_name}", self.model, self.datamodule),
            # the default logger (none given, or true): a TensorBoard run, as Hydra's; another logger: as given
            tensorboard={} if trainer_config.get("logger") in (None, True) else None,
            ckpt_path=config.get("ckpt_path"), checkpoint=self.checkpoint, subcommand=self.subcommand or "fit",
            given=frozenset({"seed"} if self.seed_given() else ()),
            trainer_class=super().instantiate_trainer, replicas=replicas)
        self.datamodule, self.model, trainer, resume = build(run)  # R replicas' model and data where --replicas.seeds asks
        lr = (config.get("optimizer") or {}).get("init_args", {}).get("lr")
        if lr is not None and isinstance(self.model, LatentVariableModel):
            # LightningCLI's own --optimizer trains the model: its learning rate is the run's (hparams.yaml, HPARAMS)
            self.model.record_resolved(lr=lr)
        if self.subcommand == "fit":
            config["ckpt_path"] = resume
        return trainer

    def fit(self, **kwargs: Any) -> None:
        """Each subcommand (LightningCLI runs the CLI's method of its name where there is one): the trainer's, with the
        last line (also after Ctrl-C/SIGTERM) naming the run, its last.ckpt and the TensorBoard command."""
        with running(self.trainer, lambda line: print(line, flush=True), evaluating_only=self.subcommand in ("validate", "test")):
            getattr(self.trainer, self.subcommand)(**kwargs)

    validate = test = fit  # (predict is refused: launch/checks/cli_check.py)

    def instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        optimizer, scheduler = (functools.partial(get_class(config[key].class_path), **(config[key].get("init_args") or {}))
                                if config.get(key) else None for key in ("optimizer", "lr_scheduler"))
        try:  # LightningCLI's own, which it builds once training starts: checked now, as a model checks its own
            if optimizer:
                check_optimizer_factory(optimizer)
            if optimizer and scheduler:
                check_scheduler_factory(scheduler, optimizer)
        except FactoryRefusal as refusal:
            raise SettingsError(refusal.naming("--optimizer" if refusal.group == "optimizer" else "--lr_scheduler")) from None
        try:
            super().instantiate_classes()
        except (ValueError, TypeError, MisconfigurationException) as error:  # a constructor refused a setting: one line
            if isinstance(error, (CheckpointError, SettingsError)):
                raise
            text = _one_line(str(error), [])
            named = argument_named(text)  # (--checkpoint.mode=maxx: "`mode` can be min, max ...")
            given = [f"{option}={value}" for option, value in option_values(self.command)
                     if named and option.rsplit(".", 1)[-1] == named]
            note = RESUMED if self.checkpoint is not None and text.startswith("--model") else ""  # (as Hydra's says)
            raise SettingsError((f"{given[-1]}: {text}" if given else text) + note) from None


def main(args: list[str] | None = None, run: bool = True) -> Any:
    """LightningCLI on the same classes, with the same defaults as the Hydra configs (JSA on MNIST, the
    likelihood that suits the data, the same callbacks) and runs named like Hydra's. train.py checks the command line
    and its paths before the imports (launch/checks/early.py); the check's walk runs again here, where the classes
    resolve, for what needs them: the settings of class-valued options, of one's own classes and of the Trainer, and
    those a chosen class requires (launch/checks/cli_check.py)."""
    args = list(sys.argv[1:] if args is None else args)
    # --optimizer replaces the model's configure_optimizers, as asked (cli_check refuses --model.optimizer beside it)
    warnings.filterwarnings("ignore", message=r".*\.configure_optimizers` will be overridden by")
    subcommand = args[0] if args and args[0] in SUBCOMMANDS else "fit"
    command = CollectionCLI.command = args if args[:1] == [subcommand] else [subcommand, *args]
    with user_errors_as_one_line():
        CollectionCLI.checkpoint = CollectionCLI.read_from = None
        model = []  # --model=<the class that wrote --ckpt_path's checkpoint> where the command line names no model
        if path := checkpoint_without_model(command):
            CollectionCLI.checkpoint, CollectionCLI.read_from = load_checkpoint_file(path), path
            if written_by := model_class_of(CollectionCLI.checkpoint):  # its options are the command's --model.* ones
                model = [f"--model={written_by}"]
        check_cli_command([*command, *model], any(arg.split("=", 1)[0] in PRINTS_ONLY for arg in args))
        return CollectionCLI(
            LatentVariableModel,
            ImageDataModule,
            args=[*args, *model],
            subclass_mode_model=True,
            subclass_mode_data=True,
            parser_class=Parser,
            parser_kwargs={subcommand: {"evaluates": subcommand}} if subcommand in ("validate", "test") else {},
            run=run,
            # fit writes config.yaml into the run; test/validate into the same run, under their own name
            save_config_callback=RunConfigFile,  # config.yaml written as every file is (common/files.py)
            save_config_kwargs={"overwrite": True, "config_filename": "config.yaml" if subcommand == "fit" else f"config_{subcommand}.yaml"},
            seed_everything_default=default_seed(),  # configs/train.yaml's
        )


def model_class_of(checkpoint: dict[str, Any]) -> str | None:
    """The class that wrote a checkpoint, as SafeCheckpoints or LightningCLI names it."""
    return checkpoint.get("model_class") or (checkpoint.get("hyper_parameters") or {}).get("_class_path")


def _option(report: str, args: list[str]) -> str | None:
    """The option a report of jsonargparse's is about, as given (--trainer.callbacks+ too): the one that ends with the
    report's innermost parser key ('Parser key "num_bits"' -> --model.num_bits), else its keys joined (--model.mis_steps);
    None where it names no key."""
    keys = list(dict.fromkeys(re.findall(r'Parser key "([^"]+)"', report)))
    if not keys:
        return None
    given = [option for option, _ in option_values(args) if option.rstrip("+").endswith(("." + keys[-1], "--" + keys[-1]))]
    return given[0] if given else "--" + ".".join(keys)


def _one_line(text: str, args: list[str]) -> str:
    """jsonargparse's nested report as one line: its reasons, named by the option (`_option`), or a model's or data
    module's refusal of its own setting as that option with the class after it, as the Hydra front end names it
    ('--model.prior: unknown prior ... (JSA)'), else by the class ('JSA: ...'); any other message with its lines joined."""
    lines = [line.strip().removeprefix("- ") for line in text.splitlines()[1:]]
    reasons = list(dict.fromkeys(line for line in lines if line and not line.startswith(REPORT_NOISE)))
    # a bare "Expected a <class 'bool'>" names another type the option takes, not what went wrong, beside a reason that does
    reasons = [r for r in reasons if not re.fullmatch(r"Expected a <class '[\w.]+'>", r)] or reasons
    option, refused_by = _option(text, args), re.search(r"class_path='(?:[\w.]+\.)?(\w+)'", text)
    if not reasons or not (option or "Errors:" in text):  # not a nested report
        return " ".join(text.split())
    group = next((g for g, base in (("model", LatentVariableModel), ("data", ImageDataModule)) if f".{base.__name__}'>" in text), None)
    reason = reasons[0].removeprefix(f"{group}.")
    setting = reason.split(" ", 1)[0].split("=", 1)[0].rstrip(":")  # (prior: ..., beta (...) ..., batch_size=N ...)
    if option is None and refused_by and group and re.search(rf"[(\s]{re.escape(setting)}=", text):  # one the class takes
        return f"--{group}.{'; '.join([reason, *reasons[1:]])} ({refused_by[1]})"
    name = option or (refused_by[1] if refused_by else None)
    return (f"{name}: " if name else "") + "; ".join(reasons)


def _no_class(message: str, args: list[str]) -> str | None:
    """jsonargparse's report of a class that cannot be found, as the option and the fix: for a name, the closest class
    LightningCLI finds by name ('--optimizer=Adamw: no such class; did you mean AdamW?'); for a path, the closest class
    of its module, or where Python looks for one's own package. A class that a checkpoint or config file names is
    said so."""
    found, option = re.search(r"(?:Expected a path but |class_path ')([\w.]+)", message), _option(message, args)
    if found is None or option is None:
        return None
    given = any(value == found[1] for _, value in option_values(args))
    file = None if given else next((f"--config={path}" for _, text, path in reversed(config_settings(args))
                                    if (text or "").strip('"') == found[1]), None)
    named = f"{file}: {option[2:]}: {found[1]}" if file else \
        f"{option}={found[1]}{'' if given else ' (named by the checkpoint or a config file)'}"
    missing = re.search(r"No module named '([\w.]+)'", message)
    no_attribute = re.search(r"module '[\w.]+' has no attribute '\w+'", message)
    if "dot import path string" in message:
        return f"{named}: {no_such_class(found[1], list(short_names()))}"
    if missing and missing[1] == found[1].split(".")[0]:
        return f"{named}: no module named '{missing[1]}'; {IMPORTABLE_HINT}"
    return f"{named}: {no_attribute[0]}{closest_in_module(found[1])}" if no_attribute else None


def config_settings(args: list[str]) -> list[tuple[str, str | None, Path]]:
    """(--option, value, file) of each setting of the -c files that exist of a command line (its subcommand first), in
    their order."""
    files = [Path(value) for option, value in cli_options(args) if option == "--config" and value and Path(value).is_file()]
    return [(option, text, path) for path in files for option, text in file_settings(path)]


def _given(options: list[tuple[str, ...]], group: str) -> set[str]:
    """The settings of `group` these (--option, value, ...) set (--group.key or --group.init_args.key)."""
    keys = [setting_key(option) for option, *_ in options]
    return {key[len(group) + 1:].split(".")[0] for key in keys if key.startswith(f"{group}.")}
