"""Train, validate and test the collection's models. Two front ends, one set of classes:

Hydra (config tree in configs/, `key=value` overrides, `-m` multirun):
    python train.py model=vae data=mnist trainer.max_epochs=5
    python train.py -m model=vae data=mnist,cifar10

LightningCLI (jsonargparse; subcommands fit/validate/test/predict):
    python train.py fit --model=VAE --data=MNISTDataModule --trainer.max_epochs=1
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, NoReturn

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
CLI_SUBCOMMANDS = ("fit", "validate", "test", "predict")
# Lightning 2.6 on torch 2.14 warns about its own use of a torch pytree API on every step.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")

USAGE = """\
usage: python train.py [KEY=VALUE ...]             (Hydra; -m for multirun)
       python train.py {{fit,validate,test,predict}} [--OPTION VALUE ...]  (LightningCLI)

Hydra, with the config tree in configs/ (defaults: model=jsa data=mnist):
  python train.py model=vae data=mnist trainer.max_epochs=5
  python train.py -m model=vae data=mnist,cifar10          # one run per combination
  python train.py -m experiment=compare data=mnist         # all models side by side, then:
  python -m benchmarks.compare logs/tensorboard            # the comparison report (table and plots)
  python train.py model=vae optimizer=sgld optimizer.lr=1e-7 callbacks=sgmcmc   # sample the weights (SG-MCMC)
  python train.py ckpt_path=PATH/last.ckpt                 # resume, in the same TensorBoard run
  config groups: {groups}
  python train.py --cfg job      # prints the composed config (every default); --hydra-help for Hydra's options

LightningCLI, the same classes and defaults through jsonargparse (defaults: --model=JSA --data=MNISTDataModule):
  python train.py fit --model=VAE --data=MNISTDataModule --trainer.max_epochs=1
  python train.py test --model=VAE --ckpt_path=PATH/last.ckpt   # logs into the run that wrote the checkpoint
  python train.py fit --help     # lists every option of model, data and trainer
  python train.py fit --config configs/cli/jsa_paper.yaml   # the JSA paper's protocol, from a config file

TensorBoard: tensorboard --logdir logs/tensorboard
"""


def _config_groups() -> str:
    groups = []
    # cli/ holds LightningCLI's config files, hydra/ Hydra's own launcher and sweeper groups (hydra/launcher=joblib).
    for group in sorted(p for p in CONFIG_DIR.iterdir() if p.is_dir() and p.name not in ("cli", "hydra")):
        choices = ",".join(sorted(f.stem for f in group.glob("*.yaml")))
        groups.append(f"{group.name}={{{choices}}}")
    return "  ".join(groups)


# ---- what both front ends share ------------------------------------------------------------


def quiet_console(hydra: bool) -> None:
    """One line per message: no advertising tips; under Hydra, Lightning's messages go through Hydra's
    logging handlers only (Lightning adds its own console handler when imported before Hydra's are set)."""
    import logging

    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda record: "💡 Tip" not in record.getMessage())
    if hydra:
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            lightning_logger = logging.getLogger(name)
            for handler in list(lightning_logger.handlers):
                lightning_logger.removeHandler(handler)
            lightning_logger.propagate = True


def without_progress_bar(callbacks: list[Any], enabled: bool) -> list[Any]:
    """The callbacks without the progress bar when the trainer's is switched off (Lightning refuses both)."""
    from lightning.pytorch.callbacks import ProgressBar

    return callbacks if enabled else [c for c in callbacks if not isinstance(c, ProgressBar)]


# ---- Hydra ------------------------------------------------------------------------------------


def register_defaults() -> None:
    """Store every registered model's and data module's constructor defaults as Hydra configs
    `model_defaults/<Class>` and `data_defaults/<Class>` (and lightning.Trainer's as `trainer_defaults/Trainer`),
    which configs/model/*.yaml, configs/data/*.yaml and configs/trainer/default.yaml extend: the class signatures are the one source of defaults, `--cfg job` shows them, and
    `model.NAME=VALUE` needs no `+`."""
    from hydra.core.config_store import ConfigStore

    import datamodules
    import models
    from callbacks.hparams import constructor_defaults

    store = ConfigStore.instance()
    from launch.schema import NOT_SETTINGS  # constructor arguments the front ends pass themselves

    groups = (("model_defaults", models, models.LatentVariableModel, NOT_SETTINGS["model"]),
              ("data_defaults", datamodules, datamodules.ImageDataModule, ()))
    for group, package, base, skip in groups:
        for name in package.__all__:
            cls = getattr(package, name)
            if isinstance(cls, type) and issubclass(cls, base):
                store.store(group=group, name=name, node={k: v for k, v in constructor_defaults(cls).items() if k not in skip})
    # Every lightning.Trainer argument, so that trainer.NAME=VALUE works for all of them (logger and callbacks
    # come from their own config groups).
    from lightning import Trainer

    trainer_settings = {k: v for k, v in constructor_defaults(Trainer).items() if k not in NOT_SETTINGS["trainer"]}
    store.store(group="trainer_defaults", name="Trainer", node=trainer_settings)


