"""benchmarks/studies/verdict_study.py: the 500-epoch verdict's plan (trunks, their continuation, the cache branches
from the epoch-300 checkpoint, RWS), its pre-registered comparisons and their report; runner.train's `start_from`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.lib import runner
from benchmarks.studies import verdict_study

REPO = Path(__file__).resolve().parents[3]


def test_a_run_starts_from_its_branch_point_until_it_has_a_checkpoint_of_its_own(tmp_path, monkeypatch):
    commands = []

    def fake_train(cmd, **kwargs):
        commands.append(cmd)
        checkpoints = tmp_path / "logs" / "tensorboard" / "jsa" / "version_0" / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        (checkpoints / "last.ckpt").write_text("saved")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(runner.subprocess, "run", fake_train)
    branch = tmp_path / "branch-points" / "trunk.ckpt"
    runner.train("b", ["model=jsa"], tmp_path / "logs", start_from=branch)
    runner.train("b", ["model=jsa"], tmp_path / "logs", start_from=branch)  # resumed: from its own last.ckpt
    assert commands[0][-1] == f"ckpt_path={branch}"
    assert commands[1][-1] == f"ckpt_path={tmp_path / 'logs' / 'tensorboard' / 'jsa' / 'version_0' / 'checkpoints' / 'last.ckpt'}"


# test NLL per (arm, seed): the paper's cache 0.3 better than no cache in every seed, up to a seed's noise
NLL = {("jsa-never", s): 70.0 + d for s, d in enumerate([0.1, -0.2, 0.3, 0.0, -0.1])}
NLL |= {("jsa-cache300", s): NLL["jsa-never", s] - 0.3 + d for s, d in enumerate([0.05, -0.02, 0.0, 0.03, -0.04])}
NLL |= {("jsa-cache300-rho0.2", s): NLL["jsa-never", s] + d for s, d in enumerate([0.2, -0.1, 0.1, -0.3, 0.05])}
NLL |= {("rws", s): 70.2 + d for s, d in enumerate([0.3, -0.1, 0.2, -0.4, 0.1])}


@pytest.fixture
def fake_training(monkeypatch):
    """runner.train and read_curves without train.py: each call logged; a run's last.ckpt holds its log dir's name
    and its epochs (a trunk's differs from every other seed's), its test NLL comes from NLL."""
    calls = []

    def train(name, overrides, log_dir, start_from=None):
        calls.append((name, list(overrides), log_dir, start_from))
        run_dir = log_dir / "tensorboard" / "jsa" / "version_0"
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        epochs = next(o for o in overrides if o.startswith("trainer.max_epochs="))
        (run_dir / "checkpoints" / "last.ckpt").write_text(f"{log_dir.name} {epochs}")
        (run_dir / "which").write_text(name)
        return run_dir, 60.0, "python train.py " + " ".join(overrides)

    def read_curves(run_dir, extra_tags=()):
        name = (run_dir / "which").read_text()
        if name.endswith("-to300"):
            return {"curves": {"nll": [[300 * 275 - 1, 75.0]]}, "epoch_time_s": [], "test": {}}
        arm, seed = name.rsplit("-s", 1)
        nll = NLL[arm, int(seed)]
        return {"curves": {"nll": [[490 * 275 - 1, nll + 3.1], [500 * 275 - 1, nll + 3.0]]}, "epoch_time_s": [], "test": {"nll": nll}}

    monkeypatch.setattr(verdict_study.runner, "train", train)
    monkeypatch.setattr(verdict_study, "read_curves", read_curves)
    return calls


def test_the_branches_start_from_their_seeds_epoch_300_checkpoint_and_the_no_cache_run_goes_on_in_its_own(tmp_path, fake_training):
    out, logs = tmp_path / "out", tmp_path / "logs"
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--lanes", "2"])
    names = [call[0] for call in fake_training]
    assert sorted(names) == sorted([f"jsa-never-s{s}-to300" for s in range(5)] + [f"{arm}-s{s}" for s in range(5) for arm in
                                   ("jsa-never", "jsa-cache300", "jsa-cache300-rho0.2", "rws")])
    for seed in range(5):
        trunk = names.index(f"jsa-never-s{seed}-to300")
        assert all(names.index(f"{arm}-s{seed}") > trunk for arm in ("jsa-never", "jsa-cache300", "jsa-cache300-rho0.2"))
    by_name = {call[0]: call for call in fake_training}
    _, trunk_overrides, trunk_dir, _ = by_name["jsa-never-s1-to300"]
    assert {"trainer.max_epochs=300", "run_test=false", "model.cache_start_epoch=null", "model.val_num_samples=1000"} <= set(trunk_overrides)
    _, overrides, log_dir, start = by_name["jsa-never-s1"]
    assert log_dir == trunk_dir and start is None and "trainer.max_epochs=500" in overrides and "run_test=false" not in overrides
    point = logs / "branch-points" / "jsa-never-s1-to300.ckpt"
    assert point.read_text() == "jsa-never-s1 trainer.max_epochs=300"  # the trunk's last.ckpt at epoch 300
    for arm, settings in (("jsa-cache300", ["model.cache_start_epoch=300"]),
                          ("jsa-cache300-rho0.2", ["model.cache_start_epoch=300", "model.cache_refresh=0.2"])):
        _, overrides, log_dir, start = by_name[f"{arm}-s1"]
        assert start == point and log_dir == logs / f"{arm}-s1" and set(settings) <= set(overrides)
        assert "trainer.max_epochs=500" in overrides and "model.cache_start_epoch=null" not in overrides
    _, overrides, _, start = by_name["rws-s1"]
    assert start is None and "model=rws" in overrides and "trainer.max_epochs=500" in overrides
    records = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    shared = {records[f"{arm}-s1"]["branch_sha256"] for arm in ("jsa-never", "jsa-cache300", "jsa-cache300-rho0.2")}
    assert shared == {records["jsa-never-s1-to300"]["branch_sha256"]} and "branch_sha256" not in records["rws-s1"]
    report = (out / "report.md").read_text()
    assert "- seed 1: jsa-cache300-rho0.2-s1, jsa-cache300-s1, jsa-never-s1, jsa-never-s1-to300 share one epoch-300 checkpoint" in report
    assert "![val NLL and JSA's sampler over the 500 epochs](verdict_curves.png)" in report
    assert "| JSA, no cache | 5 | " in report and "| 2.0 (" in report.split("| JSA, no cache | 5 | ")[1].splitlines()[0]  # trunk + rest
    assert "| 1.0 (" in report.split("| RWS | 5 | ")[1].splitlines()[0]
    assert (out / "verdict_curves.png").stat().st_size > 0


def test_a_branch_waits_for_its_trunk_and_one_whose_branch_point_changed_is_refused_in_one_line(tmp_path, fake_training, capsys):
    out, logs = tmp_path / "out", tmp_path / "logs"
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--seeds", "1", "--only", "jsa-cache300-s0"])
    assert not fake_training and "1 run(s) wait for records no run will write: jsa-cache300-s0" in capsys.readouterr().out
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--seeds", "1", "--arms", "jsa-never"])
    (logs / "branch-points" / "jsa-never-s0-to300.ckpt").write_text("another state")
    with pytest.raises(SystemExit, match=r"jsa-cache300-s0: its branch point .* is missing or is not the file jsa-never-s0-to300 wrote"):
        verdict_study.main(["--out", str(out), "--logs", str(logs), "--seeds", "1", "--arms", "jsa-never,jsa-cache300"])
    assert not any(call[0] == "jsa-cache300-s0" for call in fake_training)


def test_the_report_tests_the_registered_comparisons_paired_where_they_share_a_start_with_holm_over_those_made(tmp_path, fake_training):
    from scipy import stats

    out, logs = tmp_path / "out", tmp_path / "logs"
    verdict_study.main(["--out", str(out), "--logs", str(logs)])
    report = (out / "report.md").read_text()
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line for line in report.splitlines() if line.startswith("| test NLL")}
    paired = rows["test NLL, 1000 samples", "JSA, the paper's cache (from epoch 300, ρ = 0) − JSA, no cache"]
    cache, never = ([NLL[arm, s] for s in range(5)] for arm in ("jsa-cache300", "jsa-never"))
    p = stats.ttest_rel(cache, never).pvalue
    assert f"| paired by seed | 5 | -0.30 | " in paired and f"| {p:.3f} |" in paired
    rws = [NLL["rws", s] for s in range(5)]
    unpaired = rows["test NLL, 1000 samples", "RWS − JSA, no cache"]
    assert f"| two-sample | 5 | " in unpaired and f"| {stats.ttest_ind(rws, never).pvalue:.3f} |" in unpaired
    # Holm over the 5 made (the 20,000-sample measure is not yet measured), worked here from scipy's p-values
    arms = {"RWS": "rws", "JSA, no cache": "jsa-never", "JSA, the paper's cache (from epoch 300, ρ = 0)": "jsa-cache300",
            "JSA, cache from epoch 300, ρ = 0.2": "jsa-cache300-rho0.2"}
    made = {}
    for (measure, name), line in rows.items():
        a, b = (arms[side] for side in name.split(" − "))
        xs, ys = [NLL[a, s] for s in range(5)], [NLL[b, s] for s in range(5)]
        made[name] = (stats.ttest_rel(xs, ys) if "paired" in line else stats.ttest_ind(xs, ys)).pvalue
    order = sorted(made, key=made.get)
    expected, running = {}, 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (5 - rank) * made[name]))
        expected[name] = running
    assert len(made) == 5 and max(expected.values()) > 0.05  # a family where the adjustment shows
    for name, q in expected.items():
        assert rows["test NLL, 1000 samples", name].endswith(f"| {q:.3f} |"), name
    assert "(10: 5 differences at 2 measures; 5 made so far)" in report
    assert report.count("| not yet measured |") == 10  # the 20,000-sample measure and the refit-q check
    # the refit-q check, once measured: its own family of five, from each run's mean NLL over the images
    refit = {f"{arm}-s{s}": {"nll": [NLL[arm, s] + 1.0 + 0.1 * s, NLL[arm, s] + 1.0 - 0.1 * s]} for arm, s in NLL}
    (out / "refit-q.json").write_text(json.dumps({"settings": {}, "runs": refit}))
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--report-only"])
    report = (out / "report.md").read_text()
    assert "The refit-q check, secondary (5: 5 differences at 1 measure; 5 made so far)" in report
    row = next(line for line in report.splitlines() if line.startswith("| NLL, 5000 samples, q refitted | RWS − JSA, no cache |"))
    assert f"| {stats.ttest_ind([NLL['rws', s] for s in range(5)], never).pvalue:.3f} |" in row
    assert report.count("| not yet measured |") == 5
    # the 20,000-sample measure: each arm's fall from 1000 samples shown, and the registered family complete
    measured = {f"{arm}-s{s}": {"1000": {"nll": [NLL[arm, s] + 1.0] * 2}, "20000": {"nll": [NLL[arm, s] + 0.5 - 0.1 * (arm == "rws")] * 2}}
                for arm, s in NLL}
    (out / "is-resolution.json").write_text(json.dumps({"settings": {"images": 2, "samples": [1000, 20000]}, "runs": measured}))
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--report-only"])
    report = (out / "report.md").read_text()
    assert "| RWS | 5 | 71.22 ± 0.28 | 70.62 ± 0.28 | 0.60 ± 0.00 |" in report  # RWS 70.22 ± 0.28, + 1 and + 0.4
    assert "(10: 5 differences at 2 measures; 10 made so far)" in report and "| not yet measured |" not in report


def test_the_plan_file_names_every_registered_comparison_and_measure():
    plan = (REPO / "benchmarks" / "results" / "verdict-study" / "PLAN.md").read_text()
    for comparison in verdict_study.COMPARISONS:
        expected = f"{verdict_study.ARMS[comparison.a][0]} − {verdict_study.ARMS[comparison.b][0]}"
        assert expected in plan, expected
    for measure in verdict_study.MEASURES:
        assert measure in plan, measure
    assert re.search(rf"Holm.*over (all )?the {len(verdict_study.COMPARISONS) * len(verdict_study.MEASURES)}", plan)


def test_the_study_refuses_a_cache_arm_without_its_trunk_and_too_few_epochs(tmp_path, capsys):
    for argv, message in ((["--arms", "jsa-cache300"], "add jsa-never"), (["--epochs", "300"], "above the branch epoch 300")):
        with pytest.raises(SystemExit):
            verdict_study.main([*argv, "--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs")])
        assert message in capsys.readouterr().err


def test_vimco_runs_when_asked_for_by_vimco_or_by_arms(tmp_path, fake_training, monkeypatch):
    monkeypatch.setitem(NLL, ("vimco", 0), 71.0)
    for n, argv in enumerate((["--arms", "rws,vimco"], ["--arms", "rws", "--vimco"], ["--arms", "rws"])):
        out = tmp_path / f"out{n}"
        verdict_study.main([*argv, "--seeds", "1", "--out", str(out), "--logs", str(tmp_path / f"logs{n}")])
        assert ("vimco-s0" in [call[0] for call in fake_training]) == (n < 2), argv
        fake_training.clear()


def test_with_replicas_per_process_the_trunks_are_packed_and_the_rest_train_alone(tmp_path, monkeypatch):
    """--replicas-per-process 5: the five seeds' trunks (no test, from scratch) are one pack; the branches (they start
    from their trunk's checkpoint) and RWS (it tests after training) are not packed."""
    from benchmarks.lib import packing

    packed = []
    monkeypatch.setattr(packing, "train_pack", lambda names, requests, packs_dir, lock: packed.append(list(names)))
    monkeypatch.setattr(verdict_study.runner, "run_pending", lambda *a, **k: [])
    monkeypatch.setattr(verdict_study, "write_report", lambda args: tmp_path / "report.md")
    verdict_study.main(["--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs"), "--replicas-per-process", "5"])
    assert packed == [[f"jsa-never-s{s}-to300" for s in range(5)]]
