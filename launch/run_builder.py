"""One description of a run, which each front end produces, and the one builder that turns it into a trainer.

Hydra describes a run from its composed config (launch/hydra_run.py: `describe_run`), LightningCLI from its parsed
namespace (launch/cli_app.py: `CollectionCLI.instantiate_trainer`); `build_trainer` applies every rule of
launch/rules.py to it, in one place, and hands the checkpoint the front end read once to the trainer's restore.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from lightning import Trainer
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from checkpoints.model_class import check_data_class, check_model_class
from checkpoints.trainer import AtomicCheckpointIO
from launch import rules
from launch.checks.configs import ddp_timeout_s
from launch.checks.paths import write_root_refusal
from launch.checks.settings import SettingsError
from launch.run_layout import TENSORBOARD, process_dir
from launch.runs.replicas import check_replica_checkpoint
from launch.runs.distributed import check_launcher
from launch.runs.run_directory import requeued_job_checkpoint, tensorboard_logger


@dataclasses.dataclass
class RunDescription:
    """What a run is, before its trainer exists: what the user chose, not yet where it goes (launch/run_layout.py)."""

    model: Any  # the built LightningModule
    datamodule: Any  # the built LightningDataModule
    trainer: dict[str, Any]  # lightning.Trainer's settings as given, its callbacks built (the logger: see `tensorboard`)
    name: str  # the run's name (launch/run_layout.py: run_name): its TensorBoard run, its directories
    log_dir: str  # the root of everything the run writes (Hydra's log_dir, the CLI's --log_dir)
    front_end: str  # "hydra", "cli" or "replicas": the folder under log_dir of a run without a TensorBoard run
    tensorboard: dict[str, Any] | None  # the TensorBoard run's own settings; None: no TensorBoard run (trainer["logger"] as given)
    output_dir: str | None = None  # a directory already made for the run (Hydra's), where it writes without a logger
    ckpt_path: str | None = None  # the checkpoint to start from
    checkpoint: dict[str, Any] | None = None  # ckpt_path's content, read once by the front end (given with ckpt_path)
    subcommand: str = "fit"  # what the checkpoint is for: a refusal names the command that works (checkpoints/model_class.py)
    ddp_timeout_s: float = dataclasses.field(default_factory=ddp_timeout_s)
    trainer_class: Callable[..., Any] | None = None  # lightning.Trainer unless the front end adds to it (LightningCLI)


def build_trainer(run: RunDescription) -> tuple[Any, str | None]:
    """The run's trainer, and the checkpoint fit starts from; an unusable checkpoint, or another model's, stops the
    run here, before anything is written but the reserved TensorBoard directory."""
    # as parsed: a CLI config file may set it (the early checks saw the command line only)
    if refusal := write_root_refusal("--log_dir" if run.front_end == "cli" else "log_dir", run.log_dir):
        raise SettingsError(refusal)
    checkpoint = run.checkpoint
    if run.ckpt_path:
        check_model_class(checkpoint, getattr(run.model, "model_class", type(run.model)), run.ckpt_path, run.subcommand)
        check_data_class(checkpoint, run.datamodule, run.ckpt_path, cli=run.front_end == "cli")
        check_replica_checkpoint(checkpoint, run.model, run.ckpt_path)
    root = run.trainer.get("default_root_dir")
    if root is not None and (run.tensorboard is not None or run.trainer.get("logger")) and run.front_end != "replicas":
        option = "--" if run.front_end == "cli" else ""
        raise SettingsError(f"{option}trainer.default_root_dir={root}: with a logger, a run writes everything under "
                            f"{option}log_dir (<log_dir>/tensorboard/<run>); give {option}log_dir={root} instead")
    unlogged_dir = run.output_dir or process_dir(run.log_dir, run.front_end, run.name)  # a run without a logger's files
    logger = (run.trainer.get("logger", False) if run.tensorboard is None
              else tensorboard_logger(f"{run.log_dir}/{TENSORBOARD}", run.name, run.ckpt_path, **run.tensorboard))
    # trainer.enable_checkpointing=false leaves the checkpoint callback out, which Lightning would refuse beside it.
    checkpointing = run.trainer.get("enable_checkpointing") is not False
    callbacks = [c for c in run.trainer.get("callbacks") or [] if checkpointing or not isinstance(c, ModelCheckpoint)]
    settings = {**run.trainer, "callbacks": callbacks}
    settings.update(rules.trainer_settings(settings, logger, run.ddp_timeout_s, unlogged_dir))
    trainer = (run.trainer_class or Trainer)(**{**settings, "logger": logger})
    if checkpoint is not None and run.subcommand in ("validate", "test") and "fit_loop" in (checkpoint.get("loops") or {}):
        # A trainer built to score a checkpoint (train.py test --ckpt_path=...) logs at the step its training reached,
        # after the training curves, as a test after fit does: Lightning restores the fit loop's progress for fit alone.
        trainer.fit_loop.load_state_dict(checkpoint["loops"]["fit_loop"])
    if checkpoint is not None and type(trainer.strategy.checkpoint_io) in (TorchCheckpointIO, AtomicCheckpointIO):
        # the restore takes the checkpoint read above instead of reading the file again
        trainer.strategy.checkpoint_io = AtomicCheckpointIO(read=(run.ckpt_path, checkpoint))
    check_launcher(trainer)  # several nodes need a launcher
    # fit starts from the given checkpoint, else, in a requeued SLURM job, the newest one its earlier attempt saved
    return trainer, run.ckpt_path or requeued_job_checkpoint(trainer)
