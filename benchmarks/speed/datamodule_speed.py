"""Seconds per MNIST training epoch: the in-memory batched path against the plain torchvision path.

    python -m benchmarks.speed.datamodule_speed [--epochs N]       # data from DATA_DIR (default ../shared/data)

Both serve the 55k-image train split as (x, index) batches of 128, shuffled, num_workers=0: `fast` is
`MNISTDataModule.train_dataloader()` (one gather and a vectorised binarisation per batch), `plain` is
`torchvision.datasets.MNIST` with `ToTensor()` per image (and `bernoulli` per image for dynamic binarisation).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms
from torchvision.datasets import MNIST

from datamodules import MNISTDataModule

BATCH_SIZE = 128


class PlainIndexed(Dataset[tuple[Tensor, int]]):
    """The usual per-image pipeline over the same split positions as the datamodule."""

    def __init__(self, base: MNIST, positions: Tensor, dynamic: bool) -> None:
        self.base = base
        self.positions = positions.tolist()
        self.dynamic = dynamic

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        x, _ = self.base[self.positions[i]]
        return (torch.bernoulli(x) if self.dynamic else x), i


def seconds_per_epoch(loader: Iterable[tuple[Tensor, Tensor]], epochs: int) -> float:
    start = time.perf_counter()
    for _ in range(epochs):
        seen = sum(x.shape[0] for x, _ in loader)
        assert seen == 55000, seen
    return (time.perf_counter() - start) / epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1, help="epochs timed per path (mean is reported)")
    args = parser.parse_args()
    if args.epochs < 1:
        parser.error("--epochs must be >= 1")
    data_dir = os.environ.get("DATA_DIR", "../shared/data")
    if not (Path(data_dir) / "MNIST" / "raw").is_dir():  # torchvision's MNIST would raise with a traceback
        parser.error(f"no MNIST under {data_dir}: set DATA_DIR to the directory that holds MNIST/raw")

    base = MNIST(data_dir, train=True, transform=transforms.ToTensor())
    positions = torch.randperm(60000, generator=torch.Generator().manual_seed(0))[:55000]
    print(f"MNIST train epoch: 55000 images, batch {BATCH_SIZE}, num_workers 0, "
          f"{args.epochs} epoch(s) per path, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'binarize':<9} {'fast s/epoch':>13} {'plain s/epoch':>14} {'plain/fast':>11}")
    for binarize in ("none", "dynamic"):
        dm = MNISTDataModule(data_dir=data_dir, batch_size=BATCH_SIZE, binarize=binarize, download=False)
        dm.prepare_data()
        dm.setup("fit")
        plain = DataLoader(PlainIndexed(base, positions, binarize == "dynamic"), batch_size=BATCH_SIZE, shuffle=True)
        fast_s = seconds_per_epoch(dm.train_dataloader(), args.epochs)
        plain_s = seconds_per_epoch(plain, args.epochs)
        print(f"{binarize:<9} {fast_s:>13.3f} {plain_s:>14.3f} {plain_s / fast_s:>10.1f}x")


if __name__ == "__main__":
    main()
