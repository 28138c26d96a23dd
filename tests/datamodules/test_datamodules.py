"""DataModule contract: (x, index) batches, stable split indices, binarisation, offline errors, bad data and
options said in one line."""

from __future__ import annotations

import gzip
import pickle
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.datasets import CIFAR10, FashionMNIST
from torchvision.datasets import utils as tv_utils

from common.registry import registered
from checkpoints.trainer import changed_settings
from common.signatures import settings_of
from models import VAE
from datamodules import (CIFAR10DataModule, DataCorruptError, DataError, DataNotFoundError, FashionMNISTDataModule, ImageDataModule,
                         MNISTDataModule)
from datamodules.base import InMemoryImageDataset, collate_prebatched
from benchmarks.robustness.fake_cifar10 import CIFAR_PER_BATCH, fake_cifar_batch, write_fake_cifar10
from tests import preloaded
from tests.conftest import DATA_ROOT, TinyCIFAR10DataModule, says

# The two data sets of torchvision's IDX layout, one data module class (MNIST's, parameterized by the torchvision class).
IDX_MODULES = [pytest.param(MNISTDataModule, id="mnist"), pytest.param(FashionMNISTDataModule, id="fashion_mnist")]
# Every data set a user picks (the registered data modules but their base).
DATA_MODULES = [pytest.param(cls, id=cls.config_name) for cls in registered("data") if cls is not ImageDataModule]


@pytest.fixture(scope="session", params=IDX_MODULES)
def idx_cls(request: pytest.FixtureRequest, mnist_dir: Path) -> type[MNISTDataModule]:
    """MNISTDataModule, then FashionMNISTDataModule: a test that takes it runs on the real files of each.
    The shared data root holds both; a missing file fails, not skips."""
    cls = request.param
    raw = mnist_dir / cls.dataset.__name__ / "raw"
    missing = [name.removesuffix(".gz") for name, _ in cls.dataset.resources if not (raw / name.removesuffix(".gz")).is_file()]
    if missing:
        pytest.fail(f"{cls.title} raw files {missing} missing in {raw}; set DATA_DIR to the directory holding {raw.parent.name}/raw")
    return cls


@pytest.fixture(scope="session")
def idx_dm(idx_cls: type[MNISTDataModule], mnist_dir: Path) -> MNISTDataModule:
    dm = idx_cls(data_dir=str(mnist_dir), batch_size=128, eval_batch_size=500, download=False, binarize="none")
    dm.prepare_data()
    dm.setup()
    return dm


@pytest.fixture(scope="session")
def idx_train_file(idx_cls: type[MNISTDataModule], mnist_dir: Path) -> torch.Tensor:
    """The raw training file read independently of the datamodule (by torchvision), (60000, 1, 28, 28) uint8."""
    return idx_cls.dataset(str(mnist_dir), train=True).data.unsqueeze(1)


def one_line(error: BaseException) -> bool:
    """Said once: no chained error (a torchvision one, say) printed before it in a traceback."""
    return error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def grey(images: torch.Tensor) -> torch.Tensor:
    return images.float() / 255


def test_sizes_known_before_setup() -> None:
    dm = MNISTDataModule(data_dir="/nonexistent")
    assert dm.image_shape == (1, 28, 28)
    assert (dm.num_train_examples, dm.num_val_examples, dm.num_test_examples) == (55000, 5000, 10000)
    fashion = FashionMNISTDataModule(data_dir="/nonexistent")
    assert fashion.dataset is FashionMNIST and fashion.title == "Fashion-MNIST"  # torchvision's files, mirrors and md5s
    assert fashion.image_shape == (1, 28, 28) and fashion.raw_folder == Path("/nonexistent/FashionMNIST/raw")
    assert (fashion.num_train_examples, fashion.num_val_examples, fashion.num_test_examples) == (55000, 5000, 10000)
    assert (fashion.binarize, fashion.likelihood, fashion.backbone, fashion.config_name) == ("dynamic", "bernoulli", None, "fashion_mnist")
    cifar = CIFAR10DataModule(data_dir="/nonexistent")
    assert cifar.image_shape == (3, 32, 32)
    assert (cifar.num_train_examples, cifar.num_val_examples, cifar.num_test_examples) == (45000, 5000, 10000)
    assert dm.eval_batch_size == dm.batch_size == 128
    assert dm.hparams["binarize"] == dm.binarize == "dynamic" and cifar.binarize == "none"  # the usual benchmarks
    assert (dm.likelihood, cifar.likelihood) == ("bernoulli", "discretized_logistic")
    assert (dm.backbone, cifar.backbone) == (None, "conv")  # CIFAR-10 asks for the conv networks; MNIST leaves the model its own


def test_data_dir_falls_back_to_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    assert MNISTDataModule().data_dir == tmp_path.resolve()