def model_settings(cfg: Any) -> dict[str, Any]:
    """cfg.model as a dict, with an experiment's shared settings applied unless the command line sets them for
    the model: `discrete_latent` (experiment=compare) to a model with a discrete latent (JSA, DiscreteVAE,
    VQ-VAE), then `per_model.<the model's config name>` (experiment=jsa_paper: L for JSA, K for RWS, ...)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    settings = OmegaConf.to_container(cfg.model, resolve=True)
    given = {key.removeprefix("model.") for key in command_line_overrides() if key.startswith("model.")}
    shared = cfg.get("discrete_latent")
    if shared and get_class(settings["_target_"]).has_discrete_latent:
        settings.update({k: v for k, v in OmegaConf.to_container(shared, resolve=True).items() if k not in given})
    choice = HydraConfig.get().runtime.choices.get("model") if HydraConfig.initialized() else None
    own = (cfg.get("per_model") or {}).get(choice) if choice is not None else None
    if own:
        settings.update({k: v for k, v in OmegaConf.to_container(own, resolve=True).items() if k not in given})
    return settings


def command_line_overrides() -> dict[str, str]:
    """KEY -> VALUE of the command line's overrides of this (multirun) job, e.g. {"model.lr": "0.01"}."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    pairs = (o.lstrip("+~").split("=", 1) for o in HydraConfig.get().overrides.task)
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def run_name(cfg: Any, run_tag: str) -> str:
    """<model>-<data>-<the model's key settings>, plus, in a multirun, every swept model or data setting
    that the key settings do not already show (e.g. jsa-mnist-mlp-K10-L20-lr0.01)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from hydra.utils import get_class

    name = f"{cfg.run_name}-{run_tag}" if run_tag else cfg.run_name
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        shown = {f"model.{key}" for key in get_class(cfg.model._target_).run_tag_keys}  # already in the tag
        swept = swept_keys()
        for key, value in command_line_overrides().items():
            if key in swept and key not in shown and (key.startswith(("model.", "data.")) or key == "seed"):
                name += f"-{key.rsplit('.', 1)[-1]}{value}"
    return name


def swept_keys() -> set[str]:
    """The keys a multirun sweeps: given on the command line as a list or range (a=1,2 / range(...)), or in
    the config's hydra.sweeper.params."""
    from hydra.core.hydra_config import HydraConfig

    keys = set(HydraConfig.get().sweeper.get("params") or {})
    for arg in sys.argv[1:]:
        key, _, value = arg.lstrip("+~").partition("=")
        if "," in value or value.startswith(("range(", "choice(", "glob(", "interval(")):
            keys.add(key)
    return keys


