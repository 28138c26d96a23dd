"""benchmarks/speed/replica_throughput.py's CPU smoke run: the GPU table's script runs as the lease will run it."""

import shutil
import subprocess

import pytest

from benchmarks.speed import replica_throughput


@pytest.mark.slow
def test_the_replica_throughput_table_runs_on_the_cpu(tmp_path, capsys):
    # --seconds 0.01: each measurement is its warm-up calls and a block or two; the table's lines are checked, not its times.
    replica_throughput.main(["--quick", "--seconds", "0.01", "--out", str(tmp_path / "table.txt")])
    lines = (tmp_path / "table.txt").read_text().splitlines()
    assert lines[0].startswith("Replica throughput on CPU")
    for model in ("jsa", "rws"):
        assert sum(line.startswith(f"{model} eager: R = ") for line in lines) == 2
        assert any(line.startswith(f"{model} eager: the plain single-run step") for line in lines)
        validations = [line for line in lines if line.startswith(f"{model} validation: R = ")]
        assert len(validations) == 2 and all("500 images at 4 samples" in line for line in validations)


def test_the_mps_probe_says_it_did_not_look_where_pgrep_is_missing(monkeypatch):
    found = {"nvidia-cuda-mps-control": None, "pgrep": None}
    monkeypatch.setattr(shutil, "which", lambda name: found[name])
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: pytest.fail("pgrep run where there is none"))
    said = []
    replica_throughput.mps_probe(said.append)
    assert said == ["CUDA MPS: nvidia-cuda-mps-control not on this machine",
                    "CUDA MPS daemon: not looked for (no pgrep on this machine)"]
