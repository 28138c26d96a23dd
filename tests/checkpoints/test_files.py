"""Checkpoint files: atomic writes, checksums verified on load, clear errors for unusable files, and
resuming with changed settings (checkpoints/file_format.py, checkpoints/loader.py,
checkpoints/trainer.py). The kill tests against a real training process are in test_interruptions.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from checkpoints.errors import CheckpointError
from checkpoints.trainer import AtomicCheckpointIO, SafeCheckpoints
from checkpoints.file_format import file_digest, listed_digests, remove_stale_temporaries, save_checkpoint_file
from checkpoints.loader import load_checkpoint_file
from models import JSA, VAE

REPO = Path(__file__).resolve().parents[2]

CHECKPOINT = {"state_dict": {"w": torch.arange(1000.0)}, "epoch": 3}


def test_save_writes_the_checksum_and_load_verifies_it(tmp_path):
    path = tmp_path / "last.ckpt"
    save_checkpoint_file(CHECKPOINT, path)
    assert (tmp_path / "last.ckpt.sha256").read_text() == file_digest(path)
    assert torch.equal(load_checkpoint_file(path)["state_dict"]["w"], CHECKPOINT["state_dict"]["w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]  # no temporaries left

    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the tensor data: torch.load alone would not notice
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=True)["epoch"] == 3
    with pytest.raises(CheckpointError, match=r"last\.ckpt is corrupt: its SHA-256"):
        load_checkpoint_file(path)

    (tmp_path / "last.ckpt.sha256").unlink()  # a checkpoint without a checksum (older, or from elsewhere) loads
    assert load_checkpoint_file(path)["epoch"] == 3


def test_a_kill_between_the_two_renames_leaves_a_loadable_pair(tmp_path, monkeypatch):
    """While the checkpoint is replaced, its checksum file lists the old and the new digest: killed after the
    checksum file was replaced but before the checkpoint was, the old checkpoint still verifies."""
    path = tmp_path / "last.ckpt"
    save_checkpoint_file(CHECKPOINT, path)
    old_digest = file_digest(path)
    real_replace = os.replace

    def killed_before_the_checkpoint_is_replaced(src, dst):
        if str(dst).endswith(".ckpt"):
            raise KeyboardInterrupt  # the process dies here
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_before_the_checkpoint_is_replaced)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint_file({**CHECKPOINT, "epoch": 4}, path)
    monkeypatch.setattr(os, "replace", real_replace)
    assert file_digest(path) == old_digest and old_digest in (tmp_path / "last.ckpt.sha256").read_text()
    assert load_checkpoint_file(path)["epoch"] == 3


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    dead = tmp_path / ".last.ckpt.tmp-999999999"  # no such process
    alive = tmp_path / f".last.ckpt.tmp-{os.getpid()}"
    not_pids = [tmp_path / ".last.ckpt.tmp-12ab", tmp_path / ".last.ckpt.tmp--1"]  # -1 would signal every process
    for path in (dead, alive, *not_pids):
        path.write_bytes(b"half")
    remove_stale_temporaries(tmp_path)
    assert not dead.exists() and alive.exists() and all(path.exists() for path in not_pids)


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("directory", "is a directory .*e.g. .*checkpoints/last.ckpt"),
    (b"", "is empty"),
    (b"lr: 0.001\nlatent_dim: 32\n", r"is not a readable checkpoint \(UnpicklingError: Unsupported operand \d+\); it is not a "
                                    r"file torch.save wrote \(a checkpoint is a run's checkpoints/\*.ckpt\)$"),  # hparams.yaml
    ("truncated", "is not a readable checkpoint .*; it is truncated, was not written by torch.save"),
    ("no_state", "holds no model state"),
])
def test_unusable_checkpoints_are_one_clear_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.ckpt"
    if content == "truncated":
        save_checkpoint_file(CHECKPOINT, path)
        path.write_bytes(path.read_bytes()[:2000])
        (tmp_path / "bad.ckpt.sha256").unlink()
    elif content == "no_state":
        torch.save({"epoch": 1}, path)
    elif content == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message) as error:
        load_checkpoint_file(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)
    if content == "truncated":  # the reader's reason as one whole sentence, not its advice cut short
        reason = re.search(r"\((\w+: .*?)\); it is truncated", str(error.value))[1]
        assert ". " not in reason and not reason.endswith(" "), reason


def test_a_stream_is_read_with_the_checks_of_a_file_but_its_checksum():
    """load_from_checkpoint takes a stream, as Lightning's does (tests/launch/test_first_hour.py loads one): read weights
    only and checked as a file is, one line naming it where it is not a checkpoint."""
    import io

    with pytest.raises(CheckpointError, match="checkpoint given as a stream is not a readable checkpoint"):
        VAE.load_from_checkpoint(io.BytesIO(b"anything"))


def fit(model: L.LightningModule, tmp_path, steps: int, ckpt_path=None) -> L.Trainer:
    x = torch.rand(64, 1, 28, 28).bernoulli()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, torch.arange(64)), batch_size=16)
    trainer = L.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path, limit_val_batches=0, callbacks=[SafeCheckpoints()])
    trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt_path)
    return trainer


def test_trainer_writes_through_the_atomic_io_and_resume_applies_the_new_learning_rate(tmp_path, caplog):
    trainer = fit(VAE(latent_dim=4, lr=1e-3), tmp_path, 2)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    path = tmp_path / "ckpt.ckpt"
    trainer.save_checkpoint(path)
    assert (tmp_path / "ckpt.ckpt.sha256").is_file()

    with caplog.at_level("WARNING"):
        trainer = fit(VAE(latent_dim=4, lr=5e-4), tmp_path, 3, ckpt_path=path)
    assert trainer.optimizers[0].param_groups[0]["lr"] == 5e-4  # Lightning alone would restore 1e-3
    assert "model.lr: 0.001 -> 0.0005" in caplog.text and "optimizer lr 0.001 (checkpoint) -> 0.0005" in caplog.text


def test_resume_into_other_shapes_names_the_settings(tmp_path):
    trainer = fit(JSA(mis_steps=2, val_num_samples=2, cache_size=64), tmp_path, 1)
    path = tmp_path / "ckpt.ckpt"
    trainer.save_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"does not fit this model .*model\.num_latents=20 -> 12") as error:
        fit(JSA(mis_steps=2, val_num_samples=2, cache_size=64, num_latents=12), tmp_path, 2, ckpt_path=path)
    assert "\n" not in str(error.value) and str(error.value).startswith(f"checkpoint {path} does not fit this model")
    assert "use the settings it was trained with" in str(error.value)  # resumed or tested alike
    with pytest.raises(CheckpointError, match=r"cache\.codes.*model\.use_cache=True -> False"):
        fit(JSA(mis_steps=2, val_num_samples=2, use_cache=False), tmp_path, 2, ckpt_path=path)


@pytest.mark.parametrize("alter, named", [
    (lambda c: c.update(global_step=-1), "global_step"),
    (lambda c: c["loops"]["fit_loop"].update(epoch_progress="garbage"), "loops.fit_loop.epoch_progress"),
    (lambda c: c["loops"]["fit_loop"]["epoch_progress"]["total"].update(completed=True), "loops.fit_loop.epoch_progress.total.completed"),
])
def test_a_loop_count_that_no_training_loop_writes_is_refused_naming_it(alter, named, tmp_path):
    trainer = fit(VAE(latent_dim=4), tmp_path, 1)
    path = tmp_path / "ckpt.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)
    alter(checkpoint)
    save_checkpoint_file(checkpoint, path)
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: its {named} is not what a training loop writes there"):
        fit(VAE(latent_dim=4), tmp_path, 2, ckpt_path=path)


def test_resume_into_another_optimizer_class_is_refused_before_a_step(tmp_path):
    import functools

    trainer = fit(VAE(latent_dim=4), tmp_path, 1)  # Adam
    path = tmp_path / "ckpt.ckpt"
    trainer.save_checkpoint(path)
    model = VAE(latent_dim=4, optimizer=functools.partial(torch.optim.SGD, lr=1e-3))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError, match=r"optimizer torch\.optim\.adam\.Adam, this run uses torch\.optim\.sgd\.SGD") as refused:
        fit(model, tmp_path, 3, ckpt_path=path)
    assert "(optimizer=... of configs/optimizer/; in LightningCLI --model.optimizer=torch.optim.adam.Adam --model.optimizer.lr=0.001)" in str(refused.value)
    restored = torch.load(path, weights_only=True)["state_dict"]
    assert all(torch.equal(p, restored[name]) for name, p in model.state_dict().items() if name in restored)
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # restored, then stopped: no step


def test_a_trainer_without_safe_checkpoints_is_told_once_how_to_add_them(tmp_path):
    """A script's own Trainer that lacks the callback gets one warning naming it (models/base.py), and the
    builder's list of always-on callbacks holds it (launch/run_builder.py)."""
    from launch.run_builder import always_on_callbacks

    x = torch.rand(16, 1, 28, 28).bernoulli()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, torch.arange(16)), batch_size=16)
    trainer = L.Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path, limit_val_batches=0)
    with pytest.warns(UserWarning, match=r"lacks checkpoints\.trainer\.SafeCheckpoints.*Trainer\(callbacks=\[SafeCheckpoints\(\)"):
        trainer.fit(VAE(latent_dim=4), train_dataloaders=loader)
    assert any(isinstance(c, SafeCheckpoints) for c in always_on_callbacks(None))