def check_run_settings(cfg: Any) -> None:
    """The top-level settings and the trainer's, checked before anything is seeded, built or written:
    a `+key=value` that nothing reads (a typo of a setting, say `+ckpt_pth=...`) is refused, not ignored."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    from callbacks.settings import SettingsError, check_settings, check_trainer_values, expected
    from launch.precheck import CONFIG_GROUPS, TOP_LEVEL_SETTINGS

    problems = []
    for arg in sys.argv[1:]:
        key = arg.lstrip("+~").partition("=")[0]
        if arg.startswith("+") and "." not in key and "/" not in key and key not in (*TOP_LEVEL_SETTINGS, *CONFIG_GROUPS):
            problems.append(f"{key}: no such setting (the top-level ones are {', '.join(TOP_LEVEL_SETTINGS)})")
    top_level = {key: cfg[key] for key in TOP_LEVEL_SETTINGS if key in cfg}
    for key, value in OmegaConf.to_container(OmegaConf.create(top_level), resolve=False).items():
        want = expected(TOP_LEVEL_SETTINGS[key], value)
        if want is not None:
            problems.append(f"{key}={value!r}: expected {want}")
    if isinstance(cfg.get("seed"), int) and not 0 <= cfg.seed < 2**32:
        problems.append(f"seed={cfg.seed}: expected an integer in [0, 2^32 - 1]")
    if isinstance(cfg.get("ddp_timeout_s"), (int, float)) and not cfg.ddp_timeout_s > 0:
        problems.append(f"ddp_timeout_s={cfg.ddp_timeout_s}: expected a number of seconds > 0")
    if problems:
        raise SettingsError("; ".join(problems))
    trainer_settings = OmegaConf.to_container(cfg.trainer, resolve=True)
    check_settings(get_class(trainer_settings["_target_"]), trainer_settings, "trainer")
    check_trainer_values(trainer_settings, "trainer")


def build(cfg: Any) -> tuple[Any, Any]:
    """The data module and the model of a composed config; the model's likelihood and backbone follow the data unless set."""
    from omegaconf import OmegaConf

    from hydra.errors import InstantiationException
    from hydra.utils import get_class, instantiate

    from callbacks.settings import SettingsError, check_settings

    # Hydra passes any value through: check each against the constructor's type hints first (as LightningCLI does).
    data_settings = OmegaConf.to_container(cfg.data, resolve=True)
    check_settings(get_class(data_settings["_target_"]), data_settings, "data")
    settings = model_settings(cfg)
    check_settings(get_class(settings["_target_"]), settings, "model")
    if cfg.get("optimizer"):  # after the model's: the optimizer's lr is ${model.lr} unless set
        optimizer_settings = OmegaConf.to_container(cfg.optimizer, resolve=True)
        check_settings(get_class(optimizer_settings["_target_"]), optimizer_settings, "optimizer")
    datamodule = instantiate(cfg.data, _convert_="all")
    settings["likelihood"] = settings.get("likelihood") or datamodule.likelihood
    settings["backbone"] = settings.get("backbone") or datamodule.backbone
    optimizer = instantiate(cfg.optimizer) if cfg.get("optimizer") else None
    try:
        model = instantiate(settings, data_shape=list(datamodule.image_shape), optimizer=optimizer, _convert_="all")
    except InstantiationException as error:  # the constructor refused a combination of settings: its message
        if not isinstance(error.__cause__, (ValueError, TypeError)):
            raise
        raise SettingsError(f"model ({cfg.model._target_.rsplit('.', 1)[-1]}): {error.__cause__}") from None
    return datamodule, model


