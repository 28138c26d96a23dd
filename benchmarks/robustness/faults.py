"""Faults injected into real `python train.py` processes, repeated to count how often each holds.

    python -m benchmarks.robustness.faults [--kills 20] [--concurrent 10] [--resumes 10] [--out benchmarks/results/faults]

1. kill -9 the moment a save is in progress (TMPDIR on another filesystem): every checkpoint left verifies and
   loads, and the next run resumes from `last.ckpt`;
2. two identical runs started together: each gets its own version and Hydra directory and its own `last.ckpt`;
3. two resumes of one run at once: one finishes it, the other is refused naming the owner (exit 2).
Writes results.json and results.md under --out; each fault in detail: benchmarks/results/faults/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import lightning as L

import models  # noqa: F401  (registers the model classes the checkpoints it reads name)

from benchmarks.lib import arguments, runner
from common.files import create_new, write_file

REPO = Path(__file__).resolve().parents[2]
STEPS = 40
# Tiny and fast, long enough to be interrupted: 20 batches of 32 an epoch, a checkpoint every 2 steps.
SETTINGS = ["model=jsa", "model.mis_steps=2", "model.val_num_samples=2", "data.batch_size=32", f"trainer.max_steps={STEPS}",
            "trainer.limit_train_batches=20", "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0",
            "trainer.enable_progress_bar=false", "callbacks.model_checkpoint.every_n_train_steps=2",
            "callbacks.gradient_variance.every_n_steps=0"]
RUN = "logs/tensorboard/jsa-mnist-mlp-K10-L2"  # the run's name under these settings


def start(cwd: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """train.py with SETTINGS in its own process group, its output in a file (a stopped child would hold a pipe open)."""
    return run_train(cwd, *SETTINGS, *args, env=env)


def run_train(cwd: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """train.py with `args` alone (`start` adds SETTINGS), as `start` runs it."""
    log = cwd / f"output-{time.monotonic_ns()}.txt"
    process = subprocess.Popen([sys.executable, str(REPO / "train.py"), *args], cwd=cwd,
                               env={**os.environ, **(env or {})}, stdout=create_new(log), stderr=subprocess.STDOUT,
                               start_new_session=True)
    process.log = log
    return process


def finish(process: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    process.wait(timeout=timeout)
    return process.returncode, process.log.read_text()


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, timeout: float = 120, poll: float = 0.002) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended first:\n{process.log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(poll)


class HoldAtTrainStart(L.Callback):
    """Waits at the start of training until the file `release` exists (at most `timeout_s`): a resume that owns its run
    keeps it while another one asks for it, however slowly either process started (concurrent_resumes)."""

    def __init__(self, release: str, timeout_s: float = 600.0) -> None:
        self.release, self.timeout_s = Path(release), timeout_s

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        (self.release.parent / f"holding-{os.getpid()}").touch()  # a second one holding at once: two writers
        deadline = time.monotonic() + self.timeout_s
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def kill_during_saves(cwd: Path, kills: int) -> dict:
    """SIGKILL runs mid-save (each resuming the last) until `kills` kills have hit a save in progress, check every
    checkpoint left after each kill, then finish the run. A kill can land just after the save it aimed at has
    finished (the write is fast); such a kill is checked too but not counted, at most 3 * `kills` kills in all."""
    from checkpoints.loader import load_checkpoint_file

    cwd.mkdir(parents=True, exist_ok=True)
    checkpoints = cwd / RUN / "version_0" / "checkpoints"
    env = {"TMPDIR": "/dev/shm" if Path("/dev/shm").is_dir() else str(cwd / "tmp")}
    every_step = ["callbacks.model_checkpoint.every_n_train_steps=1"]

    def temporaries() -> set[str]:
        return {p.name for p in os.scandir(checkpoints) if ".tmp-" in p.name} if checkpoints.is_dir() else set()

    outcomes = []
    while sum(o["temporaries"] > 0 for o in outcomes) < kills and len(outcomes) < 3 * kills:
        resume = [f"ckpt_path={checkpoints / 'last.ckpt'}"] if (checkpoints / "last.ckpt").exists() else []
        killed_before = temporaries()  # the killed runs' (`.<name>.tmp-<pid>`), until this run removes them
        process = start(cwd, *every_step, *resume, env=env)
        # a save of this run in progress while last.ckpt exists: the file a kill must not destroy
        wait_for(lambda before=killed_before: (checkpoints / "last.ckpt").exists() and bool(temporaries() - before),
                 process, poll=0.0005)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        left = sorted(checkpoints.glob("*.ckpt"))
        broken = []
        for checkpoint in left:
            try:
                load_checkpoint_file(checkpoint)  # raises on a truncated or mismatched file
            except ValueError as error:
                broken.append(f"{checkpoint.name}: {error}")
        outcomes.append({"checkpoints": len(left), "broken": broken, "temporaries": len(temporaries() - killed_before),
                         "step": load_checkpoint_file(checkpoints / "last.ckpt")["global_step"] if not broken else None})
    code, output = finish(start(cwd, *every_step, f"ckpt_path={checkpoints / 'last.ckpt'}", env=env))
    return {
        "kills": len(outcomes),
        "kills_with_every_checkpoint_loadable": sum(not o["broken"] for o in outcomes),
        "kills_mid_save": sum(o["temporaries"] > 0 for o in outcomes),
        "attempts": outcomes,
        "resumed_to_the_end": code == 0 and load_checkpoint_file(checkpoints / "last.ckpt")["global_step"] == STEPS,
        "temporaries_left_after_resume": len(temporaries()),
        "resume_output_tail": "" if code == 0 else output[-2000:],
    }


def concurrent_starts(cwd: Path, pairs: int) -> dict:
    """Start two identical short runs together, `pairs` times in one directory; count separate outputs."""
    separate = 0
    for attempt in range(pairs):
        root = cwd / f"pair-{attempt}"
        root.mkdir(parents=True)
        processes = [start(root, "trainer.max_steps=2") for _ in range(2)]
        codes = [finish(p)[0] for p in processes]
        versions = sorted(p.name for p in (root / RUN).iterdir()) if (root / RUN).is_dir() else []
        separate += (codes == [0, 0] and versions == ["version_0", "version_1"]
                     and all((root / RUN / v / "checkpoints" / "last.ckpt").is_file() for v in versions)
                     and len(list((root / "logs" / "hydra").glob("*/*"))) == 2)
    return {"pairs": pairs, "pairs_with_separate_directories": separate}


def concurrent_resumes(cwd: Path, pairs: int) -> dict:
    """A short run, then two resumes of it started together, `pairs` times: count the pairs where exactly one resumed
    (to its end) and the other was refused with the owner's name, leaving the run's checkpoint whole."""
    held = 0
    outputs, exit_codes = [], []
    for attempt in range(pairs):
        root = cwd / f"resume-{attempt}"
        root.mkdir(parents=True)
        assert finish(start(root, "trainer.max_steps=2"))[0] == 0
        checkpoint = root / RUN / "version_0" / "checkpoints" / "last.ckpt"
        # Whichever takes the run first holds it at its training start until the other has been answered, so the two
        # overlap on a machine of any speed: no race between two processes' imports decides the outcome.
        release = root / "release"
        hold = ["+callbacks.hold._target_=benchmarks.robustness.faults.HoldAtTrainStart", f"+callbacks.hold.release={release}"]
        processes = [start(root, "trainer.max_steps=14", f"ckpt_path={checkpoint}", *hold) for _ in range(2)]
        deadline = time.monotonic() + 600
        while (all(p.poll() is None for p in processes) and len(list(root.glob("holding-*"))) < 2
               and time.monotonic() < deadline):
            time.sleep(0.05)
        release.touch()
        results = [finish(p) for p in processes]
        codes = sorted(code for code, _ in results)
        refusal = next((out for code, out in results if code == 2), "")
        from checkpoints.loader import load_checkpoint_file

        held += (codes == [0, 2] and "is being written by process" in refusal and "Traceback" not in refusal
                 and load_checkpoint_file(checkpoint)["global_step"] == 14)
        outputs.append(refusal.strip().splitlines()[-1] if refusal.strip() else results[0][1][-500:])
        exit_codes.append(codes)
    return {"pairs": pairs, "pairs_with_one_writer": held, "exit_codes": exit_codes, "refusal": outputs[0] if outputs else "",
            "last_lines": outputs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=arguments.integer(0), default=20)
    parser.add_argument("--concurrent", type=arguments.integer(0), default=10)
    parser.add_argument("--resumes", type=arguments.integer(0), default=10)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "faults")
    args = parser.parse_args()
    runner.check_directory_options(parser, args, ("out",))  # before the runs, not after
    if "DATA_DIR" not in os.environ:
        raise SystemExit("error: set DATA_DIR to the directory that holds MNIST/raw (the runs read real MNIST)")
    results = {}
    with tempfile.TemporaryDirectory() as work:
        started = time.monotonic()
        results["kill_during_saves"] = kill_during_saves(Path(work) / "kills", args.kills) if args.kills else None
        print(f"kill -9 during saves: {json.dumps({k: v for k, v in (results['kill_during_saves'] or {}).items() if k != 'attempts'})}")
        results["concurrent_starts"] = concurrent_starts(Path(work) / "concurrent", args.concurrent) if args.concurrent else None
        print(f"concurrent starts: {results['concurrent_starts']}")
        results["concurrent_resumes"] = concurrent_resumes(Path(work) / "resumes", args.resumes) if args.resumes else None
        print(f"concurrent resumes: {results['concurrent_resumes']}")
        results["seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    write_file(args.out / "results.json", json.dumps(results, indent=2) + "\n")
    kills, pairs = results["kill_during_saves"], results["concurrent_starts"]
    lines = ["# Fault injection (`python -m benchmarks.robustness.faults`)", ""]
    if kills:
        lines.append(f"- kill -9 during a checkpoint write, TMPDIR=/dev/shm: {kills['kills_with_every_checkpoint_loadable']}/"
                     f"{kills['kills']} kills left every checkpoint loadable ({kills['kills_mid_save']} of them with a save in "
                     f"progress); resumed to step {STEPS}: {kills['resumed_to_the_end']}; temporaries left after the resume: "
                     f"{kills['temporaries_left_after_resume']}")
    if pairs:
        lines.append(f"- two runs started at the same moment: {pairs['pairs_with_separate_directories']}/{pairs['pairs']} "
                     "pairs got their own TensorBoard version and Hydra directory and each finished with its own last.ckpt")
    resumes = results["concurrent_resumes"]
    if resumes:
        lines.append(f"- two resumes of one run started at the same moment: {resumes['pairs_with_one_writer']}/{resumes['pairs']} "
                     "pairs had one writer (one resumed to its end, the other refused in one line naming it; the run's "
                     f"last.ckpt the finished one's). The refusal: `{resumes['refusal']}`")
    lines.append(f"- {results['seconds']} s on {os.cpu_count()} CPU cores")
    write_file(args.out / "results.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
