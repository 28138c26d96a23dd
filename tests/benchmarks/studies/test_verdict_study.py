"""benchmarks/studies/verdict_study.py: the 500-epoch verdict's plan (per group of seeds a trunk process, then its three
JSA arms as replicas from the trunk's own checkpoint; RWS), its pre-registered comparisons and their report."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from benchmarks.studies import verdict_study
from tests import preloaded
from tests.conftest import says

REPO = Path(__file__).resolve().parents[3]


# test NLL per (arm, seed): the paper's cache 0.3 better than no cache in every seed, up to a seed's noise
NLL = {("jsa-never", s): 70.0 + d for s, d in enumerate([0.1, -0.2, 0.3, 0.0, -0.1])}
NLL |= {("jsa-cache300", s): NLL["jsa-never", s] - 0.3 + d for s, d in enumerate([0.05, -0.02, 0.0, 0.03, -0.04])}
NLL |= {("jsa-cache300-rho0.2", s): NLL["jsa-never", s] + d for s, d in enumerate([0.2, -0.1, 0.1, -0.3, 0.05])}
NLL |= {("rws", s): 70.2 + d for s, d in enumerate([0.3, -0.1, 0.2, -0.4, 0.1])}


@pytest.fixture
def fake_training(monkeypatch):
    """packing.train_process and read_curves without train.py: each process logged as (name, overrides, start_from);
    it writes its last.ckpt (its name and overrides: a trunk's differs from every other group's) and a TensorBoard
    folder per replica, named as launch/runs/replicas.py names them from its replicas.seeds and replicas.arms (parsed
    by Hydra); a run's val curve lies after its start epoch, its test NLL comes from NLL."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from launch.runs.replicas import replica_names

    calls = []

    def train_process(label, overrides, process_dir, run_lock, start_from=None):
        calls.append((label, list(overrides), start_from))
        value = {o.split("=", 1)[0]: OverridesParser.create().parse_override(o).value() for o in overrides if "=" in o}
        arms = value.get("replicas.arms") or [{}]
        first = 0 if start_from is None else int(re.search(r"trainer.max_epochs=(\d+)", start_from.read_text()).group(1))
        checkpoints = process_dir / "replicas" / "jsa" / "t-1" / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        (checkpoints / "last.ckpt").write_text(f"{label} " + " ".join(overrides))
        for index, settings in enumerate(arms):
            arm = verdict_study.BRANCHES[index] if label.startswith("jsa-") else value["model"]
            for seed in value["replicas.seeds"]:
                run_dir = process_dir / "tensorboard" / replica_names("jsa", [seed], [settings])[0] / "version_0"
                run_dir.mkdir(parents=True)
                run = {"arm": arm, "seed": seed, "first": first, "last": value["trainer.max_epochs"],
                       "every": value["trainer.check_val_every_n_epoch"], "test": value["run_test"]}
                (run_dir / "which").write_text(json.dumps(run))
        return 60.0, "python train.py " + " ".join(overrides)

    def read_curves(run_dir, extra_tags=()):
        run = json.loads((run_dir / "which").read_text())
        nll = NLL.get((run["arm"], run["seed"]), 75.0) if run["test"] else 75.0
        epochs = range(run["first"] + run["every"], run["last"] + 1, run["every"])
        curve = [[epoch * 275 - 1, nll + 3.0 + (run["last"] - epoch) / 100] for epoch in epochs]
        return {"curves": {"nll": curve}, "epoch_time_s": [], "test": {"nll": nll} if run["test"] else {}}

    monkeypatch.setattr(verdict_study.packing, "train_process", train_process)
    monkeypatch.setattr(verdict_study, "read_curves", read_curves)
    return calls


@pytest.fixture
def no_figure(monkeypatch):
    """The report's figure named and not drawn, for the tests of what the study trains and reports: matplotlib's
    drawing is most of their time. test_each_seed_groups_trunk_... draws it and checks the file."""
    monkeypatch.setattr(verdict_study, "plot", lambda records, args: args.out / "verdict_curves.png")


