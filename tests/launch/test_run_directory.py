"""Run directories: a run refused before it saved anything leaves nothing behind; a resumed run keeps its own (launch/runs/run_directory.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from common.files import LeadsOutside
from launch.runs import run_directory
from checkpoints.errors import CheckpointError
from launch.runs.run_directory import (ReservedVersionLogger, no_traces_if_refused, own_run_directory, placed, process_dir,
                                       read_owner, run_logger)


class Refused(ValueError):
    pass


def logger_at(run_dir: Path) -> SimpleNamespace:
    return SimpleNamespace(log_dir=str(run_dir), _version=run_dir.name)


def test_a_new_run_refused_before_saving_is_removed_with_its_empty_parents(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs" / "tensorboard" / "other").mkdir(parents=True)
    run_dir = tmp_path / "logs" / "tensorboard" / "jsa" / "version_0"
    with pytest.raises(Refused), no_traces_if_refused(logger_at(run_dir), (Refused,)):
        run_dir.mkdir(parents=True)
        (run_dir / f"events.out.tfevents.1.host.{os.getpid()}.0").write_text("")
        raise Refused
    assert not (tmp_path / "logs" / "tensorboard" / "jsa").exists() and (tmp_path / "logs" / "tensorboard" / "other").is_dir()


def test_a_refused_resume_keeps_the_run_as_it_was(tmp_path):
    run_dir = tmp_path / "version_0"
    (run_dir / "checkpoints").mkdir(parents=True)
    old = [run_dir / "events.out.tfevents.1.host.1.0", run_dir / "checkpoints" / "last.ckpt"]
    for path in old:
        path.write_text("earlier run")
    (run_dir / "config.yaml").write_text("lr: 0.001\n")
    past = time.time() - 60
    for path in [*old, run_dir / "config.yaml"]:
        os.utime(path, (past, past))
    with pytest.raises(Refused), no_traces_if_refused(logger_at(run_dir), (Refused,)):
        (run_dir / f"events.out.tfevents.2.host.{os.getpid()}.0").write_text("")
        (run_dir / "config.yaml").write_text("lr: 0.5\n")  # LightningCLI rewrites it at setup
        raise Refused
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "config.yaml", "events.out.tfevents.1.host.1.0"]
    assert (run_dir / "config.yaml").read_text() == "lr: 0.001\n"


def test_a_run_that_saved_a_checkpoint_keeps_everything(tmp_path):
    run_dir = tmp_path / "version_0"
    with pytest.raises(Refused), no_traces_if_refused(logger_at(run_dir), (Refused,)):
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "last.ckpt").write_text("trained")
        raise Refused
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_other_errors_are_not_cleaned_up(tmp_path):
    run_dir = tmp_path / "version_0"
    with pytest.raises(RuntimeError), no_traces_if_refused(logger_at(run_dir), (Refused,)):
        run_dir.mkdir()
        raise RuntimeError("a bug: its traces are evidence")
    assert run_dir.is_dir()


def test_a_refused_run_keeps_the_empty_directories_the_user_made(tmp_path, monkeypatch):
    """Directories that existed when the process started stay, empty or not; those the run made go."""
    from launch.runs import run_directory

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_directory, "_existing_before", set())
    (tmp_path / "logs" / "tensorboard").mkdir(parents=True)  # made by the user, empty
    run_directory.note_existing_directories("logs")
    run_dir = tmp_path / "logs" / "tensorboard" / "jsa" / "version_0"
    with pytest.raises(Refused), no_traces_if_refused(logger_at(run_dir), (Refused,)):
        run_dir.mkdir(parents=True)
        (run_dir / f"events.out.tfevents.1.host.{os.getpid()}.0").write_text("")
        raise Refused
    assert (tmp_path / "logs" / "tensorboard").is_dir() and not (tmp_path / "logs" / "tensorboard" / "jsa").exists()


def test_a_version_taken_since_the_listing_goes_to_the_next_one(tmp_path, monkeypatch):
    """Two runs started at the same moment list the same versions: the directory is reserved by `os.mkdir`, which one
    of them wins; the other takes the next version (tests/launch/test_interruptions.py races two processes)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    monkeypatch.setattr(TensorBoardLogger, "_get_next_version", lambda self: 0)  # the listing found no version
    (tmp_path / "jsa" / "version_0").mkdir(parents=True)  # made since, by the other run
    assert ReservedVersionLogger(str(tmp_path), name="jsa").version == 1
    assert (tmp_path / "jsa" / "version_1" / ".owner").read_text().startswith(f"process {os.getpid()} on ")


