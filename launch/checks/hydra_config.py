"""The Hydra front end's config tree: the classes' defaults as config nodes (register_defaults), and the config a
command line composes, in this process (compose). Torch-free: the early check composes every job of a command line
with it before the heavy imports (launch/checks/hydra_check.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import pkgutil
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from common.registry import registered
from common.signatures import constructor_defaults
from configs.settings import settings_class
from launch.checks.configs import CONFIGS, NOT_SETTINGS, config_targets, every_config
from launch.checks.received_config import ConfigRefusal, composed, given_settings


def class_defaults(kind: str, target: str) -> Any:
    """The settings and defaults of the class at `target`: as configs/settings.py declares them; else, once imported,
    its constructor's; before, an open node (any key composes; its constructor checks them once imported)."""
    if (found := settings_class(target)) is not None:
        return {field.name: field.default for field in dataclasses.fields(found)}
    if "lightning" in sys.modules:
        with contextlib.suppress(ImportError, AttributeError, ValueError):  # not importable: building it says why
            return {k: v for k, v in constructor_defaults(pkgutil.resolve_name(target)).items() if k not in NOT_SETTINGS.get(kind, ())}
    return OmegaConf.create({}, flags={"struct": False})


def own_targets(kind: str, folders: Sequence[Path]) -> dict[str, str]:
    """Class name -> class path of each `_target_` the configs of group `kind` in one's own config folders name, e.g.
    {"MyVAE": "mypkg.mymodel.MyVAE"}, each file read as the check of received configs reads it (bounded, no tags)."""
    targets = {}
    for path in sorted(path for folder in folders for path in (Path(folder) / kind).glob("*.yaml")):
        with contextlib.suppress(ConfigRefusal):  # refused by that check, or not YAML: said there, or by Hydra
            settings = dict(given_settings(composed(path, f"Hydra config {path}")))
            target = settings.get(f"{kind}._target_") or settings.get("_target_")
            if target:
                targets[target.strip('"').rsplit(".", 1)[-1]] = target.strip('"')
    return targets


def register_defaults(config_dirs: Sequence[Path] = ()) -> None:
    """Store every model's and data module's defaults (class_defaults) as Hydra configs `model_defaults/<Class>` and
    `data_defaults/<Class>` (once imported, every registered class's too; and those of the classes one's own configs in
    `config_dirs` build, so that they extend them as configs/ does), and lightning.Trainer's (an open node until
    Lightning is imported) as `trainer_defaults/Trainer`, which configs/model/*.yaml, configs/data/*.yaml and
    configs/trainer/default.yaml extend: one source of defaults, `--cfg job` shows them, and `model.NAME=VALUE` needs
    no `+`. Also the `${every_config:...}` resolver the config tree uses."""
    store = ConfigStore.instance()
    for kind in ("model", "data"):
        targets = {**own_targets(kind, config_dirs),  # the collection's names win
                   **{target.rsplit(".", 1)[-1]: target for target in config_targets(kind).values()}}
        if "lightning" in sys.modules:
            targets.update({cls.__name__: f"{cls.__module__}.{cls.__qualname__}" for cls in registered(kind)})
        for name, target in sorted(targets.items()):
            store.store(group=f"{kind}_defaults", name=name, node=class_defaults(kind, target))
    # every argument, so that trainer.NAME=VALUE works for all (logger, callbacks: their own groups)
    store.store(group="trainer_defaults", name="Trainer", node=class_defaults("trainer", "lightning.Trainer"))
    # experiment=compare's models: `${every_config:model,vqvae_prior}`, the configs of configs/model/ as they are now
    OmegaConf.register_new_resolver("every_config", every_config, replace=True)


def compose(overrides: list[str], config_dirs: list[Path] = ()) -> Any:
    """The config `python train.py OVERRIDES` runs with (its hydra node too), composed in this process by Hydra's compose
    API, with the folders of --config-dir searched too; `${hydra:...}` resolves as in a run. What the early check, the
    tests and the benchmarks that build a model without a new interpreter use."""
    register_defaults(config_dirs)
    searched = [f"hydra.searchpath=[{','.join(f'file://{Path(folder).resolve()}' for folder in config_dirs)}]"] \
        if config_dirs else []
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = hydra_compose("train", overrides=[*overrides, *searched], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg
