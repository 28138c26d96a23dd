"""What configs/ declares, read without torch: each config group's choices and the class each builds (configs/<group>/
*.yaml, read as text), and the settings each class declares (configs/settings.py): what the early checks check a
command line against."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

from configs.settings import settings_class

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
# Constructor arguments that are not settings: the front ends pass them (registered defaults leave them out).
NOT_SETTINGS = {"model": ("data_shape", "optimizer", "scheduler"), "trainer": ("logger", "callbacks", "plugins")}
GROUPS = ("model", "data", "optimizer", "scheduler", "trainer")  # the config groups whose choices name one class


def default_choices() -> dict[str, str]:
    """group -> the default choice of configs/train.yaml's defaults list (`- model: jsa`)."""
    choices = {}
    for line in (CONFIGS / "train.yaml").read_text().splitlines():
        match = re.match(r"\s*-\s*(\w+)\s*:\s*([\w.]+)", line)
        if match:
            choices[match[1]] = match[2]
    return choices


def config_targets(group: str) -> dict[str, str]:
    """choice -> the class its config builds, for configs/<group>/*.yaml (read as text: no YAML import needed)."""
    def target_of(path: Path) -> str | None:
        lines = path.read_text().splitlines()
        target = next((line.split(":", 1)[1].strip() for line in lines if line.strip().startswith("_target_:")), None)
        # A config that extends another of its group (configs/model/dvae_gumbel.yaml: defaults: [dvae, _self_]).
        names = [line.strip()[2:].split("#")[0].strip() for line in lines if line.strip().startswith("- ")]
        parents = [path.with_name(name + ".yaml") for name in names if name.isidentifier()]
        return target or next((target_of(parent) for parent in parents if parent.is_file() and parent != path), None)

    return {path.stem: target for path in sorted((CONFIGS / group).glob("*.yaml")) if (target := target_of(path))}


def every_config(group: str, *left_out: str) -> str:
    """`${every_config:GROUP,NAME,...}` in a config (launch/hydra_config.py registers it): the choices of configs/GROUP/
    but those named, as a sweep ("a,b,c"). experiment=compare's models, so that a new model's config joins the
    comparison with no edit there (Hydra's `glob(*,exclude=...)` would too, but the Optuna sweeper refuses a glob)."""
    return ",".join(path.stem for path in sorted((CONFIGS / group).glob("*.yaml")) if path.stem not in left_out)


def declared(target: str | None) -> dict[str, Any] | None:
    """setting -> type hint of the class at `target` (`models.JSA`), as configs/settings.py declares them; None for a
    class that declares none there (the Trainer, an optimizer: checked once imported)."""
    found = settings_class(target) if target else None
    return typing.get_type_hints(found) if found is not None else None


def declared_defaults(target: str | None) -> dict[str, Any]:
    """setting -> default of the class at `target`, as configs/settings.py declares them; {} for a class that declares none."""
    found = settings_class(target) if target else None
    return {field.name: field.default for field in dataclasses.fields(found)} if found is not None else {}


def check_declared(target: str | None, given: dict[str, Any]) -> None:
    """Build the settings of the class at `target` from `given` (a ValueError naming the first setting refused), as
    its constructor will; nothing for a class that declares none."""
    found = settings_class(target) if target else None
    if found is not None:
        found(**{name: value for name, value in given.items() if name in {f.name for f in dataclasses.fields(found)}})


def cli_classes() -> dict[str, dict[str, str]]:
    """LightningCLI's `--model=NAME` and `--data=NAME` choices, class name -> class path: the classes the configs of
    configs/model/ and configs/data/ build (every registered model and data set has its config: CONTRIBUTING.md)."""
    return {group: {target.rsplit(".", 1)[-1]: target for target in sorted(set(config_targets(group).values()))}
            for group in ("model", "data")}
