"""benchmarks/runner.py's scheduling of a study's runs: order, waiting for records, lanes, failures, atomic records."""

from __future__ import annotations

import json
import threading
import time

import pytest

from benchmarks import runner


def test_a_run_that_needs_another_waits_for_its_record(tmp_path):
    started = []

    def run(name: str) -> dict:
        started.append(name)
        if name == "report" and not (tmp_path / "a.json").exists():
            raise runner.NotYet("needs a")
        return {"name": name}

    left = runner.run_pending(["report", "a", "b"], tmp_path, run, lambda record: "")
    assert left == [] and started == ["report", "a", "report", "b"]  # tried again as soon as a's record existed
    assert json.loads((tmp_path / "report.json").read_text()) == {"name": "report"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_runs_no_run_can_unblock_are_returned_not_waited_for(tmp_path):
    def run(name: str) -> dict:
        if name == "never":
            raise runner.NotYet("needs a record nobody writes")
        return {}

    assert runner.run_pending(["never", "a"], tmp_path, run, lambda record: "", lanes=2) == ["never"]
    assert (tmp_path / "a.json").exists() and not (tmp_path / "never.json").exists()


def test_two_lanes_run_two_at_once(tmp_path):
    running, most = set(), []
    lock = threading.Lock()

    def run(name: str) -> dict:
        with lock:
            running.add(name)
            most.append(len(running))
        time.sleep(0.2)
        with lock:
            running.discard(name)
        return {}

    runner.run_pending(["a", "b", "c", "d"], tmp_path, run, lambda record: "", lanes=2)
    assert max(most) == 2 and len(list(tmp_path.glob("*.json"))) == 4


def test_a_failed_run_lets_the_running_one_finish_starts_no_other_and_is_raised(tmp_path):
    started, b_running = [], threading.Event()

    def run(name: str) -> dict:
        started.append(name)
        if name == "a":
            assert b_running.wait(timeout=30)
            raise SystemExit("run a failed")
        b_running.set()
        time.sleep(0.3)  # still running when a fails
        return {}

    with pytest.raises(SystemExit, match="run a failed"):
        runner.run_pending(["a", "b", "c"], tmp_path, run, lambda record: "", lanes=2)
    assert sorted(started) == ["a", "b"] and [p.name for p in tmp_path.glob("*.json")] == ["b.json"]
