"""Faults injected into real `python train.py` processes: kill -9 while a checkpoint is written (TMPDIR on
another filesystem), SIGTERM and Ctrl-C (a checkpoint, exit 143/130, a bit-for-bit resume), two runs
started at the same moment, a frozen DDP peer, a run on several nodes without a launcher, and SLURM's
preempt-and-requeue cycle with a stand-in `scontrol`. Each run is a process of its own, in a process group of its own:
forked from tests/preloaded's server (its libraries imported), the harness's too (benchmarks/robustness/faults.py: kills
during saves, concurrent resumes), except its concurrent starts, which start `python train.py` as the harness does, and
the sbatch script's, which runs `python train.py` under a stand-in srun."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from benchmarks import compare
from benchmarks.robustness import faults
from benchmarks.robustness.faults import RUN, STEPS, finish, wait_for
import models  # noqa: F401 (registers the classes a checkpoint may name: common/registry.py)
from checkpoints.loader import load_checkpoint_file
from tests import preloaded

pytestmark = pytest.mark.slow  # real processes: run by the full suite (README), not the quick loop

REPO = Path(__file__).resolve().parents[2]


def start(cwd: Path, mnist_dir: Path, *args: str, env: dict | None = None) -> preloaded.Started:
    """faults.start's run (its SETTINGS, a process group of its own, its output in one file), forked from
    tests/preloaded's server (no library imports per run). The harness's own tests below start theirs as faults does."""
    return start_train(cwd, mnist_dir, *faults.SETTINGS, *args, env=env)


def start_train(cwd: Path, mnist_dir: Path, *args: str, env: dict | None = None) -> preloaded.Started:
    """train.py with `args` alone (`start` adds faults.SETTINGS), started as `start` starts it."""
    return preloaded.start_train(list(args), cwd, {**os.environ, "DATA_DIR": str(mnist_dir), **(env or {})})


@pytest.fixture
def forked_harness(monkeypatch, mnist_dir) -> None:
    """The harness's runs (faults.run_train: train.py in a session of its own, its output in one file) forked as `start`
    forks its runs."""
    monkeypatch.setattr(faults, "run_train", lambda cwd, *args, env=None: start_train(cwd, mnist_dir, *args, env=env))


def state(checkpoint_path: Path) -> dict:
    checkpoint = load_checkpoint_file(checkpoint_path)
    return {"step": checkpoint["global_step"], "state_dict": checkpoint["state_dict"],
            "optimizer": checkpoint["optimizer_states"][0]["state"]}


def assert_same_training_state(a: dict, b: dict) -> None:
    assert a["step"] == b["step"] == STEPS
    for key, value in a["state_dict"].items():  # parameters and the MIS cache
        assert torch.equal(value, b["state_dict"][key]), key
    for index, moments in a["optimizer"].items():
        assert all(torch.equal(moments[k], b["optimizer"][index][k]) for k in moments)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, mnist_dir) -> dict:
    cwd = tmp_path_factory.mktemp("uninterrupted")
    code, output = finish(start(cwd, mnist_dir))
    assert code == 0, output[-3000:]
    return state(cwd / RUN / "version_0" / "checkpoints" / "last.ckpt")


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_save_a_checkpoint_exit_nonzero_and_resume_bit_for_bit(signum, status, uninterrupted, tmp_path, mnist_dir):
    last = tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt"
    process = start(tmp_path, mnist_dir)
    wait_for(last.exists, process)
    process.send_signal(signum)
    code, output = finish(process)
    assert code == status, output[-3000:]
    assert f"{signal.Signals(signum).name}: saved a resumable checkpoint" in output
    # The command to resume with names the model and this run's settings; Lightning's own lines are not shown.
    assert f"resume with: python {preloaded.TRAIN} {' '.join(faults.SETTINGS)} ckpt_path={last}" in output, output[-3000:]  # train.py as named
    assert "Received SIGTERM" not in output and "weights_only" not in output, output[-3000:]
    run = f"{RUN}/version_0"  # the last line: where the run is
    assert output.strip().splitlines()[-1].endswith(
        f"run: {run} · checkpoint: {run}/checkpoints/last.ckpt · tensorboard --logdir logs/tensorboard"), output[-3000:]
    stopped_at = load_checkpoint_file(last)["global_step"]
    assert 0 < stopped_at < STEPS
    # its record says so: the comparison report marks it stopped, until a resume trains on
    assert compare.read_run(last.parents[1], tmp_path).stopped_by == (signal.Signals(signum).name, stopped_at)
    hydra_dirs = list((tmp_path / "logs" / "hydra").glob("*/*/"))  # the stopped run keeps its Hydra record
    assert len(hydra_dirs) == 1 and (hydra_dirs[0] / ".hydra" / "config.yaml").is_file(), hydra_dirs
    assert (hydra_dirs[0] / "train.log").is_file()

    code, output = finish(start(tmp_path, mnist_dir, f"ckpt_path={last}"))
    assert code == 0, output[-3000:]
    assert_same_training_state(uninterrupted, state(last))
    assert compare.read_run(last.parents[1], tmp_path).stopped_by is None


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_during_test_exits_nonzero_and_leaves_the_run_as_it_was(signum, status, tmp_path, mnist_dir):
    """`python train.py test --ckpt_path=...` logs into the run that wrote the checkpoint; Ctrl-C while it tests
    exits with 130 (Lightning's own answer is 1), SIGTERM with 143 (Lightning's: 0, as if the test had finished), and
    takes back what the stopped test wrote there (its event file, with image grids and no metrics; config_test.yaml),
    as a refused run does. The test holds at its second batch of three (tests/scripts/hold.py) until the signal comes."""
    fit = ["fit", "--model=VAE", "--trainer.max_steps=2", "--trainer.limit_val_batches=1", "--model.val_num_samples=2"]
    fitted = preloaded.run_train(fit, tmp_path, {**os.environ, "DATA_DIR": str(mnist_dir)}, timeout=240)
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    run = tmp_path / "logs" / "tensorboard" / "vae-mnist-mlp-z32" / "version_0"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    tested = start_train(tmp_path, mnist_dir, "test", "--model=VAE", f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
                         "--model.test_num_samples=2", "--trainer.limit_test_batches=3",
                         "--trainer.callbacks+=tests.scripts.hold.HoldInTest")
    wait_for((tmp_path / "holding-test").exists, tested, timeout=600)
    assert len(list(run.glob("events.out.tfevents.*"))) > len([p for p in before if p.name.startswith("events.")])
    tested.send_signal(signum)
    code, output = finish(tested)
    assert code == status, output[-3000:]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert output.strip().splitlines()[-1].startswith("run: logs/tensorboard/vae-mnist-mlp-z32/version_0 "), output[-3000:]  # where it is


def test_sigterm_before_training_exits_143_with_one_line_and_the_process_exit_handlers_run(tmp_path, mnist_dir):
    """SIGTERM while a run sets up (before Lightning takes the signal over for training) ends the process with a line
    and exit status 143, then the run's line; its exit handlers run: the run's `.owner` note goes with the process."""
    process = start(tmp_path, mnist_dir, "+callbacks.hold._target_=tests.scripts.hold.HoldInSetup")
    wait_for((tmp_path / "holding-setup").exists, process)
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 143, output[-3000:]
    lines = output.strip().splitlines()
    assert lines[-2].startswith("error: stopped by SIGTERM ("), output[-3000:]
    assert lines[-1].endswith(f"run: {RUN}/version_0 · tensorboard --logdir logs/tensorboard"), output[-3000:]  # no checkpoint
    assert (tmp_path / RUN).is_dir() and not list((tmp_path / "logs").rglob(".owner"))


def test_ctrl_c_during_hydras_test_stage_exits_130_and_keeps_the_fitted_run(tmp_path, mnist_dir):
    """Hydra tests after fit (run_test=true): Ctrl-C in that test stage exits 130, not Lightning's 1, and the run its
    fit wrote stays with its checkpoint and the line that names it, with nothing of the stopped test (its image grids
    would look like a result). The test holds at its second batch until the signal comes (tests/scripts/hold.py)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tested = start_train(tmp_path, mnist_dir, "model=vae", "trainer.max_steps=2", "trainer.limit_val_batches=1",
                         "model.val_num_samples=2", "run_test=true", "model.test_num_samples=2",
                         "trainer.limit_test_batches=2", "+callbacks.hold._target_=tests.scripts.hold.HoldInTest")
    wait_for((tmp_path / "holding-test").exists, tested, timeout=600)  # inside the test loop (tests/scripts/hold.py)
    tested.send_signal(signal.SIGINT)
    code, output = finish(tested)
    assert code == 130, output[-3000:]
    run = "logs/tensorboard/vae-mnist-mlp-z32/version_0"
    assert (tmp_path / run / "checkpoints" / "last.ckpt").is_file()
    assert output.strip().splitlines()[-1].endswith(f"run: {run} · checkpoint: {run}/checkpoints/last.ckpt · "
                                                    "tensorboard --logdir logs/tensorboard"), output[-3000:]
    events = EventAccumulator(str(tmp_path / run))
    events.Reload()
    assert not [tag for kind in ("images", "scalars") for tag in events.Tags()[kind] if tag.startswith("test/")], events.Tags()


