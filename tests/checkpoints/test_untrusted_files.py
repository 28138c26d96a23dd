"""Files from strangers: a checkpoint with code planted in its pickle never runs it, through any loading path of the
Python API or of either front end, with or without TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (torch's own messages suggest
setting it); URLs are refused without being fetched; a class path named inside a checkpoint is not imported unless it
is one of the collection's models. (CIFAR-10's pickled batches: tests/datamodules/test_datamodules.py.)"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import lightning as L
import pytest
import torch

from checkpoints.errors import CheckpointError
from checkpoints.trainer import SafeCheckpoints
from checkpoints.file_format import save_checkpoint_file
from checkpoints.loader import load_checkpoint_file
from datamodules import MNISTDataModule
from models import VAE, VQVAE
from tests import preloaded
from tests.conftest import says

pytestmark = pytest.mark.slow  # Trainer runs and real processes: the full suite's
REPO = Path(__file__).resolve().parents[2]


class Planted:
    """What a stranger's checkpoint can hold: unpickling it would run `exec`, which writes a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def tiny_trainer(root: Path, **kwargs) -> L.Trainer:
    return L.Trainer(default_root_dir=root, max_steps=1, limit_train_batches=1, limit_val_batches=0, limit_test_batches=1,
                     logger=False, enable_progress_bar=False, enable_model_summary=False,
                     **{"callbacks": [SafeCheckpoints()], **kwargs})


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory, mnist_dir) -> Path:
    """A real checkpoint of a tiny VAE run (one step), written by the collection."""
    root = tmp_path_factory.mktemp("good")
    trainer = tiny_trainer(root, enable_checkpointing=False)
    trainer.fit(VAE(latent_dim=2, val_num_samples=2), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=8))
    path = root / "good.ckpt"
    trainer.save_checkpoint(path)
    return path


PLACES = ["bare pickle", "top level", "hyperparameters", "callback state"]


def planted_checkpoint(good: Path, place: str, folder: Path) -> tuple[Path, Path]:
    """A checkpoint (with a matching checksum file, as the collection writes them) carrying a payload at `place`."""
    marker = folder / f"ran-{place.replace(' ', '-')}"
    checkpoint = torch.load(good, weights_only=True)
    if place == "bare pickle":
        checkpoint = Planted(marker)
    elif place == "top level":
        checkpoint["extra"] = Planted(marker)
    elif place == "hyperparameters":
        checkpoint["hyper_parameters"]["lr"] = Planted(marker)
    else:
        checkpoint["callbacks"] = {"SomeCallback": {"state": Planted(marker)}}
    path = folder / f"planted-{place.replace(' ', '-')}.ckpt"
    save_checkpoint_file(checkpoint, path)
    return path, marker


