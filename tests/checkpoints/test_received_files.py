"""Files from someone else: a received checkpoint or run deletes nothing outside the run, imports
nothing the collection does not register, and writes through no link; each test plants the received file and runs
the command in this process (launch.hydra_app.run on the composed config, launch.cli_app.main: its one line and exit
status through launch.errors.user_errors_as_one_line), or as a real process where only a process shows it: a file that
would block the reader for ever or never end (a pipe, a device), another process holding the run, nothing imported
before the imports, and one damaged checkpoint through `python train.py` as written. (Pickled payloads and URLs:
tests/checkpoints/test_untrusted_files.py.)"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import launch.cli_app
import launch.hydra_app
from checkpoints.errors import CheckpointError
from checkpoints.file_format import save_checkpoint_file
from launch.errors import user_errors_as_one_line
from tests import preloaded
from tests.conftest import refused
from tests.launch.test_configs import composed

pytestmark = pytest.mark.slow  # runs that train, and real processes: the full suite's
REPO = Path(__file__).resolve().parents[2]
FAST = ["trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
        "model.val_num_samples=2", "model.test_num_samples=2", "data.batch_size=16", "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false", "callbacks.gradient_variance.every_n_steps=0", "model.mis_steps=2", "run_test=false"]


def train(cwd: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HYDRA_FULL_ERROR": "0"}
    return preloaded.run_train(list(args), cwd, env, timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory, mnist_dir) -> Path:
    """A two-step JSA run (Hydra's, in this process); its last.ckpt is what the tests alter."""
    root = tmp_path_factory.mktemp("run")
    os.environ.setdefault("DATA_DIR", str(mnist_dir))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        launch.hydra_app.run(composed(["model=jsa", "trainer.max_steps=2", *FAST]))
    for note in root.glob("logs/tensorboard/*/version_0/.owner"):  # this process's note, which its exit would remove
        note.unlink()
    return root


def copied_run(run: Path, where: Path) -> Path:
    """A copy of the fixture's working directory (its logs), so that each test resumes and alters its own."""
    subprocess.run(["cp", "-a", f"{run}/.", str(where)], check=True)
    (checkpoint,) = where.glob("logs/tensorboard/*/version_0/checkpoints/last.ckpt")
    return checkpoint


def checkpoint_callback_state(checkpoint: dict) -> dict:
    (state,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("ModelCheckpoint")]
    return state


@pytest.mark.parametrize("key", ["last_model_path", "kth_best_model_path", "best_k_models"])
def test_a_received_checkpoint_removes_nothing_outside_the_run(key, run, tmp_path, monkeypatch, caplog):
    """The sender's ModelCheckpoint state names a directory outside the run, through `..` (relative, as Lightning keeps
    it when the state omits dirpath) or absolute: resuming (Hydra's run, in this process) keeps that directory whole."""
    last = copied_run(run, tmp_path)
    victim = tmp_path / "notes"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    checkpoint = torch.load(last, weights_only=True)
    state = checkpoint_callback_state(checkpoint)
    state.pop("dirpath")
    relative = f"{last.parent.relative_to(tmp_path)}/../../../../../notes"
    if key == "best_k_models":
        state["best_k_models"] = {str(victim): state["kth_value"]}
    else:
        state[key] = relative if key == "last_model_path" else str(victim)
    planted = last.with_name("received.ckpt")
    save_checkpoint_file(checkpoint, planted)
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING):
        launch.hydra_app.run(composed(["model=jsa", "trainer.max_steps=4", *FAST, f"ckpt_path={planted.relative_to(tmp_path)}"]))
    assert (victim / "thesis.tex").read_text() == "years of work"
    assert "outside this run's checkpoint directory" in caplog.text


PLANTED_MODULE = "import pathlib\npathlib.Path('IMPORTED').write_text('the planted module ran')\nclass Thing:\n    pass\n"


