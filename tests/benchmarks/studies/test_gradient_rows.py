"""The gradient-rows SNR study (benchmarks/studies/gradient_rows.py) end to end on a real checkpoint."""

from __future__ import annotations

import json

import pytest

import launch.hydra_app
from benchmarks.studies import gradient_rows
from tests.launch.test_configs import composed


@pytest.mark.slow  # a 3-step experiment=jsa_paper run (in this process), then 2 x 3 gradient estimates at batch 200, L = 20
def test_the_study_measures_each_k_and_every_row_at_a_trained_checkpoint(tmp_path, mnist_dir, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    launch.hydra_app.run(composed(["experiment=jsa_paper", "trainer.max_epochs=1", "trainer.limit_train_batches=3",
                                   "trainer.limit_val_batches=1", "model.val_num_samples=2", "run_test=false", f"log_dir={tmp_path}"]))
    checkpoint = next(tmp_path.glob("tensorboard/*/version_0/checkpoints/last.ckpt"))
    gradient_rows.main(["--checkpoint", str(checkpoint), "--ks", "2", "--states", "chain", "--batches", "1", "--repeats", "3",
                        "--out", str(tmp_path / "out")])
    record = json.loads((tmp_path / "out" / "snr.json").read_text())
    chain = record["results"]["chain"]
    assert chain.keys() == {"2", "all"} and record["settings"]["mis_steps"] == 20
    for result in chain.values():
        assert result["decoder"]["variance"] > 0 and result["encoder"]["variance"] > 0
    assert 1 <= chain["2"]["weighted_candidates"] <= 21 and 0 <= chain["2"]["share_beyond_k"] <= 1
    assert "| chain | 3 |" in (tmp_path / "out" / "snr.md").read_text()
