"""A command reads its checkpoint once: the builder hands what it read to the trainer's restore
(checkpoints/trainer.py), and a real resume through either front end unpickles and hashes the file once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import checkpoints.loader
from checkpoints.file_format import save_checkpoint_file
from checkpoints.trainer import AtomicCheckpointIO
from tests import preloaded

REPO = Path(__file__).resolve().parents[2]


def test_the_restore_takes_the_checkpoint_the_builder_read_and_reads_any_other(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    save_checkpoint_file({"state_dict": {"w": torch.ones(3)}, "pytorch-lightning_version": "2.6.6"}, path)
    reads = []
    real = checkpoints.loader.lightning_load
    monkeypatch.setattr(checkpoints.loader, "lightning_load", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    read = checkpoints.loader.load_checkpoint_file(path)
    plugin = AtomicCheckpointIO(read=(str(tmp_path / "." / "last.ckpt"), read))  # the same file, named another way
    assert plugin.load_checkpoint(path) is read and len(reads) == 1  # handed over, not read again
    again = plugin.load_checkpoint(path)  # handed over once: a later restore (test after fit) reads the file
    assert again is not read and torch.equal(again["state_dict"]["w"], torch.ones(3)) and len(reads) == 2
    other = tmp_path / "other.ckpt"
    save_checkpoint_file({"state_dict": {"w": torch.zeros(3)}, "pytorch-lightning_version": "2.6.6"}, other)
    assert torch.equal(AtomicCheckpointIO(read=(path, read)).load_checkpoint(other)["state_dict"]["w"], torch.zeros(3))


# Runs train.py in this process with every torch.load and checksum of the checkpoint counted (whoever calls them:
# the front ends, Lightning, the plugin), then prints the counts.
COUNTING = """
import json, os, sys
import torch
import checkpoints.file_format as file_format
ckpt = os.path.realpath(sys.argv[1])
counts = {"torch.load": 0, "sha256": 0}

def named(source):
    name = source if isinstance(source, (str, os.PathLike)) else getattr(source, "name", getattr(source, "path", None))
    return isinstance(name, (str, os.PathLike)) and os.path.realpath(name) == ckpt

real_load, real_digest = torch.load, file_format.file_digest
def load(source, *args, **kwargs):
    counts["torch.load"] += named(source)
    return real_load(source, *args, **kwargs)
def digest(path):
    counts["sha256"] += named(path)
    return real_digest(path)
torch.load, file_format.file_digest = load, digest
sys.argv = ["train.py", *sys.argv[2:]]
import train
train.main()
print("COUNTS", json.dumps(counts))
"""
TINY = {"cli": ["fit", "--model=JSA", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
                "--model.val_num_samples=2"],
        "hydra": ["model=jsa", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "model.val_num_samples=2"]}


@pytest.mark.slow  # real training processes
@pytest.mark.parametrize("front_end", ["cli", "hydra"])
def test_a_resume_through_either_front_end_reads_its_checkpoint_once(front_end, tmp_path, mnist_dir):
    env = {**os.environ, "DATA_DIR": str(mnist_dir), "PYTHONPATH": str(REPO)}
    option = "--{}=" if front_end == "cli" else "{}="  # --trainer.max_steps=2 or trainer.max_steps=2
    max_steps = option.format("trainer.max_steps") + "{}"
    first = preloaded.run_train([*TINY[front_end], max_steps.format(2)], tmp_path, env, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = (next(tmp_path.glob("logs/tensorboard/*/version_0/checkpoints/last.ckpt")))
    resume = option.format("ckpt_path") + str(ckpt)
    result = preloaded.run_code(COUNTING, [str(ckpt), *TINY[front_end], max_steps.format(4), resume], tmp_path, env,
                                timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = json.loads(result.stdout.split("COUNTS", 1)[1])
    assert counts == {"torch.load": 1, "sha256": 1}
    assert torch.load(ckpt, weights_only=True)["global_step"] == 4  # resumed, and trained on to its last step