def test_each_seed_groups_trunk_trains_to_the_branch_epoch_then_its_three_arms_from_its_own_checkpoint(tmp_path, fake_training):
    """Per group of seeds one trunk process (no test), then one process of the three JSA arms started from the trunk's
    last.ckpt: the no-cache continuation is a run of its own, trained to 500 and tested, its curve its own; RWS one
    process with its test. Records name the trunk checkpoint they share, and the report counts no minutes twice."""
    out, logs = tmp_path / "out", tmp_path / "logs"
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--replicas-per-process", "3", "--lanes", "2"])
    labels = [call[0] for call in fake_training]
    assert sorted(labels) == sorted(["jsa-trunk-s0-2-to300", "jsa-arms-s0-2-from300", "jsa-trunk-s3-4-to300",
                                     "jsa-arms-s3-4-from300", "rws-s0-2", "rws-s3-4"])
    by_label = {call[0]: call for call in fake_training}
    assert labels.index("jsa-arms-s3-4-from300") > labels.index("jsa-trunk-s3-4-to300")
    _, trunk, start = by_label["jsa-trunk-s3-4-to300"]
    assert start is None and {"replicas.seeds=[3,4]", "trainer.max_epochs=300", "run_test=false", "model.cache_start_epoch=null",
                              "model.val_num_samples=1000"} <= set(trunk) and not any(o.startswith("replicas.arms=") for o in trunk)
    _, arms, start = by_label["jsa-arms-s3-4-from300"]
    trunk_checkpoint = logs / "processes" / "jsa-trunk-s3-4-to300" / "replicas" / "jsa" / "t-1" / "checkpoints" / "last.ckpt"
    assert start == trunk_checkpoint
    assert {"replicas.seeds=[3,4]", "trainer.max_epochs=500", "run_test=true", "model.cache_start_epoch=null",
            "replicas.arms=[{},{cache_start_epoch:300},{cache_start_epoch:300,cache_refresh:0.2}]"} <= set(arms)
    _, rws, start = by_label["rws-s0-2"]
    assert start is None and {"model=rws", "trainer.max_epochs=500", "run_test=true", "replicas.seeds=[0,1,2]"} <= set(rws)
    records = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    assert sorted(records) == sorted([f"jsa-never-s{s}-to300" for s in range(5)] + [f"{arm}-s{s}" for s in range(5) for arm in
                                     ("jsa-never", "jsa-cache300", "jsa-cache300-rho0.2", "rws")])
    never, trunk_record = records["jsa-never-s4"], records["jsa-never-s4-to300"]
    assert never["test"] == {"nll": NLL["jsa-never", 4]} and trunk_record["test"] == {}
    assert min(epoch_of(step) for step, _ in never["curves"]["nll"]) == 305  # its own validations only
    assert max(epoch_of(step) for step, _ in trunk_record["curves"]["nll"]) == 300
    assert never["command"] == ("python train.py experiment=jsa_paper seed=4 trainer.max_epochs=500 trainer.check_val_every_n_epoch=5 "
                                "model.val_num_samples=1000 model=jsa model.cache_start_epoch=null")
    assert records["jsa-cache300-rho0.2-s4"]["command"].endswith("model.cache_start_epoch=300 model.cache_refresh=0.2")
    assert never["seconds"] == 60.0 / 6 and never["replicas"] == 6 and trunk_record["seconds"] == 60.0 / 2
    digest = verdict_study.sha256(trunk_checkpoint)
    assert {records[f"{arm}-s4"]["branch_sha256"] for arm in verdict_study.BRANCHES} == {digest}
    assert trunk_record["branch_sha256"] == digest and "branch_sha256" not in records["rws-s4"]
    for name, record in records.items():  # each run in a log folder of its own, where at_checkpoints looks for it
        assert [p.parent.name for p in (logs / name).glob("tensorboard/*/version_0")] == [name_of(record)], name
    report = (out / "report.md").read_text()
    assert "- seed 4: jsa-cache300-rho0.2-s4, jsa-cache300-s4, jsa-never-s4, jsa-never-s4-to300 share one epoch-300 checkpoint" in report
    assert "| 0.1 (" in report.split("| JSA, no cache | 5 | ")[1].splitlines()[0]  # its own process's share: 60 s / 9 or 6 replicas
    assert "The trunks (epochs 1-300, shared by each seed's JSA arms" in report and "5 seeds, 0.4 (" in report
    assert (out / "verdict_curves.png").stat().st_size > 0
    assert (out / "commands.txt").read_text().count("\n") == 25  # each run's single-run command


def name_of(record: dict) -> str:
    """The replica folder of a run in the fake processes (launch/runs/replicas.py's naming)."""
    settings = verdict_study.arm_settings(record["arm"], 300) if record["arm"] in verdict_study.BRANCHES else {}
    return "jsa-seed" + str(record["seed"]) + "".join(f"-{key}{value}" for key, value in settings.items())


def epoch_of(step: int) -> int:
    return round((step + 1) / 275)


