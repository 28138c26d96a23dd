"""tests/preloaded.py runs a script as `python script ARGS` would: what the suite's real-process tests rely on."""

from __future__ import annotations

import ast
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import preloaded

pytestmark = pytest.mark.slow  # starts a forkserver that imports torch and Lightning

SCRIPT = """
import atexit, multiprocessing, os, sys, threading, time
import helper  # beside the script: its folder comes first on sys.path
print(__name__, multiprocessing.get_start_method(), os.getcwd(), os.environ["MARK"], sys.argv[1:], helper.VALUE, flush=True)
print("to stderr", file=sys.stderr, flush=True)
atexit.register(lambda: print("atexit", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread", flush=True))).start()
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def script(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "helper.py").write_text("VALUE = 'beside the script'\n")
    (folder / "script.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "work").mkdir()
    return folder / "script.py"


def test_a_forked_script_runs_as_the_interpreter_would_run_it(script, tmp_path):
    env = {**os.environ, "MARK": "this environment"}
    result = preloaded.run_script(script, ["3"], tmp_path / "work", env)
    assert result.returncode == 3
    first, *rest = result.stdout.splitlines()
    assert first == f"__main__ fork {tmp_path / 'work'} this environment ['3'] beside the script"
    assert rest == ["thread", "atexit"]  # the interpreter's exit: threads joined, then the atexit functions
    assert result.stderr == "to stderr\n"


@pytest.mark.parametrize("pythonpath", [None, "elsewhere"])
def test_a_run_has_the_interpreters_sys_path(pythonpath, tmp_path):
    """The same sys.path as `python -c` started with the run's environment: the run's $PYTHONPATH, not the server's."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = str(tmp_path / pythonpath)
    code = "import sys\nprint(sys.path)"
    interpreter = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                                 timeout=60, check=True)
    forked = preloaded.run_code(code, [], tmp_path, env)
    assert forked.returncode == 0, forked.stderr[-2000:]
    expected, found = ast.literal_eval(interpreter.stdout), ast.literal_eval(forked.stdout)
    head = ["", *([str(tmp_path / pythonpath)] if pythonpath else [])]  # the working directory, then $PYTHONPATH
    assert found[:len(head)] == expected[:len(head)] == head, found
    assert [p for p in found if p in expected] == expected, found  # every entry of the interpreter's, in its order
    servers = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p} - set(expected)
    assert not servers & set(found), found  # the server's $PYTHONPATH is not the run's (its other entries, such as
    # pytest's rootdir, stay: the modules it imported came from there)


def test_a_run_puts_its_temporary_files_where_its_own_tmpdir_says(tmp_path):
    """$TMPDIR is the run's, not the server's (which its imports may have read already): a run told to keep its
    temporary files on another filesystem (benchmarks/robustness/faults.py) keeps them there."""
    (tmp_path / "tmp").mkdir()
    result = preloaded.run_code("import tempfile\nprint(tempfile.gettempdir())", [], tmp_path,
                                {**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert (result.returncode, result.stdout) == (0, f"{tmp_path / 'tmp'}\n"), result.stderr[-2000:]


def test_a_command_past_its_timeout_is_killed_with_its_output(script, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired) as timeout:
        preloaded.run_script(script, ["sleep"], tmp_path / "work", {**os.environ, "MARK": "m"}, timeout=3)
    assert "beside the script" in timeout.value.stdout and "to stderr" in timeout.value.stderr


def test_pythonpath_is_read_after_the_scripts_folder_as_the_interpreter_reads_it(script, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "helper.py").write_text("VALUE = 'from PYTHONPATH'\n")
    (other / "extra.py").write_text("VALUE = 'only on PYTHONPATH'\n")
    probe = script.parent / "probe.py"
    probe.write_text("import extra, helper\nprint(helper.VALUE, '|', extra.VALUE)\n")
    result = preloaded.run_script(probe, [], tmp_path / "work", {**os.environ, "PYTHONPATH": str(other)})
    assert (result.returncode, result.stdout) == (0, "beside the script | only on PYTHONPATH\n"), result.stderr[-2000:]


def test_a_module_runs_as_python_dash_m_runs_it(tmp_path):
    package = tmp_path / "work" / "package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tool.py").write_text("import os, sys\nprint(__name__, sys.argv[0] == __file__, sys.path[0] == os.getcwd(), "
                                     "sys.argv[1:])\nsys.exit(4)\n")
    result = preloaded.run_module("package.tool", ["--flag"], tmp_path / "work", dict(os.environ))
    assert (result.returncode, result.stdout) == (4, "__main__ True True ['--flag']\n"), result.stderr[-2000:]


def test_code_runs_as_python_dash_c_runs_it(tmp_path):
    """sys.argv[0] is '-c', '' (the working directory) comes first on sys.path, an uncaught error ends in the message."""
    (tmp_path / "beside.py").write_text("VALUE = 'in the working directory'\n")
    code = "import os, sys, beside\nprint(__name__, sys.argv, sys.path[0] == '', beside.VALUE)\nraise ValueError('the end')"
    result = preloaded.run_code(code, ["--flag"], tmp_path, dict(os.environ))
    assert (result.returncode, result.stdout) == (1, "__main__ ['-c', '--flag'] True in the working directory\n")
    assert result.stderr.strip().splitlines()[-1] == "ValueError: the end", result.stderr[-2000:]


PARENT = """
import subprocess, sys
child = [sys.executable, sys.argv[1]]
done = subprocess.run([*child, "0"], capture_output=True, text=True)
print("captured", done.returncode, done.stdout.strip(), done.stderr.strip())
with open("log", "w") as log:
    log.write("first\\n")
    subprocess.run([*child, "0"], stdout=log, stderr=subprocess.STDOUT)
print("log", open("log").read().split())
done = subprocess.run([*child, "0"], stdout=subprocess.PIPE)
print("piped", type(done.stdout).__name__, done.stderr)
subprocess.run([*child, "0"])
try:
    subprocess.run([*child, "4"], capture_output=True, check=True)
except subprocess.CalledProcessError as error:
    print("check", error.returncode)
done = subprocess.run([sys.executable, "-c", "import sys; print('torch' in sys.modules)"], capture_output=True, text=True)
print("dash c", done.stdout.strip())
"""
CHILD = "import sys\nprint('forked' if 'torch' in sys.modules else 'interpreter')\nprint('err', file=sys.stderr)\nsys.exit(int(sys.argv[1]))\n"


def test_a_runs_own_python_scripts_are_forked_with_subprocess_runs_streams_and_checks(tmp_path):
    """forks_python: the run's `subprocess.run([sys.executable, script, ...])` is a fork of the preloaded server (torch
    is imported before the script runs), its output where subprocess.run's arguments send it; `python -c` stays a new
    interpreter."""
    (tmp_path / "parent.py").write_text(PARENT)
    (tmp_path / "child.py").write_text(CHILD)
    result = preloaded.run_script(tmp_path / "parent.py", [str(tmp_path / "child.py")], tmp_path, dict(os.environ),
                                  forks_python=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["captured 0 forked err", "log ['first', 'forked', 'err']", "piped bytes None",
                                          "forked", "check 4", "dash c False"]
    assert result.stderr == "err\nerr\n"  # the piped run's and the inheriting run's


STARTED = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("term", flush=True), sys.exit(143)))
print("out", os.getpgid(0) == os.getpid() == os.getsid(0), flush=True)
print("err", file=sys.stderr, flush=True)
print("ready", flush=True)
while True:  # short sleeps: a signal that lands just before one is handled when it ends
    time.sleep(0.05)
