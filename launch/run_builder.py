"""How a run is built, for both front ends: one description of a run (`RunDescription`), which Hydra
(launch/hydra_app.py: `describe_run`, the settings of what the run builds) and LightningCLI (launch/cli_app.py:
`instantiate_trainer`, with the data module and model its parser built) each give, and the one builder, `build`, that
applies every run rule to it in one pass and hands the checkpoint, read once, to the trainer's restore. The rules, each
written once: the defaults of configs/ (LightningCLI takes them as its defaults); the run's seed and the data decide
settings of the data module and the model (`apply_rules`); the callbacks every run gets (`always_on_callbacks`); a DDP
strategy's timeouts, the SLURM root and the progress bar (`trainer_settings`); the run's last line and no directory
left by a refused one (`running`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import logging
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from lightning import Callback, Trainer
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.strategies import StrategyRegistry
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from callbacks.guards.nonfinite import NonFiniteLossGuard
from callbacks.guards.preemption import SaveOnPreemption
from callbacks.guards.process_group import CollectiveTimeout, ReleaseProcessGroupAtExit
from checkpoints.model_class import check_data_class, check_model_class
from checkpoints.trainer import AtomicCheckpointIO, SafeCheckpoints
from common.registry import TRUST_VARIABLE, is_registered, qualified_name
from common.signatures import constructor_defaults
from configs.settings import MACHINE_DATA_SETTINGS, MODEL_ARGUMENTS
from launch.checks.configs import LOGGER_FOLDERS, config_file, ddp_timeout_s
from launch.checks.paths import write_root_refusal
from launch.checks.settings import SettingsError, class_hints
from launch.errors import REFUSALS, StoppedByCtrlC, argument_named, lightning_exits_as_ours
from launch.runs.replicas import check_replica_checkpoint, replicate
from launch.runs.run_directory import (chosen_logger, no_traces_if_refused, placed, process_dir, run_name, run_places,
                                       run_summary, slurm_job_id)
from models.components.optimizers import FactoryRefusal

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunDescription:
    """What a run is, before its trainer exists: what the user chose, not yet where it goes (launch/runs/run_directory.py).
    Hydra's gives the settings of its data module, model and callbacks, and the fields after `trainer_class`;
    LightningCLI's the data module and model its parser built."""

    model: Any  # the LightningModule, or its settings (`_target_` and its arguments)
    datamodule: Any  # the LightningDataModule, or its settings
    trainer: dict[str, Any]  # lightning.Trainer's settings as given, its callbacks built (settings by name: Hydra's)
    name: str  # the run's name (launch/runs/run_directory.py: run_name): its TensorBoard run, its directories; Hydra's base
    log_dir: str  # the root of everything the run writes (Hydra's log_dir, the CLI's --log_dir)
    front_end: str  # "hydra", "cli" or "replicas": the folder under log_dir of a run without a TensorBoard run
    tensorboard: dict[str, Any] | None  # the TensorBoard run's own settings; None: no TensorBoard run (trainer["logger"] as given)
    output_dir: str | None = None  # a directory already made for the run (Hydra's), where it writes without a logger
    ckpt_path: str | None = None  # the checkpoint to start from
    checkpoint: dict[str, Any] | None = None  # ckpt_path's content, read once by the front end that describes the run
    subcommand: str = "fit"  # what the checkpoint is for: a refusal names the command that works (checkpoints/model_class.py)
    ddp_timeout_s: float = dataclasses.field(default_factory=ddp_timeout_s)
    trainer_class: Callable[..., Any] | None = None  # lightning.Trainer unless the front end adds to it (LightningCLI)
    optimizer: dict[str, Any] | None = None  # the optimizer's and the scheduler's settings (the model builds them)
    scheduler: dict[str, Any] | None = None
    logger: dict[str, Any] | None = None  # the logger group's settings (TensorBoardLogger, CSVLogger or none)
    seed: Any = None  # the run's seed (a resumed run's: `resumed_seed`)
    given: frozenset[str] = frozenset()  # the settings the command line gives: Hydra's all ("seed", "model.lr", ...), the CLI's "seed"
    swept: dict[str, Any] = dataclasses.field(default_factory=dict)  # a multirun's swept settings the name shows
    replicas: dict[str, Any] | None = None  # replicas.seeds and replicas.arms (launch/runs/replicas.py)


