"""DataModule contract: (x, index) batches, stable split indices, binarisation, offline errors."""

from __future__ import annotations

import pickle
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.datasets import MNIST

from datamodules import CIFAR10DataModule, DataNotFoundError, ImageDataModule, MNISTDataModule
from datamodules.base import InMemoryImageDataset, collate_prebatched
from tests.conftest import TinyCIFAR10DataModule


@pytest.fixture(scope="session")
def mnist_dm(mnist_dir: Path) -> MNISTDataModule:
    dm = MNISTDataModule(data_dir=str(mnist_dir), batch_size=128, eval_batch_size=500, download=False, binarize="none")
    dm.prepare_data()
    dm.setup()
    return dm


@pytest.fixture(scope="session")
def mnist_train_file(mnist_dir: Path) -> torch.Tensor:
    """The raw training file read independently of the datamodule, (60000, 1, 28, 28) uint8."""
    return MNIST(str(mnist_dir), train=True).data.unsqueeze(1)


def grey(images: torch.Tensor) -> torch.Tensor:
    return images.float() / 255


def test_sizes_known_before_setup() -> None:
    dm = MNISTDataModule(data_dir="/nonexistent")
    assert dm.image_shape == (1, 28, 28)
    assert (dm.num_train_examples, dm.num_val_examples, dm.num_test_examples) == (55000, 5000, 10000)
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


def test_invalid_arguments_rejected() -> None:
    with pytest.raises(ValueError, match="binarize"):
        MNISTDataModule(binarize="stochastic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="val_size"):
        MNISTDataModule(val_size=60000)


def test_mnist_batches(mnist_dm: MNISTDataModule) -> None:
    assert [len(s) for s in (mnist_dm.train_set, mnist_dm.val_set, mnist_dm.test_set)] == [55000, 5000, 10000]
    for loader, split, size in [
        (mnist_dm.train_dataloader(), mnist_dm.train_set, 128),
        (mnist_dm.val_dataloader(), mnist_dm.val_set, 500),
        (mnist_dm.test_dataloader(), mnist_dm.test_set, 500),
    ]:
        x, index = next(iter(loader))
        assert x.shape == (size, 1, 28, 28) and x.dtype == torch.float32
        assert index.shape == (size,) and index.dtype == torch.int64
        assert 0 <= x.min() and x.max() <= 1
        assert 0 <= index.min() and index.max() < len(split)
        torch.testing.assert_close(x, grey(split.images[index]), rtol=0, atol=0)


def test_epoch_indices_cover_split(mnist_dm: MNISTDataModule) -> None:
    val = torch.cat([index for _, index in mnist_dm.val_dataloader()])
    assert torch.equal(val, torch.arange(5000))  # unshuffled: positions in order
    train = torch.cat([index for _, index in mnist_dm.train_dataloader()])
    assert not torch.equal(train, torch.arange(55000))  # shuffled ...
    assert torch.equal(train.sort().values, torch.arange(55000))  # ... but a permutation of the split


def test_single_item_matches_batch(mnist_dm: MNISTDataModule) -> None:
    x, index = mnist_dm.train_set[7]
    assert x.shape == (1, 28, 28) and int(index) == 7
    torch.testing.assert_close(x, grey(mnist_dm.train_set.images[7]), rtol=0, atol=0)


def test_split_deterministic_and_disjoint(
    mnist_dir: Path, mnist_dm: MNISTDataModule, mnist_train_file: torch.Tensor
) -> None:
    perm = torch.randperm(60000, generator=torch.Generator().manual_seed(0))
    train_pos, val_pos = perm[:55000], perm[55000:]
    assert not set(train_pos.tolist()) & set(val_pos.tolist())
    assert torch.equal(mnist_dm.train_set.images, mnist_train_file[train_pos])
    assert torch.equal(mnist_dm.val_set.images, mnist_train_file[val_pos])

    again = MNISTDataModule(data_dir=str(mnist_dir), binarize="none")
    again.setup("fit")
    assert torch.equal(again.val_set.images, mnist_dm.val_set.images)
    assert again.test_set is None  # "fit" does not load the test file

    other = MNISTDataModule(data_dir=str(mnist_dir), split_seed=1, binarize="none")
    other.setup("validate")
    assert not torch.equal(other.val_set.images, mnist_dm.val_set.images)


def test_binarize_none(mnist_dm: MNISTDataModule) -> None:
    x, _ = InMemoryImageDataset(mnist_dm.train_set.images, "none").__getitems__(list(range(64)))
    assert ((x > 0) & (x < 1)).any()


def test_binarize_static(mnist_dir: Path) -> None:
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="static")
    dm.setup("fit")
    x, index = next(iter(dm.train_dataloader()))
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(x, (grey(dm.train_set.images[index]) > 0.5).float())


def test_binarize_dynamic(mnist_dm: MNISTDataModule) -> None:
    torch.manual_seed(0)
    ds = InMemoryImageDataset(mnist_dm.train_set.images, "dynamic")
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


def test_eval_binarization_is_fixed_and_train_draws_are_fresh_per_epoch(mnist_dir: Path) -> None:
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=64)
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


def test_simulated_ddp_shards_are_disjoint_and_cover(mnist_dm: MNISTDataModule) -> None:
    ds = mnist_dm.val_set
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


@pytest.mark.parametrize("cls", [MNISTDataModule, CIFAR10DataModule])
def test_missing_data_without_download(cls: type[ImageDataModule], tmp_path: Path) -> None:
    dm = cls(data_dir=str(tmp_path), download=False)
    with pytest.raises(DataNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str(tmp_path.resolve()) in message and "DATA_DIR" in message
    assert ("MNIST/raw/{train-images-idx3-ubyte" if cls is MNISTDataModule else "cifar-10-batches-py") in message
    assert isinstance(info.value, FileNotFoundError)
    # One short line, said once: no chained torchvision error printed before it.
    assert "\n" not in message and len(message) < 600 and info.value.__suppress_context__ and info.value.__cause__ is None
    with pytest.raises(DataNotFoundError, match="DATA_DIR"):
        cls(data_dir=str(tmp_path)).setup("fit")  # setup alone also explains


@pytest.mark.parametrize("cls", [MNISTDataModule, CIFAR10DataModule])
def test_missing_data_download_fails_offline(
    cls: type[ImageDataModule], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("network disabled in tests")

    # Guarantees nothing is downloaded even on a machine with network access.
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataNotFoundError, match="no data set in .*the download failed.*DATA_DIR") as info:
        cls(data_dir=str(tmp_path), download=True).prepare_data()
    assert str(tmp_path.resolve()) in str(info.value) and "\n" not in str(info.value) and len(str(info.value)) < 600
