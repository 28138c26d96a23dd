"""The Hydra front end: `python train.py [KEY=VALUE ...]` (configs/; `-m` for a multirun). Composes the config,
builds the run (launch/hydra_run.py), fits, and tests the best checkpoint when `run_test=true`."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
import torch
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf

from common.files import write_file
from common.private_api import basic_sweeper_jobs
from common.registry import TRUST_VARIABLE, is_registered
from launch.checks.arguments import overrides_of
from launch.checks.configs import CONFIGS, log_dir as default_log_dir
from launch.checks.early import USER_ERROR, exit_with
from launch.checks.hydra_check import check_hydra, overrides_given
from launch.checks.hydra_config import own_targets, register_defaults
from launch.checks.received_config import hydra_folders
from launch.checks.precheck import EarlyRefusal
from launch.checks.settings import SettingsError
from launch.errors import quiet_console, user_errors_as_one_line
from launch.hydra_run import build_run, replica_tests
from launch.run_builder import running
from launch.runs.run_directory import note_existing_directories, remove_if_only_hydra_files
from models.replicas import Replicas

log = logging.getLogger(__name__)


def run(cfg: Any) -> dict[str, float]:
    """Build data, model and trainer from a composed config, fit (and test); the run's final metrics."""
    datamodule, model, trainer, ckpt_path = build_run(cfg)
    with running(trainer, log.info):
        if cfg.get("run_test") and not isinstance(model, Replicas):
            check_testable(type(model))
        note_hydra_job(trainer.logger)  # after the run's files are listed: a refused new run still leaves nothing
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
        if cfg.get("run_test") and isinstance(model, Replicas):
            for replica_data, replica, replica_trainer, best in replica_tests(cfg, model, trainer):  # as its single run's
                with running(replica_trainer, log.info, evaluating_only=True):
                    replica_trainer.test(replica, datamodule=replica_data, ckpt_path=best)
        elif cfg.get("run_test"):
            # The best checkpoint on val/nll, unless a callback put SG-MCMC's posterior mean into the model.
            # (fast_dev_run saves none: its final weights, without a word)
            use_model = any(getattr(c, "use_mean", False) for c in trainer.callbacks) or not trainer.checkpoint_callback \
                or bool(trainer.fast_dev_run)
            if not use_model and not trainer.checkpoint_callback.best_model_path:
                log.warning("run_test: no best checkpoint on val/nll (no validation ran): testing the final weights")
                use_model = True
            trainer.test(model, datamodule=datamodule, ckpt_path=None if use_model else "best")
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # The best val/nll of the run (the checkpoint callback's score: what run_test tests), the sweeper's objective.
    best = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
    if best is not None and getattr(trainer.checkpoint_callback, "monitor", None) == "val/nll":
        metrics["val/nll_best"] = float(best)
    return metrics