def build(run: RunDescription) -> tuple[Any, Any, Any, str | None]:
    """(datamodule, model, trainer, the checkpoint fit starts from) of a described run: its log_dir checked, what Hydra
    describes by its settings built (`built`), then, for both front ends, the checkpoint's classes checked, the logger
    and the run's directory, the callbacks and the Trainer. An unusable checkpoint, or another model's, stops the run here,
    before anything is written but the reserved TensorBoard directory."""
    cli = run.front_end == "cli"  # a refusal names the options as the command gave them (replicas too: `replicate`)
    # as composed or parsed: a config file may set it (the early checks saw the command line only)
    if refusal := write_root_refusal("--log_dir" if cli else "log_dir", run.log_dir):
        raise SettingsError(refusal)
    if isinstance(run.model, dict):  # settings: Hydra's, checked before (launch/hydra_app.py: run)
        run = built(run)
    option = "--replicas" if cli else "replicas"
    if (run.replicas or {}).get("arms") is not None and run.replicas.get("seeds") is None:
        raise SettingsError(f"{option}.arms without {option}.seeds: arms are replicas of each seed; give the seeds too "
                            f"({option}.seeds=[0,1], docs/replicas.md)")
    if (run.replicas or {}).get("seeds") is not None:  # R replicas of it in one process (launch/runs/replicas.py)
        if "seed" in run.given:  # (each replica is seeded by its own)
            seed = "--seed_everything" if cli else "seed"
            raise SettingsError(f"{seed} with {option}.seeds: each replica runs with its own seed of {option}.seeds; "
                                f"leave {seed} out")
        if run.tensorboard is None:  # each replica logs a TensorBoard run of its own
            logger = run.trainer.get("logger")
            given = (f"--trainer.logger={type(logger).__name__ if logger else 'false'}" if cli
                     else f"logger={LOGGER_FOLDERS.get((run.logger or {}).get('_target_'), 'none')}")
            fix = "leave --trainer.logger out" if cli else "use logger=tensorboard"
            raise SettingsError(f"{given} with replicas: each replica logs to a TensorBoard run of its own "
                                f"(docs/replicas.md); {fix}")
        run = replicate(run, run.replicas["seeds"], run.replicas.get("arms"))
    model_class = getattr(run.model, "model_class", type(run.model))  # (the class of each replica)
    if run.subcommand == "fit" and not is_registered(name := qualified_name(model_class)) and rank_zero_only.rank == 0:
        log.warning("%s is a class of your own: its checkpoints are read (to resume, test or load_from_checkpoint) with "
                    "its package trusted, %s=%s", name, TRUST_VARIABLE, name.split(".")[0])
    checkpoint = run.checkpoint
    if run.ckpt_path:
        check_model_class(checkpoint, model_class, run.ckpt_path, run.subcommand)
        check_data_class(checkpoint, run.datamodule, run.ckpt_path, cli=cli)
        if run.front_end != "replicas":  # (`replicate` checked its own, before comparing the weights)
            check_replica_checkpoint(checkpoint, run.model, run.ckpt_path, "--ckpt_path" if cli else "ckpt_path", run.subcommand)
        if run.subcommand == "fit" and "optimizer_states" not in checkpoint:  # (Lightning's KeyError deep in its restore)
            raise SettingsError(f"{'--' if cli else ''}ckpt_path={run.ckpt_path} holds the model's weights only (save_weights_only): training "
                                "cannot continue from it (no optimizer, loop or callback state); test or validate it, or "
                                "start a new run")
    root = run.trainer.get("default_root_dir")
    if root is not None and (run.tensorboard is not None or run.trainer.get("logger")) and run.front_end != "replicas":
        option = "--" if cli else ""
        raise SettingsError(f"{option}trainer.default_root_dir={root}: with a logger, a run writes everything under "
                            f"{option}log_dir (<log_dir>/tensorboard/<run>); give {option}log_dir={root} instead")
    logger, unlogged_dir, start_from = run_places(run)
    if run.subcommand == "fit":
        check_checkpoint_folders(run.trainer.get("callbacks") or [], start_from)
    # trainer.enable_checkpointing=false leaves the checkpoint callback out, which Lightning would refuse beside it.
    checkpointing = run.trainer.get("enable_checkpointing") is not False
    callbacks = [c for c in run.trainer.get("callbacks") or [] if checkpointing or not isinstance(c, ModelCheckpoint)]
    settings = {**run.trainer, "callbacks": callbacks}
    settings.update(trainer_settings(settings, logger, run.ddp_timeout_s, unlogged_dir))
    try:
        trainer = (run.trainer_class or Trainer)(**{**settings, "logger": logger})
    except (ValueError, TypeError, RuntimeError, MisconfigurationException) as error:  # Lightning refused a setting
        option, text = "--trainer" if cli else "trainer", " ".join(str(error).split())
        if twice := re.match(r"Found more than one stateful callback of type `(\w+)`", text):  # (a second ModelCheckpoint)
            where = "--trainer.callbacks" if cli else "callbacks"
            ours = " (the --checkpoint group's is one: --checkpoint.monitor, ...)" if cli else ""
            raise SettingsError(f"{where}: two {twice[1]} callbacks with the same settings would share one state in the "
                                f"checkpoint{ours}; give the second other settings (another monitor), or leave it out"
                                ) from None
        if (named := argument_named(text)) in settings:
            raise SettingsError(f"{option}.{named}={settings[named]}: {text}") from None
        if isinstance(error, RuntimeError) or isinstance(error, REFUSALS) and not isinstance(error, MisconfigurationException):
            raise
        raise SettingsError(f"{option} (Trainer): {text}") from None
    if checkpoint is not None and run.subcommand in ("validate", "test") and "fit_loop" in (checkpoint.get("loops") or {}):
        # A trainer built to score a checkpoint (train.py test --ckpt_path=...) logs at the step its training reached,
        # after the training curves, as a test after fit does: Lightning restores the fit loop's progress for fit alone.
        trainer.fit_loop.load_state_dict(checkpoint["loops"]["fit_loop"])
    if checkpoint is not None and type(trainer.strategy.checkpoint_io) in (TorchCheckpointIO, AtomicCheckpointIO):
        # the restore takes the checkpoint read above instead of reading the file again
        trainer.strategy.checkpoint_io = AtomicCheckpointIO(read=(run.ckpt_path, checkpoint))
    # Several nodes need a launcher that starts a process per device on each (torchrun, srun): without one, Lightning
    # would wait forever for the other nodes. Its manual layout (MASTER_ADDR, NODE_RANK, WORLD_SIZE set by hand on each
    # node) counts as one.
    environment = getattr(trainer.strategy, "cluster_environment", None)
    if trainer.num_nodes > 1 and type(environment) is LightningEnvironment and "NODE_RANK" not in os.environ:
        raise SettingsError(
            f"trainer.num_nodes={trainer.num_nodes} needs a launcher that starts the processes on every node, and "
            "none was found (no torchrun or SLURM environment). On each node run: torchrun --nnodes="
            f"{trainer.num_nodes} --nproc-per-node=DEVICES --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 train.py "
            f"trainer=multinode trainer.num_nodes={trainer.num_nodes} trainer.devices=DEVICES; or, in a SLURM job, "
            "sbatch scripts/slurm/train.sbatch (srun python train.py trainer=multinode ...); see docs/cluster.md")
    return run.datamodule, run.model, trainer, start_from