# Two writers save one path over and over while a reader loads it, until the reader has loaded it READS times. Each
# step waits on the event it needs (the other processes started, the reader done), never on a time or a count of
# saves that a busy machine could miss: the reads overlap the saves however slowly each process runs.
WRITER = """
import sys
from pathlib import Path
from typing import Any
import torch
from checkpoints.file_format import save_checkpoint_file
path, writer, started, stop = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
saves = 0
while not stop.exists():
    save_checkpoint_file({"state_dict": {"w": torch.full((2000,), float(writer * 100000 + saves))}}, path)
    saves += 1
    if saves == 1:
        started.touch()
print(saves - 1)
"""
READER = """
import sys, time
from pathlib import Path
from typing import Any
from checkpoints.errors import CheckpointError
from checkpoints.loader import load_checkpoint_file
path, wanted, stop, started = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), [Path(p) for p in sys.argv[4:]]
while not all(p.exists() for p in started):  # both writers are saving
    time.sleep(0.01)
reads = refused = 0
while reads + refused < wanted:
    try:
        load_checkpoint_file(path)
        reads += 1
    except CheckpointError as error:
        refused += 1
        print(error, file=sys.stderr)
stop.touch()
print(reads, refused)
"""
READS = 20


@pytest.mark.slow  # three processes, hundreds of saves
def test_two_processes_saving_one_path_leave_a_consistent_pair_and_no_reader_refuses(tmp_path):
    """Two writers and a reader, each a process of its own, forked from tests/preloaded's server (torch imported there;
    the project's modules imported by each process). Each writes stdout and stderr to one file, its count last."""
    from tests import preloaded

    path = tmp_path / "last.ckpt"
    save_checkpoint_file({"state_dict": {"w": torch.zeros(2000)}}, path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    stop, started = tmp_path / "stop", [tmp_path / f"writer-{w}-saving" for w in (1, 2)]
    (tmp_path / "writer.py").write_text(WRITER)
    (tmp_path / "reader.py").write_text(READER)
    writers = [preloaded.start_script(tmp_path / "writer.py", [str(path), str(w), str(started[w - 1]), str(stop)], tmp_path, env)
               for w in (1, 2)]
    reader = preloaded.start_script(tmp_path / "reader.py", [str(path), str(READS), str(stop), *map(str, started)], tmp_path, env)
    codes = [process.wait(timeout=900) for process in (reader, *writers)]
    read, written = reader.log.read_text(), [w.log.read_text() for w in writers]
    assert codes == [0, 0, 0], (codes, read[-2000:], [text[-2000:] for text in written])
    last_saves = [int(text.split()[-1]) for text in written]
    reads, refused = map(int, read.split()[-2:])
    assert refused == 0 and reads == READS, (reads, read[-2000:])
    assert listed_digests(path) == [file_digest(path)]  # the final pair is one save's
    assert load_checkpoint_file(path)["state_dict"]["w"][0] in (100000 + last_saves[0], 200000 + last_saves[1])


def small_checkpoint(**state) -> dict:
    return {"state_dict": {"w": torch.ones(3), **state}}


def test_checksum_files_written_by_sha256sum_or_in_capitals_are_read(tmp_path):
    path = tmp_path / "x.ckpt"
    save_checkpoint_file(small_checkpoint(), path)
    digest = file_digest(path)
    sidecar = tmp_path / "x.ckpt.sha256"
    for text in (f"{digest.upper()}\n", f"{digest}  x.ckpt\n", f"{digest} *x.ckpt\n"):
        sidecar.write_text(text)
        assert load_checkpoint_file(path)["state_dict"]["w"].sum() == 3
    sidecar.write_text(f"{'0' * 64}  x.ckpt\n")
    with pytest.raises(CheckpointError, match="is corrupt: its SHA-256"):
        load_checkpoint_file(path)
    sidecar.write_text("not a digest\n")
    with pytest.raises(CheckpointError, match=r"x.ckpt.sha256 holds no SHA-256 digest \(64 hexadecimal digits\)"):
        load_checkpoint_file(path)


def test_a_save_replaces_a_checksum_file_of_no_digest(tmp_path):
    """A run resumed from its best checkpoint beside a last.ckpt whose checksum file holds garbage: its first save of
    last.ckpt writes both files anew (the garbage let no load through), instead of stopping the run."""
    path = tmp_path / "last.ckpt"
    save_checkpoint_file(small_checkpoint(), path)
    (tmp_path / "last.ckpt.sha256").write_text("not a digest\n")
    save_checkpoint_file(small_checkpoint(b=torch.zeros(2)), path)
    assert listed_digests(path) == [file_digest(path)]
    assert load_checkpoint_file(path)["state_dict"]["b"].shape == (2,)


@pytest.mark.parametrize("state, message", [
    ({"w": torch.tensor([1.0, float("nan")])}, r"holds non-finite weights \(w\): the run diverged"),
    ({"b": torch.tensor([float("inf")])}, r"holds non-finite weights \(b\)"),
    ({"w": [1.0, 2.0]}, "state_dict is not a mapping of parameter names to tensors"),
])
def test_checkpoints_of_the_wrong_structure_or_with_non_finite_weights_are_refused(state, message, tmp_path):
    path = tmp_path / "x.ckpt"
    save_checkpoint_file({"state_dict": state}, path)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint_file(path)


def test_a_save_that_fails_on_a_full_disk_leaves_the_old_file_and_no_partial_one(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    save_checkpoint_file(small_checkpoint(), path)
    before = (path.read_bytes(), (tmp_path / "last.ckpt.sha256").read_bytes())

    def full_disk(descriptor):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(CheckpointError, match=r"could not write .*last.ckpt.sha256 \(No space left on device\)"):
        save_checkpoint_file(small_checkpoint(w=torch.zeros(3)), path)
    monkeypatch.undo()
    assert (path.read_bytes(), (tmp_path / "last.ckpt.sha256").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]
    assert load_checkpoint_file(path)["state_dict"]["w"].sum() == 3


def test_a_directory_locked_for_good_by_another_process_is_an_error_not_a_hang(tmp_path, monkeypatch):
    """A live run holds an exclusive flock on its run directory for its whole life; reading a checkpoint written there
    (hpc_ckpt_N.ckpt) from another process waits LOCK_WAIT_S, then says why, instead of hanging silently. The lock is
    held here by a real second process."""
    import checkpoints.file_format as checkpoint_files

    path = tmp_path / "hpc_ckpt_1.ckpt"
    save_checkpoint_file({"state_dict": {"w": torch.zeros(2)}}, path)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(tmp_path)!r}, os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(checkpoint_files, "LOCK_WAIT_S", 0.3)
        with pytest.raises(CheckpointError, match=f"^{tmp_path} has been locked by another process for 0.3 s"):
            load_checkpoint_file(path)
    finally:
        holder.kill()
        holder.wait()
    assert load_checkpoint_file(path)["state_dict"]["w"].shape == (2,)  # released: read at once


def test_a_save_waits_for_a_slow_reader_however_long_instead_of_ending_the_run(tmp_path, monkeypatch):
    """The read's deadline is not the save's: a save that gave up would end the training run (and remove a new run's
    directory). A second process reads (holds the shared lock) for longer than LOCK_WAIT_S; the save waits, then lands."""
    import checkpoints.file_format as checkpoint_files

    monkeypatch.setattr(checkpoint_files, "LOCK_WAIT_S", 0.1)
    finished = tmp_path.parent / f"{tmp_path.name}-read-finished"  # written by the reader just before it unlocks
    reader = subprocess.Popen([sys.executable, "-c", "import fcntl, os, time\n"
                               f"fd = os.open({str(tmp_path)!r}, os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_SH)\n"
                               "print('reading', flush=True); time.sleep(1.0)\n"
                               f"open({str(finished)!r}, 'w').close(); fcntl.flock(fd, fcntl.LOCK_UN); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "reading"
        save_checkpoint_file({"state_dict": {"w": torch.ones(2)}}, tmp_path / "last.ckpt")
        assert finished.exists()  # it saved only once the reader had finished
    finally:
        reader.kill()
        reader.wait()
    assert torch.equal(load_checkpoint_file(tmp_path / "last.ckpt")["state_dict"]["w"], torch.ones(2))


def test_a_save_killed_after_another_killed_save_leaves_the_checkpoint_loadable(tmp_path, monkeypatch):
    """Two saves in a row killed between listing the new digest and replacing the checkpoint (the fault harness's kills
    during consecutive resumes): the checkpoint on disk stays listed in its checksum file, and verifies."""
    from checkpoints import file_format

    path = tmp_path / "last.ckpt"
    file_format.save_checkpoint_file({"step": 0}, path)
    write = file_format.write_atomically

    def killed_before_the_replace(target: Path, data: Any) -> None:
        if target == path:
            raise KeyboardInterrupt  # the process ends here: the checkpoint is not replaced
        write(target, data)

    monkeypatch.setattr(file_format, "write_atomically", killed_before_the_replace)
    for step in (1, 2):
        with pytest.raises(KeyboardInterrupt):
            file_format.save_checkpoint_file({"step": step}, path)
    monkeypatch.undo()
    file_format.verify_checkpoint_file(path)
    assert torch.load(path, weights_only=True)["step"] == 0


def test_the_plugin_removes_a_checkpoint_file_and_its_checksum_never_a_link_or_a_directory(tmp_path):
    """Lightning's ModelCheckpoint removes "the previous" checkpoint through the plugin: a regular file goes with its
    checksum file; a link (to the user's file) or a directory named like a checkpoint stays, with a line."""
    outside = tmp_path / "thesis.tex"
    outside.write_text("years of work")
    run = tmp_path / "checkpoints"
    save_checkpoint_file(small_checkpoint(), run / "epoch=0.ckpt")
    (run / "last.ckpt").symlink_to(outside)
    (run / "epoch=1.ckpt").mkdir()
    (run / "epoch=1.ckpt" / "notes.txt").write_text("kept")
    plugin = AtomicCheckpointIO()
    for name in ("epoch=0.ckpt", "last.ckpt", "epoch=1.ckpt"):
        plugin.remove_checkpoint(run / name)
    assert sorted(p.name for p in run.iterdir()) == ["epoch=1.ckpt", "last.ckpt"]
    assert outside.read_text() == "years of work" and (run / "epoch=1.ckpt" / "notes.txt").read_text() == "kept"
