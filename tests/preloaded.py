"""`python train.py ARGS` in a process of its own that skips the interpreter's import of the libraries.

A multiprocessing forkserver imports torch, Lightning and Hydra once; each command runs train.py (or `python -m`,
`python -c`) as `__main__` in a fresh fork with its own environment, working directory, sys.argv and sys.path,
Hydra singleton, signal handlers, torch settings and exit status. The project's modules are not preloaded: each fork
imports them from its checkout. A fresh interpreter stays where one is the thing tested: the early checks that import
nothing heavy, DDP's rank 1, the fault harness's concurrent starts. Differences from the interpreter: an uncaught
error is printed by multiprocessing (`Process <name>:` first), and an uncaught KeyboardInterrupt exits with 1.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import multiprocessing
import multiprocessing.util  # its exit function (joins the runs) registered before ours below
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

# What a train.py run imports before its first step, all third-party (the forks share them, read-only).
PRELOAD = ["torch", "torchvision", "lightning.pytorch", "torchmetrics", "hydra", "omegaconf", "tensorboard"]
# The script the suite's real-process tests run (each a fresh fork instead of a fresh interpreter).
TRAIN = Path(__file__).resolve().parents[1] / "train.py"
# The project's top-level packages: none may come from the server, whose sys.path is not the script's.
PROJECT = {"train", "launch", "models", "datamodules", "samplers", "callbacks", "checkpoints", "common", "benchmarks"}


def context() -> multiprocessing.context.BaseContext:
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload(PRELOAD)  # taken when the server starts: the first run below
    return forkserver


def _as_main(argv: list[str], cwd: str, env: dict, out: str, err: str, new_session: bool = False,
             forks_python: bool = False) -> None:
    """`python argv[0] argv[1:]` in the fork (`python -m module ...` when argv[0] is -m, `python -c code ...` when it
    is -c): the interpreter's set-up, the script, module or code as __main__, the interpreter's exit. `out` and `err`
    name the files for stdout and stderr (one file for both when they are the same); new_session: the process leads
    a session and process group of its own (Popen's start_new_session); forks_python: the run's own
    `subprocess.run([sys.executable, ...])` are forked in turn (`forked_subprocess_run`)."""
    import runpy

    import torch

    preloaded_project = sorted(name for name in sys.modules if name.split(".")[0] in PROJECT)
    assert not preloaded_project, f"the forkserver imported the project's {preloaded_project}"
    for name in [name for name in sys.modules if name.split(".")[0] == "tests"]:
        del sys.modules[name]  # this module's package, imported to find this function: the script does not see it
    multiprocessing.set_start_method(None, force=True)  # the interpreter's default again, not forkserver
    server_paths = set(os.environ.get("PYTHONPATH", "").split(os.pathsep))  # on the server's sys.path, not the run's
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the server's, found from its own $TMPDIR: found again from the run's, as an interpreter does
    os.chdir(cwd)
    module = argv[1] if argv[0] == "-m" else None
    code = argv[1] if argv[0] == "-c" else None
    # -m: runpy puts the module's file in sys.argv[0], as python does; -c: sys.argv[0] is '-c', as python has it.
    sys.argv = list(argv[1:] if module else ["-c", *argv[2:]] if code is not None else argv)
    # The interpreter's order: the script's folder (-m: the working directory; -c: '', the working directory as it is
    # at each import), then $PYTHONPATH (read at start-up, so set here), then the rest ('' and the server's $PYTHONPATH
    # were the server's).
    sys.path[:] = [cwd if module else "" if code is not None else str(Path(argv[0]).parent),
                   *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p),
                   *(p for p in sys.path if p and p not in server_paths)]
    sys.stdin = open(os.devnull)
    # Ctrl-C raises KeyboardInterrupt, as in an interpreter started from a shell, whatever the server inherited: a
    # Trainer that met a KeyboardInterrupt in the test process ignores SIGINT from then on (Lightning's trainer/call.py),
    # and a server started after that would hand the ignore on to every run.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if new_session:
        os.setsid()
    opened = {path: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) for path in {out, err}}
    for fd, path in ((1, out), (2, err)):
        os.dup2(opened[path], fd)  # one file: one offset for both, as `2>&1`
    if forks_python:
        subprocess.run = forked_subprocess_run(subprocess.run)
    if env.get("OMP_NUM_THREADS"):  # read by a new interpreter; the server has imported torch already
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    try:
        # A SystemExit's status becomes the exit status, as in the interpreter.
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        elif code is not None:
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(code, "<string>", "exec"), main.__dict__)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    finally:
        # The interpreter's exit, in its order (multiprocessing's own ends in os._exit): join the threads, which
        # also stops joblib's worker processes (it hooks the join), then the atexit functions, which join children.
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


def run_script(script: Path, args: list[str], cwd: Path, env: dict, timeout: float | None = 600,
               forks_python: bool = False) -> subprocess.CompletedProcess:
    """`python script *args` in `cwd` with environment `env`: its exit status and what it printed. Like
    subprocess.run, it kills the process on a timeout (TimeoutExpired, with the output) or an interrupt.
    forks_python: the script's own `python train.py ...` and `python -m ...` processes are forks too."""
    return _run([str(script), *args], cwd, env, timeout, forks_python=forks_python)


def run_module(module: str, args: list[str], cwd: Path, env: dict, timeout: float | None = 600,
               forks_python: bool = False) -> subprocess.CompletedProcess:
    """`python -m module *args`, as run_script runs a script."""
    return _run(["-m", module, *args], cwd, env, timeout, forks_python=forks_python)


def forked_subprocess_run(interpreter_run):
    """subprocess.run for a run that starts Python processes of its own (a study's `python train.py ...` runs): a
    `[sys.executable, script.py | -m module, ...]` command is forked as run_script forks one, with subprocess.run's
    cwd, env, stdout/stderr (None, DEVNULL, PIPE, STDOUT, a file), capture_output, text, check and timeout; any other
    command, or another keyword, goes to `interpreter_run`. `python -c` stays an interpreter: a process that measures
    its children (benchmarks/speed/memory.py) needs them to be its own."""
    handled = {"cwd", "env", "stdout", "stderr", "capture_output", "text", "check", "timeout"}

    def run(args, **kwargs):
        argv = [str(arg) for arg in args] if isinstance(args, (list, tuple)) else []
        if (len(argv) < 2 or argv[0] != sys.executable or set(kwargs) - handled
                or not (argv[1] == "-m" or argv[1].endswith(".py"))):
            return interpreter_run(args, **kwargs)
        stdout, stderr = kwargs.get("stdout"), kwargs.get("stderr")
        if kwargs.get("capture_output"):
            stdout = stderr = subprocess.PIPE
        env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
        cwd = Path(kwargs.get("cwd") or os.getcwd())
        # This module as the fork's pickling finds it by name (a run's fork dropped the suite's modules: _as_main).
        this_module = importlib.import_module(__name__)
        result = this_module._run(argv[1:], cwd, env, kwargs.get("timeout"), merged=stderr == subprocess.STDOUT,
                                  forks_python=True)
        for text, target, stream in ((result.stdout, stdout, sys.stdout), (result.stderr, stderr, sys.stderr)):
            if target is None:  # inherited: this process's stdout or stderr
                stream.flush()
                os.write(stream.fileno(), text.encode())
            elif target not in (subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT):  # a file or a descriptor
                if not isinstance(target, int):
                    target.flush()
                os.write(target if isinstance(target, int) else target.fileno(), text.encode())
        as_bytes = not kwargs.get("text")
        result = subprocess.CompletedProcess(
            args, result.returncode,
            *((part.encode() if as_bytes else part) if target == subprocess.PIPE else None
              for part, target in ((result.stdout, stdout), (result.stderr, stderr))))
        if kwargs.get("check"):
            result.check_returncode()
        return result

    return run


class Started:
    """A Popen-like handle on a run that start_script started: pid, poll, wait, returncode, send_signal, kill, and
    `log`, the file that holds its stdout and stderr. Unlike Popen's start_new_session, the run makes its session
    itself once it runs (os.setsid in _as_main): wait for a sign of life before os.killpg(pid, ...)."""

    def __init__(self, process: multiprocessing.process.BaseProcess, log: Path) -> None:
        self.process, self.log, self.pid = process, log, process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode  # -N when signal N ended it, as Popen has it

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(self.process.name, timeout)
        return self.process.exitcode

    def send_signal(self, signum: int) -> None:
        """As Popen: nothing once the run has ended (its pid may be another process's by then)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_started: list[Started] = []


@atexit.register  # before multiprocessing's own exit function (registered earlier), which would wait for them
def _kill_runs_left_running() -> None:
    """A run that a failed test left running (stopped, even) does not keep the test process from exiting."""
    for started in _started:
        if started.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(started.pid, signal.SIGKILL)


def start_script(script: Path, args: list[str], cwd: Path, env: dict) -> Started:
    """`python script *args` started and left running, as benchmarks/robustness/faults.py starts train.py (Popen with
    start_new_session, stdout and stderr into one file in `cwd`): for the tests that signal a run."""
    log = cwd / f"output-{time.monotonic_ns()}.txt"
    log.touch()  # there to read from the start
    process = context().Process(target=_as_main, args=([str(script), *args], str(cwd), env, str(log), str(log), True),
                                name=Path(script).name)
    process.start()
    _started.append(Started(process, log))
    return _started[-1]


def start_train(args: list[str], cwd: Path, env: dict) -> Started:
    """`python train.py *args`, started as start_script starts a script."""
    return start_script(TRAIN, list(args), cwd, env)


def run_code(code: str, args: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -c code *args`, as run_script runs a script."""
    return _run(["-c", code, *args], cwd, env, timeout)


def _run(argv: list[str], cwd: Path, env: dict, timeout: float | None, merged: bool = False,
         forks_python: bool = False) -> subprocess.CompletedProcess:
    """argv as run_script takes it, its stdout and stderr kept apart, or in stdout alone when `merged` (`2>&1`)."""
    with tempfile.TemporaryDirectory() as streams:
        out, err = Path(streams) / "stdout", Path(streams) / ("stdout" if merged else "stderr")
        out.touch()
        err.touch()
        name = argv[1] if argv[0] == "-m" else "-c" if argv[0] == "-c" else Path(argv[0]).name
        process = context().Process(target=_as_main, args=(argv, str(cwd), env, str(out), str(err), False, forks_python),
                                    name=name)
        # The fork imports no __main__ of this process (multiprocessing's spawn.prepare would, as __mp_main__): a run
        # that forks its own runs has its benchmark module there.
        main, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
        try:
            process.start()
        finally:
            sys.modules["__main__"] = main
        try:
            process.join(timeout)
            timed_out = process.is_alive()
        finally:
            if process.is_alive():
                process.kill()
                process.join()
        result = subprocess.CompletedProcess(argv, process.exitcode, out.read_text(errors="replace"),
                                             "" if merged else err.read_text(errors="replace"))
    if timed_out:
        raise subprocess.TimeoutExpired(argv, timeout, result.stdout, result.stderr)
    return result


def run_train(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python train.py *args` (run_script's way); the environment is this process's unless `env` is given."""
    return run_script(TRAIN, list(args), cwd, dict(os.environ if env is None else env), timeout)


def studies_fork_train_py(monkeypatch) -> None:
    """The benchmark studies' `python train.py ...` processes (benchmarks/lib/packing.py's run_train_py) forked by
    forked_subprocess_run: for the tests of a study's own logic, where the process is not what is tested."""
    from benchmarks.lib import packing

    run = forked_subprocess_run(subprocess.run)
    monkeypatch.setattr(packing, "subprocess", types.SimpleNamespace(run=run, STDOUT=subprocess.STDOUT))  # packing's alone