# Ctrl-C while tests/scripts/hold.py holds, with SIGINT blocked in the holding (main) thread: another thread takes the
# signal and runs its handler, and no system call of the holding thread is interrupted, as when the signal lands between
# Python's last check for signals and the start of a sleep. Prints how long the KeyboardInterrupt took.
CTRL_C_BESIDE_THE_HOLD = """
import os, signal, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.scripts.hold import HoldInTest

sent = []
def ctrl_c():  # as the tests send it: once the hold says it waits
    while not Path("holding-test").exists():
        time.sleep(0.01)
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=ctrl_c, daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
try:
    HoldInTest(timeout_s=float(sys.argv[2])).on_test_batch_start(None, None, None, batch_idx=1)
except KeyboardInterrupt:
    print(time.monotonic() - sent[0])
"""


def test_the_test_stages_hold_ends_at_ctrl_c_even_when_no_sleep_of_it_was_interrupted(tmp_path):
    """The Ctrl-C-during-test tests send SIGINT the moment the hold's file appears; a hold waiting in one sleep of
    timeout_s would then, now and again, take the KeyboardInterrupt only when that sleep ends (and the test pass after
    timeout_s). Its wait ends at the signal, whichever thread took it (CTRL_C_BESIDE_THE_HOLD)."""
    timeout_s = 60
    result = preloaded.run_code(CTRL_C_BESIDE_THE_HOLD, [str(REPO), str(timeout_s)], tmp_path, dict(os.environ))
    assert result.returncode == 0 and result.stdout.strip(), result.stderr[-2000:]
    assert float(result.stdout) < timeout_s / 2, result.stdout  # the signal, not the timeout, ended the hold