def run(cfg: Any) -> dict[str, float]:
    """Build data, model, logger, callbacks and trainer from a composed Hydra config and fit."""
    import logging

    import lightning as L
    from hydra.utils import instantiate

    from callbacks.checkpoint_files import load_checkpoint_file
    from callbacks.distributed import check_launcher, strategy_with_timeout
    from callbacks.run_directory import (
        no_traces_if_refused, note_hydra_job, requeued_job_checkpoint, run_summary_at_end, slurm_job_id, tensorboard_logger)
    from models.base import check_model_class

    check_run_settings(cfg)
    if cfg.model.get("compile"):  # each job of a multirun compiles its own networks, under Dynamo's recompile_limit
        import torch._dynamo

        torch._dynamo.reset()
    L.seed_everything(cfg.seed, workers=True)
    datamodule, model = build(cfg)
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path:  # an unusable checkpoint (or another model's) stops the run here, before anything is written
        check_model_class(load_checkpoint_file(ckpt_path), type(model), ckpt_path)
    logger = False
    if cfg.get("logger"):
        logger_settings = {k: v for k, v in cfg.logger.items() if k not in ("_target_", "save_dir", "name")}
        logger = tensorboard_logger(cfg.logger.save_dir, run_name(cfg, model.run_tag), ckpt_path, **logger_settings)
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values()]
    callbacks = without_progress_bar(callbacks, cfg.trainer.get("enable_progress_bar") is not False)  # None: on
    trainer_settings: dict[str, Any] = {"strategy": strategy_with_timeout(cfg.trainer.get("strategy"), cfg.ddp_timeout_s)}
    if logger and slurm_job_id() is not None:  # Lightning's auto-requeue saves and finds hpc_ckpt_N.ckpt here
        trainer_settings["default_root_dir"] = logger.log_dir
    # A job of a multirun whose launcher runs several at once (configs/hydra/launcher/): joblib's n_jobs jobs share the
    # machine, so each gets its own GPU where there are several (job k -> cuda:k mod GPUs) and CPU cores // n_jobs
    # torch threads; a submitit job gets cpus_per_task threads. The basic launcher's jobs, one at a time, keep torch's.
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_job = HydraConfig.get() if HydraConfig.initialized() else None
    launcher = hydra_job.launcher if hydra_job is not None and hydra_job.mode == RunMode.MULTIRUN else {}
    threads, shared = None, ""
    if launcher.get("n_jobs") is not None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        n_jobs = int(launcher.n_jobs) if int(launcher.n_jobs) > 0 else max(1, cores + 1 + int(launcher.n_jobs))  # joblib's -1: all
        threads, shared = max(1, cores // n_jobs), f"{cores} CPU cores // n_jobs={n_jobs}"
        import torch

        gpus = torch.cuda.device_count() if str(cfg.trainer.get("accelerator")) in ("auto", "gpu", "cuda") else 0
        if gpus > 1 and str(cfg.trainer.get("devices")) == "1":  # one device per job (not a DDP job of several)
            trainer_settings["devices"] = [hydra_job.job.num % gpus]
            shared += f"; cuda:{hydra_job.job.num % gpus} of {gpus} GPUs"
    elif launcher.get("cpus_per_task"):
        threads, shared = int(launcher.cpus_per_task), "hydra.launcher.cpus_per_task"
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
        logging.getLogger(__name__).info("parallel job %s: torch threads %d (%s)", hydra_job.job.num, threads, shared)
    trainer = instantiate(cfg.trainer, logger=logger, callbacks=callbacks, _convert_="all", **trainer_settings)
    check_launcher(trainer)
    ckpt_path = ckpt_path or requeued_job_checkpoint(trainer)
    with run_summary_at_end(trainer, logging.getLogger(__name__).info):  # the last line: run, last.ckpt, tensorboard
        with no_traces_if_refused(logger, refusals()):
            note_hydra_job(logger)  # after the run's files are listed: a refused new run still leaves nothing
            trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
        if cfg.get("run_test"):
            # The best checkpoint on val/nll, unless a callback put SG-MCMC's posterior mean into the model.
            use_model = any(getattr(c, "use_mean", False) for c in callbacks) or not trainer.checkpoint_callback
            if not use_model and not trainer.checkpoint_callback.best_model_path:
                logging.getLogger(__name__).warning(
                    "run_test: no validation ran before training stopped (trainer.check_val_every_n_epoch=%s), so there "
                    "is no best checkpoint on val/nll: testing the final weights", cfg.trainer.get("check_val_every_n_epoch"))
                use_model = True
            trainer.test(model, datamodule=datamodule, ckpt_path=None if use_model else "best")
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # The best val/nll of the run (the checkpoint callback's score: what run_test tests), the sweeper's objective.
    best = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
    if best is not None and getattr(trainer.checkpoint_callback, "monitor", None) == "val/nll":
        metrics["val/nll_best"] = float(best)
    return metrics


def check_output_directories(argv: list[str]) -> None:
    """Hydra makes its run directory under log_dir before any of our code runs: a path given there that
    names a file would end in Hydra's traceback, so it is checked first."""
    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key == "run_name" and (not value or value in (".", "..") or any(sep in value for sep in "/\\")):
            # It names directories under log_dir (TensorBoard's run, Hydra's): a path would write outside it.
            print(f"error: run_name={value}: expected a name (no '/', not '.' or '..'): runs are written under log_dir",
                  file=sys.stderr)
            raise SystemExit(2)
        if key in ("log_dir", "hydra.run.dir", "hydra.sweep.dir", "logger.save_dir") and value and "${" not in value:
            blocking = next((p for p in (Path(value), *Path(value).parents) if p.exists() and not p.is_dir()), None)
            if blocking is not None:
                print(f"error: {key}={value}: {blocking} is a file, not a directory; give a directory to write the run in",
                      file=sys.stderr)
                raise SystemExit(2)
            refusal = unwritable(Path(value))
            if refusal:
                print(f"error: {key}={value}: {refusal}; give a directory the run can write to", file=sys.stderr)
                raise SystemExit(2)
    if not any(arg.lstrip("+").startswith("log_dir=") for arg in argv) and unwritable(Path("logs")):  # the default
        print(f"error: log_dir=logs (the default): {unwritable(Path('logs'))}; run from a directory you can write to, or "
              "give log_dir=DIR", file=sys.stderr)
        raise SystemExit(2)


def unwritable(directory: Path) -> str | None:
    """Why nothing can be written under `directory` (read-only, immutable, not permitted), or None. Tried for real
    with a probe directory in its nearest existing ancestor, removed at once: access() cannot see every reason."""
    import tempfile

    existing = next((p for p in (directory, *directory.parents) if p.is_dir()), Path.cwd()).resolve()
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=existing))
    except OSError as error:
        return f"{existing} cannot be written to ({error.strerror})"
    return None


