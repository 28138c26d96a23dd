"""A fake CIFAR-10 in torchvision's official format (pickled batch files and their md5s), small and seeded: the
bad-input harness (bad_inputs.py) corrupts it, the tests read it."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
from torchvision.datasets import CIFAR10
from common.files import write_file

CIFAR_PER_BATCH = 20


def write_fake_cifar10(root: Path, seed: int = 0) -> tuple[list[list[str]], list[list[str]], str]:
    """Write a fake CIFAR-10 (CIFAR_PER_BATCH images per batch file) under ``root/cifar-10-batches-py``.

    Returns torchvision's ``train_list``/``test_list`` for it (``[name, md5]`` rows) and the md5 of ``batches.meta``.
    """
    folder = root / CIFAR10.base_folder
    folder.mkdir()
    rng = np.random.default_rng(seed)

    def dump(name: str, obj: dict) -> list[str]:
        path = folder / name
        write_file(path, pickle.dumps(obj))
        return [name, hashlib.md5(path.read_bytes()).hexdigest()]

    train_list = [dump(name, fake_cifar_batch(name, rng)) for name in [f"data_batch_{k}" for k in range(1, 6)]]
    test_list = [dump("test_batch", fake_cifar_batch("test_batch", rng))]
    meta = {"label_names": [f"class{k}" for k in range(10)], "num_cases_per_batch": CIFAR_PER_BATCH, "num_vis": 3072}
    _, meta_md5 = dump("batches.meta", meta)
    return train_list, test_list, meta_md5


def fake_cifar_batch(name: str, rng: np.random.Generator) -> dict:
    """One batch file's dict, in the official format."""
    # Rows are 3072 bytes: 1024 red, then green, then blue, each row-major 32x32.
    data = rng.integers(0, 256, size=(CIFAR_PER_BATCH, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, size=CIFAR_PER_BATCH).tolist()
    filenames = [f"{name}_{i}.png" for i in range(CIFAR_PER_BATCH)]
    return {"batch_label": name, "data": data, "labels": labels, "filenames": filenames}