"""


@pytest.mark.parametrize("stop, status", [("send_signal", 143), ("kill", -9)])
def test_a_started_script_leads_its_own_session_and_writes_both_streams_to_one_file(stop, status, tmp_path):
    """start_script, as benchmarks/robustness/faults.py's Popen: a process group of its own (os.killpg reaches what
    it starts), stdout and stderr in order in one file, its handlers on signals, Popen's -N for a kill."""
    (tmp_path / "started.py").write_text(STARTED)
    process = preloaded.start_script(tmp_path / "started.py", [], tmp_path, dict(os.environ))
    deadline = time.monotonic() + 60
    while "ready" not in process.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None and process.returncode is None
    getattr(process, stop)(*([signal.SIGTERM] if stop == "send_signal" else []))
    assert process.wait(timeout=30) == status == process.returncode
    assert process.log.read_text() == "out True\nerr\nready\n" + ("term\n" if status == 143 else "")


def test_ctrl_c_raises_keyboard_interrupt_in_a_run_even_when_the_test_process_ignores_it():
    """Lightning ignores SIGINT for good in a process whose Trainer met a KeyboardInterrupt; a server started then
    inherits the ignore, and the runs it forks must not (the Ctrl-C tests in tests/launch/test_interruptions.py)."""
    import multiprocessing.forkserver

    multiprocessing.forkserver._forkserver._stop()  # the next run starts a server in the state set below
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = preloaded.run_code("import signal\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)",
                                    [], os.getcwd(), dict(os.environ))
    finally:
        signal.signal(signal.SIGINT, previous)
        multiprocessing.forkserver._forkserver._stop()  # later runs: a server started as before
    assert (result.returncode, result.stdout) == (0, "True\n"), result.stderr[-2000:]


def ended(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet (/proc/PID/stat's state Z)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_run_left_running_does_not_keep_the_test_process_from_exiting(tmp_path):
    """A failed test may leave a run going, stopped even: the process that started it still exits, and the run goes."""
    pid_file = tmp_path / "pid"
    (tmp_path / "stops.py").write_text(f"import os, signal\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                       "print('stopping', flush=True)\nos.kill(os.getpid(), signal.SIGSTOP)\n")
    code = (f"import os, sys, time\nsys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
            "from pathlib import Path\nfrom tests import preloaded\n"
            f"run = preloaded.start_script(Path({str(tmp_path / 'stops.py')!r}), [], Path({str(tmp_path)!r}), dict(os.environ))\n"
            "while 'stopping' not in run.log.read_text():\n    time.sleep(0.05)\n")
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + 30
        while not ended(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ended(pid), "the run is still there"
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
