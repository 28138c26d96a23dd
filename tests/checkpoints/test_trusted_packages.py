"""Your own code is not a stranger's: the packages and modules listed in LATENT_ZOO_TRUST (here a real package,
mypkg with a VAE subclass, and a module, my_callbacks with a callback, in a folder on the path) are admitted by both
front ends and by `load_from_checkpoint`, while a stranger's module named beside them is still never imported. The
front ends run in this process (train.main, launch.hydra_app.run, with the variable and sys.path set there); one
`python train.py` runs as a user runs it, with the package on PYTHONPATH and the variable in its environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from checkpoints.errors import CheckpointError
from checkpoints.file_format import save_checkpoint_file
from checkpoints.loader import load_checkpoint_file
from common.registry import TRUST_VARIABLE, is_allowed_import, is_registered, trusted_prefixes
from launch.checks.received_config import refuse_received_configs
from tests import preloaded
from tests.conftest import train_main

REPO = Path(__file__).resolve().parents[2]
# README's Hydra config of one's own, its lines as written there
README_OWN_CONFIG = "\n".join(re.search(r"is written as ours are: `(# @package _global_)` on its first line .*?then `(defaults: [^`]*)`"
                                         r".*? and `(model: [^`]*)`", (REPO / "README.md").read_text()).groups()) + "\n"
MY_MODEL = "from models import VAE\n\n\nclass MyVAE(VAE):\n    \"\"\"A user's own subclass.\"\"\"\n"
MY_CALLBACKS = ("import lightning as L\n\n\nclass PrintEpoch(L.Callback):\n"
                "    def on_train_epoch_end(self, trainer, pl_module):\n"
                "        print(f'my epoch {trainer.current_epoch} ended', flush=True)\n")
MARKER = "STRANGER-RAN"
STRANGERS = f"open({MARKER!r}, 'w').close()\n\n\nclass Thing:\n    pass\n"  # imported: leaves the marker
TINY_RUN = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
MY_CONFIG = """\
model:
  class_path: mypkg.mymodel.MyVAE
  init_args:
    latent_dim: 2
    val_num_samples: 2
trainer:
  max_epochs: 1
  num_sanity_val_steps: 0
  limit_train_batches: 2
  limit_val_batches: 1
  callbacks:
    - class_path: my_callbacks.PrintEpoch
"""


@pytest.fixture
def user(tmp_path: Path, mnist_dir: Path) -> dict[str, str]:
    """A working directory holding the user's own package and module and a stranger's module, all importable; the
    environment trusts nothing yet."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "mymodel.py").write_text(MY_MODEL)
    (tmp_path / "my_callbacks.py").write_text(MY_CALLBACKS)
    (tmp_path / "strangers.py").write_text(STRANGERS)
    env = {key: value for key, value in os.environ.items() if key != TRUST_VARIABLE}
    return {**env, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "DATA_DIR": str(mnist_dir), "HYDRA_FULL_ERROR": "0"}


def trusting(env: dict[str, str], names: str = "mypkg,my_callbacks") -> dict[str, str]:
    return {**env, TRUST_VARIABLE: names}


def last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""


def test_the_trusted_packages_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(TRUST_VARIABLE, " mypkg , my_callbacks,")
    assert trusted_prefixes() == ("mypkg.", "my_callbacks.")
    assert is_allowed_import("my_callbacks.PrintEpoch") and is_allowed_import("mypkg.mymodel.MyVAE")
    assert is_registered("mypkg.mymodel.MyVAE", "model") and is_registered("mypkg.mymodel.MyVAE")
    # a package of a longer name, a stranger's, a __main__ module: not trusted
    assert not is_allowed_import("mypkgx.Thing") and not is_registered("strangers.Thing")
    assert not is_allowed_import("mypkg.__main__.Thing")
    monkeypatch.delenv(TRUST_VARIABLE)
    assert not is_allowed_import("my_callbacks.PrintEpoch") and not is_registered("mypkg.mymodel.MyVAE", "model")


