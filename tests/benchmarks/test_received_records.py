"""Records and logs from someone else: the report readers (a study's --report-only, benchmarks.compare) skip a
record or file that is not one with one line naming it, and write the report from the rest."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.checkpoints.test_received_files import run  # noqa: F401 (the fixture: a real two-step run)
from tests import preloaded

pytestmark = pytest.mark.slow  # real processes: the full suite's
REPO = Path(__file__).resolve().parents[2]

BAD_RECORDS = {  # name -> what a colleague's copy of a study's out/runs may hold instead of a record
    "L20-middle-s1": "{}",
    "L20-middle-s2": '{"name": "L20-middle-s2", "seed": "two", "test": {"nll": 90.1}}',
    "L20-never-s1": '{"name": "L20-never-s1", "seconds": 60, "test": {"nll": NaN}}',
    "L20-never-s2": "[" * 100_000 + "]" * 100_000,
    "L20-epoch0-s1": "not json",
}


def test_a_study_report_skips_a_bad_record_with_one_line_naming_it(tmp_path):
    """`--report-only` on records of which some are not records (empty, wrong types, a diverged run's NaN test NLL,
    nested past the parser's depth, not JSON): the report is written from the others, each bad one named."""
    out = tmp_path / "out"
    subprocess.run(["cp", "-r", str(REPO / "benchmarks" / "results" / "cache-study"), str(out)], check=True)
    for name, text in BAD_RECORDS.items():
        (out / "runs" / f"{name}.json").write_text(text)
    result = preloaded.run_module("benchmarks.studies.cache.study", ["--out", str(out), "--report-only"], REPO,
                                  {**os.environ, "PYTHONPATH": str(REPO)}, timeout=240)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    skipped = [line for line in result.stdout.splitlines() if line.startswith("skipped ")]
    assert {line.split(".json")[0].rsplit("/", 1)[-1] for line in skipped} == set(BAD_RECORDS), skipped


def test_the_comparison_report_skips_a_bad_job_file_or_image_with_one_line(run, tmp_path):
    """benchmarks.compare on runs received with a hydra_job.yaml that is too deep or of the wrong type, or whose event
    file holds a decompression-bomb PNG as its reconstructions: each named in one line, the report written."""
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "runs"
    subprocess.run(["cp", "-r", str(run / "logs" / "tensorboard"), str(root)], check=True)
    (good,) = root.glob("*/version_0")
    for name, job in (("deep", "a: " + "[" * 5000 + "]" * 5000 + "\n"), ("wrong", "sweep_dir: [1, 2]\n")):
        copy = good.with_name(f"version_{name}")
        subprocess.run(["cp", "-r", str(good), str(copy)], check=True)
        (copy / "hydra_job.yaml").write_text(job)
    bomb = good.with_name("version_bomb")
    subprocess.run(["cp", "-r", str(good), str(bomb)], check=True)
    png = bytearray(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + (100_000).to_bytes(4, "big") * 2 + b"\x08\x00\x00\x00\x00")
    writer = SummaryWriter(str(bomb))
    from tensorboard.compat.proto.summary_pb2 import Summary
    writer.file_writer.add_summary(Summary(value=[Summary.Value(tag="test/reconstructions", image=Summary.Image(
        height=100_000, width=100_000, colorspace=1, encoded_image_string=bytes(png)))]), global_step=5)
    writer.close()
    result = preloaded.run_module("benchmarks.compare", [str(root), "--all", "--out", str(tmp_path / "report")], REPO,
                                  {**os.environ, "PYTHONPATH": str(REPO)}, timeout=240)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    skipped = [line for line in result.stdout.splitlines() if line.startswith("skipped ")]
    assert any("version_deep/hydra_job.yaml: job file" in line and "nested too deeply" in line for line in skipped), skipped
    assert any("version_wrong/hydra_job.yaml: not a job file" in line for line in skipped), skipped
    assert any("reconstructions of" in line and "version_bomb" in line for line in skipped), skipped


@pytest.mark.parametrize("damage", ["random bytes", "a record claiming 2**62 bytes"])
def test_the_comparison_report_skips_an_unreadable_event_file_with_one_line(damage, run, tmp_path):
    import struct

    root = tmp_path / "runs"
    subprocess.run(["cp", "-r", str(run / "logs" / "tensorboard"), str(root)], check=True)
    (good,) = root.glob("*/version_0")
    broken = good.with_name("version_broken")
    broken.mkdir()
    event = broken / "events.out.tfevents.1700000000.host.123.0"
    event.write_bytes(os.urandom(4096) if damage == "random bytes" else struct.pack("<Q", 2**62) + bytes(12))
    result = preloaded.run_module("benchmarks.compare", [str(root), "--all", "--out", str(tmp_path / "report")], REPO,
                                  {**os.environ, "PYTHONPATH": str(REPO)}, timeout=240)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert [line for line in result.stdout.splitlines() if line.startswith(f"skipped {broken}")], result.stdout[-2000:]
    assert "version_broken" not in (tmp_path / "report" / "report.md").read_text().split("## Runs")[0]
