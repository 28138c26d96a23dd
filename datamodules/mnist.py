"""MNIST: 60k training images (55k train / 5k val by default), 10k test, 1x28x28."""

from __future__ import annotations

import os

from typing import Any

from torch import Tensor
from torchvision.datasets import MNIST

from .base import Binarize, ImageDataModule


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

    def _read(self, train: bool, download: bool) -> Tensor:
        return MNIST(str(self.data_dir), train=train, download=download).data.unsqueeze(1)

    def _expected_files(self) -> list[str]:
        # torchvision reads the uncompressed files named after its .gz resources.
        raw = self.data_dir / "MNIST" / "raw"
        return [f"{raw}/{{{','.join(os.path.splitext(name)[0] for name, _ in MNIST.resources)}}}"]
