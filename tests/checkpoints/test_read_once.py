"""A checkpoint is read once per command (checkpoints/loader.py): later reads of the unchanged file neither read nor hash
it, a file rewritten since is read again, no reader sees what another changed, and a real resume through either front
end reads its checkpoint once."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

import checkpoints.file_format
import checkpoints.loader
from checkpoints.errors import CheckpointError
from checkpoints.file_format import save_checkpoint_file
from checkpoints.loader import load_checkpoint_file
from tests import preloaded

REPO = Path(__file__).resolve().parents[2]


def settled(path: Path) -> Path:
    """`path` as a checkpoint one resumes from is: written a while ago, with its checksum file (the loader keeps no
    file written just now)."""
    past = time.time() - 60
    for file in (path, path.with_name(path.name + ".sha256")):
        if file.exists():
            os.utime(file, (past, past))
    return path


def saved(path: Path, content: dict) -> Path:
    save_checkpoint_file(content, path)
    return path


@pytest.fixture
def reads(monkeypatch) -> dict[str, int]:
    """How often the loader unpickled and hashed a file, in this test; nothing kept from other tests."""
    counts = {"load": 0, "digest": 0}
    real_load, real_digest = checkpoints.loader.lightning_load, checkpoints.file_format.file_digest

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(checkpoints.loader, "lightning_load", counted("load", real_load))
    monkeypatch.setattr(checkpoints.file_format, "file_digest", counted("digest", real_digest))
    monkeypatch.setattr(checkpoints.loader, "_recent", type(checkpoints.loader._recent)())
    return counts


def checkpoint(value: float) -> dict:
    return {"state_dict": {"w": torch.full((100,), value)}, "hyper_parameters": {"lr": 1e-3, "sizes": [1, 2]},
            "callbacks": {"ModelCheckpoint": {"best_k_models": {"a.ckpt": 1.0}}}}


def test_a_file_loaded_many_times_is_read_and_hashed_once(tmp_path, reads):
    path = settled(saved(tmp_path / "last.ckpt", checkpoint(1.0)))
    loaded = [load_checkpoint_file(path) for _ in range(5)]
    assert reads == {"load": 1, "digest": 1}
    assert all(torch.equal(c["state_dict"]["w"], torch.ones(100)) and c["hyper_parameters"] == {"lr": 1e-3, "sizes": [1, 2]}
               for c in loaded)


def test_what_one_reader_changes_no_other_reader_sees(tmp_path, reads):
    """LightningCLI pops keys from the hyperparameters it reads; the trainer's restore keeps the dicts and tensors it
    gets (ModelCheckpoint adds to best_k_models, the optimizer updates the moments in place) and so takes the kept
    checkpoint with it: the next read is a fresh one."""
    path = settled(saved(tmp_path / "last.ckpt", checkpoint(1.0)))
    first = load_checkpoint_file(path)
    first["hyper_parameters"].pop("lr")
    first["hyper_parameters"]["sizes"].append(3)
    first["callbacks"]["ModelCheckpoint"]["best_k_models"]["b.ckpt"] = 2.0
    second = load_checkpoint_file(path)
    assert second["hyper_parameters"] == {"lr": 1e-3, "sizes": [1, 2]}
    assert second["callbacks"]["ModelCheckpoint"]["best_k_models"] == {"a.ckpt": 1.0}
    assert reads["load"] == 1

    restored = load_checkpoint_file(path, hand_over=True)  # the kept one, handed over: the restore changes it
    assert reads["load"] == 1
    restored["state_dict"]["w"].add_(1)
    assert torch.equal(load_checkpoint_file(path)["state_dict"]["w"], torch.ones(100)) and reads["load"] == 2


def test_a_rewritten_file_is_read_again(tmp_path, reads):
    path = settled(saved(tmp_path / "last.ckpt", checkpoint(1.0)))
    assert load_checkpoint_file(path)["state_dict"]["w"][0] == 1.0
    settled(saved(path, checkpoint(2.0)))  # the run's next save (a new file under the same name)
    assert load_checkpoint_file(path)["state_dict"]["w"][0] == 2.0
    assert reads == {"load": 2, "digest": 2}
    checksum_file = path.with_name("last.ckpt.sha256")
    checksum_file.write_text("0" * 64)
    settled(checksum_file)  # another checksum file: the file is checked again
    with pytest.raises(CheckpointError, match="is corrupt"):
        load_checkpoint_file(path)

    # A file written just now is not kept: rewritten in place within the same clock tick, it would keep its size, its
    # inode and its times.
    fresh = saved(tmp_path / "fresh.ckpt", checkpoint(3.0))
    load_checkpoint_file(fresh)
    load_checkpoint_file(fresh)
    assert reads["load"] == 4
    torch.save(checkpoint(4.0), fresh)
    (tmp_path / "fresh.ckpt.sha256").unlink()
    assert load_checkpoint_file(fresh)["state_dict"]["w"][0] == 4.0


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
    ckpt = settled(next(tmp_path.glob("logs/tensorboard/*/version_0/checkpoints/last.ckpt")))
    resume = option.format("ckpt_path") + str(ckpt)
    result = preloaded.run_code(COUNTING, [str(ckpt), *TINY[front_end], max_steps.format(4), resume], tmp_path, env,
                                timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = json.loads(result.stdout.split("COUNTS", 1)[1])
    assert counts == {"torch.load": 1, "sha256": 1}
    assert torch.load(ckpt, weights_only=True)["global_step"] == 4  # resumed, and trained on to its last step