@pytest.fixture(params=[False, True], ids=["plain environment", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1"])
def environment(request, monkeypatch) -> dict:
    if request.param:
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    else:
        monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    return dict(os.environ)


def api_paths(mnist_dir: Path, root: Path) -> dict:
    datamodule = MNISTDataModule(data_dir=str(mnist_dir), batch_size=8)
    return {
        "load_checkpoint_file": lambda path: load_checkpoint_file(path),
        "VAE.load_from_checkpoint": lambda path: VAE.load_from_checkpoint(path),
        "Trainer.test(ckpt_path=...)": lambda path: tiny_trainer(root).test(VAE(latent_dim=2), datamodule=datamodule, ckpt_path=path),
        "Trainer.fit(ckpt_path=...)": lambda path: tiny_trainer(root).fit(VAE(latent_dim=2), datamodule=datamodule, ckpt_path=path),
        "VQVAE autoencoder_checkpoint": lambda path: VQVAE(prior="factorized", autoencoder_checkpoint=str(path)).load_autoencoder(str(path)),
    }


@pytest.mark.parametrize("place", PLACES)
def test_no_payload_runs_through_the_python_api(place, good_checkpoint, environment, mnist_dir, tmp_path):
    path, marker = planted_checkpoint(good_checkpoint, place, tmp_path)
    for name, load in api_paths(mnist_dir, tmp_path).items():
        with pytest.raises(CheckpointError) as info:
            load(path)
        assert not marker.exists(), name
        message = str(info.value)
        assert message.startswith(f"checkpoint {path} is not a readable checkpoint (UnpicklingError") and "\n" not in message, (name, message)


class CountingHandler(http.server.BaseHTTPRequestHandler):
    requests = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).requests += 1
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.server.payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def payload_url(good_checkpoint, tmp_path):
    """A payload checkpoint served on the loopback address; the handler counts the requests it gets."""
    path, marker = planted_checkpoint(good_checkpoint, "top level", tmp_path)
    server = http.server.HTTPServer(("127.0.0.1", 0), CountingHandler)
    server.payload = path.read_bytes()
    CountingHandler.requests = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/last.ckpt", marker
    server.shutdown()


def test_a_checkpoint_url_is_refused_without_being_fetched(payload_url, environment, mnist_dir, tmp_path):
    url, marker = payload_url
    for name, load in api_paths(mnist_dir, tmp_path).items():
        with pytest.raises((CheckpointError, FileNotFoundError)) as info:
            load(url)
        assert "is a URL: checkpoints are read from local files only" in str(info.value) or name == "VQVAE autoencoder_checkpoint", name
    assert CountingHandler.requests == 0 and not marker.exists()


def test_a_checkpoint_that_names_a_foreign_class_is_not_imported(good_checkpoint, tmp_path):
    """`python train.py test --ckpt_path=X` builds the class X's hyperparameters name; one outside the registry is
    refused before anything imports it (here a module that would leave a marker when imported)."""
    (tmp_path / "strangers_module.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Model: pass\n")
    checkpoint = torch.load(good_checkpoint, weights_only=True)
    checkpoint["hyper_parameters"]["_class_path"] = "strangers_module.Model"
    checkpoint.pop("model_class", None)
    path = tmp_path / "foreign.ckpt"
    save_checkpoint_file(checkpoint, path)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    result = preloaded.run_train(["test", f"--ckpt_path={path}"], tmp_path, env, timeout=300)
    assert result.returncode == 2 and not (tmp_path / "imported").exists(), result.stderr[-2000:]
    says(result.stderr.strip().splitlines()[-1], f"error: checkpoint {path}", "hyper_parameters._class_path",
         "strangers_module.Model", "not imported", "LATENT_ZOO_TRUST=")


def test_no_payload_runs_through_either_front_end(good_checkpoint, payload_url, tmp_path, mnist_dir):
    """Every way a front end reads a checkpoint, with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: exit 2, one line, no marker."""
    path, marker = planted_checkpoint(good_checkpoint, "hyperparameters", tmp_path)
    url, url_marker = payload_url
    config = tmp_path / "cli.yaml"
    config.write_text(f"ckpt_path: {path}\n")
    commands = {
        "Hydra ckpt_path": ["model=vae", f"ckpt_path={path}"],
        "Hydra ckpt_path URL": ["model=vae", f"ckpt_path={url}"],
        "CLI test --ckpt_path": ["test", "--model=VAE", f"--ckpt_path={path}"],
        "CLI fit, a repeated --ckpt_path": ["fit", "--model=VAE", f"--ckpt_path={good_checkpoint}", f"--ckpt_path={path}"],
        "CLI test, ckpt_path in a -c config": ["test", "--model=VAE", "--data=MNISTDataModule", "-c", str(config)],
        "CLI test --ckpt_path URL": ["test", "--model=VAE", f"--ckpt_path={url}"],
    }
    env = {**os.environ, "DATA_DIR": str(mnist_dir), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "OMP_NUM_THREADS": "1"}
    from concurrent.futures import ThreadPoolExecutor

    def run(args: list[str]) -> subprocess.CompletedProcess:
        return preloaded.run_train(args, tmp_path, env, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:  # independent processes, two at a time
        results = dict(zip(commands, pool.map(run, commands.values())))
    for name, result in results.items():
        assert result.returncode == 2, (name, result.stderr[-2000:])
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and ("is not a readable checkpoint (UnpicklingError" in last or "is a URL" in last), (name, last)
        assert "Traceback" not in result.stderr, name
    assert not marker.exists() and not url_marker.exists() and CountingHandler.requests == 0


class _Payload:
    """Unpickling this runs `open(marker, "w")`: the code a stranger's pickle would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("flag", ["--experimental-rerun", "--experimental-re"])  # argparse takes abbreviations too
def test_hydras_rerun_of_a_pickled_config_is_refused_unread(flag, tmp_path):
    """`train.py --experimental-rerun FILE` would hand FILE to pickle.load (Hydra's rerun of .hydra/config.pickle):
    refused in one line before anything is read, the payload not run, in both spellings (FILE apart, and =FILE)."""
    import pickle

    marker = tmp_path / "ran"
    payload = tmp_path / "config.pickle"
    payload.write_bytes(pickle.dumps(_Payload(marker)))
    for args in ([flag, str(payload)], [f"{flag}={payload}"]):
        result = subprocess.run([sys.executable, str(REPO / "train.py"), *args], cwd=tmp_path, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 2 and not marker.exists(), result.stderr[-2000:]
        assert result.stderr.strip().splitlines() == [f"error: {flag}: a run's config.pickle is never unpickled here (a "
                                                      "stranger's file could run code); to rerun a run, pass the "
                                                      "overrides in its .hydra/overrides.yaml"]


def test_the_registry_names_the_models_and_data_modules_and_nothing_else():
    """common/registry.py: what models/ and datamodules/ register, under both names; an exception class of the
    data modules, another package's class, or a non-string is not nameable in a checkpoint."""
    import datamodules  # noqa: F401 (registers the data modules)
    import models  # noqa: F401
    from common.registry import LIGHTNING_INSTANTIATOR, is_registered

    assert is_registered("models.jsa.JSA") and is_registered("models.JSA", "model") and not is_registered("models.JSA", "data")
    assert is_registered("datamodules.MNISTDataModule") and is_registered("datamodules.mnist.MNISTDataModule")
    assert is_registered(LIGHTNING_INSTANTIATOR) and not is_registered(LIGHTNING_INSTANTIATOR, "model")
    assert not any(is_registered(name) for name in ("datamodules.DataError", "os.system", "models.base.torch", None, 3))
