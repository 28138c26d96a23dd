"""A described run turned into R replicas trained in one process (models/replicas.py, docs/replicas.md), for both front
ends: `replicas.seeds=[0,1,2,3]`, with `replicas.arms` the settings replicas of one seed may differ in.

Each replica is built and logged as the run of its seed would be (callbacks/replica_runs.py); the process itself keeps
only its progress and last.ckpt under `<log_dir>/replicas/`. Given a trunk's `ckpt_path` (the same seeds, no arms),
each arm of a seed starts from that seed's replica (`trunk_to_branch`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any, Sequence

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from callbacks.replica_runs import ReplicaRuns
from checkpoints.file_format import save_checkpoint_file
from checkpoints.loader import check_fits
from callbacks.validation_checkpoint import ValidationCheckpoint
from common.private_api import checkpoint_every_n_train_steps
from common.settings import SEED_RANGE
from common.signatures import constructor_defaults
from datamodules.replicas import ReplicaData
from launch.checks.settings import SettingsError
from launch.checks.configs import TENSORBOARD
from launch.runs.run_directory import ReservedVersionLogger, placed, process_dir
from models.replicas import Replicas, branch_checkpoint

log = logging.getLogger(__name__)

# The callbacks that read one model's evaluation or weights: each replica's run gets its own val/ tags and HPARAMS tab
# from callbacks/replica_runs.py instead; image grids, gradient variance and the test stage's cost are single-run only.
SINGLE_RUN_CALLBACKS = ("ImageGrids", "HparamsWithMetrics", "TestCost", "GradientVariance", "PosteriorSamples")


def replica_names(name: str, seeds: Sequence[int], arms: Sequence[dict[str, Any]]) -> list[str]:
    """<name>-seed<S>, plus each arm setting as a multirun names a swept one (<key><value>)."""
    return [f"{name}-seed{seed}" + "".join(f"-{key}{value}" for key, value in arm.items()) for arm in arms for seed in seeds]


def check_replica_request(seeds: Any, arms: Any, option: str) -> tuple[list[int], list[dict[str, Any]]]:
    """`seeds` a non-empty list of distinct integers in numpy's range, `arms` null or a non-empty list of mappings."""
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(type(s) is int and SEED_RANGE[0] <= s <= SEED_RANGE[1] for s in seeds):
        raise SettingsError(f"{option}.seeds={seeds!r}: expected a list of integer seeds in [0, 2^32 - 1], e.g. [0,1,2,3]")
    if len(set(seeds)) != len(seeds):
        raise SettingsError(f"{option}.seeds={list(seeds)}: a seed is repeated; each replica needs its own seed")
    arms = [{}] if arms is None else arms
    if not isinstance(arms, (list, tuple)) or not arms or not all(isinstance(a, dict) for a in arms):
        raise SettingsError(f"{option}.arms={arms!r}: expected a list of settings, one arm each, e.g. [{{}},{{cache_start_epoch:300}}]")
    if (twice := next((arm for i, arm in enumerate(arms) if arm in arms[:i]), None)) is not None:
        raise SettingsError(f"{option}.arms: {twice} is repeated; each arm trains other settings (a seed twice: {option}.seeds)")
    # YAML reads {cache_start_epoch:300} as one key: the CLI's parser does
    if (glued := next((key for arm in arms for key in arm if ":" in str(key)), None)) is not None:
        raise SettingsError(f"{option}.arms: {glued!r} is one key; write a space after the colon, e.g. '[{{}}, {{cache_start_epoch: 300}}]'")
    return list(seeds), [dict(a) for a in arms]


def check_one_process(trainer: dict[str, Any], dashes: str) -> None:
    """Replicas are one batched computation in one process on one device (docs/replicas.md): a DDP-family strategy,
    several devices or several nodes are refused before any process starts, not left to fail in each rank."""
    strategy, devices, nodes = trainer.get("strategy"), trainer.get("devices"), trainer.get("num_nodes") or 1
    strategy_name = strategy if isinstance(strategy, str) or strategy is None else type(strategy).__name__
    device_count = len(devices) if isinstance(devices, (list, tuple)) else int(devices) if str(devices).isdigit() else 1
    distributed = any(word in str(strategy_name).lower() for word in ("ddp", "fsdp", "deepspeed"))
    if distributed or device_count > 1 or int(nodes) > 1:
        raise SettingsError(f"{dashes}replicas.seeds with {dashes}trainer.strategy={strategy_name} {dashes}trainer.devices="
                            f"{devices} {dashes}trainer.num_nodes={nodes}: replicas train as one process on one device "
                            "(docs/replicas.md); drop the DDP settings, or train each seed as a DDP run of its own")


