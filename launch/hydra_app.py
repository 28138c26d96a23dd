"""The Hydra front end: `python train.py [KEY=VALUE ...]` (configs/; `-m` for a multirun). Composes the config,
reads from it and from Hydra (the command line's overrides, an experiment's shared settings, a multirun's swept
settings and launcher) the run's description, has launch/run_builder.py build it, fits, and tests the best checkpoint
when `run_test=true`."""

from __future__ import annotations

import dataclasses
import logging
import os
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import hydra
import torch
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import get_class
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf, open_dict

from callbacks.replica_runs import ReplicaRuns
from checkpoints.loader import load_checkpoint_file
from common.files import write_file
from common.private_api import basic_sweeper_jobs
from common.registry import TRUST_VARIABLE, is_registered, qualified_name
from launch.checks.arguments import overrides_of
from launch.checks.configs import CONFIGS, config_targets, log_dir as default_log_dir
from launch.checks.early import USER_ERROR
from launch.checks.hydra_check import check_after_imports, overrides_given, parsed_override
from launch.checks.hydra_config import register_defaults
from launch.checks.received_config import hydra_folders
from launch.checks.settings import SettingsError, check_composed, with_fix
from launch.errors import divergence_line, diverged, quiet_console, user_errors_as_one_line
from launch.run_builder import RunDescription, build, built, resumed_seed, resumed_settings, running
from launch.runs.run_directory import SCORING_SETTINGS, note_existing_directories, remove_if_only_hydra_files
from launch.runs.worker_slots import claim_slot
from models.replicas import Replicas

log = logging.getLogger(__name__)


def run(cfg: Any) -> dict[str, float]:
    """Check a composed config's settings, build data, model and trainer from it, fit (and test); the run's final
    metrics."""
    check_composed(cfg, model_settings(cfg))  # every setting, before anything is seeded, built or written
    datamodule, model, trainer, ckpt_path = build_run(cfg)
    with running(trainer, log.info):
        # run_test reads the checkpoint fit writes, which names the model's class: one of the user's own packages only
        # if trusted (common/registry.py), refused here rather than after the whole training
        name = qualified_name(type(model))
        if cfg.get("run_test") and not isinstance(model, Replicas) and not is_registered(name, "model"):
            raise SettingsError(f"run_test=true with model._target_={name}: the test reads the run's checkpoint, which "
                                f"names this class of your own; trust its package: {TRUST_VARIABLE}={name.split('.')[0]} "
                                "(README: Your own code)")
        note_hydra_job(trainer.logger)  # after the run's files are listed: a refused new run still leaves nothing
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
        if cfg.get("run_test") and isinstance(model, Replicas):
            for replica_data, replica, replica_trainer, best in replica_tests(cfg, model, trainer):  # as its single run's
                with running(replica_trainer, log.info, evaluating_only=True):
                    replica_trainer.test(replica, datamodule=replica_data, ckpt_path=best)
        elif cfg.get("run_test"):
            # The best checkpoint on val/nll, unless a callback put SG-MCMC's posterior mean into the model.
            # (fast_dev_run saves none: its final weights, without a word)
            use_model = (any(getattr(c, "use_mean", False) for c in trainer.callbacks) or not trainer.checkpoint_callback
                         or bool(trainer.fast_dev_run))
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


def run_trial(cfg: Any, tuning: bool) -> dict[str, float]:
    """`run`'s metrics; under an Optuna sweep (`tuning`), a trial that diverged (its lr too high, say: launch/errors.py
    `diverged`) is the worst value, val/nll = inf, and the study goes on."""
    try:
        return run(cfg)
    except Exception as error:
        if not (tuning and diverged(error)):
            raise
        log.warning("this trial diverged and counts as val/nll = inf: %s", divergence_line(error))
        return {"val/nll": float("inf")}


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