def hydra_main() -> None:
    import logging

    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    register_defaults()
    check_output_directories(sys.argv[1:])
    from callbacks.run_directory import note_existing_directories

    given = [a.split("=", 1)[1] for a in sys.argv[1:] if a.lstrip("+").startswith("log_dir=")]
    note_existing_directories(given[-1] if given and "${" not in given[-1] else "logs")
    # The jobs a launcher starts as new processes (hydra/launcher=slurm, slurm_local: `python -m submitit...` from the
    # working directory) import the collection's modules as this process does, from wherever it was started.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CONFIG_DIR.parent) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(CONFIG_DIR.parent), *paths])
    # ${pid:} in configs/train.yaml's run and sweep directories: this process's id, also where a parallel launcher's
    # jobs resolve it in their own processes (Hydra hands them its resolvers), so that they share the sweep directory.
    launching_pid = os.getpid()
    OmegaConf.register_new_resolver("pid", lambda: launching_pid, replace=True)

    def parallel_jobs() -> int:
        """configs/hydra/launcher/parallel.yaml's n_jobs: one job per GPU where there are several, else 2."""
        import torch

        return torch.cuda.device_count() if torch.cuda.device_count() > 1 else 2

    OmegaConf.register_new_resolver("parallel_jobs", parallel_jobs, replace=True)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # Optuna's storage imports it: a line per plugin it sets up

    @hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
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
                    logging.getLogger(__name__).warning("this trial diverged and counts as val/nll = inf: %s", diverged)
                    return float("inf")
        except SystemExit as stop:
            if stop.code == 2:  # a setting refused: the output directory Hydra made holds nothing of a run
                from callbacks.run_directory import remove_if_only_hydra_files

                remove_if_only_hydra_files(HydraConfig.get().runtime.output_dir)
            raise  # 130/143 (Ctrl-C, SIGTERM): a stopped run keeps its config.yaml and train.log
        return metrics.get("val/nll_best", metrics.get("val/nll", float("nan")))  # NaN: no validation ran (a failed trial)

    _main()


# ---- LightningCLI ------------------------------------------------------------------------------