def built(run: RunDescription) -> RunDescription:
    """The run Hydra describes by its settings (a checkpoint's under the command line's: launch/hydra_app.py), built but
    for its trainer, in this order: the run's seed and the rules; the data module, model and callbacks; the run's name
    and logger."""
    data, model, trainer = dict(run.datamodule), dict(run.model), dict(run.trainer)
    classes = {"data": get_class(data["_target_"]), "model": get_class(model["_target_"])}
    if model.get("compile"):  # each job of a multirun compiles its own networks, under Dynamo's recompile_limit
        torch.compiler.reset()
    L.seed_everything(run.seed, workers=True)
    apply_rules({"data": data, "model": model}, classes, run.seed, "seed" in run.given,
                lambda group, key: f"{group}.{key}" in run.given)
    datamodule = constructed(data, "data")
    # the model's configure_optimizers builds both
    optimizer, scheduler = (instantiate(settings) if settings else None for settings in (run.optimizer, run.scheduler))
    model = constructed(model, "model", RESUMED if run.checkpoint is not None else "",
                        data_shape=list(datamodule.image_shape), optimizer=optimizer, scheduler=scheduler)
    callbacks = [constructed(settings, f"callbacks.{name}") for name, settings in trainer.pop("callbacks").items()
                 if settings is not None]  # callbacks.NAME=null leaves it out, as ~callbacks.NAME does
    partial = instantiate(trainer, _partial_=True, _convert_="all")  # lightning.Trainer and its settings, built
    name = run_name(run.name, model, datamodule, run.swept)
    logger, tensorboard = chosen_logger(run, name)
    return dataclasses.replace(
        run, model=model, datamodule=datamodule, name=name, tensorboard=tensorboard,
        trainer={**partial.keywords, "callbacks": callbacks, "logger": logger}, trainer_class=partial.func,
        # ~logger: the checkpoints go to Hydra's run directory (beside its config and log), not the working directory;
        # outside a Hydra app (a config composed in a test), one of the same layout. Placed: no link out of <log_dir>.
        output_dir=(placed(run.log_dir, "hydra", run.output_dir) if run.output_dir
                    else process_dir(run.log_dir, "hydra", run.name)))