def model_settings(cfg: Any) -> dict[str, Any]:
    """cfg.model as a dict, with an experiment's shared settings applied unless the command line sets them for
    the model: `discrete_latent` (experiment=compare) to a model with a discrete latent (JSA, DiscreteVAE,
    VQ-VAE), then `per_model.<the model's config name>` (experiment=jsa_paper: L for JSA, K for RWS, ...)."""
    settings = OmegaConf.to_container(cfg.model, resolve=True)
    given = {key.removeprefix("model.") for key in command_line_overrides() if key.startswith("model.")}
    shared = cfg.get("discrete_latent")
    choice = HydraConfig.get().runtime.choices.get("model") if HydraConfig.initialized() else None
    for extra in (shared if shared and get_class(settings["_target_"]).has_discrete_latent else None,
                  (cfg.get("per_model") or {}).get(choice) if choice is not None else None):
        if extra:
            settings.update({k: v for k, v in OmegaConf.to_container(extra, resolve=True).items() if k not in given})
    return settings


def command_line_overrides() -> dict[str, str]:
    """KEY -> VALUE of the command line's overrides of this (multirun) job, e.g. {"model.lr": "0.01"}."""
    if not HydraConfig.initialized():
        return {}
    pairs = (o.lstrip("+~").split("=", 1) for o in HydraConfig.get().overrides.task)
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def swept_settings(cfg: Any) -> dict[str, str]:
    """In a multirun, every swept model or data setting (and the seed) that the model's key settings do not already
    show, with its value in this job: the run's name shows them (launch/runs/run_directory.py). Swept: given as a list or range
    on the command line (a=1,2 / range(...); a word that is no override, in a launcher's job process the process's own
    arguments, sweeps nothing), or in the config's hydra.sweeper.params."""
    if not (HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN):
        return {}
    model_class = get_class(cfg.model._target_)
    shown = {*SCORING_SETTINGS, *(f"model.{key}" for key in (*model_class.run_tag_keys, *model_class.estimator_settings))}
    swept = set(HydraConfig.get().sweeper.get("params") or {}) | {
        parsed.key_or_group for parsed in map(parsed_override, overrides_given(sys.argv[1:]))
        if parsed is not None and parsed.is_sweep_override()}
    return {key: value for key, value in command_line_overrides().items()
            if key in swept and key not in shown and (key.startswith(("model.", "data.")) or key == "seed")}


