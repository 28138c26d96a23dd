"""The Hydra front end's config tree: the constructors' defaults as config nodes (register_defaults), and the config a
command line composes, in this process (compose)."""

from __future__ import annotations

from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from lightning import Trainer
from omegaconf import OmegaConf

import datamodules  # noqa: F401  (importing the packages registers their classes)
import models  # noqa: F401
from checkpoints.registry import registered
from common.signatures import constructor_defaults
from launch.checks.configs import CONFIGS, NOT_SETTINGS, every_config


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