RESUMED = " (a resumed run takes its checkpoint's model settings where the command line gives none)"


def constructed(settings: dict[str, Any], group: str, note: str = "", **kwargs: Any) -> Any:
    """The object `settings` describe; a refusal of its constructor (a value out of range, a combination of settings)
    as one line naming the class and the group's setting where it names one, as the early checks do ("data.seed must
    be ... (MNISTDataModule)"), else the group ("callbacks.model_checkpoint (ValidationCheckpoint): Invalid value for
    save_top_k=-5 ..."); `note` after it."""
    try:
        return instantiate(settings, _convert_="all", **kwargs)
    except InstantiationException as error:
        if not isinstance(error.__cause__, (ValueError, TypeError, MisconfigurationException)):
            raise
        if isinstance(error.__cause__, FactoryRefusal):  # the model's optimizer or scheduler: a group of its own here
            raise SettingsError(error.__cause__.naming(error.__cause__.group)) from None
        text, name = str(error.__cause__), settings["_target_"].rsplit(".", 1)[-1]
        text = text.removeprefix(f"{group}.")  # a refusal that names the group's setting itself (model.prior_hidden ...)
        named = text.split(" ", 1)[0].split("=", 1)[0].rstrip(":") in settings  # (model.prior=x, model.prior: ...)
        raise SettingsError(f"{group}.{text} ({name}){note}" if named else f"{group} ({name}): {text}{note}") from None


def check_checkpoint_folders(callbacks: Sequence[Any], start_from: str | None) -> None:
    """A checkpoint callback's given folder that holds another run's checkpoints: this run would write over its
    last.ckpt (Lightning only warns); a run resumed from a checkpoint beside that folder is the run that wrote it."""
    for callback in callbacks:
        folder = Path(callback.dirpath) if isinstance(callback, ModelCheckpoint) and callback.dirpath else None
        found = sorted(path.name for path in folder.glob("*.ckpt")) if folder and folder.is_dir() else []
        if found and not (start_from and Path(start_from).resolve().is_relative_to(folder.resolve().parent)):
            raise SettingsError(f"{type(callback).__name__}(dirpath={folder}) holds another run's checkpoints "
                                f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}): this run would write over "
                                "them; give a folder of its own, or leave dirpath out (each run keeps its checkpoints in its "
                                "run's folder)")


def trainer_defaults() -> dict[str, Any]:
    """The lightning.Trainer settings configs/trainer/default.yaml changes from the Trainer's own defaults."""
    own = constructor_defaults(Trainer)
    return {key: value for key, value in config_file("trainer/default.yaml").items()
            if key in own and value != own[key]}


def checkpoint_settings() -> dict[str, Any]:
    """ModelCheckpoint's settings (configs/callbacks/default.yaml's model_checkpoint): last + best on val/nll."""
    return {k: v for k, v in config_file("callbacks/default.yaml")["model_checkpoint"].items() if k != "_target_"}


def default_callbacks() -> list[Callback]:
    """The other callbacks of configs/callbacks/default.yaml, built with their settings there (the user may replace
    them: callbacks=..., --trainer.callbacks=...)."""
    return [instantiate(entry) for name, entry in config_file("callbacks/default.yaml").items() if name != "model_checkpoint"]


