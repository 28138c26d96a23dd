"""MNIST: 60k training images (55k train / 5k val by default), 10k test, 1x28x28."""

from __future__ import annotations

import os

from torch import Tensor
from torchvision.datasets import MNIST

from .base import ImageDataModule


class MNISTDataModule(ImageDataModule):
    """MNIST from ``<data_dir>/MNIST/raw`` (torchvision's layout); see :class:`ImageDataModule`."""

    image_shape = (1, 28, 28)
    train_file_size = 60000
    test_file_size = 10000

    def _read(self, train: bool, download: bool) -> Tensor:
        return MNIST(str(self.data_dir), train=train, download=download).data.unsqueeze(1)

    def _expected_files(self) -> list[str]:
        # torchvision reads the uncompressed files named after its .gz resources.
        raw = self.data_dir / "MNIST" / "raw"
        return [str(raw / os.path.splitext(name)[0]) for name, _ in MNIST.resources]
