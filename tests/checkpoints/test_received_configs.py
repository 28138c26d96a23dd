"""Received configs and checkpoint settings: every way a config or a checkpoint's settings
reach jsonargparse or Hydra is checked before anything is imported. Each spelling is a case of
benchmarks/robustness/bad_inputs.py's table (config_source_cases), run here as the real command in a directory that
holds the received files and strangers_module.py, which writes STRANGER-RAN when imported: the marker is never
written, and the command ends with one line that names the file and the key."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.robustness import bad_inputs
from checkpoints.file_format import save_checkpoint_file
from tests import preloaded
from tests.conftest import says

pytestmark = pytest.mark.slow  # real processes: the full suite's
REPO = Path(__file__).resolve().parents[2]
CONFIG_CASES = [case for case in bad_inputs.config_source_cases() if not case.copy_runs]


def received_here(cwd: Path) -> dict[str, str]:
    """strangers_module.py in `cwd`, and `cwd` on the path (as '.' is for many users): the module is importable."""
    (cwd / "strangers_module.py").write_text(bad_inputs.STRANGERS_MODULE)
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{cwd}", "HYDRA_FULL_ERROR": "0"}


@pytest.mark.parametrize("case", CONFIG_CASES, ids=lambda case: case.id.removeprefix("received source: "))
def test_a_received_config_is_refused_before_anything_it_names_is_imported(case, tmp_path, mnist_dir):
    env = {**received_here(tmp_path), "DATA_DIR": str(mnist_dir)}
    bad_inputs.write_received(tmp_path, case.files)
    args = [arg.format() for arg in case.args]  # {{ in the table's arguments is a brace
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(REPO / "train.py"), *args], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    seconds = time.monotonic() - started
    assert not (tmp_path / bad_inputs.STRANGER_MARKER).exists(), result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert case.mention in lines[0], lines[0]
    assert seconds < 30, seconds  # refused before torch and Lightning are imported (a bomb included)


def test_a_nested_alias_bomb_is_refused_in_under_a_second(tmp_path, monkeypatch):
    from launch.checks.received_config import refuse_received_configs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "received.yaml").write_text("model:\n  class_path: models.JSA\n  init_args:\n    prior: deeper.yaml\n")
    (tmp_path / "deeper.yaml").write_text("trainer: laughs.yaml\n")
    (tmp_path / "laughs.yaml").write_text(bad_inputs.BOMB)
    started = time.monotonic()
    refusal = refuse_received_configs(["fit", "-c", "received.yaml"], cli=True)
    assert time.monotonic() - started < 1
    assert "\n" not in refusal
    says(refusal, "laughs.yaml", "trainer of config file deeper.yaml", "model.init_args.prior of config file received.yaml",
         "aliases", "100000", "refused unread")


def checkpoint_with_optimizer(path: Path, wrapped: bool) -> None:
    """A checkpoint as LightningCLI writes one (its class and instantiator named), whose settings give the optimizer as
    strangers_module.make; `wrapped`: the settings as a class_path mapping around the model's."""
    from checkpoints.model_class import stamp_classes
    from models import JSA

    model = JSA()
    checkpoint = {"state_dict": model.state_dict(), "pytorch-lightning_version": "2.6.6", "hyper_parameters": dict(model.hparams)}
    stamp_classes(checkpoint, model, None)  # names the class and Lightning's instantiator, as a real checkpoint does
    hparams = checkpoint["hyper_parameters"]
    if wrapped:
        checkpoint["hyper_parameters"] = {"class_path": "models.JSA", "init_args": {**hparams, "optimizer": "strangers_module.make"}}
    else:
        hparams["optimizer"] = "strangers_module.make"
    save_checkpoint_file(checkpoint, path)


