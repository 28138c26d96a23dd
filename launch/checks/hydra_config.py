"""The Hydra front end's config tree: the classes' defaults as config nodes (register_defaults), and the config a
command line composes, in this process (compose). Torch-free: the early check composes every job of a command line
with it before the heavy imports (launch/checks/hydra_check.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from launch.checks.configs import CONFIGS, NOT_SETTINGS, config_targets, declared_defaults, every_config


def trainer_known() -> bool:
    """Whether lightning.Trainer's settings are known here: once Lightning is imported (its constructor declares them)."""
    return "lightning" in sys.modules


def register_defaults() -> None:
    """Store every model's and data module's declared defaults (configs/settings.py) as Hydra configs
    `model_defaults/<Class>` and `data_defaults/<Class>`, and once Lightning is imported lightning.Trainer's as
    `trainer_defaults/Trainer`, which configs/model/*.yaml, configs/data/*.yaml and configs/trainer/default.yaml extend:
    one source of defaults, `--cfg job` shows them, and `model.NAME=VALUE` needs no `+`. Also the `${every_config:...}`
    resolver the config tree uses."""
    store = ConfigStore.instance()
    for kind in ("model", "data"):
        for target in sorted(set(config_targets(kind).values())):
            store.store(group=f"{kind}_defaults", name=target.rsplit(".", 1)[-1], node=declared_defaults(target))
    trainer_settings: dict[str, Any] = {}
    if trainer_known():  # every argument, so that trainer.NAME=VALUE works for all (logger, callbacks: their own groups)
        from lightning import Trainer

        from common.signatures import constructor_defaults

        trainer_settings = {k: v for k, v in constructor_defaults(Trainer).items() if k not in NOT_SETTINGS["trainer"]}
    store.store(group="trainer_defaults", name="Trainer", node=trainer_settings)
    # experiment=compare's models: `${every_config:model,vqvae_prior}`, the configs of configs/model/ as they are now
    OmegaConf.register_new_resolver("every_config", every_config, replace=True)


def compose(overrides: list[str], config_dirs: list[Path] = ()) -> Any:
    """The config `python train.py OVERRIDES` runs with (its hydra node too), composed in this process by Hydra's compose
    API, with the folders of --config-dir searched too; `${hydra:...}` resolves as in a run. What the early check, the
    tests and the benchmarks that build a model without a new interpreter use."""
    register_defaults()
    searched = [f"hydra.searchpath=[{','.join(f'file://{Path(folder).resolve()}' for folder in config_dirs)}]"] \
        if config_dirs else []
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = hydra_compose("train", overrides=[*overrides, *searched], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg
