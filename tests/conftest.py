"""Shared fixtures: the real MNIST files and a tiny fake CIFAR-10 on disk."""

from __future__ import annotations

import copy
import functools
import gc
import os
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

# torch.compile's kernel cache, one per test process (each xdist worker, and the processes it starts, inherit theirs):
# two processes writing the same kernel file at once can leave another reading it half-written ("file too short").
# Assigned, not setdefault, and before torch is imported: importing torch fills the variable with the shared
# default (/tmp/torchinductor_<user>), which the workers would then inherit from the controller.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"torchinductor-{os.getpid()}")
# Inductor's C++ for the CPU without vector intrinsics, in this process and those it starts: the suite's compiled
# steps are checked against the eager step (graph capture, buffer writes, eager's random draws), which does not hinge
# on the instructions the kernels use, and scalar kernels generate and compile faster (benchmarks/results/suite/).
# One test compiles with the vector code
# (tests/models/test_accelerator_step.py); a value set outside the suite is kept.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")
# The user's cache, where a run records the libraries' settings for the early checks (launch/checks/configs.py):
# one per test process too, so that the suite neither reads nor writes the user's own.
os.environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"latent-zoo-cache-{os.getpid()}")
gc.disable()  # until the collection ends: pytest_collection below

import pytest  # noqa: E402

# No torch, torchvision or project import at the top: under xdist the controller loads this file too, runs no test,
# and would spend seconds on them before it starts the workers. What needs them imports them where it is used.
if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]


def data_root(repo: Path, environ: Mapping[str, str]) -> Path:
    """The folder the tests read MNIST and Fashion-MNIST from, in torchvision's layout (README, "Install and run the
    tests"): `$DATA_DIR`; else `shared/data` beside the clone `repo` (CI's copy, never downloaded into); else the
    clone's own `data/` (git-ignored), which the session fills through the data modules' download (`fetch_test_data`)."""
    if environ.get("DATA_DIR"):
        return Path(environ["DATA_DIR"]).expanduser().resolve()
    shared = repo.parent / "shared" / "data"
    return (shared if shared.is_dir() else repo / "data").resolve()


# The data root of every test. Exported, so that whatever a test leaves to its default (a data module built without
# data_dir, a composed config, a `python train.py` it starts) reads these files too, and so that the xdist workers,
# which inherit the environment, resolve the same folder.
DATA_ROOT = data_root(REPO, os.environ)
os.environ["DATA_DIR"] = str(DATA_ROOT)

# Under pytest-xdist (pyproject's -n auto) the workers share the cores: each worker, and every process it starts, gets
# its share of them. Two processes of two torch threads each on two cores run the quick loop 3.3 times slower.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    THREADS = max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    torch.set_num_threads(THREADS)
    os.environ["OMP_NUM_THREADS"] = str(THREADS)


def mnist_slice(mnist_dir: Path, n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n images of the MNIST training split, statically binarized, and their indices: a copy of the
    session's (the data module reads the files once), which the caller may change."""
    x, index = mnist_slice_once(mnist_dir, n)
    return x.clone(), index.clone()


@functools.cache
def mnist_slice_once(mnist_dir: Path, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    from datamodules import MNISTDataModule

    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="static")
    dm.setup("fit")
    return dm.train_set.__getitems__(list(range(n)))


def says(message: object, *parts: str) -> None:
    """`message` (an exception or a string) names each of `parts`: the option it refuses, the value given, the fix it
    offers (CONTRIBUTING: one clear line naming the option and what was expected). The words around them are the
    message's own: a rewording passes, a message that loses the option or the fix fails."""
    text = " ".join(str(message).split())
    missing = [part for part in parts if part not in text]
    assert not missing, f"{text!r} does not name {missing}"


def quick_rows(rows: list, count: int) -> list:
    """A parametrized table whose first `count` rows run in the quick loop (`pytest -m "not slow"`) and the rest in the
    full suite only (CONTRIBUTING, "The quick loop"): the first rows hold one case of each kind the table checks."""
    def slow(row: Any) -> Any:
        if isinstance(row, type(pytest.param())):  # a pytest.param row keeps its values, marks and id
            return pytest.param(*row.values, marks=[*row.marks, pytest.mark.slow], id=row.id)
        return pytest.param(*(row if isinstance(row, tuple) else (row,)), marks=pytest.mark.slow)

    return [*rows[:count], *map(slow, rows[count:])]


def train_main(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """`python train.py ARGS` run by train.main in this process (sys.argv set by `monkeypatch`, the output read by
    `capsys`): its exit status (0 when it returns), stdout and stderr. The SIGTERM handler train.main installs would
    be the test process's own: left out."""
    import launch.checks.early
    import train

    monkeypatch.setattr(sys, "argv", ["train.py", *args])
    monkeypatch.setattr(launch.checks.early, "exit_on_sigterm", lambda: None)
    capsys.readouterr()
    try:
        train.main()
        code = 0
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture, hydra: list[str] | None = None, cli: list[str] | None = None) -> str:
    """`python train.py HYDRA` (launch.hydra_app.run on the composed config) or `python train.py CLI`
    (launch.cli_app.main) run in this process, which must end with exit status 2: its last line on stderr."""
    import launch.checks.hydra_config
    import launch.cli_app
    import launch.hydra_app
    from launch.errors import user_errors_as_one_line

    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        if hydra is not None:
            with user_errors_as_one_line():
                launch.hydra_app.run(launch.checks.hydra_config.compose(list(hydra)))
        else:
            launch.cli_app.main(cli)
    err = capsys.readouterr().err
    assert stop.value.code == 2, err[-3000:]
    return err.strip().splitlines()[-1]


def narrow_mlps(model, width: int = 64):
    """`model` with its MLP encoder and decoder replaced by two hidden layers of `width` (the same inputs, outputs and
    activation): the toy models of a few pixels that tests enumerate need no 512/256 MNIST MLP, whose per-state
    gradients and 20000-row batches would dominate their time."""
    from models.components.backbones import MLPDecoder, MLPEncoder

    activation = getattr(model, "activation", "relu")
    data_shape = model.data_shape
    model.encoder = MLPEncoder(data_shape, model.encoder.net[-1].out_features, (width, width), activation)
    model.decoder = MLPDecoder(model.decoder.net[0].in_features, model.decoder.data_shape, (width, width), activation)
    return model


def train_on_batch(model, x: torch.Tensor, index: torch.Tensor, steps: int) -> tuple[dict, dict]:
    """`steps` Adam steps of `model.training_loss` on one batch; the loss terms of the first and the last."""
    optimizer = model.configure_optimizers()
    history = []
    for _ in range(steps):
        terms = model.training_loss(x, index)
        optimizer.zero_grad()
        terms["loss"].backward()
        optimizer.step()
        history.append({name: value.detach() for name, value in terms.items()})
    return history[0], history[-1]


def __getattr__(name: str) -> type:
    """`TinyCIFAR10DataModule` (`from tests.conftest import ...`, or a config's `data._target_`), made on first use."""
    if name != "TinyCIFAR10DataModule":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from datamodules import CIFAR10DataModule

    tiny = type(name, (CIFAR10DataModule,), {
        "__module__": __name__, "__doc__": "CIFAR-10 sized for the 20-images-per-batch fake of the cifar10_dir fixture.",
        "train_file_size": 100, "test_file_size": 20, "config_name": "cifar10"})  # (its runs named as CIFAR-10's)
    globals()[name] = tiny
    return tiny


@pytest.fixture(autouse=True)
def sigint_as_found() -> Iterator[None]:
    """Each test leaves SIGINT's handler as it found it: Lightning, for one, ignores SIGINT for good once a Trainer call
    meets a KeyboardInterrupt (lightning/pytorch/trainer/call.py), and a process a later test starts would inherit the
    ignore (a guard against a Ctrl-C test leaving SIGINT ignored for the tests after it)."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    if handler is not None:  # None: a handler installed outside Python, which it cannot put back
        signal.signal(signal.SIGINT, handler)


def fetch_test_data(root: Path) -> None:
    """Download what `root` lacks of MNIST and Fashion-MNIST through the data modules' own download (`prepare_data`,
    as train.py's first run does): only missing files, and a failed download leaves `root` as it was. Raises
    pytest.UsageError, one line (pytest prints `ERROR: ...`), when the files cannot be had."""
    from datamodules import DataError, FashionMNISTDataModule, MNISTDataModule

    for cls in (MNISTDataModule, FashionMNISTDataModule):
        try:
            cls(data_dir=str(root)).prepare_data()
        except DataError as error:
            raise pytest.UsageError(f"the tests read MNIST and Fashion-MNIST from the clone's data/ (no DATA_DIR set, "
                                    f"no ../shared/data beside the clone): {error}") from None


def pytest_sessionstart(session: pytest.Session) -> None:
    """The clone's own data folder is filled before any test runs, once: in the one process, or in xdist's controller
    before it starts the workers. `$DATA_DIR` and `../shared/data` are read as they are, never downloaded into."""
    if os.environ.get("PYTEST_XDIST_WORKER") or DATA_ROOT != (REPO / "data").resolve():
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # torchvision's "Downloading ..." lines, when it downloads
        fetch_test_data(DATA_ROOT)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first, the documented commands (the train.py chain, each benchmark's) and the bad inputs'
    quick set: under xdist (worksteal) the workers start them at once, and take the rest after."""
    longest = ("tests/test_documented_commands.py::test_", "tests/benchmarks/robustness/test_bad_inputs.py::test_each_kind")
    items.sort(key=lambda item: not item.nodeid.startswith(longest))


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    """What the imports and the collection make (torch, Lightning, Hydra, the test modules) lives as long as the
    session: the cyclic garbage collector is off while they are made (from this file's import on), and `gc.freeze`
    then moves them out of its reach, so that a full collection, which the tests' short-lived objects trigger, walks
    the objects a test made rather than every object of those libraries. Under xdist the controller, which collects
    nothing, passes here too."""
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """Data root holding ``MNIST/raw``: DATA_ROOT (`data_root`). Missing files fail, not skip."""
    from torchvision.datasets import MNIST

    root = DATA_ROOT
    raw = root / "MNIST" / "raw"
    names = [os.path.splitext(name)[0] for name, _ in MNIST.resources]
    missing = [name for name in names if not (raw / name).is_file()]
    if missing:
        pytest.fail(f"MNIST raw files {missing} missing in {raw}; set DATA_DIR to the directory containing MNIST/raw")
    return root


@pytest.fixture(scope="session")
def cifar10_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fake CIFAR-10 (20 images per batch file) in the real ``cifar-10-batches-py`` pickle format.

    The data module checks every batch file against the official md5 in torchvision's
    ``CIFAR10.train_list``/``test_list`` (and torchvision's CIFAR10 class, ``batches.meta``
    against ``CIFAR10.meta``), looked up when read: those attributes are pointed at the
    md5 of the fake files, so the files load with the integrity checks intact.
    """
    from torchvision.datasets import CIFAR10

    from benchmarks.robustness.fake_cifar10 import write_fake_cifar10

    root = tmp_path_factory.mktemp("cifar10")
    train_list, test_list, meta_md5 = write_fake_cifar10(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CIFAR10, "train_list", train_list)
        mp.setattr(CIFAR10, "test_list", test_list)
        mp.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": meta_md5})
        yield root


def pytest_unconfigure(config: pytest.Config) -> None:
    """This process's caches (set at the top of this file) go with it: a suite leaves no cache behind."""
    import shutil

    for variable, prefix in (("TORCHINDUCTOR_CACHE_DIR", "torchinductor"), ("XDG_CACHE_HOME", "latent-zoo-cache")):
        own = os.path.join(tempfile.gettempdir(), f"{prefix}-{os.getpid()}")
        if os.environ.get(variable) == own:
            shutil.rmtree(own, ignore_errors=True)  # safe: this process's own cache directory, named by its pid above


@pytest.fixture(autouse=True, scope="session")
def each_command_composed_once() -> Iterator[None]:
    """Many tests check a command line whose config another test has composed (the default config, model=vae,
    each model of experiment=compare, the config a refusal's advice is read from): `launch.checks.hydra_config.compose`,
    which the early check calls for every job of a command, composes a command once in this process and then gives a
    copy, made Hydra's current config as compose makes it. A compose is a function of the overrides, the files of the
    config folders it adds, DATA_DIR, the registered classes and whether Lightning is imported
    (launch/checks/hydra_config.py: register_defaults), each part of the key, and of the working directory, which it
    records alone (hydra.runtime.cwd: set in the copy). A compose that raises is not kept: its next call composes again."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from common.registry import registered
    from launch.checks import hydra_check, hydra_config

    compose = hydra_config.compose
    composed: dict[tuple, object] = {}

    def folder_files(folder: Path) -> tuple:
        folder = Path(folder)
        return tuple(sorted((str(path), path.stat().st_mtime_ns, path.stat().st_size)
                            for path in folder.rglob("*") if path.is_file())) if folder.is_dir() else ()

    def compose_once(overrides: list[str], config_dirs: list[Path] = ()) -> object:
        key = (tuple(overrides), tuple((str(Path(folder).resolve()), folder_files(folder)) for folder in config_dirs),
               os.environ.get("DATA_DIR"), "lightning" in sys.modules,
               tuple(f"{cls.__module__}.{cls.__qualname__}" for kind in ("model", "data") for cls in registered(kind)))
        if key not in composed:
            composed[key] = compose(overrides, config_dirs)
        cfg = copy.deepcopy(composed[key])
        OmegaConf.set_readonly(cfg.hydra, False)
        cfg.hydra.runtime.cwd = os.getcwd()
        HydraConfig.instance().set_config(cfg)  # (the hydra node read-only again, as compose leaves it)
        return cfg

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hydra_config, "compose", compose_once)
        patch.setattr(hydra_check, "compose", compose_once)
        yield