@pytest.mark.parametrize("value", ["mypkg,*", "my pkg", "mypkg.", "__main__"])
def test_a_malformed_trust_list_is_refused_in_one_line(value, monkeypatch):
    monkeypatch.setenv(TRUST_VARIABLE, value)
    refusal = refuse_received_configs(["fit"], cli=True)
    assert refusal is not None and refusal.startswith(f"{TRUST_VARIABLE}={value}: ") and "\n" not in refusal
    assert "expected comma-separated dotted names" in refusal


@pytest.mark.parametrize("names", ["mypkg.mymodel.MyVAE", "strangers.Thing"])
def test_a_checkpoint_naming_a_class_is_read_only_when_it_is_trusted(names, monkeypatch, tmp_path):
    """The checkpoint reader's rule (every read: test, resume, load_from_checkpoint): a class path in a trusted package
    is admitted; a stranger's is refused with the way to trust one's own."""
    monkeypatch.setenv(TRUST_VARIABLE, "mypkg")
    path = tmp_path / "named.ckpt"
    save_checkpoint_file({"state_dict": {"w": torch.zeros(1)}, "hyper_parameters": {"_class_path": names}}, path)
    if names.startswith("mypkg."):
        assert load_checkpoint_file(path)["hyper_parameters"]["_class_path"] == names
    else:
        with pytest.raises(CheckpointError, match=f"hyper_parameters._class_path names 'strangers.Thing'.*{TRUST_VARIABLE}"
                                                  r".*; it is 'mypkg' now\)$"):  # what it holds: a typo there shows
            load_checkpoint_file(path)


@pytest.fixture
def own_code(tmp_path: Path, mnist_dir: Path, monkeypatch) -> Path:
    """`user`'s working directory, set up in this process: current, on sys.path as PYTHONPATH puts it, nothing
    trusted; modules of its names are forgotten before and after the test (another test's tmp_path holds packages of
    the same names)."""
    forget_own_modules()
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "mymodel.py").write_text(MY_MODEL)
    (tmp_path / "my_callbacks.py").write_text(MY_CALLBACKS)
    (tmp_path / "strangers.py").write_text(STRANGERS)
    monkeypatch.delenv(TRUST_VARIABLE, raising=False)
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    forget_own_modules()


def forget_own_modules() -> None:
    for name in [name for name in sys.modules if name.split(".")[0] in ("mypkg", "my_callbacks", "strangers")]:
        del sys.modules[name]