def test_kill_during_checkpoint_writes_never_leaves_a_broken_checkpoint(tmp_path, mnist_dir, monkeypatch, forked_harness):
    """SIGKILL the moment a temporary checkpoint file appears (a save in progress), with TMPDIR on another
    filesystem than the checkpoints (/dev/shm); each surviving checkpoint verifies and loads, and the
    next run resumes from last.ckpt and removes the killed processes' temporaries. `python -m
    benchmarks.robustness.faults` repeats it 20 times."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    result = faults.kill_during_saves(tmp_path, kills=2)
    assert result["kills_mid_save"] == 2, result  # both kills hit a save in progress (more may have missed)
    assert result["kills_with_every_checkpoint_loadable"] == result["kills"], result
    assert result["resumed_to_the_end"] and result["temporaries_left_after_resume"] == 0, result


def test_runs_started_at_the_same_moment_get_their_own_directories(tmp_path, mnist_dir, monkeypatch):
    """Two `python train.py` started together, each a new interpreter, as the harness starts its runs."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    assert faults.concurrent_starts(tmp_path, pairs=1)["pairs_with_separate_directories"] == 1


def test_two_resumes_of_one_run_started_together_have_one_writer(tmp_path, mnist_dir, monkeypatch, forked_harness):
    """One resumes to its end; the other is refused in one line naming the owner (benchmarks/robustness/faults.py, --resumes)."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    result = faults.concurrent_resumes(tmp_path, pairs=1)  # `python -m benchmarks.robustness.faults --resumes N` repeats it
    assert result["pairs_with_one_writer"] == 1, result
    assert result["refusal"].startswith("error: the run ") and "is being written by process" in result["refusal"]


def test_a_frozen_ddp_peer_stops_the_run_with_a_message_after_the_timeout(tmp_path, mnist_dir):
    """Rank 1 starts 9 s after rank 0 (as on a busy machine), which is longer than ddp_timeout_s (6 s): the start is not
    a hang (the ranks wait for each other as long as launch/run_builder.py's STARTUP_TIMEOUT_S). Then rank 1 freezes
    after two steps, and rank 0 stops with the one-line message once the collective has waited ddp_timeout_s. Timed
    from the freeze itself, not from the start, which a loaded machine makes as slow as it likes."""
    timeout_s = 6
    freeze = ["trainer=ddp", "trainer.accelerator=cpu", f"ddp_timeout_s={timeout_s}",
              "+callbacks.freeze._target_=tests.scripts.freeze.FreezeRank1", f"+callbacks.freeze.late_start_s={timeout_s + 3}"]
    process = start(tmp_path, mnist_dir, *freeze)
    try:
        wait_for(lambda: "rank 1 stops itself (SIGSTOP)" in process.log.read_text(), process, timeout=600, poll=0.05)
        frozen = time.monotonic()
        code, output = finish(process, timeout=timeout_s + 120)
        assert code == 2, output[-3000:]
        error = output.strip().splitlines()[-1]
        assert error.startswith("error: a distributed collective timed out") and "ddp_timeout_s" in error, output[-3000:]
        assert time.monotonic() - frozen < timeout_s + 90  # the collective's timeout, not torch's 30 min
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the stopped rank 1


def test_several_nodes_without_a_launcher_stop_at_once_with_the_commands(tmp_path, mnist_dir):
    code, output = finish(start(tmp_path, mnist_dir, "trainer=multinode"), timeout=60)
    assert code == 2
    assert "error: trainer.num_nodes=2 needs a launcher" in output and "torchrun --nnodes=2" in output and "sbatch" in output
    assert "Traceback" not in output and not (tmp_path / RUN).exists()


def test_slurm_preemption_requeues_and_the_requeued_job_resumes_by_itself(uninterrupted, tmp_path, mnist_dir):
    """SIGUSR1 (sbatch --signal=SIGUSR1@90): Lightning saves hpc_ckpt_1.ckpt and calls `scontrol requeue`
    (a stand-in records it); SLURM's SIGTERM then stops the job with last.ckpt; the requeued job (same job
    id, no ckpt_path) continues in the same run and ends where an uninterrupted run ends."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "scontrol.log"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1",
             "SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_NODELIST": "localhost", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    run_dir = tmp_path / RUN / "slurm_job_4242"

    process = start(tmp_path, mnist_dir, env=slurm)
    wait_for((run_dir / "checkpoints" / "last.ckpt").exists, process)
    process.send_signal(signal.SIGUSR1)
    wait_for(record.exists, process)
    process.send_signal(signal.SIGTERM)
    code, output = finish(process)
    assert code == 143, output[-3000:]
    assert record.read_text().split() == ["requeue", "4242"]
    assert (run_dir / "hpc_ckpt_1.ckpt").is_file()

    code, output = finish(start(tmp_path, mnist_dir, env={**slurm, "SLURM_RESTART_COUNT": "1"}))
    assert code == 0, output[-3000:]
    assert "Restored all states from the checkpoint" in output
    assert [p.name for p in (tmp_path / RUN).iterdir()] == ["slurm_job_4242"]
    assert_same_training_state(uninterrupted, state(run_dir / "checkpoints" / "last.ckpt"))


def test_the_sbatch_script_runs_train_py_under_a_stand_in_srun(tmp_path, mnist_dir):
    """scripts/slurm/train.sbatch as sbatch would run it (its #SBATCH lines are comments to bash), with a
    stand-in `srun` that runs the task once, on one node with one task: the job's run is slurm_job_<id>."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/sh\nexec "$@"\n')
    (bin_dir / "srun").chmod(0o755)
    env = {**os.environ, "DATA_DIR": str(mnist_dir), "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_SUBMIT_DIR": str(REPO),
           "SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "latent-zoo", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1",
           "SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODELIST": "localhost"}
    args = ["trainer.accelerator=cpu", "trainer.max_steps=2", "trainer.limit_val_batches=1", "model.val_num_samples=2",
            "trainer.enable_progress_bar=false", f"log_dir={tmp_path / 'logs'}"]
    result = subprocess.run(["bash", str(REPO / "scripts" / "slurm" / "train.sbatch"), *args], env=env,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "logs" / "tensorboard" / "jsa-mnist-mlp-K10-L20" / "slurm_job_77" / "checkpoints" / "last.ckpt").is_file()
