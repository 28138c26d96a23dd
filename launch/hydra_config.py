"""What the Hydra front end reads from its config tree and command line: the config composed in this process, a
model's settings with an experiment's shared ones applied, the command line's overrides and swept keys, and the checks
of the trainer's and callbacks' settings that need their classes (before anything is seeded, built or written)."""

from __future__ import annotations

import sys
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_class, get_object
from omegaconf import OmegaConf

import lightning  # noqa: F401  (register_defaults takes the Trainer's defaults from its signature once imported)
from launch.checks.configs import CONFIGS
from launch.checks.hydra_check import register_defaults
from launch.checks.settings import check_settings, check_trainer_values


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
    """What only Lightning and the callbacks' classes can check, before anything is seeded, built or written: the
    trainer's settings against lightning.Trainer (a value it accepts but cannot run, too) and each callback's against
    its constructor. The early check (launch/checks/hydra_check.py) has checked the composed config's keys."""
    trainer_settings = OmegaConf.to_container(cfg.trainer, resolve=True)
    check_settings(get_class(trainer_settings["_target_"]), trainer_settings, "trainer")
    check_trainer_values(trainer_settings, "trainer")
    for name, callback in (OmegaConf.to_container(cfg.callbacks, resolve=True) if cfg.get("callbacks") else {}).items():
        if isinstance(callback, dict) and "_target_" in callback:
            check_settings(get_object(callback["_target_"]), callback, f"callbacks.{name}")  # a class or a factory
