"""A composed Hydra config -> the run's description (launch/run_builder.py), and through the builder both front ends
call, its data module, model, trainer and the checkpoint fit starts from.

Every value is checked against what its class declares before anything is built (launch/checks/settings.py:
check_composed; LightningCLI's parser does the same check on its side), and the rules of launch/run_builder.py apply.
"""

from __future__ import annotations

import logging
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any, Iterator

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, InstantiationException
from hydra.types import RunMode
from hydra.utils import get_class, instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import OmegaConf, open_dict

from callbacks.replica_runs import ReplicaRuns
from checkpoints.loader import load_checkpoint_file
from common.registry import qualified_name
from common.signatures import constructor_defaults
from configs.settings import MODEL_ARGUMENTS
from launch.checks.configs import config_targets
from launch.checks.hydra_check import overrides_given
from launch.checks.settings import SettingsError, check_composed
from launch.run_builder import RunDescription, apply_rules, build_trainer, resumed_seed
from launch.run_layout import LOGGER_FOLDERS, TENSORBOARD, logger_root, placed, process_dir, run_name
from launch.runs.replicas import replicate
from launch.runs.worker_slots import claim_slot

log = logging.getLogger(__name__)


def model_settings(cfg: Any, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
    """cfg.model as a dict, with an experiment's shared settings applied unless the command line sets them for
    the model: `discrete_latent` (experiment=compare) to a model with a discrete latent (JSA, DiscreteVAE,
    VQ-VAE), then `per_model.<the model's config name>` (experiment=jsa_paper: L for JSA, K for RWS, ...).
    Given the `checkpoint` of a run of this model class, its saved settings come under those the command line gives
    (`model=rws ckpt_path=...` resumes a run of model.num_samples=5 with 5, as LightningCLI's `fit --model=RWS
    --ckpt_path=...` does); another model's checkpoint is left to the builder's refusal."""
    settings = OmegaConf.to_container(cfg.model, resolve=True)
    given = {key.removeprefix("model.") for key in command_line_overrides() if key.startswith("model.")}
    shared = cfg.get("discrete_latent")
    choice = HydraConfig.get().runtime.choices.get("model") if HydraConfig.initialized() else None
    for extra in (shared if shared and get_class(settings["_target_"]).has_discrete_latent else None,
                  (cfg.get("per_model") or {}).get(choice) if choice is not None else None):
        if extra:
            settings.update({k: v for k, v in OmegaConf.to_container(extra, resolve=True).items() if k not in given})
    if checkpoint is None:
        return settings
    try:
        cls = pkgutil.resolve_name(settings["_target_"])
    except (ImportError, AttributeError, ValueError):
        return settings  # refused by the checks, naming the class
    if checkpoint.get("model_class") == qualified_name(cls):
        names = set(constructor_defaults(cls)) - set(MODEL_ARGUMENTS) - given
        settings.update({k: v for k, v in (checkpoint.get("hyper_parameters") or {}).items() if k in names})
    return settings


def command_line_overrides() -> dict[str, str]:
    """KEY -> VALUE of the command line's overrides of this (multirun) job, e.g. {"model.lr": "0.01"}."""
    if not HydraConfig.initialized():
        return {}
    pairs = (o.lstrip("+~").split("=", 1) for o in HydraConfig.get().overrides.task)
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def build(cfg: Any, settings: dict[str, Any] | None = None, seed: int | None = None) -> tuple[Any, Any]:
    """The data module and the model of a composed config (the model's `settings`: model_settings(cfg) unless given;
    the run's `seed`: cfg.seed unless given); the model's likelihood and backbone follow the data unless set."""
    data_settings = OmegaConf.to_container(cfg.data, resolve=True)
    settings = model_settings(cfg) if settings is None else settings
    overrides = command_line_overrides()
    apply_rules({"data": data_settings, "model": settings},
                {"data": get_class(data_settings["_target_"]), "model": get_class(settings["_target_"])},
                cfg.seed if seed is None else seed, "seed" in overrides, lambda group, key: f"{group}.{key}" in overrides)
    datamodule = constructed(data_settings, "data")
    optimizer = instantiate(cfg.optimizer) if cfg.get("optimizer") else None
    scheduler = instantiate(cfg.scheduler) if cfg.get("scheduler") else None  # the model's configure_optimizers builds both
    model = constructed(settings, "model", data_shape=list(datamodule.image_shape), optimizer=optimizer, scheduler=scheduler)
    return datamodule, model


def constructed(settings: dict[str, Any], group: str, **kwargs: Any) -> Any:
    """The object `settings` describe; a refusal of its constructor (a value out of range, a combination of settings)
    as one line naming the group and the class: "data (MNISTDataModule): seed must be ...", "callbacks.model_checkpoint
    (ValidationCheckpoint): Invalid value for save_top_k=-5 ..."."""
    try:
        return instantiate(settings, _convert_="all", **kwargs)
    except InstantiationException as error:
        if not isinstance(error.__cause__, (ValueError, TypeError, MisconfigurationException)):
            raise
        raise SettingsError(f"{group} ({settings['_target_'].rsplit('.', 1)[-1]}): {error.__cause__}") from None


def is_swept(override: str) -> bool:
    """Whether a command-line override sweeps (a=1,2, range(...), choice(...)); a word that is no override (in a
    launcher's job process, the process's own arguments: submitit's folder) sweeps nothing."""
    try:
        return OverridesParser.create().parse_override(override).is_sweep_override()
    except (HydraException, TypeError):  # Hydra's grammar refusal (a TypeError where Hydra fails to build it)
        return False


def swept_settings(cfg: Any) -> dict[str, str]:
    """In a multirun, every swept model or data setting (and the seed) that the model's key settings do not already
    show, with its value in this job: the run's name shows them (launch/run_layout.py). Swept: given as a list or range
    on the command line (a=1,2 / range(...)), or in the config's hydra.sweeper.params."""
    if not (HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN):
        return {}
    model_class = get_class(cfg.model._target_)
    shown = {f"model.{key}" for key in (*model_class.run_tag_keys, *model_class.estimator_settings)}  # already in the tag
    swept = set(HydraConfig.get().sweeper.get("params") or {}) | {
        override.lstrip("+~").split("=", 1)[0].split("@", 1)[0] for override in overrides_given(sys.argv[1:]) if is_swept(override)}
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


def chosen_logger(cfg: Any, name: str) -> tuple[Any, dict[str, Any] | None]:
    """The run's logger as the logger group chose it, placed by the run's layout (launch/run_layout.py): (False,
    its settings) for TensorBoard, whose run the builder makes; (a CSVLogger of run `name`, None) for logger=csv;
    (False, None) for logger=none (check_composed refuses a class the layout cannot place)."""
    settings = OmegaConf.to_container(cfg.logger, resolve=True) if cfg.get("logger") else {}
    if not settings:
        return False, None
    target = settings.pop("_target_")
    if LOGGER_FOLDERS[target] == TENSORBOARD:
        return False, settings
    placed(cfg.log_dir, LOGGER_FOLDERS[target], f"{logger_root(cfg.log_dir, target)}/{name}")  # no link out of <log_dir>
    return get_class(target)(save_dir=logger_root(cfg.log_dir, target), name=name, **settings), None


def base_name(cfg: Any, model: Any, datamodule: Any) -> str:
    """Hydra's run_name, <model choice>-<data choice> unless given; where the command builds a class of one's own in
    place of the one its configs/ choice builds (model=vae model._target_=mypkg.MyVAE), that class's config_name in
    the choice's place, as LightningCLI names the run."""
    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    if cfg.run_name != f"{choices.get('model')}-{choices.get('data')}":  # given, or not Hydra's
        return cfg.run_name
    parts = []
    for kind, built in (("model", model), ("data", datamodule)):
        target = config_targets(kind).get(choices.get(kind))
        parts.append(choices.get(kind) if target is None or pkgutil.resolve_name(target) is type(built) else built.config_name)
    return "-".join(parts)


def describe_run(cfg: Any) -> RunDescription:
    """The run of a composed config (launch/run_builder.py's RunDescription), checked, seeded and built but for its
    trainer."""
    checkpoint = load_checkpoint_file(cfg.ckpt_path) if cfg.get("ckpt_path") else None  # read once, handed on
    settings = model_settings(cfg, checkpoint)  # the model's, as built: checked with every other setting
    try:
        check_composed(cfg, settings)
    except SettingsError as error:  # a setting given beside the checkpoint's (model.use_cache=false with its cache_size)
        resumed = " (a resumed run takes its checkpoint's model settings where the command line gives none)"
        raise SettingsError(f"{error}{resumed if checkpoint is not None else ''}") from None
    if cfg.model.get("compile"):  # each job of a multirun compiles its own networks, under Dynamo's recompile_limit
        torch.compiler.reset()
    seed = resumed_seed(cfg.seed, "seed" in command_line_overrides(), checkpoint)
    L.seed_everything(seed, workers=True)
    datamodule, model = build(cfg, settings, seed)
    trainer = instantiate(cfg.trainer, _partial_=True, _convert_="all")  # lightning.Trainer and its settings, built
    callbacks = [constructed(settings, f"callbacks.{name}") for name, settings in
                 (OmegaConf.to_container(cfg.callbacks, resolve=True) if cfg.get("callbacks") else {}).items()]
    name = run_name(base_name(cfg, model, datamodule), model.run_tag, swept_settings(cfg))
    logger, tensorboard = chosen_logger(cfg, name)
    hydra_dir = OmegaConf.select(HydraConfig.get(), "runtime.output_dir", default=None) if HydraConfig.initialized() else None
    run = RunDescription(
        model=model, datamodule=datamodule, name=name, log_dir=cfg.log_dir, front_end="hydra", tensorboard=tensorboard,
        trainer={**trainer.keywords, "callbacks": callbacks, "logger": logger, **parallel_job_settings(cfg)},
        trainer_class=trainer.func, ckpt_path=cfg.get("ckpt_path"), checkpoint=checkpoint, ddp_timeout_s=cfg.ddp_timeout_s,
        # ~logger: the checkpoints go to Hydra's run directory (beside its config and log), not the working directory;
        # outside a Hydra app (a config composed in a test), one of the same layout. Placed: no link out of <log_dir>.
        output_dir=placed(cfg.log_dir, "hydra", hydra_dir) if hydra_dir else process_dir(cfg.log_dir, "hydra", cfg.run_name))
    replicas = OmegaConf.to_container(cfg.replicas, resolve=True) if cfg.get("replicas") else {}
    if replicas.get("seeds") is None:
        return run
    if logger:  # each replica's run is a TensorBoard run of its own (docs/replicas.md)
        raise SettingsError(f"logger={HydraConfig.get().runtime.choices.get('logger')} with replicas: each replica logs to a "
                            "TensorBoard run of its own; use logger=tensorboard (or logger=none)")
    return replicate(run, replicas["seeds"], replicas.get("arms"))


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
        yield datamodule, model, test_trainer, ckpt_path


def build_run(cfg: Any) -> tuple[Any, Any, Any, str | None]:
    """(datamodule, model, trainer, ckpt_path) of a composed config: its description, built (launch/run_builder.py)."""
    run = describe_run(cfg)
    trainer, ckpt_path = build_trainer(run)
    return run.datamodule, run.model, trainer, ckpt_path
