"""The comparison end to end, as a user runs it: `train.py -m experiment=compare` on a tiny slice of
MNIST, then `python -m benchmarks.compare` on its TensorBoard root."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from PIL import Image

from tests.test_entrypoints import FAST, REPO, train

pytestmark = pytest.mark.slow  # end to end: run by the full suite (README), not the quick loop


def test_compare_experiment_and_report(tmp_path, mnist_dir):
    tiny = [*FAST, "trainer.limit_test_batches=1", "model.test_num_samples=2", "data.batch_size=32"]
    train(["-m", "experiment=compare", "data=mnist", *tiny], tmp_path, mnist_dir)
    root = tmp_path / "logs" / "tensorboard"
    runs = sorted(p.name for p in root.iterdir())
    assert runs == [
        "dvae-mnist-mlp-K10-reinforce-optimal", "dvae_gumbel-mnist-mlp-K10-tau0.5", "jsa-mnist-mlp-K10-L20",
        "vae-mnist-mlp-z32", "vqvae-mnist-mlp-K10-autoregressive",
    ]

    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.compare", str(root), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (out / "report.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| run"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in lines if line.startswith("| ") and line != header]
    assert sorted(row["model"] for row in rows) == ["DiscreteVAE", "DiscreteVAE", "JSA", "VAE", "VQVAE"]
    for row in rows:
        assert row["data"] == "mnist" and row["epochs"] == "1", row
        for column in ("nll (nats)", "bpd", "recon MSE", "PSNR (dB)", "ms/step", "params", "s/epoch"):
            number = float(row[column].removeprefix("≤ ").replace(",", ""))  # tested numbers, no "(val)"
            assert math.isfinite(number) and number > 0, (column, row)
        assert row["nll (nats)"].startswith("≤ ") == (row["model"] == "VQVAE")  # the bound is labelled
        # the VQ-VAE has a learned prior (MADE, fit alongside): its uniform-prior bound stands beside the learned one
        if row["model"] == "VQVAE":
            uniform_bound = float(row["nll, uniform prior"].removeprefix("≤ ").replace(",", ""))
            assert math.isfinite(uniform_bound) and uniform_bound > 0
        else:
            assert row["nll, uniform prior"] == "—"

    for name, min_size in (("val_nll.png", (600, 300)), ("reconstructions.png", (600, 300))):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.size >= min_size, (name, image.size)
            assert len(set(image.convert("L").getdata())) > 10, name  # drawn on, not a blank canvas
