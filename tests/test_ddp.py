"""Real 2-process DDP runs on CPU (gloo) with shuffled shards: state that every rank keeps for
itself (JSA's cache, the VQ-VAE's EMA codebook) must end identical on both ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "ddp_fit.py"


def run_ddp(model: str, out_dir: Path, mnist_dir: Path) -> tuple[dict, dict]:
    env = {**os.environ, "DATA_DIR": str(mnist_dir)}
    result = subprocess.run([sys.executable, str(SCRIPT), model, str(out_dir)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rank0, rank1 = (torch.load(out_dir / f"rank{r}.pt") for r in (0, 1))
    # Each rank trained on its own shard of the shuffled training split.
    seen0, seen1 = set(rank0["seen"].tolist()), set(rank1["seen"].tolist())
    assert len(seen0) == len(seen1) == 4 * 16 and not seen0 & seen1
    # Validation metrics are reduced across ranks: both report the same value.
    assert torch.equal(rank0["val_nll"], rank1["val_nll"])
    return rank0, rank1


def test_jsa_cache_identical_on_both_ranks_and_holds_both_shards(tmp_path, mnist_dir):
    rank0, rank1 = run_ddp("jsa", tmp_path, mnist_dir)
    codes = rank0["state"]["cache.codes"]
    assert torch.equal(codes, rank1["state"]["cache.codes"])
    filled = set(torch.nonzero((codes != 255).all(1)).flatten().tolist())
    assert filled == set(rank0["seen"].tolist()) | set(rank1["seen"].tolist())


def test_vqvae_ema_codebook_identical_on_both_ranks_after_restarts(tmp_path, mnist_dir):
    rank0, rank1 = run_ddp("vqvae", tmp_path, mnist_dir)
    assert rank0["restarts"] > 0 and rank0["restarts"] == rank1["restarts"]
    for name, tensor in rank0["state"].items():
        assert torch.equal(tensor, rank1["state"][name]), name