def parallel_job_settings(cfg: Any) -> dict[str, Any]:
    """A job of a multirun whose launcher runs several at once (configs/hydra/launcher/): joblib's n_jobs jobs share the
    machine, so each gets its own GPU where there are several (launch/runs/worker_slots.py) and CPU cores // n_jobs
    torch threads; a submitit job gets cpus_per_task threads. The basic launcher's jobs, one at a time, keep torch's.
    Returns the trainer settings this changes (the devices), and sets torch's threads."""
    hydra_job = HydraConfig.get() if HydraConfig.initialized() else None
    launcher = hydra_job.launcher if hydra_job is not None and hydra_job.mode == RunMode.MULTIRUN else {}
    settings: dict[str, Any] = {}
    threads, shared = None, ""
    if launcher.get("n_jobs") is not None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        n_jobs = int(launcher.n_jobs) if int(launcher.n_jobs) > 0 else max(1, cores + 1 + int(launcher.n_jobs))  # joblib's -1: all
        threads, shared = max(1, cores // n_jobs), f"{cores} CPU cores // n_jobs={n_jobs}"
        gpus = torch.cuda.device_count() if str(cfg.trainer.get("accelerator")) in ("auto", "gpu", "cuda") else 0
        if gpus > 1 and str(cfg.trainer.get("devices")) == "1":  # one device per job (not a DDP job of several)
            slot = claim_slot(Path(hydra_job.sweep.dir) / ".worker-slots", n_jobs)
            device = (hydra_job.job.num if slot is None else slot) % gpus  # no slot (no flock): the job number
            settings["devices"] = [device]
            shared += f"; cuda:{device} of {gpus} GPUs" + ("" if slot is None else f" (worker slot {slot})")
    elif launcher.get("cpus_per_task"):
        threads, shared = int(launcher.cpus_per_task), "hydra.launcher.cpus_per_task"
    if threads is not None:
        torch.set_num_threads(threads)
        log.info("parallel job %s: torch threads %d (%s)", hydra_job.job.num, threads, shared)
    return settings


def base_name(cfg: Any) -> str:
    """Hydra's run_name, <model choice>-<data choice> unless given; where the command builds a class of one's own in
    place of the one its configs/ choice builds (model=vae model._target_=mypkg.MyVAE), that class's config_name in
    the choice's place, as LightningCLI names the run."""
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    if cfg.run_name != f"{choices.get('model')}-{choices.get('data')}":  # given, or not Hydra's
        return cfg.run_name
    parts = []
    for kind in ("model", "data"):
        target, chosen = config_targets(kind).get(choices.get(kind)), pkgutil.resolve_name(cfg[kind]._target_)
        own = target is not None and pkgutil.resolve_name(target) is not chosen
        parts.append(chosen.config_name if own else choices.get(kind))
    return "-".join(parts)


def describe_run(cfg: Any) -> RunDescription:
    """The run of a composed config, as launch/run_builder.py builds it: the settings of its data module, model (an
    experiment's shared settings applied), optimizer, scheduler, callbacks, logger and trainer (a parallel job's
    device), with what Hydra knows beside them: the command line's settings, a multirun's swept ones, the run's base
    name and Hydra's run directory; and the checkpoint to start from, read once (`run` checks the settings first), with
    the seed it was trained with where the command line gives none (launch/run_builder.py: resumed_seed)."""
    def plain(key: str) -> Any:  # a group's settings as plain values, None where the config has none
        return OmegaConf.to_container(cfg[key], resolve=True) if cfg.get(key) else None

    hydra_dir = OmegaConf.select(HydraConfig.get(), "runtime.output_dir", default=None) if HydraConfig.initialized() else None
    ckpt_path, given = cfg.get("ckpt_path"), frozenset(command_line_overrides())
    checkpoint = load_checkpoint_file(ckpt_path) if ckpt_path else None
    model, data, optimizer = model_settings(cfg), plain("data"), plain("optimizer")
    for group, settings in (("model", model), ("data", data)) if checkpoint is not None else ():  # as LightningCLI's
        # `fit --model=RWS --ckpt_path=...`: `model=rws ckpt_path=...` resumes a run of model.num_samples=5 with 5
        own = {key.split(".", 1)[1] for key in given if key.startswith(f"{group}.")}
        settings.update(resumed_settings(checkpoint, group, get_class(settings["_target_"]), own, ckpt_path))
    # The model's learning rate as the run takes it (a checkpoint's, an experiment's); an optimizer group with a rate of
    # its own (SG-MCMC's step size) resumes with the checkpoint's, which its model recorded, where none is given.
    resumed_rate = checkpoint is not None and not {"optimizer.lr", "model.lr"} & given
    if optimizer and (OmegaConf.to_container(cfg.optimizer, resolve=False).get("lr") == "${model.lr}" or resumed_rate):
        optimizer["lr"] = model["lr"]
    return RunDescription(
        model=model, datamodule=data, name=base_name(cfg), log_dir=cfg.log_dir,
        front_end="hydra", tensorboard=None, output_dir=hydra_dir, ckpt_path=ckpt_path, checkpoint=checkpoint,
        trainer={**plain("trainer"), "callbacks": plain("callbacks") or {}, **parallel_job_settings(cfg)},
        ddp_timeout_s=cfg.ddp_timeout_s, optimizer=optimizer, scheduler=plain("scheduler"),
        logger=plain("logger"), seed=resumed_seed(cfg.seed, "seed" in given, checkpoint), given=given,
        swept=swept_settings(cfg), replicas=plain("replicas"))


def replica_tests(cfg: Any, replicas: Any, trainer: Any) -> Iterator[tuple[Any, Any, Any, str | None]]:
    """run_test=true after a replicated fit: each replica's test as its single run's run_test (its seed, and its model
    settings where they differ from the config's: its arm's, JSA's cache size), from its own best checkpoint on val/nll
    (its last when no validation ran, as a single run tests its final weights), logged into its own run:
    (datamodule, model, trainer, checkpoint) each."""
    (runs,) = [c for c in trainer.callbacks if isinstance(c, ReplicaRuns)]
    for r, seed in enumerate(replicas.seeds):
        own = {key: value for key, value in replicas.settings[r].hparams.items()
               if key in cfg.model and isinstance(value, (bool, int, float, str, type(None))) and value != cfg.model[key]}
        ckpt_path = runs.best_files[r]
        if ckpt_path is None:
            ckpt_path = str(Path(runs.loggers[r].log_dir) / "checkpoints" / "last.ckpt")
            log.warning("run_test: replica %s had no validation before training stopped, so no best checkpoint on val/nll: "
                        "testing its final weights (%s)", runs.names[r], ckpt_path)
        single = cfg.copy()
        with open_dict(single):
            single.replicas, single.seed, single.ckpt_path = None, seed, ckpt_path
            single.model.update(own)
        datamodule, model, test_trainer, _ = build_run(single)
        test_trainer.fit_loop.load_state_dict(trainer.fit_loop.state_dict())  # logged where training ended, as a single run's
        yield datamodule, model, test_trainer, ckpt_path


def data_and_model(cfg: Any, settings: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """The data module and the model of a composed config as its run builds them, the run's seed set first (the model's
    `settings`: model_settings(cfg) unless given); nothing is written."""
    described = describe_run(cfg)
    run = built(described if settings is None else dataclasses.replace(described, model=settings))
    return run.datamodule, run.model


def build_run(cfg: Any) -> tuple[Any, Any, Any, str | None]:
    """(datamodule, model, trainer, ckpt_path) of a composed config: its description, built (launch/run_builder.py); a
    refused value that an interpolation gave named with it (scheduler=cosine's T_max: ${trainer.max_epochs})."""
    try:
        return build(describe_run(cfg))
    except SettingsError as error:
        raise with_fix(error, re.match(r"\w*", str(error))[0], cfg) from None


def main() -> None:
    # The Trainer's settings, known once Lightning is imported, before Hydra composes (its struct mode refuses an
    # unknown one in several lines); and the settings of the classes one's own configs build, importable here.
    with user_errors_as_one_line():
        check_after_imports(sys.argv[1:])
    register_defaults(hydra_folders(sys.argv[1:]))
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
                metrics = run_trial(cfg, tuning)
        except SystemExit as stop:
            # A setting refused: the output directory Hydra made holds nothing of a run (rank 0's: the other ranks of a
            # distributed run share it). A run stopped by a NaN trained: its config and train.log stay beside its run.
            if stop.code == USER_ERROR and rank_zero_only.rank == 0 and not diverged(stop.__context__):
                # (a multirun's sweep folder too where its jobs run one at a time: no later job runs after a refusal)
                hydra_config = HydraConfig.get()
                remove_if_only_hydra_files(hydra_config.runtime.output_dir, hydra_config.mode == RunMode.MULTIRUN
                                           and hydra_config.runtime.choices.get("hydra/launcher") == "basic")
            if stop.code in (130, 143) and rank_zero_only.rank == 0:
                note_jobs_not_run()
            raise  # 130/143 (Ctrl-C, SIGTERM): a stopped run keeps its config.yaml and train.log
        return metrics.get("val/nll_best", metrics.get("val/nll", float("nan")))  # NaN: no validation ran (a failed trial)

    _main()