def test_a_data_dir_that_is_a_file_is_refused_naming_where_it_came_from(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not a NotADirectoryError from deep inside the download's clean-up: one line, naming data_dir or DATA_DIR."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    with pytest.raises(ValueError, match=r"^data_dir=.*notes\.txt is a file; expected the folder"):
        MNISTDataModule(data_dir=str(a_file))
    monkeypatch.setenv("DATA_DIR", str(a_file))
    with pytest.raises(ValueError, match=r"^the environment's DATA_DIR=.*notes\.txt is a file"):
        FashionMNISTDataModule()


@pytest.mark.slow  # a process of its own: root reads any folder unless it gives up that power (setpriv)
def test_a_data_folder_this_user_cannot_look_into_is_one_line_naming_it(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    data = tmp_path / "data"
    (data / "MNIST" / "raw").mkdir(parents=True)
    data.chmod(0)
    drop = []  # root ignores the mode: it is run without the capabilities that let it
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: a folder of mode 000 cannot be made unreadable")
        drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-dac_override,-dac_read_search"]
    code = f"from datamodules import MNISTDataModule\nMNISTDataModule(data_dir={str(data)!r}).prepare_data()"
    try:
        result = subprocess.run([*drop, sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    finally:
        data.chmod(0o755)
    assert result.stderr.strip().splitlines()[-1] == (
        f"datamodules.base.DataError: MNISTDataModule: cannot look for {data}/MNIST/raw/train-images-idx3-ubyte: "
        f"permission denied. Fix: make the data folder {data} (DATA_DIR, or data.data_dir) and the folders below it "
        "readable and searchable by this user (chmod u+rx), or point DATA_DIR at one that is.")


class OwnMNIST(MNISTDataModule):
    """A data module of one's own with a setting of its own."""

    def __init__(self, invert: bool = False, **settings) -> None:
        super().__init__(**settings)
        self.invert = invert


def test_a_setting_of_a_data_module_of_ones_own_is_saved_and_a_changed_one_is_named() -> None:
    """OwnMNIST(invert, **settings): invert is saved beside the declared settings (hparams.yaml, the HPARAMS tab, the
    checkpoint's datamodule_hyper_parameters), so that a test or resume with another value is named, not silent."""
    written, given = OwnMNIST(invert=True, batch_size=32), OwnMNIST(batch_size=32)
    assert written.hparams["invert"] is True and written.hparams["batch_size"] == 32 and settings_of(given)["invert"] is False
    model = VAE()
    checkpoint = {"hyper_parameters": dict(model.hparams), "datamodule_hyper_parameters": dict(written.hparams)}
    assert changed_settings(checkpoint, model, given) == {"data.invert": (True, False)}


def test_a_data_module_of_ones_own_names_its_runs_by_its_class() -> None:
    """Its runs are not named like the class's it extends (vae-mnist-...), as a model of one's own (myvae-...)."""
    from datamodules import FashionMNISTDataModule

    assert (OwnMNIST.config_name, MNISTDataModule.config_name, FashionMNISTDataModule.config_name) == \
        ("ownmnist", "mnist", "fashion_mnist")


def test_invalid_arguments_rejected() -> None:
    with pytest.raises(ValueError, match="binarize"):
        MNISTDataModule(binarize="stochastic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="val_size"):
        MNISTDataModule(val_size=60000)


def test_batches(idx_dm: MNISTDataModule) -> None:
    assert [len(s) for s in (idx_dm.train_set, idx_dm.val_set, idx_dm.test_set)] == [55000, 5000, 10000]
    for loader, split, size in [
        (idx_dm.train_dataloader(), idx_dm.train_set, 128),
        (idx_dm.val_dataloader(), idx_dm.val_set, 500),
        (idx_dm.test_dataloader(), idx_dm.test_set, 500),
    ]:
        x, index = next(iter(loader))
        assert x.shape == (size, 1, 28, 28) and x.dtype == torch.float32
        assert index.shape == (size,) and index.dtype == torch.int64
        assert 0 <= x.min() and x.max() <= 1
        assert 0 <= index.min() and index.max() < len(split)
        torch.testing.assert_close(x, grey(split.images[index]), rtol=0, atol=0)


def test_epoch_indices_cover_split(idx_dm: MNISTDataModule) -> None:
    val = torch.cat([index for _, index in idx_dm.val_dataloader()])
    assert torch.equal(val, torch.arange(5000))  # unshuffled: positions in order
    train = torch.cat([index for _, index in idx_dm.train_dataloader()])
    assert not torch.equal(train, torch.arange(55000))  # shuffled ...
    assert torch.equal(train.sort().values, torch.arange(55000))  # ... but a permutation of the split


def test_single_item_matches_batch(idx_dm: MNISTDataModule) -> None:
    x, index = idx_dm.train_set[7]
    assert x.shape == (1, 28, 28) and int(index) == 7
    torch.testing.assert_close(x, grey(idx_dm.train_set.images[7]), rtol=0, atol=0)


def test_split_deterministic_and_disjoint(
    idx_cls: type[MNISTDataModule], mnist_dir: Path, idx_dm: MNISTDataModule, idx_train_file: torch.Tensor
) -> None:
    perm = torch.randperm(60000, generator=torch.Generator().manual_seed(0))
    train_pos, val_pos = perm[:55000], perm[55000:]
    assert not set(train_pos.tolist()) & set(val_pos.tolist())
    assert torch.equal(idx_dm.train_set.images, idx_train_file[train_pos])
    assert torch.equal(idx_dm.val_set.images, idx_train_file[val_pos])

    again = idx_cls(data_dir=str(mnist_dir), binarize="none")
    again.setup("fit")
    assert torch.equal(again.val_set.images, idx_dm.val_set.images)
    assert again.test_set is None  # "fit" does not load the test file

    other = idx_cls(data_dir=str(mnist_dir), split_seed=1, binarize="none")
    other.setup("validate")
    assert not torch.equal(other.val_set.images, idx_dm.val_set.images)


def test_binarize_none(idx_dm: MNISTDataModule) -> None:
    x, _ = InMemoryImageDataset(idx_dm.train_set.images, "none").__getitems__(list(range(64)))
    assert ((x > 0) & (x < 1)).any()


def test_binarize_static(idx_cls: type[MNISTDataModule], mnist_dir: Path) -> None:
    dm = idx_cls(data_dir=str(mnist_dir), binarize="static")
    dm.setup("fit")
    x, index = next(iter(dm.train_dataloader()))
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(x, (grey(dm.train_set.images[index]) > 0.5).float())


def test_binarize_dynamic(idx_dm: MNISTDataModule) -> None:
    torch.manual_seed(0)
    ds = InMemoryImageDataset(idx_dm.train_set.images, "dynamic")
    indices = list(range(16))
    first, index = ds.__getitems__(indices)
    second, _ = ds.__getitems__(indices)
    assert set(first.unique().tolist()) <= {0.0, 1.0}
    assert not torch.equal(first, second)
    draws = 1000
    mean = sum(ds.__getitems__(indices)[0] for _ in range(draws)) / draws
    target = grey(ds.images[index])
    # Per-pixel std of the mean is <= 0.5 / sqrt(1000) ~ 0.016.
    assert (mean - target).abs().max() < 0.1
    assert (mean - target).mean().abs() < 0.005


def test_seeded_dynamic_binarization_draws_bernoulli_of_the_grey_values() -> None:
    """The seeded draw (the one training uses) is 1 where a uniform falls below the grey value: white pixels are
    always 1, black always 0, and over many epochs each pixel's mean is its grey value."""
    images = torch.tensor([0, 255, 64, 128, 192, 230], dtype=torch.uint8).view(1, 1, 2, 3).repeat(4, 1, 1, 1)
    ds = InMemoryImageDataset(images, "dynamic", seed=0)
    indices = list(range(4))
    draws = []
    for epoch in range(500):
        ds.epoch = epoch
        draws.append(ds.__getitems__(indices)[0])
    draws = torch.stack(draws)
    assert set(draws.unique().tolist()) == {0.0, 1.0}
    assert (draws[..., 0, 0] == 0).all() and (draws[..., 0, 1] == 1).all()
    # Per-pixel std of the mean is <= 0.5 / sqrt(500) ~ 0.022.
    assert (draws.mean(0) - grey(images)).abs().max() < 0.1


def test_eval_binarization_depends_on_the_split_seed_not_the_training_seed(mnist_dir: Path) -> None:
    """Validation and test images are drawn with split_seed: runs that differ only in their training seed are
    evaluated on the same binary images."""
    firsts = []
    for seed in (1, 2):
        dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", seed=seed, split_seed=0, eval_batch_size=64)
        dm.setup()
        firsts.append([next(iter(loader()))[0] for loader in (dm.val_dataloader, dm.test_dataloader)])
    for first, second in zip(*firsts):
        assert torch.equal(first, second)


def test_eval_binarization_is_fixed_and_train_draws_are_fresh_per_epoch(idx_cls: type[MNISTDataModule], mnist_dir: Path) -> None:
    dm = idx_cls(data_dir=str(mnist_dir), binarize="dynamic", batch_size=64)
    dm.setup()
    for loader in (dm.val_dataloader, dm.test_dataloader):  # every model and epoch sees the same binary images
        torch.manual_seed(0)
        first = next(iter(loader()))[0]
        torch.manual_seed(1)
        assert torch.equal(first, next(iter(loader()))[0])
        assert set(first.unique().tolist()) == {0.0, 1.0}
    train = dm.train_dataloader()
    x0, i0 = next(iter(train))
    assert torch.equal((x0, i0)[0], next(iter(train))[0])  # the same batch again: the same draw
    train.sampler.set_epoch(1)
    x1, i1 = next(iter(train))
    assert not torch.equal(i0, i1)  # reshuffled, and binarized afresh:
    assert not torch.equal(train.dataset.__getitems__(i0.tolist())[0], x0)


def test_simulated_ddp_shards_are_disjoint_and_cover(idx_dm: MNISTDataModule) -> None:
    ds = idx_dm.val_set
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(ds, batch_size=256, sampler=sampler, collate_fn=collate_prebatched)
        indices = []
        for x, index in loader:
            torch.testing.assert_close(x, grey(ds.images[index]), rtol=0, atol=0)
            indices.append(index)
        seen.append(set(torch.cat(indices).tolist()))
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(len(ds)))


def read_pickled(folder: Path, names: list[str]) -> np.ndarray:
    return np.concatenate([pickle.loads((folder / n).read_bytes(), encoding="latin1")["data"] for n in names])


def test_cifar10(cifar10_dir: Path) -> None:
    dm = TinyCIFAR10DataModule(data_dir=str(cifar10_dir), batch_size=16, val_size=20, download=False)
    dm.prepare_data()
    dm.setup()
    assert (dm.num_train_examples, len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (80, 80, 20, 20)
    folder = cifar10_dir / "cifar-10-batches-py"
    rows = read_pickled(folder, [f"data_batch_{k}" for k in range(1, 6)])
    test_rows = read_pickled(folder, ["test_batch"])
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(0))

    x, index = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 3, 32, 32) and x.dtype == torch.float32 and index.dtype == torch.int64
    row = rows[int(perm[int(index[0])])]
    # Pickled rows are planar RGB: channel c, pixel (h, w) sits at c*1024 + h*32 + w.
    for c, h, w in [(0, 0, 0), (1, 5, 7), (2, 31, 30)]:
        assert x[0, c, h, w].item() == pytest.approx(row[c * 1024 + h * 32 + w] / 255)
    expected = torch.from_numpy(rows).view(100, 3, 32, 32)[perm[:80]]
    torch.testing.assert_close(x, grey(expected[index]), rtol=0, atol=0)

    x, index = next(iter(dm.test_dataloader()))
    assert torch.equal(index, torch.arange(16))
    torch.testing.assert_close(x, grey(torch.from_numpy(test_rows[:16]).view(16, 3, 32, 32)), rtol=0, atol=0)


@pytest.mark.parametrize("cls", DATA_MODULES)
def test_missing_data_without_download(cls: type[ImageDataModule], tmp_path: Path) -> None:
    dm = cls(data_dir=str(tmp_path), download=False)
    with pytest.raises(DataNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str(tmp_path.resolve()) in message and "DATA_DIR" in message
    folder = f"/{cls.dataset.__name__}/raw/{{train-images-idx3-ubyte" if issubclass(cls, MNISTDataModule) else "/cifar-10-batches-py/"
    assert message.startswith(f"{cls.__name__}: no data set in ") and folder in message
    assert isinstance(info.value, FileNotFoundError)
    # One short line, said once: no chained torchvision error printed before it.
    assert "\n" not in message and len(message) < 600 and one_line(info.value)
    with pytest.raises(DataNotFoundError, match="DATA_DIR"):
        cls(data_dir=str(tmp_path)).setup("fit")  # setup alone also explains


@pytest.mark.parametrize("cls", DATA_MODULES)
@pytest.mark.parametrize("data_dir", [".", "MNIST", "not/there"])  # an empty folder, one level too deep, a typo
def test_missing_data_download_fails_offline(
    cls: type[ImageDataModule], data_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("network disabled in tests")

    # Guarantees nothing is downloaded even on a machine with network access.
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    (tmp_path / "MNIST" / "raw").mkdir(parents=True)  # the user's folder: MNIST/raw without the files
    (tmp_path / "notes.txt").write_text("mine")
    before = sorted(tmp_path.rglob("*"))
    root = tmp_path / data_dir
    with pytest.raises(DataNotFoundError, match="no data set in .*the download failed.*DATA_DIR") as info:
        cls(data_dir=str(root), download=True).prepare_data()
    assert str(root.resolve()) in str(info.value) and "\n" not in str(info.value) and len(str(info.value)) < 600
    # The refused run leaves the user's data folder as it was: no MNIST/MNIST/raw, cifar-10-batches-py, not/there.
    assert sorted(tmp_path.rglob("*")) == before


# ---- options: refused in __init__, naming the option -----------------------------------------------------------


# Each refusal names the option as given and what it takes.
@pytest.mark.parametrize("options,named", [
    ({"batch_size": 100000}, ["batch_size=100000", "55000 images", "val_size=5000", "at most 55000"]),
    ({"batch_size": 59001, "val_size": 1000}, ["batch_size=59001", "59000 images", "val_size=1000"]),
    ({"eval_batch_size": 10001}, ["eval_batch_size=10001", "5000 images", "10000", "at most 10000"]),
    ({"batch_size": 0}, ["batch_size", ">= 1", "0"]),
    ({"batch_size": True}, ["batch_size=True", "integer"]),
    ({"batch_size": "128"}, ["batch_size='128'", "integer"]),
    ({"batch_size": 128.0}, ["batch_size=128.0", "integer"]),
    ({"eval_batch_size": 0}, ["eval_batch_size", ">= 1", "null", "0"]),
    ({"num_workers": -1}, ["num_workers", ">= 0", "-1"]),
    ({"val_size": 5000.0}, ["val_size=5000.0", "integer"]),
    ({"val_size": -1}, ["val_size", ">= 0", "-1"]),
    ({"val_size": 60000}, ["val_size", "[0, 60000)", "60000"]),
    ({"seed": "0"}, ["seed='0'", "integer"]),
    ({"seed": 2**64}, ["seed", "[0, 4294967295]", "18446744073709551616"]),
    ({"split_seed": -1}, ["split_seed", "[0, 4294967295]", "-1"]),
    ({"batch_size": np.int64(64)}, ["batch_size=np.int64(64)", "integer"]),
    ({"download": "no"}, ["download='no'", "true or false"]),
])
def test_options_are_checked_in_init(options: dict, named: list) -> None:
    with pytest.raises(ValueError) as error:
        MNISTDataModule(data_dir="/nonexistent", **options)
    assert str(error.value).startswith(named[0]), error.value
    says(error.value, *named)


def test_batch_sizes_up_to_the_splits_are_accepted() -> None:
    dm = MNISTDataModule(data_dir="/nonexistent", batch_size=55000, eval_batch_size=10000)
    assert (dm.batch_size, dm.eval_batch_size) == (55000, 10000)
    # Left out, eval_batch_size is batch_size, which may exceed val and test: each is then one batch.
    assert MNISTDataModule(data_dir="/nonexistent", batch_size=20000).eval_batch_size == 20000


# ---- bad files: one line naming the file, what is wrong and the fix; never a download over them ------------------


def no_download(*args: object, **kwargs: object) -> None:
    pytest.fail("a download was attempted although the files are on disk")


def raw_folder(root: Path, cls: type[MNISTDataModule]) -> Path:
    """Where `cls` reads its files under the data root `root`: MNIST/raw, FashionMNIST/raw (resolved, as messages say it)."""
    return root.resolve() / cls.dataset.__name__ / "raw"


@pytest.fixture
def idx_copy(idx_cls: type[MNISTDataModule], mnist_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data root whose MNIST/raw (or FashionMNIST/raw) links to the real files; `corrupt_file` swaps one for a bad one.
    Downloads fail the test."""
    raw = raw_folder(tmp_path, idx_cls)
    raw.mkdir(parents=True)
    real = [raw_folder(mnist_dir, idx_cls) / name.removesuffix(".gz") for name, _ in idx_cls.dataset.resources]
    for target in real:
        (raw / target.name).symlink_to(target)
    monkeypatch.setattr(tv_utils, "download_and_extract_archive", no_download)
    monkeypatch.setattr(urllib.request, "urlopen", no_download)
    before = [(f.stat().st_size, f.stat().st_mtime_ns) for f in real]
    yield tmp_path
    assert [(f.stat().st_size, f.stat().st_mtime_ns) for f in real] == before, f"the shared {idx_cls.title} files were changed"


def corrupt_file(path: Path, contents: bytes) -> None:
    """Replace the link `path` by a file of `contents`; never writes through it to the shared real file."""
    if not path.is_symlink():
        raise AssertionError(f"{path} is not a link of idx_copy: refusing to overwrite it")
    path.unlink()
    path.write_bytes(contents)


def real_file(cls: type[MNISTDataModule], name: str, size: int = -1) -> bytes:
    """The first `size` bytes (all: -1) of one of the shared real files of `cls`'s data set."""
    with open(raw_folder(DATA_ROOT, cls) / name, "rb") as f:
        return f.read(size)


# (file, its bad contents from `real` (name, size=-1) -> the real file's bytes, what the message says). The test
# files are the smaller ones to copy. Each case is tried on MNIST and on Fashion-MNIST ({title}: the data set's name).
IDX_CORRUPTIONS = {
    "empty": ("t10k-images-idx3-ubyte", lambda real: b"", "the file is empty"),
    "garbage": ("train-images-idx3-ubyte", lambda real: b"<!DOCTYPE html> an error page saved under the file's name" * 20,
                "expected IDX magic 2051 (images), found 1008813135 (not an MNIST IDX file)"),
    "truncated": ("train-images-idx3-ubyte", lambda real: real("train-images-idx3-ubyte", 1000),
                  "header says 60000 images of 28x28 = 47040000 bytes, the file has 984 after its 16-byte header (truncated)"),
    "float type": ("t10k-images-idx3-ubyte", lambda real: b"\x00\x00\x0d\x03" + real("t10k-images-idx3-ubyte")[4:], "expected IDX magic 2051 (images), found 3331"),
    "header count": ("t10k-images-idx3-ubyte", lambda real: real("t10k-images-idx3-ubyte")[:4] + (10001).to_bytes(4, "big") + real("t10k-images-idx3-ubyte")[8:],
                     "header says 10001 images of 28x28 = 7840784 bytes, the file has 7840000 after its 16-byte header (truncated)"),
    "extra bytes": ("t10k-labels-idx1-ubyte", lambda real: real("t10k-labels-idx1-ubyte") + b"\0", "header says 10000 labels = 10000 bytes, the file has 10001 after its 8-byte header (extra bytes at its end)"),
    "labels as images": ("t10k-images-idx3-ubyte", lambda real: real("t10k-labels-idx1-ubyte"), "expected IDX magic 2051 (images), found 2049 (labels: the labels file under this name?)"),
    "images as labels": ("t10k-labels-idx1-ubyte", lambda real: real("t10k-images-idx3-ubyte"), "expected IDX magic 2049 (labels), found 2051 (images"),
    "test as train": ("train-labels-idx1-ubyte", lambda real: real("t10k-labels-idx1-ubyte"), "it holds 10000 labels, expected 60000 labels"),
    "gzipped": ("t10k-labels-idx1-ubyte", lambda real: gzip.compress(real("t10k-labels-idx1-ubyte")), "it is still gzip-compressed. Fix: unpack it (gunzip)"),
    # Valid headers, degenerate contents.
    "labels past 9": ("t10k-labels-idx1-ubyte", lambda real: real("t10k-labels-idx1-ubyte")[:8] + bytes(range(100)) * 100,
                      "its labels run up to 99, where {title}'s classes are 0-9"),
    "zeroed images": ("t10k-images-idx3-ubyte", lambda real: real("t10k-images-idx3-ubyte")[:16] + bytes(7_840_000),
                      "every pixel of its 10000 images is 0: it holds no images"),
}


@pytest.mark.parametrize("case", IDX_CORRUPTIONS)
def test_corrupt_idx_file_is_one_line_naming_it(case: str, idx_cls: type[MNISTDataModule], idx_copy: Path) -> None:
    name, contents, what = IDX_CORRUPTIONS[case]
    path = raw_folder(idx_copy, idx_cls) / name
    corrupt_file(path, contents(lambda name, size=-1: real_file(idx_cls, name, size)))
    dm = idx_cls(data_dir=str(idx_copy), download=True)
    dm.prepare_data()  # the files are all there: nothing to download
    with pytest.raises(DataCorruptError) as info:
        dm.setup("fit" if name.startswith("train") else "test")
    message = str(info.value)
    assert message.startswith(f"{path} is corrupt: {what.format(title=idx_cls.title)}") and "Fix: " in message and "delete it" in message
    assert isinstance(info.value, ValueError) and isinstance(info.value, DataError) and not isinstance(info.value, FileNotFoundError)
    assert "\n" not in message and one_line(info.value)


@pytest.fixture
def cifar_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh fake CIFAR-10 whose md5s are the "official" ones (torchvision's lists); downloads fail the test."""
    train_list, test_list, meta_md5 = write_fake_cifar10(tmp_path)
    monkeypatch.setattr(CIFAR10, "train_list", train_list)
    monkeypatch.setattr(CIFAR10, "test_list", test_list)
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": meta_md5})
    monkeypatch.setattr(tv_utils, "download_and_extract_archive", no_download)
    monkeypatch.setattr(urllib.request, "urlopen", no_download)
    return tmp_path


def other_batch(change) -> bytes:
    batch = fake_cifar_batch("data_batch_1", np.random.default_rng(1))
    return pickle.dumps(change(batch))


CIFAR_CORRUPTIONS = {
    "md5": (lambda good: other_batch(lambda b: b), "its md5 "),
    "truncated": (lambda good: good[: len(good) // 2], "it cannot be unpickled (UnpicklingError: pickle data was truncated): truncated, or not a CIFAR-10 python batch"),
    "not a pickle": (lambda good: b"P6 32 32 255\n" + bytes(100), "it cannot be unpickled ("),
    "empty": (lambda good: b"", "the file is empty"),
    "not a dict": (lambda good: other_batch(lambda b: [b["data"]]), "it holds a list, not a CIFAR-10 batch (a dict with 'data' and 'labels')"),
    "no labels": (lambda good: other_batch(lambda b: {k: v for k, v in b.items() if k != "labels"}),
                  "it has no 'labels' entry (its keys: 'batch_label', 'data', 'filenames')"),
    "wrong size": (lambda good: other_batch(lambda b: {**b, "data": b["data"][:, :3000]}),
                   f"'data' is a uint8 array of shape ({CIFAR_PER_BATCH}, 3000), expected uint8 ({CIFAR_PER_BATCH}, 3072): {CIFAR_PER_BATCH} images of 3x32x32"),
    "float data": (lambda good: other_batch(lambda b: {**b, "data": b["data"] / 255}), "'data' is a float64 array of shape"),
    "labels short": (lambda good: other_batch(lambda b: {**b, "labels": b["labels"][:-1]}), f"'labels' has {CIFAR_PER_BATCH - 1} entries, expected one for each"),
}


@pytest.mark.parametrize("case", CIFAR_CORRUPTIONS)
def test_corrupt_cifar10_file_is_one_line_naming_it(case: str, cifar_copy: Path) -> None:
    change, what = CIFAR_CORRUPTIONS[case]
    path = cifar_copy / "cifar-10-batches-py" / "data_batch_2"
    path.write_bytes(change(path.read_bytes()))
    dm = TinyCIFAR10DataModule(data_dir=str(cifar_copy), batch_size=16, val_size=20, download=True)
    dm.prepare_data()  # present files are never downloaded again, whatever their md5
    with pytest.raises(DataCorruptError) as info:
        dm.setup()
    message = str(info.value)
    assert message.startswith(f"{path.resolve()} is corrupt: {what}") and message.endswith("Fix: delete it so that it is downloaded again, or copy a good one in its place.")
    assert "\n" not in message and len(message) < 600 and one_line(info.value)
    if case == "md5":
        assert re.search(r"its md5 [0-9a-f]{32} differs from the official [0-9a-f]{32}; the file is corrupt or not the official CIFAR-10 python version", message)


def test_only_missing_files_are_downloaded(cifar_copy: Path, idx_cls: type[MNISTDataModule], idx_copy: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A download brings the missing files only: one already there, corrupt or not, is left for setup to report."""
    folder = cifar_copy / "cifar-10-batches-py"
    (folder / "test_batch").unlink()
    (folder / "data_batch_3").write_bytes(b"")
    urls = []

    def fake_archive(url: str, download_root: str, extract_root: str | None = None, **kwargs: object) -> None:
        urls.append(url)
        if "cifar" in url:  # every file of the archive, as the real one unpacks
            write_fake_cifar10(Path(extract_root), seed=0)
        else:
            target = Path(download_root) / kwargs["filename"].removesuffix(".gz")
            assert not target.exists()  # nor a link: writing would go through it to the shared file
            target.write_bytes(real_file(idx_cls, target.name))

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", fake_archive)
    dm = TinyCIFAR10DataModule(data_dir=str(cifar_copy), batch_size=16, val_size=20)
    dm.prepare_data()
    assert urls == [CIFAR10.url] and (folder / "test_batch").stat().st_size > 0 and (folder / "data_batch_3").stat().st_size == 0
    dm.prepare_data()  # all there now
    assert len(urls) == 1
    with pytest.raises(DataCorruptError, match="data_batch_3 is corrupt: the file is empty"):
        dm.setup()

    (raw_folder(idx_copy, idx_cls) / "t10k-labels-idx1-ubyte").unlink()
    idx_cls(data_dir=str(idx_copy)).prepare_data()
    assert urls[1:] == [f"{idx_cls.dataset.mirrors[0]}t10k-labels-idx1-ubyte.gz"]  # the missing file only, from the data set's mirror


def test_unreadable_file_is_not_reported_missing(idx_cls: type[MNISTDataModule], idx_copy: Path) -> None:
    path = raw_folder(idx_copy, idx_cls) / "t10k-images-idx3-ubyte"
    path.unlink()
    path.mkdir()  # there, but not a file
    dm = idx_cls(data_dir=str(idx_copy))
    dm.prepare_data()
    with pytest.raises(DataError, match=f"{re.escape(str(path))} is corrupt: it is not a regular file") as info:
        dm.setup("test")
    assert not isinstance(info.value, DataNotFoundError) and one_line(info.value)


def test_partly_missing_data_names_the_missing_files(idx_cls: type[MNISTDataModule], idx_copy: Path) -> None:
    (raw_folder(idx_copy, idx_cls) / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DataNotFoundError, match=rf"^{idx_cls.__name__}: incomplete data set in {re.escape(str(idx_copy.resolve()))}: expected "
                                                 rf"{re.escape(str(raw_folder(idx_copy, idx_cls)))}/{{train-images-idx3-ubyte,.*; missing "
                                                 r"train-labels-idx1-ubyte; no download was attempted \(download=False\)") as info:
        idx_cls(data_dir=str(idx_copy), download=False).prepare_data()
    assert "\n" not in str(info.value) and one_line(info.value)


def test_train_py_turns_any_data_error_into_one_line(idx_cls: type[MNISTDataModule], idx_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import launch.hydra_app
    import launch.errors

    corrupt_file(raw_folder(idx_copy, idx_cls) / "t10k-labels-idx1-ubyte", b"")
    with pytest.raises(SystemExit) as info, launch.errors.user_errors_as_one_line():
        idx_cls(data_dir=str(idx_copy)).setup("test")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    says(err, f"error: {raw_folder(idx_copy, idx_cls) / 't10k-labels-idx1-ubyte'}", "corrupt", "empty", "delete it",
         "downloaded again")


def front_end_args(cls: type[MNISTDataModule], front_end: str, settings: dict[str, object]) -> list[str]:
    """`python train.py` arguments choosing `cls` and setting `settings` (trainer.NAME or data.NAME) in that front end."""
    if front_end == "hydra":
        return [f"data={cls.config_name}", *(f"{key}={value}" for key, value in settings.items())]
    return ["fit", f"--data={cls.__name__}", *(f"--{key}={value}" for key, value in settings.items())]


@pytest.mark.slow  # a train.py process: the same, end to end (several seconds: imports Lightning and Hydra)
@pytest.mark.parametrize("idx_cls,front_end,problem", [  # each front end, problem and data set once; every file's line above
    (MNISTDataModule, "hydra", "corrupt"), (FashionMNISTDataModule, "cli", "missing"),
], indirect=["idx_cls"], ids=lambda value: getattr(value, "config_name", value))
def test_train_py_process_says_bad_data_in_one_line(idx_cls: type[MNISTDataModule], front_end: str, problem: str, idx_copy: Path,
                                                    tmp_path: Path) -> None:
    raw = raw_folder(idx_copy, idx_cls)
    settings = {"data.data_dir": idx_copy, "trainer.max_steps": 1, "trainer.accelerator": "cpu", "trainer.enable_progress_bar": "false"}
    if problem == "corrupt":
        corrupt_file(raw / "train-images-idx3-ubyte", real_file(idx_cls, "train-images-idx3-ubyte", 1000))
        said = f"error: {raw / 'train-images-idx3-ubyte'} is corrupt: header says 60000 images"
    else:
        (raw / "t10k-labels-idx1-ubyte").unlink()
        settings["data.download"] = "false"
        said = f"error: {idx_cls.__name__}: incomplete data set in {idx_copy.resolve()}: expected {raw}/{{train-images-idx3-ubyte,"
    result = preloaded.run_train(front_end_args(idx_cls, front_end, settings), tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(said) and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert problem == "corrupt" or "; missing t10k-labels-idx1-ubyte; no download was attempted (download=False)" in last


@pytest.mark.slow  # trains through the front ends
@pytest.mark.parametrize("front_end", ["hydra", "cli"])
def test_train_py_trains_on_fashion_mnist(front_end: str, mnist_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A few steps of a model on Fashion-MNIST through each front end (in this process), as a user would run them."""
    import launch.cli_app
    from tests.launch.test_entrypoints import CLI_FAST, FAST, hydra_run, tags

    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    if front_end == "hydra":
        hydra_run(["data=fashion_mnist", "model=vae", *FAST], tmp_path)
    else:
        launch.cli_app.main(["fit", "--data=FashionMNISTDataModule", "--model=VAE", *CLI_FAST])
    run_dir = tmp_path / "logs" / "tensorboard" / "vae-fashion_mnist-mlp-z32" / "version_0"  # named after the data set
    assert {"train/loss", "val/nll"} <= tags(run_dir) and (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_compare_experiment_on_fashion_mnist() -> None:
    """`experiment=compare data=fashion_mnist`: the MLP networks, as on MNIST, and the Bernoulli likelihood of binarized pixels."""
    import launch.hydra_app
    import launch.runs.run_directory
    import launch.errors
    from tests.launch.test_configs import composed

    cfg = composed(["experiment=compare", "model=jsa", "data=fashion_mnist"])
    assert cfg.model.backbone == "mlp" and cfg.data._target_ == "datamodules.FashionMNISTDataModule"
    data, model = launch.hydra_app.data_and_model(cfg)
    assert type(data) is FashionMNISTDataModule and model.hparams["likelihood"] == "bernoulli"
    assert launch.runs.run_directory.run_name(cfg.run_name, model, data) == "jsa-fashion_mnist-mlp-K10-L20"


@pytest.mark.parametrize("new_batch_size", [4, 6, 3])
def test_a_resumed_loader_continues_at_the_same_example_whatever_its_batch_size(new_batch_size: int) -> None:
    """The loader's saved position counts examples: a run resumed with another data.batch_size (logged as a changed
    setting) sees the rest of the epoch, in the same order, from the first example the checkpointed run had not seen."""
    from datamodules.resumable import ResumableDataLoader, ResumableSampler

    dataset = torch.utils.data.TensorDataset(torch.arange(40))
    first = ResumableDataLoader(dataset, ResumableSampler(dataset, 4, seed=3))
    order = [int(i) for i in first.sampler]  # the epoch's permutation
    for batch in first:
        first.sampler.batches_done += 1  # as the data module's on_before_batch_transfer counts them
        if first.sampler.batches_done == 3:
            break
    state = first.state_dict()
    resumed = ResumableDataLoader(dataset, ResumableSampler(dataset, new_batch_size, seed=3))
    resumed.load_state_dict(state)
    rest = [int(i) for (batch,) in resumed for i in batch]
    assert rest == order[12:]
    resumed.sampler.batches_done = 2  # and its own position is again in examples
    assert resumed.state_dict()["examples_done"] == 12 + 2 * new_batch_size


class PlantedPayload:
    """What a stranger's pickle can hold: unpickling it calls `Path.touch` on a marker file (any callable would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("md5_matches", [False, True], ids=["foreign md5", "payload's md5 listed as official"])
@pytest.mark.parametrize("where", ["top level", "inside the dict"])
def test_a_cifar10_batch_with_a_payload_never_runs_it(where: str, md5_matches: bool, cifar_copy: Path, monkeypatch) -> None:
    """Whether or not the planted file's md5 is the one the data module expects, nothing in it runs: the unpickler
    imports numpy's array constructors only, and the refusal is one line naming the file."""
    marker = cifar_copy / "payload-ran"
    path = cifar_copy / "cifar-10-batches-py" / "data_batch_2"
    batch = fake_cifar_batch("data_batch_2", np.random.default_rng(2))
    path.write_bytes(pickle.dumps(PlantedPayload(marker) if where == "top level" else {**batch, "labels": PlantedPayload(marker)}))
    if md5_matches:
        import hashlib
        listed = [[name, hashlib.md5(path.read_bytes()).hexdigest() if name == "data_batch_2" else md5] for name, md5 in CIFAR10.train_list]
        monkeypatch.setattr(CIFAR10, "train_list", listed)
    dm = TinyCIFAR10DataModule(data_dir=str(cifar_copy), batch_size=16, val_size=20)
    with pytest.raises(DataCorruptError) as info:
        dm.setup()
    assert not marker.exists()
    message = str(info.value)
    assert message.startswith(f"{path.resolve()} is corrupt: it cannot be unpickled (UnpicklingError: it refers to pathlib")
    assert "which a CIFAR-10 batch never does" in message and "\n" not in message
