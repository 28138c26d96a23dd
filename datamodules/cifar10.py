"""CIFAR-10: 50k training images (45k train / 5k val by default), 10k test, 3x32x32."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchvision.datasets import CIFAR10
from torchvision.datasets import utils as tv_utils

from configs.settings import CIFAR10DataModuleSettings

from .base import ImageDataModule
from .files import read_cifar_batch


class CIFAR10DataModule(ImageDataModule):
    """CIFAR-10 from ``<data_dir>/cifar-10-batches-py`` (torchvision's layout); see :class:`ImageDataModule`.

    The batch files are read here, not through torchvision's CIFAR10, which reports a file whose md5 differs
    as "not found" and downloads the archive again over it; each file is checked against torchvision's
    official md5 (``CIFAR10.train_list``/``test_list``, looked up when read) and a mismatch is an error.
    ``batches.meta`` (the class names) is not needed and not required.
    """

    config_name = "cifar10"  # as in configs/data/ and the run names
    backbone = "conv"  # colour images want the convolutional networks (the VQ-VAE paper's)
    image_shape = (3, 32, 32)
    train_file_size = 50000
    test_file_size = 10000

    def __init__(self, **settings: Any) -> None:
        super().__init__(CIFAR10DataModuleSettings(**settings))

    @property
    def folder(self) -> Path:
        return self.data_dir / CIFAR10.base_folder

    def _files(self, train: bool) -> list[Path]:
        return [self.folder / name for name, _ in (CIFAR10.train_list if train else CIFAR10.test_list)]

    def _read(self, train: bool) -> Tensor:
        listed = CIFAR10.train_list if train else CIFAR10.test_list
        per_file = (self.train_file_size if train else self.test_file_size) // len(listed)
        rows = np.concatenate([read_cifar_batch(self.folder / name, per_file, md5) for name, md5 in listed])
        # Rows are planar RGB (1024 red, then green, then blue values), so (N, 3, 32, 32) is a plain view.
        return torch.from_numpy(rows).view(-1, *self.image_shape)

    def _download_places(self) -> list[Path]:
        return [*super()._download_places(), self.data_dir / CIFAR10.filename]  # the archive, beside the folder

    def _download(self) -> None:
        # The archive holds every file: unpack it aside and move in only the missing ones, so that a file
        # already there (perhaps corrupt: setup says so) is never replaced behind the user's back.
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.data_dir) as unpacked:
            tv_utils.download_and_extract_archive(CIFAR10.url, str(self.data_dir), extract_root=unpacked,
                                                  filename=CIFAR10.filename, md5=CIFAR10.tgz_md5)
            self.folder.mkdir(exist_ok=True)
            for source in (Path(unpacked) / CIFAR10.base_folder).iterdir():
                if not (self.folder / source.name).exists():
                    shutil.move(source, self.folder / source.name)