def test_a_rerun_trains_only_what_has_no_record_and_an_arm_process_starts_only_from_its_trunks_file(tmp_path, fake_training, no_figure):
    out, logs = tmp_path / "out", tmp_path / "logs"
    argv = ["--out", str(out), "--logs", str(logs), "--seeds", "2"]
    verdict_study.main(argv)
    assert len(fake_training) == 3
    (out / "runs" / "jsa-cache300-s1.json").unlink()  # a process cut after it finished, before all its records
    verdict_study.main(argv)
    assert len(fake_training) == 3 and (out / "runs" / "jsa-cache300-s1.json").exists()  # from its finished process
    for name in ("jsa-never-s0", "jsa-cache300-s0", "jsa-cache300-rho0.2-s0", "jsa-never-s1", "jsa-cache300-s1", "jsa-cache300-rho0.2-s1"):
        (out / "runs" / f"{name}.json").unlink()
    shutil.rmtree(logs / "processes" / "jsa-arms-s0-1-from300")
    trunk = next((logs / "processes" / "jsa-trunk-s0-1-to300").glob("replicas/*/*/checkpoints/last.ckpt"))
    trunk.write_text("another state")
    with pytest.raises(SystemExit, match=r"jsa-arms-s0-1-from300: its trunk's checkpoint .* is not the one the trunk's records name"):
        verdict_study.main(argv)
    assert len(fake_training) == 3


def test_trunks_train_in_one_call_and_their_arms_in_another_from_the_packed_checkpoint(tmp_path, fake_training, no_figure, monkeypatch):
    """--trunks-only trains the trunks alone; --pack-trunks writes each one's checkpoint in gzipped parts; on another
    machine (an empty --logs) the arms start from the checkpoint those parts restore, checked against the trunk's
    records; a damaged part is refused before any arm trains."""
    out, logs, parts = tmp_path / "out", tmp_path / "logs", tmp_path / "parts"
    argv = ["--out", str(out), "--logs", str(logs), "--seeds", "2", "--arms", "jsa-never,jsa-cache300"]
    verdict_study.main([*argv, "--trunks-only"])
    assert [call[0] for call in fake_training] == ["jsa-trunk-s0-1-to300"]
    assert sorted(p.stem for p in (out / "runs").glob("*.json")) == ["jsa-never-s0-to300", "jsa-never-s1-to300"]
    record = out / "runs" / "jsa-never-s1-to300.json"
    record.rename(tmp_path / "aside.json")  # a trunk not finished (cut by a call's limit) is not packed
    verdict_study.main([*argv, "--pack-trunks", str(parts)])
    assert not parts.exists()
    (tmp_path / "aside.json").rename(record)
    monkeypatch.setattr(verdict_study, "PART_BYTES", 16)  # a checkpoint of several parts
    verdict_study.main([*argv, "--pack-trunks", str(parts)])
    trunk = next((logs / "processes" / "jsa-trunk-s0-1-to300").glob("replicas/*/*/checkpoints/last.ckpt"))
    packed = sorted(parts.iterdir())
    assert len(packed) > 1 and [p.name for p in packed][:2] == ["jsa-trunk-s0-1-to300.ckpt.gz.00", "jsa-trunk-s0-1-to300.ckpt.gz.01"]
    original = trunk.read_bytes()
    shutil.rmtree(logs)  # another machine: the trunk's folder is not there
    damaged = packed[-1].read_bytes()
    packed[-1].write_bytes(damaged[:-1] + bytes([damaged[-1] ^ 1]))
    with pytest.raises(SystemExit, match=r"jsa-trunk-s0-1-to300.ckpt.gz.\*: \d+ parts that are not one whole gzip file"):
        verdict_study.main([*argv, "--trunk-parts", str(parts)])
    assert len(fake_training) == 1
    packed[-1].write_bytes(damaged)
    verdict_study.main([*argv, "--trunk-parts", str(parts)])
    labels = [call[0] for call in fake_training]
    assert labels == ["jsa-trunk-s0-1-to300", "jsa-arms-s0-1-from300"]
    start = fake_training[-1][2]
    assert start == logs / "trunks" / "jsa-trunk-s0-1-to300.ckpt" and start.read_bytes() == original
    assert json.loads((out / "runs" / "jsa-cache300-s1.json").read_text())["branch_sha256"] == verdict_study.sha256(start)


