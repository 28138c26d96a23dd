"""What the Hydra front end reads from its config tree and command line: the constructors' defaults as config nodes,
a model's settings with an experiment's shared ones applied, the command line's overrides and swept keys, and the
checks of the top-level, trainer, callback and logger settings (before anything is seeded, built or written)."""

from __future__ import annotations

import sys
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_class, get_object
from lightning import Trainer
from omegaconf import OmegaConf

import datamodules  # noqa: F401  (importing the packages registers their classes)
import models  # noqa: F401
from checkpoints.registry import registered
from common.signatures import constructor_defaults
from launch.checks.hydra_check import CONFIG_GROUPS, LAYOUT_SETTINGS, layout_setting, unknown_top_level_setting
from launch.checks.precheck import TOP_LEVEL_SETTINGS
from launch.checks.configs import CONFIGS, NOT_SETTINGS, every_config
from launch.checks.settings import SettingsError, check_settings, check_trainer_values, expected
from launch.run_layout import LOGGER_FOLDERS


def register_defaults() -> None:
    """Store every registered model's and data module's constructor defaults as Hydra configs
    `model_defaults/<Class>` and `data_defaults/<Class>` (and lightning.Trainer's as `trainer_defaults/Trainer`),
    which configs/model/*.yaml, configs/data/*.yaml and configs/trainer/default.yaml extend: the class signatures are the one source of defaults, `--cfg job` shows them, and
    `model.NAME=VALUE` needs no `+`. Also the `${every_config:...}` resolver the config tree uses."""
    store = ConfigStore.instance()
    for group, kind, skip in (("model_defaults", "model", NOT_SETTINGS["model"]), ("data_defaults", "data", ())):
        for cls in registered(kind):
            store.store(group=group, name=cls.__name__, node={k: v for k, v in constructor_defaults(cls).items() if k not in skip})
    # Every lightning.Trainer argument, so that trainer.NAME=VALUE works for all of them (logger and callbacks
    # come from their own config groups).
    trainer_settings = {k: v for k, v in constructor_defaults(Trainer).items() if k not in NOT_SETTINGS["trainer"]}
    store.store(group="trainer_defaults", name="Trainer", node=trainer_settings)
    # experiment=compare's models: `${every_config:model,vqvae_prior}`, the configs of configs/model/ as they are now
    OmegaConf.register_new_resolver("every_config", every_config, replace=True)


def compose(overrides: list[str]) -> Any:
    """The config `python train.py OVERRIDES` runs with, composed in this process (Hydra's compose API): what the
    tests and the benchmarks that build a model without a new interpreter use. `${hydra:...}` resolves as in a run."""
    register_defaults()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = hydra_compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def model_settings(cfg: Any) -> dict[str, Any]:
    """cfg.model as a dict, with an experiment's shared settings applied unless the command line sets them for
    the model: `discrete_latent` (experiment=compare) to a model with a discrete latent (JSA, DiscreteVAE,
    VQ-VAE), then `per_model.<the model's config name>` (experiment=jsa_paper: L for JSA, K for RWS, ...)."""
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

    if not HydraConfig.initialized():
        return {}
    pairs = (o.lstrip("+~").split("=", 1) for o in HydraConfig.get().overrides.task)
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def swept_keys() -> set[str]:
    """The keys a multirun sweeps: given on the command line as a list or range (a=1,2 / range(...)), or in
    the config's hydra.sweeper.params."""
    keys = set(HydraConfig.get().sweeper.get("params") or {})
    for arg in sys.argv[1:]:
        key, _, value = arg.lstrip("+~").partition("=")
        if "," in value or value.startswith(("range(", "choice(", "glob(", "interval(")):
            keys.add(key)
    return keys


def check_run_settings(cfg: Any) -> None:
    """Every setting of a composed config, checked once, before anything is seeded, built or written: the top-level
    ones (a key nothing reads, from `+key=value` or a file, is refused, not ignored), and each group's against its
    class's constructor: the model's (an experiment's shared settings applied), the data module's, the trainer's,
    the optimizer's, the scheduler's, the logger's and each callback's (a class or a factory)."""
    problems = [unknown_top_level_setting(key) for key in cfg if key not in (*TOP_LEVEL_SETTINGS, *CONFIG_GROUPS)]
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
    logger = OmegaConf.to_container(cfg.logger, resolve=False) if cfg.get("logger") else {}
    for key in LAYOUT_SETTINGS:  # (+logger.save_dir=... passes Hydra; the early checks refuse it without the +)
        if key.removeprefix("logger.") in logger:
            raise SettingsError(layout_setting(key, logger[key.removeprefix("logger.")]))
    if logger and logger.get("_target_") not in LOGGER_FOLDERS:
        raise SettingsError(f"logger._target_={logger.get('_target_')}: a run is logged by the loggers its layout places: "
                            f"{', '.join(path.rsplit('.', 1)[-1] for path in LOGGER_FOLDERS)} (logger=tensorboard, logger=csv), "
                            "or none (logger=none)")
    groups = {"model": model_settings(cfg), **{group: OmegaConf.to_container(cfg[group], resolve=True)
                                                for group in ("data", "trainer", "optimizer", "scheduler", "logger") if cfg.get(group)}}
    for name, callback in (OmegaConf.to_container(cfg.callbacks, resolve=True) if cfg.get("callbacks") else {}).items():
        if isinstance(callback, dict) and "_target_" in callback:
            groups[f"callbacks.{name}"] = callback
    for group, settings in groups.items():
        try:
            check_settings(get_object(settings["_target_"]), settings, group)
        except SettingsError as error:  # logger._target_=... over another logger's settings
            mixed = " (logger=csv and logger=tensorboard choose a logger with its own settings)" if group == "logger" else ""
            raise SettingsError(f"{error}{mixed}") from None
    check_trainer_values(groups["trainer"], "trainer")
