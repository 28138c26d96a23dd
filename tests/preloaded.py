"""`python train.py ARGS` in a process of its own that skips the interpreter's 4-5 s of imports.

A multiprocessing forkserver imports torch, Lightning, Hydra and the project once; every command then runs in a
fresh fork of it, so it still has its own Hydra singleton, signal handlers, random state, torch settings,
environment, working directory and exit status, as `python train.py ARGS` has. The documented-commands test runs
some forty train.py commands, and this is most of its time on two cores (tests/test_documented_commands.py).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What a train.py run imports before its first step (the fork shares them, read-only).
PRELOAD = ["torch", "torchvision", "lightning.pytorch", "torchmetrics", "hydra", "omegaconf", "tensorboard",
           "train", "launch.build", "launch.cli_app", "launch.hydra_app", "models", "datamodules", "callbacks"]


def context() -> multiprocessing.context.BaseContext:
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload(PRELOAD)  # taken when the server starts: the first run below
    return forkserver


def _train_main(argv: list[str], cwd: str, env: dict, out: str, err: str) -> None:
    """The body of `python train.py ARGS` in the fork: its environment and streams, then train.main()."""
    import atexit

    import torch

    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = argv
    sys.stdin = open(os.devnull)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    if env.get("OMP_NUM_THREADS"):  # read by a new interpreter; the server has imported torch already
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    import train

    try:
        train.main()  # a SystemExit's status becomes the process's exit status, as in the interpreter
    finally:
        # The interpreter's exit, in its order (multiprocessing's own ends in os._exit): join the threads, which
        # also stops joblib's worker processes (it hooks the join), then the atexit functions, which join children.
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


def run_train(args: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python train.py *args` in `cwd` with environment `env`: its exit status and what it printed."""
    with tempfile.TemporaryDirectory() as streams:
        out, err = Path(streams) / "stdout", Path(streams) / "stderr"
        process = context().Process(target=_train_main, args=([str(REPO / "train.py"), *args], str(cwd), env, str(out), str(err)))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["train.py", *args], timeout)
        return subprocess.CompletedProcess(["train.py", *args], process.exitcode, out.read_text(), err.read_text())
