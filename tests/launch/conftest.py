"""The launch tests' shared fixture: the config of a command line, composed once per test process."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def each_command_composed_once() -> Iterator[None]:
    """Many launch tests check a command line whose config another test has composed (the default config, model=vae,
    each model of experiment=compare, the config a refusal's advice is read from): `launch.checks.hydra_config.compose`,
    which the early check calls for every job of a command, composes a command once in this process and then gives a
    copy, made Hydra's current config as compose makes it. A compose is a function of the overrides, the files of the
    config folders it adds, DATA_DIR, the registered classes and whether Lightning is imported
    (launch/checks/hydra_config.py: register_defaults), each part of the key, and of the working directory, which it
    records alone (hydra.runtime.cwd: set in the copy). A compose that raises is not kept: its next call composes again."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from checkpoints.registry import registered
    from launch.checks import hydra_check, hydra_config

    compose = hydra_config.compose
    composed: dict[tuple, object] = {}

    def folder_files(folder: Path) -> tuple:
        folder = Path(folder)
        return tuple(sorted((str(path), path.stat().st_mtime_ns, path.stat().st_size)
                            for path in folder.rglob("*") if path.is_file())) if folder.is_dir() else ()

    def compose_once(overrides: list[str], config_dirs: list[Path] = ()) -> object:
        key = (tuple(overrides), tuple((str(Path(folder).resolve()), folder_files(folder)) for folder in config_dirs),
               os.environ.get("DATA_DIR"), hydra_config.classes_imported(),
               tuple(f"{cls.__module__}.{cls.__qualname__}" for kind in ("model", "data") for cls in registered(kind)))
        if key not in composed:
            composed[key] = compose(overrides, config_dirs)
        cfg = copy.deepcopy(composed[key])
        OmegaConf.set_readonly(cfg.hydra, False)
        cfg.hydra.runtime.cwd = os.getcwd()
        HydraConfig.instance().set_config(cfg)  # (the hydra node read-only again, as compose leaves it)
        return cfg

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hydra_config, "compose", compose_once)
        patch.setattr(hydra_check, "compose", compose_once)
        yield
