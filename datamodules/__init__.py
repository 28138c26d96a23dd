"""Lightning DataModules yielding ``(x, index)`` batches from in-memory uint8 splits.

An `ImageDataModule` subclass in a module of datamodules/ registers itself when defined (`ImageDataModule.__init_subclass__`,
common/registry.py); importing this package imports every module here and exports each data module under its
class name (`from datamodules import MNISTDataModule`, `_target_: datamodules.MNISTDataModule`, `--data=MNISTDataModule`).
"""

import importlib
import pkgutil

from common.registry import register, registered

from .base import DataCorruptError, DataError, DataNotFoundError, ImageDataModule

# The base is registered too, so that a checkpoint that names it loads.
register("data", ImageDataModule)
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

globals().update({cls.__name__: cls for cls in registered("data")})
__all__ = ["DataCorruptError", "DataError", "DataNotFoundError", *(cls.__name__ for cls in registered("data"))]