def test_a_run_name_folder_that_links_elsewhere_receives_no_new_run(tmp_path):
    """A received logs/ whose run-name folder is a link to the user's folder: the new run's version_N is refused there,
    before anything is made."""
    users = tmp_path / "users-folder"
    users.mkdir()
    (tmp_path / "logs" / "tensorboard").mkdir(parents=True)
    (tmp_path / "logs" / "tensorboard" / "jsa").symlink_to(users)
    logger = ReservedVersionLogger(str(tmp_path / "logs" / "tensorboard"), name="jsa")
    with pytest.raises(LeadsOutside, match="jsa leads through a symbolic link to .*users-folder"):
        logger.version
    (tmp_path / "received-logs").mkdir()
    (tmp_path / "received-logs" / "tensorboard").symlink_to(users)  # the TensorBoard folder itself a link out of log_dir
    with pytest.raises(LeadsOutside, match="received-logs/tensorboard leads through a symbolic link"):
        run_logger(str(tmp_path / "received-logs" / "tensorboard"), "jsa", None)
    assert list(users.iterdir()) == []


def test_a_run_continued_in_its_own_kind_of_logger_says_the_chosen_one_is_not_used(tmp_path, monkeypatch, caplog):
    """A checkpoint of a TensorBoard run, resumed or tested with logger=csv: the run goes on in its TensorBoard folder
    (one run, one logger), and one line says that the chosen CSV logger and its settings apply to new runs only; a
    CSV run's checkpoint, wherever it lies, goes on in its CSV run."""
    import logging

    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "logs" / "tensorboard" / "vae" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="launch.runs.run_directory"):
        logger = run_logger("logs/csv", "vae", str(checkpoint), flush_logs_every_n_steps=7)
    assert Path(logger.log_dir) == checkpoint.parents[1] and type(logger).__name__ == "RunLogger"
    assert f"continuing the tensorboard run that wrote {checkpoint} in its own logger: this command's csv logger and its " \
           "settings apply to new runs" in caplog.text, caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="launch.runs.run_directory"):
        run_logger("logs/tensorboard", "vae", str(checkpoint))  # its own kind: nothing to say
    assert "continuing" not in caplog.text
    # a run a logger of one's own put elsewhere (--trainer.logger=CSVLogger --trainer.logger.save_dir=mine): its kind
    # by what it holds, no TensorBoard event file in a CSV run
    elsewhere = tmp_path / "mine" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    elsewhere.parent.mkdir(parents=True)
    assert type(run_logger("logs/tensorboard", "vae", str(elsewhere))).__name__ == "CSVRunLogger"
    (elsewhere.parents[1] / "events.out.tfevents.1.box.2.0").write_bytes(b"")
    assert type(run_logger("logs/tensorboard", "vae", str(elsewhere))).__name__ == "RunLogger"


