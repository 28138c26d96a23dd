"""MNIST and Fashion-MNIST: 60k training images (55k train / 5k val by default), 10k test, 1x28x28.

Both come as the same four IDX files in torchvision's layout, so one data module reads either: it is
parameterized by the torchvision dataset class, whose name is the folder (``<data_dir>/MNIST/raw``,
``<data_dir>/FashionMNIST/raw``) and whose ``resources`` and ``mirrors`` are the files, their md5s and
where they are downloaded from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from torch import Tensor
from torchvision.datasets import MNIST, FashionMNIST
from torchvision.datasets import utils as tv_utils

from configs.settings import MNISTDataModuleSettings

from .base import ImageDataModule
from .files import corrupt, read_idx


class MNISTDataModule(ImageDataModule):
    """MNIST from ``<data_dir>/MNIST/raw`` (torchvision's layout); see :class:`ImageDataModule`.

    Dynamically binarized by default (the usual benchmark for discrete latent-variable models,
    scored with a Bernoulli likelihood); ``binarize="none"`` for grey pixels.
    """

    #: The torchvision class whose files these are: its name is the folder under data_dir, its
    #: ``resources`` the (file.gz, md5) pairs, its ``mirrors`` where they are downloaded from.
    dataset: ClassVar[type[MNIST]] = MNIST
    title: ClassVar[str] = "MNIST"  # the data set's name in messages
    config_name = "mnist"  # as in configs/data/ and the run names
    image_shape = (1, 28, 28)
    train_file_size = 60000
    test_file_size = 10000

    def __init__(self, **settings: Any) -> None:
        super().__init__(MNISTDataModuleSettings(**settings))

    @property
    def raw_folder(self) -> Path:
        return self.data_dir / self.dataset.__name__ / "raw"

    def _files(self, train: bool) -> list[Path]:
        # torchvision's uncompressed files, named after its .gz resources: images, then labels.
        prefix = "train" if train else "t10k"
        return [self.raw_folder / f"{prefix}-images-idx3-ubyte", self.raw_folder / f"{prefix}-labels-idx1-ubyte"]

    def _read(self, train: bool) -> Tensor:
        # Read here rather than through torchvision's MNIST, which asserts on a bad header and reads a swapped
        # or truncated file as images. The labels are not used, but a bad labels file means a bad copy of the data.
        images, labels = self._files(train)
        n = self.train_file_size if train else self.test_file_size
        pixels = read_idx(images, (n, *self.image_shape[1:]))
        classes = read_idx(labels, (n,))
        # Files with the right header can still hold nothing of the data set (zeroed, or another data set's labels).
        num_classes = len(self.dataset.classes)
        if int(classes.max()) >= num_classes:
            raise corrupt(labels, f"its labels run up to {int(classes.max())}, where {self.title}'s classes are 0-{num_classes - 1}")
        if int(pixels.max()) == 0:
            raise corrupt(images, f"every pixel of its {n} images is 0: it holds no images")
        return pixels.unsqueeze(1)

    def _download(self) -> None:
        # torchvision's download, but only for the files that are missing: one already there stays as it is.
        self.raw_folder.mkdir(parents=True, exist_ok=True)
        mirrors = self.dataset.mirrors
        for filename, md5 in self.dataset.resources:
            if (self.raw_folder / filename.removesuffix(".gz")).exists():
                continue
            for i, mirror in enumerate(mirrors):
                try:
                    tv_utils.download_and_extract_archive(f"{mirror}{filename}", str(self.raw_folder), filename=filename, md5=md5)
                    break
                except (OSError, RuntimeError):  # URLError is an OSError; a bad md5 a RuntimeError
                    if i == len(mirrors) - 1:
                        raise


class FashionMNISTDataModule(MNISTDataModule):
    """Fashion-MNIST (Zalando's 28x28 grey images of clothing, 10 classes) from ``<data_dir>/FashionMNIST/raw``:
    MNIST's files, sizes, options (dynamically binarized by default), split and checks; see :class:`MNISTDataModule`."""

    dataset = FashionMNIST
    title = "Fashion-MNIST"
    config_name = "fashion_mnist"  # as in configs/data/ and the run names