def check_replica_checkpoint(checkpoint: dict[str, Any], model: Any, ckpt_path: str, option: str = "ckpt_path",
                             subcommand: str = "fit") -> None:
    """A replicated process resumes from its own last.ckpt (with the same replicas), a single run from a single run's;
    a replica is tested or validated from its own run's checkpoints. `option`: ckpt_path as the command gave it."""
    saved, seeds = checkpoint.get("replica_seeds"), getattr(model, "seeds", None)
    if (saved is None) == (seeds is None) and (saved is None or list(saved) == list(seeds)):
        return
    if subcommand != "fit" and saved is not None:
        raise SettingsError(f"{option}={ckpt_path} holds replicas of seeds {list(saved)}, their process's resume point; "
                            f"{subcommand} a replica from its own run's checkpoints: <log_dir>/tensorboard/<name>-seed<S>"
                            "/version_<N>/checkpoints/ (its last.ckpt, or its best on val/nll)")
    held = f"replicas of seeds {list(saved)}" if saved is not None else "a single run"
    trains = f"replicas of seeds {list(seeds)}" if seeds is not None else "a single run"
    raise SettingsError(f"{option}={ckpt_path} holds {held}, this process trains {trains}: a replicated process resumes "
                        "from its own last.ckpt (<log_dir>/replicas/<name>/<time>-<pid>/checkpoints/last.ckpt) with the "
                        "replicas settings it was started with; a single run (one replica too) from its own run's "
                        "checkpoints/last.ckpt")


