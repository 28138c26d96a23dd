"""Readers of the MNIST (IDX) and CIFAR-10 (python pickle) files that check what they read.

torchvision's readers trust the files: a truncated or swapped MNIST file fails an ``assert`` or is read
as images, and CIFAR-10's md5 check reports a corrupt file as "not found" and downloads again. These
check format, sizes and (CIFAR-10) checksums, and say in one line which file is wrong, how, and the fix.
"""

from __future__ import annotations

import hashlib
import io
import math
import pickle
import stat
import struct
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .base import DataCorruptError

FIX = "Fix: delete it so that it is downloaded again, or copy a good one in its place."
# torchvision's read_sn3_pascalvincent_tensor format: 0x00 0x00, the type (0x08 = uint8), the number of
# dimensions; then each dimension as a big-endian int32; then the values.
IDX_MAGIC = {3: 0x0803, 1: 0x0801}  # 2051 for images (N, rows, cols), 2049 for labels (N,)
IDX_KIND = {0x0803: "images", 0x0801: "labels"}
CIFAR_ROW = 3 * 32 * 32  # a row of 'data': 1024 red, then green, then blue values, each row-major 32x32
# What a CIFAR-10 python batch holds besides dicts, lists, strings and ints: numpy arrays, rebuilt by these
# functions (numpy 1 and numpy 2 spell the module differently). Nothing else is ever imported while unpickling.
CIFAR_PICKLE_GLOBALS = {(module, name) for module in ("numpy.core.multiarray", "numpy._core.multiarray")
                        for name in ("_reconstruct", "scalar")} | {("numpy", "ndarray"), ("numpy", "dtype")}


class CifarUnpickler(pickle.Unpickler):
    """An unpickler for CIFAR-10 batches that imports only numpy's array constructors: a file planted by someone
    else (a `__reduce__` that calls os.system, say) fails to load instead of running."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in CIFAR_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"it refers to {module}.{name}, which a CIFAR-10 batch never does")
        return super().find_class(module, name)


def corrupt(path: Path, what: str, fix: str = FIX) -> DataCorruptError:
    return DataCorruptError(f"{path} is corrupt: {what}. {fix}")


def regular_file_size(path: Path) -> int:
    """The size of `path`, a regular file (or a link to one); a pipe or a device, which would block a read or never
    end, is refused as corrupt before it is opened."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise corrupt(path, "it is not a regular file (a pipe, a device or a directory), so it is not read")
    return info.st_size


def _describe(dims: tuple[int, ...]) -> str:
    return f"{dims[0]} labels" if len(dims) == 1 else f"{dims[0]} images of {'x'.join(map(str, dims[1:]))}"


def read_idx(path: Path, shape: tuple[int, ...], values: bool = True) -> Tensor | None:
    """The uint8 values of an IDX file of `shape` ((N, rows, cols) images or (N,) labels), after checking its
    magic number and that its header agrees with `shape` and with the file's length; `values=False` checks only."""
    expected_magic = IDX_MAGIC[len(shape)]
    header_size = 4 * (1 + len(shape))
    file_size = regular_file_size(path)
    with open(path, "rb") as f:
        header = f.read(header_size)
        if file_size == 0:
            raise corrupt(path, "the file is empty")
        if header[:2] == b"\x1f\x8b":
            raise corrupt(path, "it is still gzip-compressed", "Fix: unpack it (gunzip), or delete it so that it is downloaded again.")
        if len(header) < 4:
            raise corrupt(path, f"{file_size} bytes, too short for an IDX header")
        magic = int.from_bytes(header[:4], "big")
        if magic != expected_magic:
            kind = IDX_KIND.get(magic)
            found = f"{magic} ({kind}: the {kind} file under this name?)" if kind else f"{magic} (not an MNIST IDX file)"
            raise corrupt(path, f"expected IDX magic {expected_magic} ({IDX_KIND[expected_magic]}), found {found}")
        if len(header) < header_size:
            raise corrupt(path, f"{file_size} bytes, shorter than its {header_size}-byte IDX header")
        dims = struct.unpack(f">{len(shape)}I", header[4:])
        size = math.prod(dims)
        if size != file_size - header_size:
            end = "truncated" if size > file_size - header_size else "extra bytes at its end"
            raise corrupt(path, f"header says {_describe(dims)} = {size} bytes, the file has {file_size - header_size} "
                                f"after its {header_size}-byte header ({end})")
        if dims != shape:  # e.g. the test file under the training file's name
            raise corrupt(path, f"it holds {_describe(dims)}, expected {_describe(shape)}")
        if not values:
            return None
        data = bytearray(size)  # read straight into a writable buffer: one copy of the file, not two
        f.readinto(data)
    return torch.frombuffer(data, dtype=torch.uint8).view(*shape)


def read_cifar_batch(path: Path, count: int, md5: str) -> np.ndarray:
    """The (count, 3072) uint8 'data' rows of a CIFAR-10 python batch file, after checking its md5 and structure.

    The md5 (torchvision's CIFAR10.train_list/test_list) is computed before a byte is unpickled, and unpickling admits
    numpy arrays only (`CifarUnpickler`), so no file can run code. A file whose md5 differs is still unpickled that way
    to say what is wrong with it (truncated, no labels, wrong size). Nothing is cached: a file replaced between runs is
    checked again."""
    if regular_file_size(path) > 2 * count * (CIFAR_ROW + 64) + (1 << 20):  # an official batch: about count * 3 KB
        raise corrupt(path, f"{path.stat().st_size} bytes, far more than a CIFAR-10 batch of {count} images")
    raw = path.read_bytes()
    if not raw:
        raise corrupt(path, "the file is empty")
    digest = hashlib.md5(raw).hexdigest()
    official = digest == md5  # decided before a byte is unpickled
    try:  # the official files are Python 2 pickles (as torchvision reads them)
        batch = CifarUnpickler(io.BytesIO(raw), encoding="latin1").load()
    except Exception as err:  # a truncated or foreign file fails in many ways: UnpicklingError, EOFError, ValueError, ...
        reason = " ".join(str(err).split())[:100]  # one line: some of pickle's messages span two
        raise corrupt(path, f"it cannot be unpickled ({type(err).__name__}: {reason}): truncated, "
                            "or not a CIFAR-10 python batch") from None
    if not isinstance(batch, dict):
        raise corrupt(path, f"it holds a {type(batch).__name__}, not a CIFAR-10 batch (a dict with 'data' and 'labels')")
    for key in ("data", "labels"):
        if key not in batch:
            raise corrupt(path, f"it has no {key!r} entry (its keys: {', '.join(map(repr, list(batch)[:6]))})")
    data, labels = batch["data"], batch["labels"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.shape != (count, CIFAR_ROW):
        found = f"a {data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else f"a {type(data).__name__}"
        raise corrupt(path, f"'data' is {found}, expected uint8 ({count}, {CIFAR_ROW}): {count} images of 3x32x32")
    if not hasattr(labels, "__len__") or len(labels) != count:
        found = f"{len(labels)} entries" if hasattr(labels, "__len__") else f"a {type(labels).__name__}"
        raise corrupt(path, f"'labels' has {found}, expected one for each of its {count} images")
    if not official:
        raise corrupt(path, f"its md5 {digest} differs from the official {md5}; the file is corrupt or not the official "
                            "CIFAR-10 python version")
    return data