def cli_main(args: list[str] | None = None, run: bool = True) -> Any:
    """LightningCLI on the same classes, with the same defaults as the Hydra configs (JSA on MNIST, the
    likelihood that suits the data, the same callbacks) and runs named like Hydra's."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from hydra.utils import get_class
    from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

    import datamodules  # noqa: F401  (registers the subclasses for --data=NAME)
    import models  # noqa: F401  (registers the subclasses for --model=NAME)
    from callbacks import default_callbacks
    from callbacks.checkpoint_files import CheckpointError
    from callbacks.distributed import DDP_TIMEOUT_S, check_launcher, strategy_with_timeout
    from callbacks.run_directory import (
        no_traces_if_refused,
        note_existing_directories,
        requeued_job_checkpoint,
        run_summary_at_end,
        slurm_job_id,
        tensorboard_logger,
    )
    from callbacks.settings import SettingsError, check_trainer_values
    from datamodules import ImageDataModule
    from models import LatentVariableModel

    raw_args = list(sys.argv[1:] if args is None else args)
    subcommand = raw_args[0] if raw_args and raw_args[0] in CLI_SUBCOMMANDS else None
    given_model = _option_value(raw_args, "--model")
    # JSA on MNIST unless told otherwise, as in the Hydra front end. Given as arguments, not as parser
    # defaults: jsonargparse would carry a default class's settings over to another class the user picks.
    defaults = [f"--{key}={value}" for key, value in (("model", "JSA"), ("data", "MNISTDataModule"))
                if not any(a == f"--{key}" or a.startswith(f"--{key}=") for a in raw_args)]
    if not any(a in ("-c", "--config", "-h", "--help") or a.startswith(("--config=", "-c=")) for a in raw_args):
        first = [raw_args.pop(0)] if subcommand else []
        raw_args = first + defaults + raw_args
        if args is None:  # from the command line: LightningCLI reads sys.argv (given both, it warns)
            sys.argv[1:] = raw_args
        else:
            args = raw_args

    class Parser(LightningArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # argparse takes --trainer.max_epoch as an abbreviation of --trainer.max_epochs: a typo would run silently.
            super().__init__(*args, **{**kwargs, "allow_abbrev": False})

        def error(self, message: str, ex: Exception | None = None) -> NoReturn:  # one line, not usage + a nested report
            from launch.precheck import refuse_early

            early = refuse_early(raw_args, cli=True)  # the same line as before the imports, with "did you mean"
            if early:
                _exit_with(early)
            _exit_with(f"{_parser_message(message, raw_args)} (python train.py {subcommand or 'fit'} --help lists the options)")

    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser: Any) -> None:
            # The model is built for the data's image shape, as in the Hydra front end.
            parser.link_arguments("data.image_shape", "model.init_args.data_shape", apply_on="instantiate")
            # Same checkpointing as configs/callbacks/default.yaml: last + best on val/nll.
            parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
            parser.set_defaults({"checkpoint.monitor": "val/nll", "checkpoint.mode": "min", "checkpoint.save_last": True,
                                 "checkpoint.save_top_k": 1, "checkpoint.filename": "epoch{epoch:03d}-step{step:06d}",
                                 "checkpoint.auto_insert_metric_name": False, "checkpoint.enable_version_counter": False})
            parser.set_defaults({"trainer.devices": 1})  # as configs/trainer/default.yaml
            # The other default callbacks, as parser defaults: shown by --print_config, replaceable with
            # --trainer.callbacks=..., extended with --trainer.callbacks+=...
            parser.set_defaults({"trainer.max_epochs": 10})  # as configs/trainer/default.yaml
            parser.set_defaults({"trainer.callbacks": [{"class_path": f"{type(c).__module__}.{type(c).__name__}"} for c in default_callbacks()]})

        def before_instantiate_classes(self) -> None:
            config = self.config[self.subcommand] if self.subcommand else self.config
            # --seed_everything=N also seeds the data order and the test stage, as seed=N does in Hydra.
            seed = config.get("seed_everything")
            if _option_value(raw_args, "--seed_everything") is not None and isinstance(seed, int) and not isinstance(seed, bool):
                if not _given(raw_args, "data", "seed"):
                    config.data.init_args.seed = seed
                if not _given(raw_args, "model", "test_seed"):
                    config.model.init_args.test_seed = seed
            # A checkpoint's hyperparameters (test/validate --ckpt_path) are merged over the command line by
            # LightningCLI: an option the user gives wins over them, as without a checkpoint.
            if self.subcommand and config.get("ckpt_path"):
                given = {a.split("=", 1)[0].removeprefix("--model.").removeprefix("init_args.").split(".")[0]
                         for a in raw_args if a.startswith("--model.")}
                if given:
                    fresh = self.parser.parse_args(_without_option(raw_args, "--ckpt_path"))[self.subcommand]
                    for key in given:
                        config.model.init_args[key] = fresh.model.init_args[key]
                        if key in (config.model.get("dict_kwargs") or {}):
                            del config.model.dict_kwargs[key]
            for key, value in _integer_batch_limits(raw_args).items():  # as saved in config.yaml (see instantiate_trainer)
                config.trainer[key] = value
            if config.model.init_args.get("likelihood") is None:  # follows the data, as in the Hydra front end
                config.model.init_args.likelihood = ImageDataModule.likelihood_for(config.data.init_args.binarize)
            if config.model.init_args.get("backbone") is None:
                config.model.init_args.backbone = get_class(config.data.class_path).backbone

        def instantiate_trainer(self, **kwargs: Any) -> Any:
            trainer_config = self._get(self.config_init, "trainer", default={})
            check_trainer_values(trainer_config, "--trainer")
            # Instantiation reads the limits back as floats; the integers the user gave are counts.
            for key, value in _integer_batch_limits(raw_args).items():
                trainer_config[key] = value
            if trainer_config.get("logger") in (None, True):  # the default: a TensorBoard run named like Hydra's
                name = f"{self.model.config_name}-{self.datamodule.config_name}-{self.model.run_tag}"
                kwargs["logger"] = tensorboard_logger("logs/tensorboard", name, self._get(self.config, "ckpt_path"))
            if trainer_config.get("enable_progress_bar") is False:
                trainer_config["callbacks"] = without_progress_bar(trainer_config.get("callbacks") or [], False)
            # A DDP strategy named by a string gets the Hydra front end's collective timeout (configs/train.yaml);
            # --trainer.strategy=DDPStrategy --trainer.strategy.timeout=H:MM:SS sets another.
            trainer_config["strategy"] = strategy_with_timeout(trainer_config.get("strategy"), DDP_TIMEOUT_S)
            if kwargs.get("logger") and slurm_job_id() is not None:  # as in the Hydra front end
                trainer_config["default_root_dir"] = kwargs["logger"].log_dir
            trainer = super().instantiate_trainer(**kwargs)
            check_launcher(trainer)
            config = self.config_init[self.subcommand] if self.subcommand else self.config_init
            if self.subcommand == "fit" and not config.get("ckpt_path"):
                config["ckpt_path"] = requeued_job_checkpoint(trainer)
            return trainer

        def _parse_ckpt_path(self) -> None:
            # LightningCLI builds the model named in the checkpoint's hyperparameters (test/validate --ckpt_path, from
            # the command line, a repeated flag or a -c config file alike): the file is read the safe way first and
            # the class it names must be a registered model before anything imports it.
            ckpt_path = self.config[self.config.subcommand].get("ckpt_path") if self.config.get("subcommand") else None
            if ckpt_path:
                from models import is_registered_model
                from callbacks.checkpoint_files import load_checkpoint_file

                class_path = (load_checkpoint_file(ckpt_path).get("hyper_parameters") or {}).get("_class_path")
                if class_path is not None and not is_registered_model(class_path):
                    raise CheckpointError(f"--ckpt_path={ckpt_path} names the class {class_path!r}, which is not one of the "
                                          "collection's models; it is not imported")
            super()._parse_ckpt_path()

        def _run_subcommand(self, subcommand: str) -> None:
            # The last line (also after Ctrl-C/SIGTERM): the run, its last.ckpt and the TensorBoard command.
            with run_summary_at_end(self.trainer, lambda line: print(line, flush=True)), no_traces_if_refused(self.trainer.logger, refusals()):
                super()._run_subcommand(subcommand)

        def instantiate_classes(self) -> None:
            try:
                super().instantiate_classes()
            except (ValueError, TypeError) as error:  # a constructor refused a setting: its message, one line
                if isinstance(error, (CheckpointError, SettingsError)):
                    raise
                raise SettingsError(_constructor_message(str(error))) from None

    note_existing_directories("logs")  # where the CLI writes its runs
    with user_errors_as_one_line():
        ckpt_path = _option_value(raw_args, "--ckpt_path")
        if ckpt_path and ckpt_path != "null":  # before LightningCLI reads its hyperparameters: one clear line if unusable
            from callbacks.checkpoint_files import load_checkpoint_file

            written_by = load_checkpoint_file(ckpt_path).get("model_class") or ""
            if given_model and written_by and given_model.rsplit(".", 1)[-1] != written_by.rsplit(".", 1)[-1]:
                raise CheckpointError(f"--ckpt_path={ckpt_path} was written by {written_by.rsplit('.', 1)[-1]}, not "
                                      f"--model={given_model}: give --model={written_by.rsplit('.', 1)[-1]} or leave --model out")
        return CLI(
            LatentVariableModel,
            ImageDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            parser_class=Parser,
            args=args,
            run=run,
            # fit writes config.yaml into the run; test/validate into the same run, under their own name
            save_config_kwargs={"overwrite": True, "config_filename": "config.yaml" if subcommand in ("fit", None) else f"config_{subcommand}.yaml"},
            seed_everything_default=0,  # as seed: 0 in configs/train.yaml
        )


def _parser_message(text: str, args: list[str]) -> str:
    """jsonargparse's nested report ('Parser key "model": ... Parser key "mis_steps": Expected a <class 'int'>.
    Got value: ten') as one line naming the option as given: '--model.mis_steps: Expected a <class 'int'>. Got value: ten'."""
    import re

    import datamodules
    import models

    keys = list(dict.fromkeys(re.findall(r'Parser key "([^"]+)"', text)))
    noise = ("Does not validate", "Subtypes:", "Errors:", "Given value", "Problem with given class_path", "Parser key",
             "Expected a <class 'NoneType'>")
    lines = [line.strip().removeprefix("- ") for line in text.splitlines()[1:]]
    reasons = [line for line in lines if line and not line.startswith(noise)]
    if not keys or not reasons:
        return " ".join(text.split())
    given = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    option = next((g for g in given if g.endswith(("." + keys[-1], "--" + keys[-1]))), "--" + ".".join(keys))
    if option in ("--model", "--data") and any("dot import path" in r for r in reasons):  # an unknown class name
        package, base = (models, models.LatentVariableModel) if option == "--model" else (datamodules, datamodules.ImageDataModule)
        names = [n for n in package.__all__ if isinstance(getattr(package, n), type) and issubclass(getattr(package, n), base)
                 and getattr(package, n) is not base]
        return f"{option}={_option_value(args, option)} is not one of {', '.join(names)}"
    return f"{option}: {'; '.join(dict.fromkeys(reasons))}"


