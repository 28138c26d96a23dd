"""CONTRIBUTING.md's "Adding a model", done in a copy of the project: a new estimator is two new files, its module and
its config, and nothing else is edited; both front ends of train.py then train it, and a checkpoint it wrote names a
registered model (a class registers itself when it is defined: models/base.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import preloaded

pytestmark = pytest.mark.slow  # copies the project and starts train.py three times

REPO = Path(__file__).resolve().parents[2]

TOY_MODULE = '''"""A toy estimator: RWS's model trained on the wake phase alone, with two proposals."""

from models.rws import RWS


class Toy(RWS):
    config_name = "toy"

    def __init__(self, num_samples: int = 2, **kwargs):
        super().__init__(num_samples=num_samples, **kwargs)

    def training_loss(self, x, index):
        loss, bound = self.wake_loss(x, self.posterior(x))
        return {"loss": loss, "toy_bound": bound.mean()}
'''

TOY_CONFIG = """# @package _global_
defaults:
  - /model_defaults@model: Toy
  - _self_
model:
  _target_: models.Toy
"""


def project_copy(root: Path) -> Path:
    """The project's files, without what git, the environment and runs keep beside them."""
    def left_out(folder: str, names: list[str]) -> set[str]:
        top = {".git", ".venv", "logs", "data"} if Path(folder) == REPO else set()
        return {name for name in names if name in top or name == "__pycache__" or name.endswith(".egg-info")}

    copy = root / "project"
    shutil.copytree(REPO, copy, ignore=left_out)
    return copy


def train(args: list[str], cwd: Path, mnist_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATA_DIR": str(mnist_dir), "PYTHONPATH": str(cwd)}  # the copy's packages, not this checkout's
    result = preloaded.run_script(cwd / "train.py", args, cwd, env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def scalar_tags(run: Path) -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run))
    events.Reload()
    return events.Tags()["scalars"]


def test_a_model_added_as_a_module_and_a_config_trains_from_both_front_ends(tmp_path, mnist_dir):
    project = project_copy(tmp_path)
    (project / "models" / "toy.py").write_text(TOY_MODULE)
    (project / "configs" / "model" / "toy.yaml").write_text(TOY_CONFIG)
    short = ["max_steps=2", "limit_train_batches=2", "limit_val_batches=1", "log_every_n_steps=1"]
    data = ["batch_size=16"]

    train(["model=toy", *[f"trainer.{s}" for s in short], *[f"data.{s}" for s in data], "model.val_num_samples=2"], project, mnist_dir)
    (hydra_run,) = (project / "logs" / "tensorboard").glob("toy-mnist-*/version_0")
    train(["fit", "--model=Toy", *[f"--trainer.{s}" for s in short], *[f"--data.{s}" for s in data], "--model.val_num_samples=2",
           "--log_dir=cli-logs"], project, mnist_dir)
    (cli_run,) = (project / "cli-logs" / "tensorboard").glob("toy-mnist-*/version_0")
    for run in (hydra_run, cli_run):  # trained by Toy's own loss, each with its checkpoints
        assert "train/toy_bound" in scalar_tags(run) and (run / "checkpoints" / "last.ckpt").is_file(), run
    # The checkpoint names models.toy.Toy: read back only because the class is registered (common/registry.py).
    train(["test", "--model=Toy", f"--ckpt_path={cli_run / 'checkpoints' / 'last.ckpt'}", "--trainer.limit_test_batches=1",
           "--model.test_num_samples=2", "--log_dir=cli-logs"], project, mnist_dir)