def test_only_trains_the_processes_of_the_runs_it_names_and_a_failed_process_lets_the_others_finish(tmp_path, fake_training, no_figure, monkeypatch):
    out, logs = tmp_path / "out", tmp_path / "logs"
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--seeds", "2", "--only", "rws-*"])
    assert [call[0] for call in fake_training] == ["rws-s0-1"]
    assert sorted(p.stem for p in (out / "runs").glob("*.json")) == ["rws-s0", "rws-s1"]
    trained = verdict_study.packing.train_process

    def failing(label, *args, **kwargs):
        if label.startswith("jsa-arms-"):
            raise SystemExit(f"{label} failed (exit 1); its output: train.log")
        return trained(label, *args, **kwargs)

    monkeypatch.setattr(verdict_study.packing, "train_process", failing)
    with pytest.raises(SystemExit, match="^jsa-arms-s0-1-from300 failed"):
        verdict_study.main(["--out", str(out), "--logs", str(logs), "--seeds", "2", "--vimco", "--lanes", "2"])
    assert sorted(p.stem for p in (out / "runs").glob("*.json")) == ["jsa-never-s0-to300", "jsa-never-s1-to300", "rws-s0", "rws-s1",
                                                                    "vimco-s0", "vimco-s1"]
    assert "(6 of 12 planned runs finished)" in (out / "report.md").read_text()


def test_the_report_tests_the_registered_comparisons_paired_where_they_share_a_start_with_holm_over_those_made(tmp_path, fake_training, no_figure):
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
        expected = f"{verdict_study.label(comparison.a)} − {verdict_study.label(comparison.b)}"
        assert expected in plan, expected
    for measure in verdict_study.MEASURES:
        assert measure in plan, measure
    assert re.search(rf"Holm.*over (all )?the {len(verdict_study.COMPARISONS) * len(verdict_study.MEASURES)}", plan)


@pytest.mark.parametrize("argv, named", [  # the option, the value given, what it takes
    (["--arms", "jsa-cache300"], ["--arms", "jsa-never", "cache arm"]),
    (["--arms", "jsa-never,rws"], ["--arms", "jsa-never", "cache arm"]),
    (["--epochs", "300"], ["--epochs", "300", "above --branch-epoch 300"]),
    (["--branch-epoch", "3", "--val-every", "2", "--epochs", "6"], ["--branch-epoch 3", "multiple of --val-every 2"]),
    (["--branch-epoch", "0"], ["--branch-epoch", ">= 1"]),
])
def test_the_study_refuses_arms_that_cannot_branch_and_a_branch_epoch_between_validations(tmp_path, capsys, argv, named):
    with pytest.raises(SystemExit):
        verdict_study.main([*argv, "--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs")])
    says(capsys.readouterr().err.strip().splitlines()[-1], *named)


def test_the_branch_epoch_and_the_tiny_settings_reach_every_process_and_the_reports_protocol_line(tmp_path, fake_training, no_figure):
    out = tmp_path / "out"
    verdict_study.main(["--out", str(out), "--logs", str(tmp_path / "logs"), "--seeds", "2", "--branch-epoch", "2", "--epochs", "4",
                        "--val-every", "1", "--val-samples", "2", "data.batch_size=50", "trainer.limit_train_batches=2"])
    by_label = {call[0]: call[1] for call in fake_training}
    assert {"trainer.max_epochs=2", "trainer.check_val_every_n_epoch=1", "model.val_num_samples=2", "data.batch_size=50",
            "trainer.limit_train_batches=2"} <= set(by_label["jsa-trunk-s0-1-to2"])
    assert "replicas.arms=[{},{cache_start_epoch:2},{cache_start_epoch:2,cache_refresh:0.2}]" in by_label["jsa-arms-s0-1-from2"]
    assert {"trainer.max_epochs=4", "data.batch_size=50"} <= set(by_label["rws-s0-1"])
    report = (out / "report.md").read_text()
    assert ("Protocol: `experiment=jsa_paper data.batch_size=50 trainer.limit_train_batches=2`, 4 epochs, val NLL from 2 "
            "importance samples every 1 epochs, the test NLL from the experiment's samples at each run's best validation; "
            "the JSA arms branch from their seed's trunk at epoch 2.") in report
    assert "| JSA, the paper's cache (from epoch 2, ρ = 0) | 2 |" in report and "(10 of 10 planned runs finished)" in report


def test_the_protocol_line_says_what_the_records_ran_with_and_lists_them_apart_when_they_differ(tmp_path, fake_training, no_figure):
    out, logs = tmp_path / "out", tmp_path / "logs"
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--seeds", "2", "--arms", "rws"])
    path = out / "runs" / "rws-s1.json"
    record = json.loads(path.read_text())
    assert record["protocol"] == {"epochs": 500, "branch_epoch": 300, "val_every": 5, "val_samples": 1000, "test_samples": None,
                                  "batch_size": None, "overrides": []}
    record["protocol"] |= {"val_samples": 100, "test_samples": 1000, "batch_size": 200}
    path.write_text(json.dumps(record))
    verdict_study.main(["--out", str(out), "--logs", str(logs), "--seeds", "2", "--arms", "rws", "--report-only", "--epochs", "400"])
    report = (out / "report.md").read_text()
    assert "Protocol: the records' settings differ:" in report
    assert ("- 1 runs (rws-s1): `experiment=jsa_paper`, batch 200, 500 epochs, val NLL from 100 importance samples every 5 "
            "epochs, the test NLL from 1000 samples at each run's best validation") in report
    assert "- 1 runs (rws-s0): `experiment=jsa_paper`, 500 epochs, val NLL from 1000 " in report  # the records', not --epochs 400


