"""Lightning DataModules yielding ``(x, index)`` batches from in-memory uint8 splits."""

from checkpoints.registry import register

from .base import DataCorruptError, DataError, DataNotFoundError, ImageDataModule
from .cifar10 import CIFAR10DataModule
from .mnist import FashionMNISTDataModule, MNISTDataModule

# the only data modules a checkpoint may name (checkpoints/registry.py)
register("data", ImageDataModule, CIFAR10DataModule, FashionMNISTDataModule, MNISTDataModule)

__all__ = ["CIFAR10DataModule", "DataCorruptError", "DataError", "DataNotFoundError", "FashionMNISTDataModule",
           "ImageDataModule", "MNISTDataModule"]