def _constructor_message(text: str) -> str:
    """jsonargparse reports a constructor's refusal inside its union-subtype report (Errors: / - ... /
    Given value: <the whole namespace>): keep the constructor's own message."""
    import re

    if "Errors:" not in text:
        return text
    reasons = [line.strip()[2:] for line in text.split("Errors:", 1)[1].splitlines()
               if line.strip().startswith("- ") and not line.strip().startswith("- Expected a <class 'NoneType'>")]
    refused_by = re.search(r"class_path='([\w.]+)'", text)
    prefix = f"{refused_by[1].rsplit('.', 1)[-1]}: " if refused_by else ""
    return prefix + ("; ".join(reasons) or text.splitlines()[0])


def _given(args: list[str], group: str, key: str) -> bool:
    """Whether the command line sets `key` of `group` (--group.key or --group.init_args.key)."""
    return any(_option_value(args, f"--{group}.{prefix}{key}") is not None for prefix in ("", "init_args."))


def _integer_batch_limits(args: list[str]) -> dict[str, int]:
    """jsonargparse reads `--trainer.limit_val_batches=1` as 1.0 (all batches): an integer given is a count."""
    limits = {}
    for key in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"):
        value = _option_value(args, f"--trainer.{key}")
        if value is not None and value.isdigit():
            limits[key] = int(value)
    return limits