def test_report_only_without_records_writes_a_report_that_says_so(tmp_path, capsys):
    out = tmp_path / "out"
    verdict_study.main(["--out", str(out), "--logs", str(tmp_path / "logs"), "--report-only", "--seeds", "2"])
    report = (out / "report.md").read_text()
    assert "Protocol (asked for: no run has finished): `experiment=jsa_paper`, 500 epochs" in report
    assert "(0 of 10 planned runs finished; no run has finished yet)" in report
    assert report.count("| not yet measured |") == 15 and (out / "commands.txt").read_text() == ""


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_report_only_replaces_a_linked_report_and_leaves_the_users_file_as_it_was(link, tmp_path):
    users = tmp_path / "users-report.md"
    users.write_text("the user's report")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(users) if link == "symbolic" else os.link(users, out / "report.md")
    verdict_study.main(["--out", str(out), "--logs", str(tmp_path / "logs"), "--report-only", "--seeds", "2"])
    assert users.read_text() == "the user's report"
    assert not (out / "report.md").is_symlink() and "no run has finished yet" in (out / "report.md").read_text()


def test_vimco_runs_when_asked_for_by_vimco_or_by_arms(tmp_path, fake_training, monkeypatch):
    monkeypatch.setitem(NLL, ("vimco", 0), 71.0)
    for n, argv in enumerate((["--arms", "rws,vimco"], ["--arms", "rws", "--vimco"], ["--arms", "rws"])):
        out = tmp_path / f"out{n}"
        verdict_study.main([*argv, "--seeds", "1", "--out", str(out), "--logs", str(tmp_path / f"logs{n}")])
        assert ("vimco-s0-0" in [call[0] for call in fake_training]) == (n < 2), argv
        assert (out / "runs" / "vimco-s0.json").exists() == (n < 2)
        fake_training.clear()


TINY = ["--seeds", "2", "--branch-epoch", "1", "--epochs", "2", "--val-every", "1", "--val-samples", "2", "--steps-per-epoch", "2",
        "data.val_size=59900", "data.batch_size=50", "data.eval_batch_size=50", "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1", "model.test_num_samples=2"]


@pytest.mark.slow
def test_the_whole_study_trains_through_train_py_each_arm_tested_and_its_curves_and_best_its_own(tmp_path, monkeypatch):
    """Two seeds, the trunk to epoch 1 and the arms to 2, on 100 training images: every run recorded with its test; each
    arm's validations and best checkpoint after the branch epoch, the trunk's before it; all of a seed's arms start from
    one file; the report makes every registered comparison at the runs' own test."""
    preloaded.studies_fork_train_py(monkeypatch)
    out, logs = tmp_path / "out", tmp_path / "logs"
    verdict_study.main(["--out", str(out), "--logs", str(logs), *TINY])
    records = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    assert sorted(records) == sorted(["jsa-never-s0-to1", "jsa-never-s1-to1"] + [f"{arm}-s{s}" for s in range(2) for arm in
                                     ("jsa-never", "jsa-cache300", "jsa-cache300-rho0.2", "rws")])
    for name, record in records.items():  # 2 steps an epoch: the trunk's validations by step 2, the arms' after it
        steps = [step for step, _ in record["curves"]["nll"]]
        best = [p.name for p in (logs / name).glob("tensorboard/*/version_0/checkpoints/epoch*.ckpt")]
        if record["stage"] == "trunk":
            assert len(steps) == 1 and max(steps) <= 2 and record["test"] == {}, name
        elif record["stage"] == "branch":
            assert len(steps) == 1 and min(steps) > 2 and "nll" in record["test"] and best == ["epoch001-step000004.ckpt"], (name, steps, best)
        else:
            assert len(steps) == 2 and "nll" in record["test"], name
    assert len({records[f"{arm}-s1"]["branch_sha256"] for arm in verdict_study.BRANCHES}) == 1
    report = (out / "report.md").read_text()
    assert "(10: 5 differences at 2 measures; 5 made so far)" in report
    assert not [line for line in report.splitlines() if line.startswith("| test NLL, 1000 samples |") and "not yet measured" in line]