@pytest.mark.parametrize("wrapped", [False, True], ids=["optimizer", "init_args.optimizer"])
@pytest.mark.parametrize("command", ["test", "validate", "test -c (ckpt_path in the config)", "load_from_checkpoint"])
def test_a_checkpoint_whose_optimizer_is_a_dotted_string_imports_nothing(command, wrapped, tmp_path, mnist_dir):
    env = {**received_here(tmp_path), "DATA_DIR": str(mnist_dir)}
    checkpoint_with_optimizer(tmp_path / "received.ckpt", wrapped)
    (tmp_path / "run.yaml").write_text("ckpt_path: received.ckpt\n")
    given = ["--model=JSA", "--data=MNISTDataModule", "-c", "run.yaml"] if "-c" in command else ["--ckpt_path=received.ckpt"]
    if command == "load_from_checkpoint":
        result = preloaded.run_code("from models import JSA\nJSA.load_from_checkpoint('received.ckpt')", [], tmp_path, env,
                                    timeout=240)
    else:
        result = preloaded.run_train([command.split()[0], *given, "--trainer.limit_test_batches=1", "--trainer.limit_val_batches=1"],
                                     tmp_path, env, timeout=240)
    assert not (tmp_path / bad_inputs.STRANGER_MARKER).exists(), result.stderr[-2000:]
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    where = "hyper_parameters.init_args.optimizer" if wrapped else "hyper_parameters.optimizer"
    assert f"checkpoint received.ckpt: {where} is 'strangers_module.make'" in last and "not imported" in last, result.stderr[-2000:]
    if command != "load_from_checkpoint":
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]


def test_reading_a_received_config_lists_its_files_and_names_and_imports_nothing(tmp_path):
    """README's command to read a received config before running it: every file the command would read (a nested one
    too) and every dotted name they give; a refused config gets train.py's line and exit status 2."""
    env = received_here(tmp_path)
    (tmp_path / "received.yaml").write_text("model: sub.yaml\ntrainer:\n  callbacks:\n"
                                            "    - class_path: lightning.pytorch.callbacks.EarlyStopping\n")
    (tmp_path / "sub.yaml").write_text("class_path: models.VAE\ninit_args:\n  optimizer: torch.optim.SGD\n")
    command = [sys.executable, "-X", "importtime", "-m", "launch.checks.received_config", "fit", "-c", "received.yaml"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[1:] == [
        "  config file received.yaml",
        "  config file sub.yaml (named at model of config file received.yaml)",
        "and the classes and functions they name (allowed packages; each still chooses what runs):",
        "  config file sub.yaml (named at model of config file received.yaml): class_path = models.VAE",
        "  config file sub.yaml (named at model of config file received.yaml): init_args.optimizer = torch.optim.SGD",
        "  config file received.yaml: trainer.callbacks[0].class_path = lightning.pytorch.callbacks.EarlyStopping"]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"torch", "lightning", "jsonargparse", "models"}
    (tmp_path / "sub.yaml").write_text("class_path: models.VAE\ninit_args:\n  optimizer: strangers_module.make\n")
    result = subprocess.run(command[:1] + command[3:], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and not (tmp_path / bad_inputs.STRANGER_MARKER).exists()
    assert result.stderr.startswith("error: config file sub.yaml (named at model of config file received.yaml): "
                                    "init_args.optimizer names 'strangers_module.make'")


@pytest.mark.parametrize("settings, where", [
    ({"callbacks": ["torch.optim.SGD", "strangers_module.Thing"]}, "hyper_parameters.callbacks[1]"),
    ({"name": {"optimizer": "strangers_module.make"}}, "hyper_parameters.name.optimizer"),  # a path key holding settings
    ({"optimizer": "torch.opt\u0456m.SGD"}, "hyper_parameters.optimizer"),  # a Cyrillic і
    ({"optimizer": "strangers_module\uff0emake"}, "hyper_parameters.optimizer"),  # a full-width dot
    ({"optimizer": " strangers_module.make "}, "hyper_parameters.optimizer"),
])
def test_every_dotted_string_in_a_checkpoints_settings_is_held_to_the_rule(settings, where):
    from checkpoints.errors import CheckpointError
    from checkpoints.loader import refuse_unregistered_classes

    with pytest.raises(CheckpointError, match=f"checkpoint received.ckpt: {where.replace('[', '.').replace(']', '.')} is "):
        refuse_unregistered_classes({"hyper_parameters": {"lr": 0.001, **settings}}, "received.ckpt")
    # the path settings are paths, and the allowed packages' names pass
    refuse_unregistered_classes({"hyper_parameters": {"ckpt_path": "last.ckpt", "optimizer": "torch.optim.SGD"},
                                 "datamodule_hyper_parameters": {"data_dir": "mnist.v2"}}, "received.ckpt")