def replicate(run: Any, seeds: Any, arms: Any) -> Any:
    """The run description (launch/run_builder.py) of `run`'s configuration trained for every seed and arm in one process;
    `seeds` and `arms` as the user gave them (check_replica_request). Replicas train with the optimizer alone
    (models/replicas.py builds it over the stacked weights): a learning-rate scheduler is refused, not dropped."""
    dashes = "--" if run.front_end == "cli" else ""  # the options as the front end names them: --replicas, replicas
    option = f"{dashes}replicas"
    seeds, arms = check_replica_request(seeds, arms, option)
    if getattr(run.model, "scheduler_factory", None) is not None:
        raise SettingsError(f"{dashes + 'model.' if dashes else ''}scheduler with replicas: replicas train without a "
                            "learning-rate scheduler; train each seed as a run of its own to schedule its learning rate")
    if "configure_optimizers" in vars(run.model):  # LightningCLI's own --optimizer, set on this model alone
        raise SettingsError("--optimizer with --replicas: replicas train with the model's own Adam, built over their "
                            "stacked weights, which LightningCLI's --optimizer does not replace; drop it and give the "
                            "learning rate as --model.lr=LR")
    check_one_process(run.trainer, dashes)
    model_class = type(run.model)
    settings = {key: value for key, value in run.model.hparams.items() if not key.startswith("_")}  # (LightningCLI adds _class_path)
    if "cache_size" in constructor_defaults(model_class):  # JSA's cache is stacked with the weights, so it exists before training
        settings["cache_size"] = run.datamodule.num_train_examples
    free = getattr(model_class, "replica_settings", ())
    if (fixed := next((key for arm in arms for key in arm if key not in free), None)) is not None:
        raise SettingsError(f"{option}.arms sets {fixed}: replicas of one process may differ only in the settings that gate "
                            f"behaviour ({model_class.__name__}: {', '.join(free) or 'none'}); run other settings as other processes")
    models, replica_seeds = [], [seed for _ in arms for seed in seeds]
    for arm in arms:
        for seed in seeds:
            L.seed_everything(seed, workers=True, verbose=False)
            try:
                models.append(model_class(**{**settings, **arm, "test_seed": seed}, optimizer=run.model.optimizer_factory))
            except (ValueError, TypeError) as error:
                raise SettingsError(f"{option}.arms {arm}: {error}") from None
    try:
        model = Replicas(models, replica_seeds)
    except ValueError as error:  # (models/replicas.py names the settings as Hydra does)
        text = str(error) if not dashes else re.sub(r"(?<![\w.-])model\.(?=\w)", "--model.", str(error))
        raise SettingsError(text.replace("(optimizer=adam)", "(--model.optimizer=Adam)" if dashes else "(optimizer=adam)")) from None
    names = replica_names(run.name, seeds, arms)
    ckpt_path, checkpoint = run.ckpt_path, run.checkpoint
    branch = trunk_to_branch(checkpoint, seeds, arms, names) if ckpt_path else None
    saved = (ReplicaRuns.saved_names(checkpoint) or []) if ckpt_path else []
    if ckpt_path:  # before anything is written (a branch point, the resumed process's config.yaml)
        check_replica_checkpoint(branch or checkpoint, model, ckpt_path, f"{dashes}ckpt_path")
        check_fits((branch or checkpoint)["state_dict"], model.state_dict(), ckpt_path,
                   {"the first replica's run": (saved[0], names[0])} if saved and saved[0] != names[0] else None)
    # Runs of other names (a branch, or an arms process resumed with other settings) are new runs in a process of their
    # own: the checkpoint's process keeps its last.ckpt, its runs what they logged.
    renamed = branch is not None or bool(saved) and saved != list(names)
    resumed = not renamed and ckpt_path and Path(ckpt_path).parent.name == "checkpoints"  # the process writes there
    group_dir = str(Path(ckpt_path).parent.parent) if resumed else process_dir(run.log_dir, "replicas", run.name)
    if renamed:
        log.warning("%sckpt_path=%s: runs %s continue from its replicas %s as new runs (the checkpoint's keep what they "
                    "logged)", dashes, run.ckpt_path, ", ".join(names), ", ".join(saved))
    if branch is not None:  # the arms start from their seed's trunk replica
        ckpt_path = f"{group_dir}/checkpoints/branch-point.ckpt"
        save_checkpoint_file(branch, ckpt_path)
    callbacks = [c for c in run.trainer.get("callbacks") or [] if type(c).__name__ not in SINGLE_RUN_CALLBACKS]
    every = next((checkpoint_every_n_train_steps(c) for c in callbacks if isinstance(c, ModelCheckpoint)), None)
    callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
    if run.trainer.get("enable_checkpointing") is not False:
        # the process's last.ckpt, every replica's resume point: after every validation (each replica's last and best
        # are written with it) and every N training steps where the run's checkpoint callback says so
        callbacks.append(ValidationCheckpoint(dirpath=f"{group_dir}/checkpoints", save_last=True, save_top_k=0,
                                              every_n_train_steps=every, enable_version_counter=False))
    tensorboard = placed(run.log_dir, TENSORBOARD, f"{run.log_dir}/{TENSORBOARD}")  # no link out of <log_dir>
    callbacks.append(ReplicaRuns(tensorboard, names, new_logger=ReservedVersionLogger))
    return dataclasses.replace(
        run, model=model, datamodule=ReplicaData(run.datamodule, replica_seeds), name=f"{run.name}-replicas",
        trainer={**run.trainer, "callbacks": callbacks, "logger": False, "default_root_dir": group_dir},
        front_end="replicas", tensorboard=None, output_dir=group_dir, ckpt_path=ckpt_path,
        # new runs start their callbacks afresh (the checkpoint's name its runs and its process's files)
        checkpoint=branch if branch is not None else {**checkpoint, "callbacks": {}} if renamed else checkpoint)


def trunk_to_branch(checkpoint: dict[str, Any], seeds: Sequence[int], arms: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any] | None:
    """The branch checkpoint (models/replicas.py) when `checkpoint` is a replicated process's of these seeds, one
    replica each (a trunk), and this process trains other runs (several arms, or one arm of other settings, `names`):
    e.g. JSA to epoch 300 for 5 seeds, then its arms with and without the cache from there, each arm of a seed the same
    run up to the branch (the paired design), in a process and runs of its own. None: the same runs, resumed as they
    are (the process's own last.ckpt, or a trunk continued with its own settings)."""
    saved = checkpoint.get("replica_seeds")
    if saved is not None and list(saved) == list(seeds) and (len(arms) > 1 or ReplicaRuns.saved_names(checkpoint) != list(names)):
        return branch_checkpoint(checkpoint, len(arms))
    return None
