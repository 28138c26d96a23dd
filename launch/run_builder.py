"""One description of a run, which each front end produces, and the one builder that turns it into a trainer.

Hydra describes a run from its composed config (launch/build.py: `describe_run`), LightningCLI from its parsed and
instantiated namespace (launch/cli_app.py: `CollectionCLI.instantiate_trainer`); `build_trainer` then applies every
rule of launch/rules.py to it, in one place: the checkpoint's model class, the TensorBoard run and its directory,
where a run without a logger writes, `trainer.enable_checkpointing=false`, the collective timeout, the preemption
and process-group callbacks, and the checkpoint fit starts from.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from launch import rules


@dataclasses.dataclass
class RunDescription:
    """What a run is, before its trainer exists."""

    model: Any  # the built LightningModule
    datamodule: Any  # the built LightningDataModule
    trainer: dict[str, Any]  # lightning.Trainer's settings as given, its callbacks built (the logger: see `tensorboard`)
    name: str  # <model>-<data>-<the model's key settings> (rules.run_name): the TensorBoard run's name
    log_dir: str  # the root of everything the run writes (Hydra's log_dir, the CLI's --log_dir)
    tensorboard: dict[str, Any] | None  # the TensorBoard run's settings (save_dir, ...); None: trainer["logger"] as given
    unlogged_dir: str  # where a run without a logger writes (its checkpoints; the CLI's config.yaml)
    ckpt_path: str | None = None  # the checkpoint to start from
    ddp_timeout_s: float = dataclasses.field(default_factory=rules.ddp_timeout_s)
    trainer_class: Callable[..., Any] | None = None  # lightning.Trainer unless the front end adds to it (LightningCLI)


def build_trainer(run: RunDescription) -> tuple[Any, str | None]:
    """The run's trainer, and the checkpoint fit starts from; an unusable checkpoint, or another model's, stops the
    run here, before anything is written but the reserved TensorBoard directory."""
    from lightning import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    from checkpoints.loader import load_checkpoint_file
    from checkpoints.model_class import check_model_class
    from launch.runs.replicas import check_replica_checkpoint
    from launch.runs.run_directory import tensorboard_logger
    from launch.settings import SettingsError

    if Path(run.log_dir).exists() and not Path(run.log_dir).is_dir():  # (given in a config file: not seen earlier)
        raise SettingsError(f"log_dir {run.log_dir} is a file, not a directory; expected a directory to write the run in")
    if run.ckpt_path:
        checkpoint = load_checkpoint_file(run.ckpt_path)
        check_model_class(checkpoint, getattr(run.model, "model_class", type(run.model)), run.ckpt_path)
        check_replica_checkpoint(checkpoint, run.model, run.ckpt_path)
    if run.tensorboard is not None:
        settings = dict(run.tensorboard)
        logger = tensorboard_logger(settings.pop("save_dir"), run.name, run.ckpt_path, **settings)
    else:
        logger = run.trainer.get("logger", False)
    callbacks = list(run.trainer.get("callbacks") or [])
    # trainer.enable_checkpointing=false leaves the checkpoint callback out, which Lightning would refuse beside it.
    if run.trainer.get("enable_checkpointing") is False:
        callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
    settings = {**run.trainer, "callbacks": callbacks}
    settings.update(rules.trainer_settings(settings, logger, run.ddp_timeout_s, run.unlogged_dir))
    trainer = (run.trainer_class or Trainer)(**{**settings, "logger": logger})
    return trainer, rules.resume_point(trainer, run.ckpt_path)