@pytest.mark.parametrize("where", ["optimizer.class_path", "prior.init_args.class_path", "_instantiator", "_target_"])
def test_a_received_checkpoint_imports_nothing_it_names(where, run, tmp_path, monkeypatch, capsys):
    """A module planted beside the checkpoint and named in its hyperparameters (nested too) is not imported, neither by
    `train.py test --ckpt_path` (with the checkpoint's folder on the path) nor by `load_from_checkpoint` run there."""
    last = copied_run(run, tmp_path)
    (tmp_path / "planted.py").write_text(PLANTED_MODULE)
    checkpoint = torch.load(last, weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    if where == "_instantiator":
        hparams["_instantiator"] = "planted.Thing"
    elif where == "_target_":
        hparams["likelihood"] = {"_target_": "planted.Thing"}
    else:
        top, *rest = where.split(".")
        hparams[top] = {"class_path": "planted.Thing"} if not rest[:-1] else {"class_path": "models.JSA",
                                                                              "init_args": {"class_path": "planted.Thing"}}
    save_checkpoint_file(checkpoint, tmp_path / "received.ckpt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "planted" not in sys.modules
    try:
        line = refused(capsys, cli=["test", "--ckpt_path=received.ckpt", "--trainer.limit_test_batches=1",
                                    "--model.test_num_samples=2"])
        assert not (tmp_path / "IMPORTED").exists()
        assert "planted.Thing" in line and "not imported" in line, line
        from models import JSA

        with pytest.raises(CheckpointError) as error:
            JSA.load_from_checkpoint("received.ckpt")
        assert not (tmp_path / "IMPORTED").exists()
        assert "planted.Thing" in str(error.value) and "not imported" in str(error.value), error.value
    finally:
        sys.modules.pop("planted", None)


def test_a_callback_in_a_received_config_file_is_refused_before_it_is_imported(tmp_path):
    (tmp_path / "planted.py").write_text(PLANTED_MODULE)
    (tmp_path / "received.yaml").write_text("trainer:\n  callbacks:\n    - class_path: planted.Thing\n")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}
    result = preloaded.run_train(["fit", "-c", "received.yaml"], tmp_path, env, timeout=240)
    assert not (tmp_path / "IMPORTED").exists()
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: config file received.yaml: trainer.callbacks[0].class_path names 'planted.Thing', which is not a class or "
        "function of the collection, Lightning or torch.optim; it is not imported (importing runs code): read the file; "
        "to trust your own package or module, list it in LATENT_ZOO_TRUST (e.g. LATENT_ZOO_TRUST=mypkg,my_callbacks)"]


@pytest.mark.parametrize("name, command", [("hparams.yaml", "hydra"), ("hparams.yaml (dangling)", "hydra"), (".owner", "hydra"),
                                           ("config.yaml", "cli fit"), ("config_test.yaml", "cli test")])
def test_a_received_run_is_never_written_through_a_link(name, command, run, tmp_path, monkeypatch, capsys):
    """A file the run writes in place, planted in the received run as a link to a file of the user's (or dangling, to
    a place outside): resuming or testing there refuses in one line, and the target is untouched (or not created)."""
    last = copied_run(run, tmp_path)
    run_dir = last.parents[1]
    victim = tmp_path / "precious.txt"
    if "dangling" in name:
        victim = tmp_path / "created-outside.yaml"
    else:
        victim.write_text("precious")
    link = run_dir / name.split(" ")[0]
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    before = victim.read_bytes() if victim.exists() else None
    ckpt = str(run_dir / "checkpoints" / "last.ckpt")
    monkeypatch.chdir(tmp_path)
    if command == "hydra":
        line = refused(capsys, hydra=["model=jsa", "trainer.max_steps=4", *FAST, f"ckpt_path={ckpt}"])
    else:
        line = refused(capsys, cli=[command.split()[1], f"--ckpt_path={ckpt}", "--trainer.max_steps=4",
                                    "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
                                    "--trainer.limit_test_batches=1", "--model.val_num_samples=2", "--model.test_num_samples=2",
                                    "--model.mis_steps=2", "--data.batch_size=16"])
    assert (victim.read_bytes() if victim.exists() else None) == before
    assert line.startswith(f"error: the run {run_dir.resolve()} holds {link.name} as a link to"), line


