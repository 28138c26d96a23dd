"""Where code lives (CONTRIBUTING.md "Where things go"): callbacks/ holds Lightning callbacks only, and models/ imports
none of them (checkpoints/ holds what a checkpoint needs); what models,
callbacks, data modules and samplers are made of imports nothing from the launch package (the way runs are
started); train.py only dispatches to the two front ends."""

from __future__ import annotations

import ast
from pathlib import Path

import lightning as L
import pytest

REPO = Path(__file__).resolve().parents[1]
BELOW_LAUNCH = ("models", "callbacks", "checkpoints", "datamodules", "samplers", "common")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(p for p in (REPO / "callbacks").glob("*.py") if p.name != "__init__.py"), ids=lambda p: p.name)
def test_every_module_in_callbacks_holds_a_callback(path):
    import importlib

    module = importlib.import_module(f"callbacks.{path.stem}")
    own = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    assert any(issubclass(cls, L.Callback) for cls in own), f"callbacks/{path.name} defines no Lightning callback"


def test_nothing_below_the_launch_package_imports_it():
    found = [f"{p.relative_to(REPO)}: {name}" for folder in BELOW_LAUNCH for p in sorted((REPO / folder).rglob("*.py"))
             for name in imported_modules(p) if name == "launch" or name.startswith(("launch.", "train"))]
    assert not found, f"imports of the launch side from below it: {found}"


def test_models_import_no_callbacks_module():
    """A model needs what makes its checkpoints whole (checkpoints/), never an optional callback (callbacks/)."""
    found = [f"{p.relative_to(REPO)}: {name}" for p in sorted((REPO / "models").rglob("*.py"))
             for name in imported_modules(p) if name == "callbacks" or name.startswith("callbacks.")]
    assert not found, f"models/ imports callbacks/: {found}"


def test_train_py_only_dispatches():
    assert len((REPO / "train.py").read_text().splitlines()) <= 150