def test_a_version_folder_that_links_elsewhere_is_not_continued_by_a_requeued_job(tmp_path, monkeypatch):
    """A SLURM job's run (<name>/slurm_job_<id>) continued after a requeue: a link there out of the root is refused."""
    users = tmp_path / "users-folder"
    users.mkdir()
    (tmp_path / "tensorboard" / "jsa").mkdir(parents=True)
    (tmp_path / "tensorboard" / "jsa" / "slurm_job_7").symlink_to(users)
    monkeypatch.setattr("launch.runs.run_directory.slurm_job_id", lambda: "7")
    with pytest.raises(LeadsOutside, match="slurm_job_7 leads through a symbolic link"):
        run_logger(str(tmp_path / "tensorboard"), "jsa", None)
    assert list(users.iterdir()) == []


def test_a_process_folder_that_links_out_of_its_kind_is_refused_and_one_placed_elsewhere_is_the_users(tmp_path):
    users = tmp_path / "users-folder"
    users.mkdir()
    (tmp_path / "logs" / "cli").mkdir(parents=True)
    (tmp_path / "logs" / "cli" / "jsa").symlink_to(users)
    with pytest.raises(LeadsOutside, match=f"outside {tmp_path}/logs:"):
        process_dir(str(tmp_path / "logs"), "cli", "jsa")
    assert process_dir(str(tmp_path / "logs"), "cli", "vae").startswith(f"{tmp_path}/logs/cli/vae/")
    assert placed(str(tmp_path / "logs"), "hydra", str(users / "run")) == str(users / "run")  # hydra.run.dir=...: the user's


def test_a_csv_run_name_folder_that_links_elsewhere_is_refused(tmp_path):
    from omegaconf import OmegaConf

    from launch.runs.run_directory import chosen_logger

    users = tmp_path / "users-folder"
    users.mkdir()
    (tmp_path / "logs" / "csv").mkdir(parents=True)
    (tmp_path / "logs" / "csv" / "jsa").symlink_to(users)
    cfg = OmegaConf.create({"log_dir": str(tmp_path / "logs"), "logger": {"_target_": "lightning.pytorch.loggers.CSVLogger"},
                            "ckpt_path": None})
    with pytest.raises(LeadsOutside, match="csv/jsa leads through a symbolic link"):
        chosen_logger(cfg, "jsa")
    assert chosen_logger(cfg, "vae")[0].root_dir == str(tmp_path / "logs" / "csv" / "vae")


