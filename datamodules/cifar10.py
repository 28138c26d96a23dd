"""CIFAR-10: 50k training images (45k train / 5k val by default), 10k test, 3x32x32."""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.datasets import CIFAR10

from .base import ImageDataModule


class CIFAR10DataModule(ImageDataModule):
    """CIFAR-10 from ``<data_dir>/cifar-10-batches-py`` (torchvision's layout); see :class:`ImageDataModule`."""

    config_name = "cifar10"  # as in configs/data/ and the run names
    backbone = "conv"  # colour images want the convolutional networks (the VQ-VAE paper's)
    image_shape = (3, 32, 32)
    train_file_size = 50000
    test_file_size = 10000

    def _read(self, train: bool, download: bool) -> Tensor:
        # torchvision stores CIFAR as HWC numpy; the model wants CHW tensors.
        data = CIFAR10(str(self.data_dir), train=train, download=download).data
        return torch.from_numpy(data).permute(0, 3, 1, 2).contiguous()

    def _expected_files(self) -> list[str]:
        folder = self.data_dir / CIFAR10.base_folder
        return [f"{folder}/{{data_batch_1..5,test_batch,batches.meta}}"]
