"""MNIST: 60k training images (55k train / 5k val by default), 10k test, 1x28x28."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor
from torchvision.datasets import MNIST
from torchvision.datasets import utils as tv_utils

from .base import Binarize, ImageDataModule
from .files import corrupt, read_idx


class MNISTDataModule(ImageDataModule):
    """MNIST from ``<data_dir>/MNIST/raw`` (torchvision's layout); see :class:`ImageDataModule`.

    Dynamically binarized by default (the usual benchmark for discrete latent-variable models,
    scored with a Bernoulli likelihood); ``binarize="none"`` for grey pixels.
    """

    config_name = "mnist"  # as in configs/data/ and the run names
    image_shape = (1, 28, 28)
    train_file_size = 60000
    test_file_size = 10000

    def __init__(self, data_dir: str | None = None, binarize: Binarize = "dynamic", **kwargs: Any) -> None:
        super().__init__(data_dir=data_dir, binarize=binarize, **kwargs)

    @property
    def raw_folder(self) -> Path:
        return self.data_dir / "MNIST" / "raw"

    def _files(self, train: bool) -> list[Path]:
        # torchvision's uncompressed files, named after its .gz resources: images, then labels.
        prefix = "train" if train else "t10k"
        return [self.raw_folder / f"{prefix}-images-idx3-ubyte", self.raw_folder / f"{prefix}-labels-idx1-ubyte"]

    def _read(self, train: bool) -> Tensor:
        # Read here rather than through torchvision's MNIST, which asserts on a bad header and reads a swapped
        # or truncated file as images. The labels are not used, but a bad labels file means a bad copy of MNIST.
        images, labels = self._files(train)
        n = self.train_file_size if train else self.test_file_size
        pixels = read_idx(images, (n, *self.image_shape[1:]))
        classes = read_idx(labels, (n,))
        # Files with the right header can still hold nothing of MNIST (zeroed, or another data set's labels).
        if int(classes.max()) >= 10:
            raise corrupt(labels, f"its labels run up to {int(classes.max())}, where MNIST's classes are 0-9")
        if int(pixels.max()) == 0:
            raise corrupt(images, f"every pixel of its {n} images is 0: it holds no images")
        return pixels.unsqueeze(1)

    def _download(self) -> None:
        # torchvision's MNIST.download, but only for the files that are missing: one already there stays as it is.
        self.raw_folder.mkdir(parents=True, exist_ok=True)
        for filename, md5 in MNIST.resources:
            if (self.raw_folder / filename.removesuffix(".gz")).exists():
                continue
            for i, mirror in enumerate(MNIST.mirrors):
                try:
                    tv_utils.download_and_extract_archive(f"{mirror}{filename}", str(self.raw_folder), filename=filename, md5=md5)
                    break
                except (OSError, RuntimeError):  # URLError is an OSError; a bad md5 a RuntimeError
                    if i == len(MNIST.mirrors) - 1:
                        raise