@pytest.mark.parametrize("holder", ["study", "train.py"])
def test_a_second_study_process_never_removes_a_live_run(holder, tmp_path):
    """The first study trains run L20-middle-s0 and has not saved a checkpoint yet (its run is held by its study
    process, and by its train.py); a second `benchmarks.studies.cache.study` with the same --out, --logs and --only refuses in
    one line and removes nothing."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    run_dir = logs / "L20-middle-s0" / "tensorboard" / "jsa-mnist" / "version_0"
    run_dir.mkdir(parents=True)
    (run_dir / "events.out.tfevents.1").write_bytes(b"live")
    held = run_dir if holder == "train.py" else logs / "L20-middle-s0"
    first = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                              f"d = os.open({str(held)!r}, os.O_RDONLY); fcntl.flock(d, fcntl.LOCK_EX); print('held', flush=True)\n"
                              "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        result = preloaded.run_module("benchmarks.studies.cache.study", ["--out", str(out), "--logs", str(logs), "--only",
                                      "L20-middle-s0", "--epochs", "1"], REPO, env, timeout=120, forks_python=True)
    finally:
        first.kill()
        first.wait()
    assert (run_dir / "events.out.tfevents.1").read_bytes() == b"live"
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("run L20-middle-s0: ")


BOMB = "".join(f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 9) if i else ', '.join(['x'] * 9)}]\n"
               for i in range(9))  # nine levels of nine aliases: 9**9 strings once expanded, 600 bytes on disk


@pytest.mark.parametrize("front_end", ["cli -c", "hydra -cd experiment"])
def test_a_yaml_alias_bomb_is_refused_unread(front_end, tmp_path):
    if front_end == "cli -c":
        (tmp_path / "received.yaml").write_text(BOMB)
        args, path = ["fit", "-c", "received.yaml"], "received.yaml"
    else:
        (tmp_path / "experiment").mkdir()
        (tmp_path / "experiment" / "received.yaml").write_text("# @package _global_\n" + BOMB)
        args, path = ["-cd", str(tmp_path), "experiment=received"], str(tmp_path / "experiment" / "received.yaml")
    result = train(tmp_path, *args, timeout=60)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {'config file' if front_end == 'cli -c' else 'Hydra config'} {path}: its YAML aliases expand to more "
        "than 100000 nodes (a config file has hundreds); refused unread"]


def test_an_mnist_file_that_is_a_pipe_is_refused_without_waiting(mnist_dir, tmp_path):
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (raw / name).symlink_to(mnist_dir / "MNIST" / "raw" / name)
    os.mkfifo(raw / "train-images-idx3-ubyte")
    result = preloaded.run_train(["trainer.max_steps=1"], tmp_path, timeout=120,
                                 env={**os.environ, "PYTHONPATH": str(REPO), "DATA_DIR": str(tmp_path / "data")})
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"error: {raw / 'train-images-idx3-ubyte'} is corrupt: it is not a regular file (a pipe, a device or a directory), "
        "so it is not read. Fix: delete it so that it is downloaded again, or copy a good one in its place.")


def test_a_checkpoint_declaring_more_than_it_holds_is_refused_before_reading(run, tmp_path, monkeypatch, capsys):
    import zipfile

    last = copied_run(run, tmp_path)
    # Deflated at zlib's fastest level: the 512 MB still fit in a file of a few megabytes.
    with zipfile.ZipFile(last) as real, zipfile.ZipFile(tmp_path / "received.ckpt", "w", compresslevel=1) as crafted:
        for entry in real.infolist():  # one tensor's bytes replaced by 512 MB of zeros
            big = entry.filename.endswith("/data/0")
            crafted.writestr(entry.filename, bytes(1 << 29) if big else real.read(entry),
                             compress_type=zipfile.ZIP_DEFLATED if big else zipfile.ZIP_STORED)
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, cli=["test", "--ckpt_path=received.ckpt"])
    assert line.startswith("error: checkpoint received.ckpt declares ") and "crafted or damaged, and is not read" in line


def test_an_owner_note_that_is_an_endless_device_is_not_read(run, tmp_path):
    """A received run whose `.owner` links to /dev/zero, resumed while another process holds it: one line, at once."""
    last = copied_run(run, tmp_path)
    run_dir = last.parents[1]
    (run_dir / ".owner").symlink_to("/dev/zero")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, time\n"
                               f"d = os.open({str(run_dir)!r}, os.O_RDONLY); fcntl.flock(d, fcntl.LOCK_EX); print('held', flush=True)\n"
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = train(tmp_path, "model=jsa", "trainer.max_steps=6", *FAST, f"ckpt_path={last}", timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(
        f"error: the run {run_dir.resolve()} is being written by another process")


@pytest.mark.parametrize("model", ["jsa", "rws"])
def test_divergence_in_one_step_gets_the_guards_line_not_the_samplers_traceback(model, tmp_path, monkeypatch, capsys):
    """lr=1e308 leaves every weight inf or NaN after the first step; the next step's sampler (torch.multinomial) fails
    on them before a loss term could be checked: the run ends with the NaN guard's line, no traceback."""
    fast = [a for a in FAST if model == "jsa" or not a.startswith("model.mis_steps")]
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, hydra=[f"model={model}", "model.lr=1e308", "trainer.max_steps=4", *fast])
    assert line.startswith("error: the model's weights (encoder.") and "became NaN or inf" in line, line


