"""The JSA cache under a real 2-process DDP run on CPU (gloo), shuffled shards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "ddp_jsa_cache.py"


def test_cache_identical_on_both_ranks_and_holds_both_shards(tmp_path, mnist_dir):
    env = {**os.environ, "DATA_DIR": str(mnist_dir)}
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    # Each rank trained on its own shard of the shuffled training split ...
    seen0, seen1 = set(rank0["seen"].tolist()), set(rank1["seen"].tolist())
    assert len(seen0) == len(seen1) == 3 * 16 and not seen0 & seen1
    # ... yet both hold the same cache, with an entry for every example of either shard.
    assert torch.equal(rank0["codes"], rank1["codes"])
    filled = set(torch.nonzero((rank0["codes"] != 255).all(1)).flatten().tolist())
    assert filled == seen0 | seen1
    # Validation metrics are reduced across ranks: both report the same value.
    assert torch.equal(rank0["val_nll"], rank1["val_nll"])