def always_on_callbacks(collective_timeout_s: float | None, given: Sequence[Callback] = ()) -> list[Callback]:
    """The callbacks every run gets beside the `given` ones, whatever the configs or the command line say:
    `SafeCheckpoints` (checkpoints/trainer.py), `SaveOnPreemption` and the NaN guard, with the
    settings of configs/callbacks/default.yaml unless one's own callback list replaces them (callbacks/guards/), the
    release of a DDP run's process group at exit, and, given a collective timeout (a DDP strategy named by a string),
    that timeout for the collectives after the ranks' start (callbacks/guards/process_group.py)."""
    guard = [] if any(isinstance(c, NonFiniteLossGuard) for c in given) else [NonFiniteLossGuard()]
    timeouts = [CollectiveTimeout(collective_timeout_s)] if collective_timeout_s is not None else []
    return [SafeCheckpoints(), SaveOnPreemption(), *guard, ReleaseProcessGroupAtExit(), *timeouts]


# A run's seed (seed=N, --seed_everything=N) seeds these too: the data order and binarization, and the test stage's
# importance samples; one given itself (data.seed=..., --model.test_seed=...) keeps its value.
SEEDED_SETTINGS = (("data", "seed"), ("model", "test_seed"))


def apply_rules(settings: dict[str, Any], classes: dict[str, type], seed: Any, seed_given: bool,
                given: Callable[[str, str], bool]) -> None:
    """The run rules on the settings of its data module and model (`settings["data"]`, `settings["model"]`, of
    `classes`), in place, before either is built:
    - the run's seed (an int: LightningCLI's seed_everything=true is a random one) goes to each of SEEDED_SETTINGS its
      class takes, unless `given(group, key)` on the command line; a seed given on the command line wins over a value
      from a file or a checkpoint (test --ckpt_path=... --seed_everything=9 tests with seed 9), one from a config file
      fills only the settings still at their class default;
    - the model's likelihood and backbone follow the data where they are not given and the model takes them: Bernoulli
      for binarized pixels, else the discretized logistic; CIFAR-10's convolutional networks."""
    for group, key in SEEDED_SETTINGS if isinstance(seed, int) and not isinstance(seed, bool) else ():
        defaults = constructor_defaults(classes[group])
        if key in defaults and not given(group, key) and (seed_given or settings[group].get(key) == defaults[key]):
            settings[group][key] = seed
    data, model = classes["data"], settings["model"]
    binarize = settings["data"].get("binarize", constructor_defaults(data).get("binarize"))
    suited = {"likelihood": model.get("likelihood") or data.likelihood_for(binarize),
              "backbone": model.get("backbone") or data.backbone}
    for key in set(suited) & set(constructor_defaults(classes["model"])):
        model[key] = suited[key]


def resumed_settings(checkpoint: dict[str, Any], group: str, cls: type, given: set[str], ckpt_path: Any) -> dict[str, Any]:
    """The settings of `group` (model, data) that a run started from `checkpoint` takes from it, where its command line
    (`given`: the group's keys it sets) gives none: every setting of `cls` (those a subclass of one's own adds too), but
    a model's constructor arguments (MODEL_ARGUMENTS) and where this machine keeps the data and how it loads it
    (MACHINE_DATA_SETTINGS); none from a checkpoint another class wrote (`build` refuses it). A run resumed or tested as
    its README command says (no settings given) trains on, and is scored on, the data it was trained on (a grey-pixel
    model on grey pixels). A saved setting `cls` does not take is refused, not dropped: the run would not be the one
    saved."""
    stamp, section = {"model": ("model_class", "hyper_parameters"), "data": ("data_class", "datamodule_hyper_parameters")}[group]
    if checkpoint.get(stamp) not in (None, qualified_name(cls)):
        return {}
    saved = {key: value for key, value in (checkpoint.get(section) or {}).items() if not key.startswith("_")}
    taken = set(class_hints(cls))
    if unknown := sorted(set(saved) - taken - {*MODEL_ARGUMENTS}):
        raise SettingsError(f"checkpoint {ckpt_path}: its {group} setting {unknown[0]}={saved[unknown[0]]!r} is not one "
                            f"{qualified_name(cls)} takes (a checkpoint of another version of the class?)")
    kept = taken - {*MODEL_ARGUMENTS, *MACHINE_DATA_SETTINGS, *given}
    return {key: copy.deepcopy(value) for key, value in saved.items() if key in kept}  # (copies: a parser changes them)