def damaged(checkpoint: dict, what: str) -> str:
    """Alter `checkpoint` in place as a received file may be; returns the start of the line the resume must end with."""
    state = checkpoint["state_dict"]
    if what.startswith("optimizer state"):  # Adam's first moment, which the next step would spread over the weights
        buffers = checkpoint["optimizer_states"][0]["state"][0]
        buffers["exp_avg"] = buffers["exp_avg"] * float("nan") if what.endswith("NaN") else buffers["exp_avg"][:1]
        return "error: checkpoint {planted}: the optimizer's exp_avg of encoder.net.0.weight "
    if what == "cache codes out of range":
        state["cache.codes"][0, 0] = 42
        return "error: the checkpoint's cache.codes (JSA's cache) hold 1 value(s) outside the classes 0..9 (e.g. 42)"
    if what == "cache codes negative":
        state["cache.codes"] = state["cache.codes"].to(torch.int16)
        state["cache.codes"][0, 0] = -3
        return "error: the checkpoint's cache.codes (JSA's cache) hold 1 value(s) outside the classes 0..9 (e.g. -3)"
    if what == "cache codes float":
        state["cache.codes"] = state["cache.codes"].float() + 0.5
        return "error: checkpoint {planted}: state_dict.cache.codes holds floats (torch.float32), the model's integers"
    if what == "changed_epoch garbage":
        state["cache.changed_epoch"][0] = -2**31
        return "error: the checkpoint's cache.changed_epoch (JSA's cache) holds values that are not epochs"
    if what == "data-loader position past the split":
        checkpoint["loops"]["fit_loop"]["state_dict"] = {"combined_loader": [{"epoch": 1, "examples_done": 10**9}]}
        return "error: the checkpoint's data-loader position (epoch 1, 1000000000 examples done) does not fit"
    if what == "loop state garbage":
        checkpoint["loops"]["fit_loop"]["epoch_progress"] = "garbage"
        return "error: checkpoint "
    if what == "random state garbage":
        checkpoint["rng_states"] = [{"cpu": torch.zeros(7)}]
        return "error: checkpoint "
    raise AssertionError(what)


DAMAGES = ["cache codes out of range", "cache codes negative", "cache codes float", "changed_epoch garbage",
           "data-loader position past the split", "loop state garbage", "random state garbage", "optimizer state NaN",
           "optimizer state shape"]


def planted_damage(run: Path, tmp_path: Path, what: str) -> tuple[Path, str]:
    """A copy of the fixture's run with its checkpoint damaged as `what` says (received.ckpt beside last.ckpt), and the
    start of the line a resume from it must end with."""
    last = copied_run(run, tmp_path)
    checkpoint = torch.load(last, weights_only=True)
    planted = last.with_name("received.ckpt")
    expected = damaged(checkpoint, what).format(planted=planted)
    save_checkpoint_file(checkpoint, planted)
    return planted, expected


@pytest.mark.parametrize("what", DAMAGES)
def test_damaged_state_in_a_received_checkpoint_is_refused_in_one_line(what, run, tmp_path, monkeypatch, capsys):
    """Resuming from the damaged checkpoint (Hydra's run, in this process, as train.py runs it): exit status 2 and one
    line naming what is wrong, before a step could spread it over the weights."""
    planted, expected = planted_damage(run, tmp_path, what)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop, user_errors_as_one_line():
        launch.hydra_app.run(composed(["model=jsa", "trainer.max_steps=6", *FAST, f"ckpt_path={planted}"]))
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(expected)


def test_a_damaged_received_checkpoint_ends_the_real_command_in_one_line(run, tmp_path):
    """The same refusal from `python train.py ... ckpt_path=`: exit status 2, its line last, no traceback."""
    planted, expected = planted_damage(run, tmp_path, "cache codes out of range")
    result = train(tmp_path, "model=jsa", "trainer.max_steps=6", *FAST, f"ckpt_path={planted}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith(expected), result.stderr[-600:]


@pytest.mark.parametrize("name, kind, command", [(".owner", "FIFO", "hydra"), ("hparams.yaml", "FIFO", "hydra"),
                                                 (".owner", "hard link", "hydra"), ("config.yaml", "hard link", "cli fit")])
def test_a_file_the_run_writes_is_replaced_never_written_into_nor_waited_on(name, kind, command, run, tmp_path, monkeypatch):
    """A file the run writes, planted in the received run as a FIFO (opening it for writing would wait for a reader
    for ever: a process, ended by its timeout) or as a hard link to a file of the user's (writing into it would
    overwrite theirs: in this process): the resume replaces it, finishes, and the user's file keeps its bytes."""
    last = copied_run(run, tmp_path)
    planted = last.parents[1] / name
    planted.unlink(missing_ok=True)
    users = tmp_path / "users-notes.txt"
    users.write_text("years of work")
    if kind == "FIFO":
        os.mkfifo(planted)
    else:
        os.link(users, planted)
    hydra = ["model=jsa", "trainer.max_steps=3", *FAST, f"ckpt_path={last}"]
    cli = ["fit", f"--ckpt_path={last}", "--trainer.max_steps=3", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
           "--model.val_num_samples=2", "--model.mis_steps=2", "--data.batch_size=16"]
    if kind == "FIFO":
        result = train(tmp_path, *(hydra if command == "hydra" else cli), timeout=180)
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        monkeypatch.chdir(tmp_path)
        launch.hydra_app.run(composed(hydra)) if command == "hydra" else launch.cli_app.main(cli)
    assert users.read_text() == "years of work"
    assert not os.path.lexists(planted) or planted.is_file()  # .owner goes with its process; the others are replaced