def _without_option(args: list[str], option: str) -> list[str]:
    """args without `option=VALUE` or `option VALUE`."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def _option_value(args: list[str], option: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
        if arg == option and i + 1 < len(args):
            return args[i + 1]
    return None


# ---- errors a user can fix: one line, no traceback -----------------------------------------------


def refusals() -> tuple[type[Exception], ...]:
    """What refuses a run before it trains: a setting, the data, a checkpoint (the user's to fix)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from callbacks.checkpoint_files import CheckpointError
    from callbacks.settings import SettingsError
    from datamodules import DataError

    return DataError, CheckpointError, SettingsError, MisconfigurationException


@contextlib.contextmanager
def user_errors_as_one_line() -> Iterator[None]:
    """What the user can fix gets one line on stderr and exit status 2, no traceback: wrong settings,
    missing or corrupt data, an unusable checkpoint, a diverged loss, a stuck distributed peer."""
    from hydra.errors import InstantiationException
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from omegaconf.errors import OmegaConfBaseException

    from callbacks.distributed import collective_timeout_message, is_collective_timeout

    try:
        yield
    except MisconfigurationException as error:  # Lightning refused a trainer or callback setting
        _exit_with(" ".join(str(error).split()))
    except OmegaConfBaseException as error:  # an interpolation that cannot resolve (model.lr='${nope}'), ...
        key = getattr(error, "full_key", None)
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        _exit_with(f"{key}: {reason}" if key else reason)
    except (*refusals(), FloatingPointError) as error:
        _exit_with(str(error))
    except InstantiationException as error:  # a constructor refused a setting (its ValueError, its message)
        cause = error.__cause__
        if not isinstance(cause, (ValueError, TypeError, MisconfigurationException)):
            raise
        key = str(error).rsplit("full_key:", 1)[-1].strip() if "full_key:" in str(error) else ""
        _exit_with(f"{key + ': ' if key else ''}{cause}")
    except RuntimeError as error:
        if not is_collective_timeout(error):
            raise
        _exit_with(collective_timeout_message(error))


def _exit_with(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2) from None


def main() -> None:
    argv = sys.argv[1:]
    from launch.precheck import refuse_early  # before the imports of torch and Lightning: typos are refused at once

    refusal = refuse_early(argv, cli=bool(argv) and argv[0] in CLI_SUBCOMMANDS)
    if refusal:
        _exit_with(refusal)
    if argv and argv[0] in CLI_SUBCOMMANDS:
        quiet_console(hydra=False)
        cli_main()
    elif any(a in ("-h", "--help") for a in argv):
        print(USAGE.format(groups=_config_groups()))
    else:
        hydra_main()


if __name__ == "__main__":
    main()