def resumed_seed(seed: Any, seed_given: bool, checkpoint: dict[str, Any] | None) -> Any:
    """The seed of a run started from a checkpoint where the command line gives none: the one its data module was
    seeded with (a replica's own seed too), so that its data order and test stage continue as they were."""
    saved = (checkpoint or {}).get("datamodule_hyper_parameters") or {}
    return saved["seed"] if not seed_given and type(saved.get("seed")) is int else seed


def trainer_settings(settings: Any, logger: Any, timeout_s: float, unlogged_dir: str | None = None) -> dict[str, Any]:
    """What the run changes in the trainer's `settings` (strategy, callbacks, enable_progress_bar, default_root_dir):
    - without a logger, or under fast_dev_run (no default_root_dir given), the run's files go to `unlogged_dir`, not
      the working directory where Lightning and LightningCLI would put them;
    - a DDP strategy named by a string gets a collective timeout (`strategy_with_timeout`);
    - in a SLURM job, Lightning's auto-requeue saves and finds hpc_ckpt_N.ckpt in the run's directory;
    - the always-on callbacks join the given ones;
    - with the progress bar off, its callback goes (Lightning refuses both)."""
    changed = {"strategy": strategy_with_timeout(settings.get("strategy"), timeout_s)}
    # the strategy's timeout covers the ranks' start; the collectives after it get timeout_s
    collective_timeout_s = timeout_s if changed["strategy"] is not settings.get("strategy") else None
    if logger and slurm_job_id() is not None:
        changed["default_root_dir"] = logger.log_dir
    # fast_dev_run replaces any logger by Lightning's DummyLogger, which has no directory: the same as none.
    if (not logger or settings.get("fast_dev_run")) and settings.get("default_root_dir") is None and unlogged_dir is not None:
        changed["default_root_dir"] = unlogged_dir
    given = list(settings.get("callbacks") or [])
    callbacks = [*given, *always_on_callbacks(collective_timeout_s, given)]
    if settings.get("enable_progress_bar") is False:  # None: on
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    return {**changed, "callbacks": callbacks}


@contextlib.contextmanager
def running(trainer: Any, say: Callable[[str], Any], evaluating_only: bool = False) -> Iterator[None]:
    """Around fit/test: the last line names the run, its last.ckpt and the TensorBoard command (also after Ctrl-C or
    SIGTERM); a run refused before it saved a checkpoint leaves nothing behind. Ctrl-C exits with 130 wherever it comes
    (SIGTERM: 143); when the process only evaluates (validate, test), the run it was logging into is left as it was (a half-written
    test stage's image grids without its metrics would look like a result)."""
    undone = (*REFUSALS, StoppedByCtrlC, SIGTERMException) if evaluating_only else REFUSALS
    try:
        with no_traces_if_refused(trainer.logger, undone), lightning_exits_as_ours():
            yield
    except SystemExit as stop:  # stopped by SIGTERM or Ctrl-C (128 + SIGTERM, 128 + SIGINT) with a checkpoint to name
        if stop.code in (143, 130) and (line := run_summary(trainer, stopped=True)):
            say(line)
        raise
    if line := run_summary(trainer):  # not after a refused or failed run: nothing of a run to point at
        say(line)


# How long the ranks wait for each other to start (torch's rendezvous), whatever ddp_timeout_s says (this is its default
# in configs/train.yaml): each rank imports torch and builds the run on its own, and on a busy machine or a slow file
# system one may start a minute after another, which is not a hang. callbacks/guards/process_group.py's
# CollectiveTimeout sets ddp_timeout_s once all are there.
STARTUP_TIMEOUT_S = 600


def strategy_with_timeout(strategy: Any, seconds: float) -> Any:
    """A DDP-family strategy named by a string (ddp, ddp_spawn, ...) built with a timeout: a process that waits longer
    than `seconds` at a collective for a stuck or dead peer stops with an error naming the operation, instead of
    waiting torch's default 30 minutes in silence (the strategy's own timeout covers the start, at least
    STARTUP_TIMEOUT_S; the CollectiveTimeout callback shortens it to `seconds` after). Anything else unchanged."""
    entry = StrategyRegistry[strategy] if isinstance(strategy, str) and strategy in StrategyRegistry else None
    if entry is None or "timeout" not in inspect.signature(entry["strategy"]).parameters:
        return strategy
    return entry["strategy"](**{**entry["init_params"], "timeout": timedelta(seconds=max(seconds, STARTUP_TIMEOUT_S))})
