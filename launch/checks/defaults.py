"""configs/*.yaml as written (interpolations unresolved): the defaults the early checks and both front ends read,
from one place. The Hydra front end composes the same files; LightningCLI takes these values as its defaults."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from launch.checks.configs import CONFIGS, default_choices


@functools.cache
def config_file(name: str) -> dict[str, Any]:
    """configs/<name>, e.g. config_file("callbacks/default.yaml")."""
    return yaml.safe_load((CONFIGS / name).read_text())


def seed() -> int:
    return config_file("train.yaml")["seed"]


def log_dir() -> str:
    return config_file("train.yaml")["log_dir"]


def ddp_timeout_s() -> float:
    return config_file("train.yaml")["ddp_timeout_s"]


def default_class(group: str) -> str:
    """The class name of a config group's default choice (configs/train.yaml: model: jsa -> JSA, data: mnist ->
    MNISTDataModule)."""
    return config_file(f"{group}/{default_choices()[group]}.yaml")[group]["_target_"].rsplit(".", 1)[-1]