def check_testable(cls: type) -> None:
    """run_test reads the checkpoint fit writes, which names the model's class: one of the user's own packages only
    if trusted (common/registry.py), refused here rather than after the whole training."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if not is_registered(name, "model"):
        raise SettingsError(f"run_test=true with model._target_={name}: the test reads the run's checkpoint, which names "
                            f"this class of your own; trust its package: {TRUST_VARIABLE}={cls.__module__.split('.')[0]} "
                            "(README: Your own code)")


def note_jobs_not_run() -> None:
    """A multirun stopped by a signal ends with this job: one line naming the jobs after it, which do not run (the basic
    sweeper and launcher's order; another sweeper picks its jobs as it goes, another launcher runs them elsewhere)."""
    hydra_config = HydraConfig.get()
    choices = hydra_config.runtime.choices
    if hydra_config.mode != RunMode.MULTIRUN or (choices.get("hydra/sweeper"), choices.get("hydra/launcher")) != ("basic", "basic"):
        return
    given = overrides_given(sys.argv[1:])
    keys = {override.lstrip("+~").split("=", 1)[0] for override in given}
    params = [f"{key}={value}" for key, value in (hydra_config.sweeper.get("params") or {}).items() if key not in keys]
    left = basic_sweeper_jobs([*params, *given])[hydra_config.job.num + 1:]
    if left:
        log.warning("the multirun stopped in job #%d: its %d later job(s) did not run: %s", hydra_config.job.num, len(left),
                    "; ".join(" ".join(job) for job in left))


def note_hydra_job(logger: Any) -> None:
    """<run>/hydra_job.yaml: the Hydra job (and multirun) that made the run, so that `benchmarks.compare` reports the
    runs of one multirun together. Written once: a resumed run keeps its origin. Absolute paths; the multirun is the
    parent of the job's output directory (configs/train.yaml: hydra.sweep.subdir is one level)."""
    if not getattr(logger, "log_dir", None) or rank_zero_only.rank != 0 or not HydraConfig.initialized():
        return  # no logger, or fast_dev_run's DummyLogger (no directory)
    path, hydra = Path(logger.log_dir) / "hydra_job.yaml", HydraConfig.get()
    # a link (dangling too) is never written through; a config composed in Python (tests) has no Hydra job
    if path.exists() or path.is_symlink() or OmegaConf.is_missing(hydra.runtime, "output_dir"):
        return
    output_dir = Path(hydra.runtime.output_dir).resolve()
    multirun = {"sweep_dir": str(output_dir.parent), "job_num": hydra.job.num} if hydra.mode == RunMode.MULTIRUN else {}
    if isinstance(logger, CSVLogger):  # its writer started first: started in a folder that holds a file, it warns of
        logger.experiment  # deleting it (TensorBoard's is not: under ddp_spawn, rank 0 would write a second event file)
    job = {"output_dir": str(output_dir), **multirun}
    path.parent.mkdir(parents=True, exist_ok=True)  # a CSV run's directory is made at its first write, not reserved
    write_file(path, yaml.safe_dump(job))


def main() -> None:
    # The Trainer's settings, known once Lightning is imported, before Hydra composes (its struct mode refuses an
    # unknown one in several lines); and the settings of the classes one's own configs build, importable here.
    folders = hydra_folders(sys.argv[1:])
    try:
        check_hydra(sys.argv[1:], trainer_names_only=not any(own_targets(kind, folders) for kind in ("model", "data")))
    except EarlyRefusal as refusal:
        exit_with(str(refusal))
    register_defaults(folders)
    given = dict(overrides_of(sys.argv[1:])).get("log_dir")  # before Hydra makes its run directory there
    note_existing_directories(given if given and "${" not in given else default_log_dir())
    # The jobs a launcher starts as new processes (hydra/launcher=slurm, slurm_local: `python -m submitit...` from the
    # working directory) import the collection's modules as this process does, from wherever it was started.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CONFIGS.parent) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(CONFIGS.parent), *paths])
    # ${pid:} in configs/train.yaml's run and sweep directories: this process's id, also where a parallel launcher's
    # jobs resolve it in their own processes (Hydra hands them its resolvers), so that they share the sweep directory.
    launching_pid = os.getpid()
    OmegaConf.register_new_resolver("pid", lambda: launching_pid, replace=True)
    # configs/hydra/launcher/parallel.yaml's n_jobs: one job per GPU where there are several, else 2
    OmegaConf.register_new_resolver("parallel_jobs", lambda: torch.cuda.device_count() if torch.cuda.device_count() > 1 else 2,
                                    replace=True)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # Optuna's storage imports it: a line per plugin it sets up

    @hydra.main(version_base="1.3", config_path=str(CONFIGS), config_name="train")
    def _main(cfg: Any) -> float:
        """One run; returns its best val/nll, the objective of hydra/sweeper=tune (Optuna minimizes it)."""
        quiet_console(hydra=True)
        tuning = "optuna" in str(HydraConfig.get().sweeper.get("_target_", "")).lower()
        try:
            with user_errors_as_one_line():
                try:
                    metrics = run(cfg)
                except FloatingPointError as diverged:
                    if not tuning:
                        raise
                    # A trial whose loss diverged (its lr too high, say) is the worst value, and the study goes on.
                    log.warning("this trial diverged and counts as val/nll = inf: %s", diverged)
                    return float("inf")
        except SystemExit as stop:
            if stop.code == USER_ERROR and rank_zero_only.rank == 0:  # a setting refused: the output directory Hydra made
                # holds nothing of a run (rank 0's: the other ranks of a distributed run share it)
                remove_if_only_hydra_files(HydraConfig.get().runtime.output_dir)
            if stop.code in (130, 143) and rank_zero_only.rank == 0:
                note_jobs_not_run()
            raise  # 130/143 (Ctrl-C, SIGTERM): a stopped run keeps its config.yaml and train.log
        return metrics.get("val/nll_best", metrics.get("val/nll", float("nan")))  # NaN: no validation ran (a failed trial)

    _main()


