"""benchmarks/speed/replica_throughput.py's CPU smoke run: the GPU table's script runs as the lease will run it."""

import pytest

from benchmarks.speed import replica_throughput


@pytest.mark.slow
def test_the_replica_throughput_table_runs_on_the_cpu(tmp_path, capsys):
    replica_throughput.main(["--quick", "--out", str(tmp_path / "table.txt")])
    lines = (tmp_path / "table.txt").read_text().splitlines()
    assert lines[0].startswith("Replica throughput on CPU")
    for model in ("jsa", "rws"):
        assert sum(line.startswith(f"{model} eager: R = ") for line in lines) == 2
        assert any(line.startswith(f"{model} eager: the plain single-run step") for line in lines)