@pytest.mark.slow  # trains through the LightningCLI front end
def test_the_cli_trains_reruns_tests_and_loads_your_own_code(own_code, monkeypatch, capsys):
    """`fit -c my.yaml` (a model subclass and a callback of one's own, no --model or --data: the defaults fill in),
    the run's own config.yaml run again, `test --ckpt_path` of its checkpoint and `MyVAE.load_from_checkpoint`; each
    refused in one line naming LATENT_ZOO_TRUST until the package is trusted, and a package not importable is named
    with where Python looks for it."""
    (own_code / "my.yaml").write_text(MY_CONFIG)
    code, _, err = train_main(["fit", "-c", "my.yaml"], monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err[-2000:]
    assert err.startswith("error: config file my.yaml: model.class_path names 'mypkg.mymodel.MyVAE'") and TRUST_VARIABLE in err

    monkeypatch.setenv(TRUST_VARIABLE, "mypkg,my_callbacks")
    code, out, err = train_main(["fit", "-c", "my.yaml", "--log_dir=logs"], monkeypatch, capsys)
    assert code == 0 and "my epoch 0 ended" in out, err[-2000:]
    (run,) = (own_code / "logs" / "tensorboard").glob("*/version_0")
    assert "MyVAE" in (run / "config.yaml").read_text() and "MNISTDataModule" in (run / "config.yaml").read_text()
    code, out, err = train_main(["fit", "-c", str(run / "config.yaml"), "--log_dir=again"], monkeypatch, capsys)
    assert code == 0 and "my epoch 0 ended" in out, err[-2000:]

    last = run / "checkpoints" / "last.ckpt"
    monkeypatch.delenv(TRUST_VARIABLE)
    code, _, err = train_main(["test", f"--ckpt_path={last}"], monkeypatch, capsys)
    assert code == 2 and TRUST_VARIABLE in err.strip().splitlines()[-1] and "'mypkg.mymodel.MyVAE'" in err.strip().splitlines()[-1], err
    monkeypatch.setenv(TRUST_VARIABLE, "mypkg")
    code, out, err = train_main(["test", f"--ckpt_path={last}", "--trainer.limit_test_batches=1", "--model.test_num_samples=2"],
                                monkeypatch, capsys)
    assert code == 0 and "test/nll" in out, err[-2000:]
    from mypkg.mymodel import MyVAE

    assert type(MyVAE.load_from_checkpoint(last)) is MyVAE

    monkeypatch.setattr(sys, "path", [path for path in sys.path if path != str(own_code)])
    for name in [name for name in sys.modules if name.split(".")[0] == "mypkg"]:
        del sys.modules[name]
    code, _, err = train_main(["test", f"--ckpt_path={last}"], monkeypatch, capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        "error: --model=mypkg.mymodel.MyVAE (named by the checkpoint or a config file): no module named 'mypkg'; a package "
        "of your own is imported from train.py's folder or PYTHONPATH"), err[-2000:]


@pytest.mark.slow
def test_hydra_trains_and_tests_a_model_of_your_own(user, tmp_path):
    """`python train.py` as a user runs it, with one's own package on PYTHONPATH and LATENT_ZOO_TRUST=mypkg in the
    environment: a config of one's own extends the class's defaults (model_defaults/MyVAE), a typo in it is one line,
    and `run_test=true` tests the best checkpoint of one's own model."""
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "myvae.yaml").write_text(README_OWN_CONFIG)
    own = ["--config-dir", str(tmp_path / "conf"), "model=myvae", "model.latent_dim=2", "run_test=true", *TINY_RUN,
           "model.val_num_samples=2", "model.test_num_samples=2", "log_dir=own"]
    # (a new interpreter: before the imports the early check does not know the class's settings, the check after them
    # does; no trainer setting, which would have every job checked then anyway)
    typo = subprocess.run([sys.executable, str(REPO / "train.py"), *own[:4], "model.latent_dmi=3"], cwd=tmp_path,
                          env=trusting(user, "mypkg"), capture_output=True, text=True, timeout=240)
    assert typo.returncode == 2 and last_line(typo).startswith(f"error: model.latent_dmi: {tmp_path / 'conf' / 'model' / 'myvae.yaml'} "
                                                                "has no such key; did you mean model.latent_dim?"), typo.stderr[-2000:]
    result = preloaded.run_train(own, tmp_path, trusting(user, "mypkg"), timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "test/nll" in output, output[-2000:]
    assert "Restoring states from the checkpoint path at" in output and "epoch000-step000002.ckpt" in output
    assert list((tmp_path / "own" / "tensorboard").glob("myvae-mnist-*/version_0"))


@pytest.mark.parametrize("front_end", ["cli -c", "hydra -cd"])
def test_a_strangers_module_beside_your_own_is_still_never_imported(front_end, own_code, monkeypatch, capsys):
    monkeypatch.setenv(TRUST_VARIABLE, "mypkg,my_callbacks")
    if front_end == "cli -c":
        (own_code / "received.yaml").write_text(MY_CONFIG + "    - class_path: strangers.Thing\n")
        args, label, where = ["fit", "-c", "received.yaml"], "config file received.yaml", "trainer.callbacks[1].class_path"
    else:
        (own_code / "received" / "callbacks").mkdir(parents=True)
        (own_code / "received" / "callbacks" / "mine.yaml").write_text(
            "epochs:\n  _target_: my_callbacks.PrintEpoch\nthing:\n  _target_: strangers.Thing\n")
        args, where = ["-cd", "received", "callbacks=mine", *TINY_RUN], "thing._target_"
        label = f"Hydra config {Path('received') / 'callbacks' / 'mine.yaml'}"
    code, _, err = train_main(args, monkeypatch, capsys)
    assert not (own_code / MARKER).exists() and "strangers" not in sys.modules
    assert code == 2 and len(err.strip().splitlines()) == 1, err[-2000:]
    assert err.startswith(f"error: {label}: {where} names 'strangers.Thing'"), err
    assert TRUST_VARIABLE in err