def test_a_refused_runs_folder_goes_but_not_the_users_folder_a_link_led_to(tmp_path, monkeypatch):
    """Hydra's folder of a refused run, made through a link before the refusal: it goes, the (empty) folder the link
    leads to stays."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_directory, "_existing_before", set())
    users = tmp_path / "users-empty-folder"
    users.mkdir()
    (tmp_path / "logs" / "hydra").mkdir(parents=True)
    (tmp_path / "logs" / "hydra" / "jsa").symlink_to(users)
    run_directory.note_existing_directories(tmp_path / "logs")
    (users / "2026-01-01_00-00-00-1" / ".hydra").mkdir(parents=True)
    run_directory.remove_if_only_hydra_files(str(tmp_path / "logs" / "hydra" / "jsa" / "2026-01-01_00-00-00-1"))
    assert users.is_dir() and list(users.iterdir()) == []


@pytest.mark.parametrize("name", [".owner", "hparams.yaml", "config.yaml", "hydra_job.yaml"])
def test_a_received_run_holding_a_folder_where_it_writes_a_file_is_refused_naming_it(name, tmp_path):
    run_dir = tmp_path / "tensorboard" / "jsa" / "version_0"
    (run_dir / name / "inside").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=f"^the run {run_dir} holds {name} as a folder: the run writes a file there"):
        own_run_directory(run_dir, tmp_path / "tensorboard")
    assert sorted(p.name for p in run_dir.iterdir()) == [name]


def test_a_received_runs_owner_note_or_hparams_that_is_a_fifo_is_never_waited_on(tmp_path, monkeypatch):
    """A resume writes its own .owner over a FIFO (replaced, never opened) and leaves hparams.yaml to Lightning's
    writer (replaced too); the owner's note, read for a message, is not waited on."""
    import threading

    monkeypatch.setattr(run_directory, "OWNER_NOTE_WAIT_S", 0.0)  # (the wait for a note still to come: below)

    run_dir = tmp_path / "tensorboard" / "jsa" / "version_0"
    run_dir.mkdir(parents=True)
    for name in (".owner", "hparams.yaml"):
        os.mkfifo(run_dir / name)
    said = []
    reader = threading.Thread(target=lambda: said.append(read_owner(run_dir / ".owner")), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert said == ["another process"]
    own_run_directory(run_dir, tmp_path / "tensorboard")
    assert (run_dir / ".owner").read_text().startswith(f"process {os.getpid()} on ")


def test_a_refusal_names_the_owner_whose_note_follows_its_lock(tmp_path, monkeypatch):
    """The owner takes the lock, then writes its note: a second writer refused in between waits for the note, and
    names the process."""
    import fcntl

    run_dir = tmp_path / "tensorboard" / "jsa" / "version_0"
    run_dir.mkdir(parents=True)
    holder = os.open(run_dir, os.O_RDONLY)  # the owner, holding the lock, its note not written yet
    fcntl.flock(holder, fcntl.LOCK_EX)
    waits = []

    def owner_writes_its_note_meanwhile(seconds: float) -> None:
        waits.append(seconds)
        (run_dir / ".owner").write_text("process 4242 on node7\n")

    monkeypatch.setattr(run_directory, "time", SimpleNamespace(monotonic=time.monotonic, sleep=owner_writes_its_note_meanwhile))
    try:
        with pytest.raises(CheckpointError, match=f"^the run {run_dir} is being written by process 4242 on node7; "):
            own_run_directory(run_dir, tmp_path / "tensorboard")
    finally:
        os.close(holder)
    assert len(waits) == 1


def test_a_run_held_by_a_live_process_is_refused_as_in_use_before_what_it_holds_is_judged(tmp_path, monkeypatch):
    """The owner's lock first: a run another process writes is named as in use, even when it holds a link (its
    `.owner` linked to a device, tests/checkpoints/test_received_files.py runs the two processes)."""
    import fcntl

    monkeypatch.setattr(run_directory, "OWNER_NOTE_WAIT_S", 0.0)  # no note comes: named as another process at once

    run_dir = tmp_path / "tensorboard" / "jsa" / "version_0"
    run_dir.mkdir(parents=True)
    (run_dir / ".owner").symlink_to("/dev/zero")
    holder = os.open(run_dir, os.O_RDONLY)  # another open file: its flock excludes this process's own as another's would
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with pytest.raises(CheckpointError, match=f"^the run {run_dir} is being written by another process; "):
            own_run_directory(run_dir, tmp_path / "tensorboard")
    finally:
        os.close(holder)
    with pytest.raises(CheckpointError, match="holds .owner as a link to /dev/zero"):  # released: what it holds is judged
        own_run_directory(run_dir, tmp_path / "tensorboard")


@pytest.mark.slow  # real processes
def test_a_log_dir_nobody_can_write_to_is_one_line(tmp_path, mnist_dir):
    """An immutable directory (chattr +i: read-only even for root) as log_dir, or as the working directory."""
    import subprocess
    import sys

    locked = tmp_path / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        env = {**os.environ, "DATA_DIR": str(mnist_dir)}
        train = str(Path(__file__).resolve().parents[2] / "train.py")
        given = subprocess.run([sys.executable, train, "model=vae", f"log_dir={locked}/runs"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=300)
        default = subprocess.run([sys.executable, train, "model=vae"], cwd=locked, env=env, capture_output=True, text=True,
                                 timeout=300)
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert given.returncode == 2 and given.stderr.strip() == (
        f"error: log_dir={locked}/runs: {locked} cannot be written to (Operation not permitted); give a directory the run can write to")
    assert default.returncode == 2 and default.stderr.strip().startswith("error: log_dir=logs (the default): ")
    assert list(locked.iterdir()) == []


def test_a_resumed_run_keeps_tracking_its_best_checkpoint(tmp_path, mnist_dir, monkeypatch):
    """The first run is given a relative log directory, the resume an absolute checkpoint path: both must name the
    checkpoint directory alike, or Lightning warns "The dirpath has changed" and forgets the best val/nll so far."""
    import warnings

    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from launch.runs.run_directory import run_logger
    from datamodules import MNISTDataModule
    from models import VAE

    monkeypatch.chdir(tmp_path)

    def fit(steps: int, ckpt_path: str | None) -> ModelCheckpoint:
        checkpoint = ModelCheckpoint(monitor="val/nll", save_last=True)
        trainer = L.Trainer(max_steps=steps, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0,
                            logger=run_logger("logs/tensorboard", "run", ckpt_path), callbacks=[checkpoint],
                            enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(VAE(latent_dim=4, val_num_samples=2), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16),
                    ckpt_path=ckpt_path)
        return checkpoint

    first = fit(2, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = fit(4, str((tmp_path / first.last_model_path).resolve()))
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]
    assert Path(resumed.dirpath) == Path(first.dirpath) and Path(first.dirpath).is_absolute()


def test_the_last_line_names_the_checkpoint_in_a_process_that_spawned_the_ranks(tmp_path, monkeypatch):
    """Under ddp_spawn the ranks resolve ModelCheckpoint's folder in their own processes; the process that prints the
    run's last line, which never did, still names the run's last.ckpt (in the logger's run, where the ranks wrote it)."""
    from lightning import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import TensorBoardLogger

    monkeypatch.chdir(tmp_path)
    logger = TensorBoardLogger("logs/tensorboard", name="jsa", version=0)
    trainer = Trainer(logger=logger, callbacks=[ModelCheckpoint(save_last=True)], enable_progress_bar=False,
                      enable_model_summary=False)
    (tmp_path / "logs/tensorboard/jsa/version_0/checkpoints").mkdir(parents=True)
    (tmp_path / "logs/tensorboard/jsa/version_0/checkpoints/last.ckpt").write_bytes(b"")
    assert run_directory.run_summary(trainer) == ("run: logs/tensorboard/jsa/version_0 · checkpoint: "
                                                  "logs/tensorboard/jsa/version_0/checkpoints/last.ckpt · "
                                                  "tensorboard --logdir logs/tensorboard")


def test_the_last_line_names_the_checkpoint_a_test_scored_only_where_the_test_ended(tmp_path, monkeypatch):
    """`tested: <checkpoint>` where a test scored another checkpoint than last.ckpt; a test stopped by Ctrl-C or SIGTERM
    scored nothing, and its line does not say it did."""
    from lightning import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import TensorBoardLogger
    from lightning.pytorch.trainer.states import TrainerFn

    monkeypatch.chdir(tmp_path)
    trainer = Trainer(logger=TensorBoardLogger("logs/tensorboard", name="jsa", version=0), enable_progress_bar=False,
                      callbacks=[ModelCheckpoint(save_last=True)], enable_model_summary=False)
    checkpoints = tmp_path / "logs/tensorboard/jsa/version_0/checkpoints"
    checkpoints.mkdir(parents=True)
    for name in ("last.ckpt", "epoch000-step000002.ckpt"):
        (checkpoints / name).write_bytes(b"")
    trainer.state.fn, trainer.ckpt_path = TrainerFn.TESTING, str(checkpoints / "epoch000-step000002.ckpt")
    assert " · tested: logs/tensorboard/jsa/version_0/checkpoints/epoch000-step000002.ckpt · " in run_directory.run_summary(trainer)
    assert "tested:" not in run_directory.run_summary(trainer, stopped=True)


def test_a_csv_run_notes_its_hydra_job_without_lightnings_warning_of_deleting_files(tmp_path):
    """<run>/hydra_job.yaml is written into a CSV run's new folder before its first metrics: the CSV writer starts
    first, so that it does not find a file there and warn that "previous log files ... will be deleted"."""
    import warnings

    import yaml
    from hydra.core.hydra_config import HydraConfig
    from lightning.pytorch.loggers import CSVLogger
    from omegaconf import read_write

    import launch.hydra_app
    from launch.checks.hydra_config import compose

    cfg = compose(["logger=csv"])
    with read_write(cfg.hydra.runtime):  # as Hydra sets it when it runs a job
        cfg.hydra.runtime.output_dir = str(tmp_path / "hydra-run")
    HydraConfig.instance().set_config(cfg)
    logger = CSVLogger(str(tmp_path / "logs"), name="run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch.hydra_app.note_hydra_job(logger)
        logger.log_metrics({"train/loss": 1.0}, step=0)
        logger.save()
    assert yaml.safe_load((Path(logger.log_dir) / "hydra_job.yaml").read_text())["output_dir"] == str(tmp_path / "hydra-run")
    assert (Path(logger.log_dir) / "metrics.csv").is_file()
    assert not [w for w in caught if "exists and is not empty" in str(w.message)], [str(w.message) for w in caught]


def test_a_requeued_slurm_job_resumes_from_the_run_of_its_first_logger(tmp_path, monkeypatch):
    """In a requeued SLURM job fit starts from the newest checkpoint its earlier attempt left in its run: the run of the
    first of several loggers (as Lightning's trainer.logger), none without a logger directory."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    monkeypatch.setattr(run_directory, "slurm_job_id", lambda: "42")
    logger = SimpleNamespace(log_dir=str(tmp_path))
    assert run_directory.requeued_job_checkpoint([logger, SimpleNamespace()]) == str(tmp_path / "checkpoints" / "last.ckpt")
    assert run_directory.requeued_job_checkpoint(logger) == str(tmp_path / "checkpoints" / "last.ckpt")
    assert run_directory.requeued_job_checkpoint(False) is None and run_directory.requeued_job_checkpoint(SimpleNamespace()) is None


@pytest.mark.parametrize("planted", ["rows", "hard link", "FIFO"])
def test_a_continued_csv_run_keeps_its_rows_and_replaces_its_files_whole(planted, tmp_path):
    """A CSV run continued (resumed, validated, tested) adds its rows to those metrics.csv holds, where Lightning's
    writer removes them; metrics.csv and hparams.yaml are replaced, never written into (a hard link to a file of the
    user's keeps its bytes) nor opened (a FIFO would wait for a reader for ever)."""
    from common.lightning_files import CSVRunLogger

    run = tmp_path / "csv" / "run" / "version_0"
    run.mkdir(parents=True)
    users = tmp_path / "users-notes.txt"
    users.write_text("years of work")
    if planted == "rows":
        (run / "metrics.csv").write_text("epoch,step,train/loss\n0,0,3.0\n")
    elif planted == "hard link":
        os.link(users, run / "metrics.csv")
        os.link(users, run / "hparams.yaml")
    else:
        os.mkfifo(run / "metrics.csv")
        os.mkfifo(run / "hparams.yaml")
    logger = CSVRunLogger(str(tmp_path / "csv"), name="run", version="version_0")
    logger.log_hyperparams({"lr": 0.01})
    logger.log_metrics({"test/nll": 90.0}, step=5)
    logger.save()
    logger.record_hparams()  # as each checkpoint does
    lines = (run / "metrics.csv").read_text().splitlines()
    assert lines[0].split(",") == ["epoch", "step", "test/nll", "train/loss"] if planted == "rows" else ["step", "test/nll"]
    assert lines[1:] == (["0,0,,3.0", ",5,90.0,"] if planted == "rows" else ["5,90.0"])
    assert yaml.safe_load((run / "hparams.yaml").read_text()) == {"lr": 0.01}
    assert users.read_text() == "years of work"
