"""benchmarks/lib/runner.py's scheduling of a study's runs: order, waiting for records, lanes, failures, atomic records."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path

import pytest

from benchmarks.lib import runner


def test_a_run_that_needs_another_waits_for_its_record(tmp_path):
    started = []

    def run(name: str) -> dict:
        started.append(name)
        if name == "report" and not (tmp_path / "a.json").exists():
            raise runner.NotYet("needs a")
        return {"name": name}

    left = runner.run_pending(["report", "a", "b"], tmp_path, run, lambda record: "")
    assert left == [] and started == ["report", "a", "report", "b"]  # tried again as soon as a's record existed
    assert json.loads((tmp_path / "report.json").read_text()) == {"name": "report", "machine": runner.machine()}
    assert not list(tmp_path.glob(".*.tmp"))


def test_only_runs_the_matching_names_and_each_record_says_where_it_was_made(tmp_path):
    started = []
    runner.run_pending(["mnist-jsa-s0", "mnist-jsa-s1", "mnist-rws-s1", "fashion-jsa-s1"], tmp_path,
                       lambda name: started.append(name) or {"name": name}, lambda record: "", only=["mnist-*-s1", "x"])
    assert started == ["mnist-jsa-s1", "mnist-rws-s1"]
    machine = json.loads((tmp_path / "mnist-rws-s1.json").read_text())["machine"]
    assert machine == runner.machine() and ("cores" in machine or "NVIDIA" in machine)
    with pytest.raises(SystemExit, match="--only mnist-\\*-s3: no planned run matches; the plan's runs: a, b"):
        runner.run_pending(["a", "b"], tmp_path, lambda name: {}, lambda record: "", only=["mnist-*-s3"])


def test_runs_no_run_can_unblock_are_returned_not_waited_for(tmp_path):
    def run(name: str) -> dict:
        if name == "never":
            raise runner.NotYet("needs a record nobody writes")
        return {}

    assert runner.run_pending(["never", "a"], tmp_path, run, lambda record: "", lanes=2) == ["never"]
    assert (tmp_path / "a.json").exists() and not (tmp_path / "never.json").exists()


def test_two_lanes_run_two_at_once(tmp_path):
    """Each run waits until a second one is running beside it: only two lanes at once let all four finish (one lane
    at a time, the first run waits in vain and fails), however slowly the threads start."""
    together = threading.Barrier(2, timeout=30)

    def run(name: str) -> dict:
        together.wait()
        return {}

    runner.run_pending(["a", "b", "c", "d"], tmp_path, run, lambda record: "", lanes=2)
    assert len(list(tmp_path.glob("*.json"))) == 4


def test_a_failed_run_lets_the_running_one_finish_starts_no_other_and_is_raised(tmp_path):
    started, a_lane, a_running, b_running = [], [], threading.Event(), threading.Event()

    def run(name: str) -> dict:
        started.append(name)
        if name == "a":
            a_lane.append(threading.current_thread())
            a_running.set()
            assert b_running.wait(timeout=30)
            raise SystemExit("run a failed")
        b_running.set()
        assert a_running.wait(timeout=30)
        a_lane[0].join(timeout=30)  # b still runs when a's lane has taken a's failure and ended
        assert not a_lane[0].is_alive()
        return {}

    with pytest.raises(SystemExit, match="run a failed"):
        runner.run_pending(["a", "b", "c"], tmp_path, run, lambda record: "", lanes=2)
    assert sorted(started) == ["a", "b"] and [p.name for p in tmp_path.glob("*.json")] == ["b.json"]


def test_the_cache_studys_is_table_pairs_the_arms_by_seed_and_image(tmp_path):
    """benchmarks/studies/cache/study.py: middle − never per image within a seed pair, its standard error over the images,
    −ELBO's sign flipped (the column is −ELBO), and one row per seed pair (pooling pairs would understate the error);
    a finished middle/never run with no measurement is named."""
    import argparse

    from benchmarks.studies.cache import study as cache_study

    def run(nll_100: list[float], nll_5000: list[float], elbo: list[float]) -> dict:
        return {"100": {"nll": nll_100, "elbo": elbo}, "5000": {"nll": nll_5000, "elbo": elbo}}

    runs = {"L20-middle-s1": run([3.0, 5.0], [1.0, 1.0], [-10.0, -12.0]), "L20-never-s1": run([1.0, 1.0], [2.0, 2.0], [-4.0, -4.0]),
            "L20-middle-s2": run([1.0, 1.0], [1.0, 1.0], [-4.0, -4.0]), "L20-never-s2": run([1.0, 1.0], [1.0, 1.0], [-4.0, -4.0])}
    (tmp_path / "is-resolution.json").write_text(json.dumps({"settings": {"images": 2, "samples": [100, 5000]}, "runs": runs}))
    records = [{"name": name, "model": "L20", "arm": name.split("-")[1]} for name in [*runs, "L20-middle-s0", "L20-never-s0", "L20-epoch0-s0"]]
    lines = cache_study.is_resolution_table(argparse.Namespace(out=tmp_path), records)
    # the finished middle/never runs without a measurement are named; an epoch-0 run is never measured, so not listed
    assert any(line.startswith("Finished middle/no-cache runs with no entry in is-resolution.json")
               and "L20-middle-s0, L20-never-s0 (" in line and "epoch0" not in line for line in lines)
    paired = [line for line in lines if line.startswith("| categorical") and line.split("|")[4].strip()[0] in "+-"]  # the paired rows: signed differences
    # seed 1: NLL(100) differences 2 and 4 -> +3.00 ± sd(√2)/√2 = 1.00; NLL(5000) -1, -1 -> -1.00 ± 0.00;
    # −ELBO: -(-6, -8) -> +7.00 ± 1.00. Seed 2: level.
    assert paired == ["| categorical 20×10, L = 20 | middle | 1 | +3.00 ± 1.00 | -1.00 ± 0.00 | +7.00 ± 1.00 |",
                      "| categorical 20×10, L = 20 | middle | 2 | +0.00 ± 0.00 | +0.00 ± 0.00 | +0.00 ± 0.00 |"]


def test_the_long_studys_is_table_compares_rws_with_each_jsa_arm_at_the_most_samples(tmp_path):
    """benchmarks/studies/long_study.py: per arm the seeds' mean ± sd of each run's mean IS-NLL, −ELBO from the most samples,
    RWS − JSA at the most samples with the t-test's threshold, and the finished runs not yet measured named."""
    import argparse

    from benchmarks.studies import long_study

    def run(nll_1000: float, nll_5000: float) -> dict:
        return {"1000": {"nll": [nll_1000] * 2, "elbo": [-100.0] * 2}, "5000": {"nll": [nll_5000, nll_5000], "elbo": [-90.0, -92.0]}}

    runs = {"mnist-rws-s0": run(82.0, 81.0), "mnist-rws-s1": run(82.0, 81.2), "mnist-jsa-never-s0": run(83.0, 82.0),
            "mnist-jsa-never-s1": run(83.0, 82.4)}
    (tmp_path / "is-resolution.json").write_text(json.dumps({"settings": {"images": 2, "samples": [1000, 5000]}, "runs": runs}))
    records = [{"name": name, "arm": name.split("-", 1)[1].rsplit("-", 1)[0]} for name in [*runs, "mnist-rws-s2"]]
    args = argparse.Namespace(out=tmp_path, epochs=100, cache_arm=[])
    lines = long_study.is_resolution_lines(args, records, long_study.arms(args))
    assert "| RWS | 2 | 82.00 ± 0.00 | 81.10 ± 0.14 | 91.00 ± 0.00 |" in lines
    # RWS − JSA at 5000: 81.1 − 82.2 = −1.10; pooled sd √((0.14² + 0.28²)/2) = 0.224, t(2) = 4.303, × √(1/2 + 1/2) → 0.96
    assert "| RWS − JSA, no cache | -1.10 | 0.96 | yes |" in lines
    assert lines[-1] == "Finished runs not yet in is-resolution.json: mnist-rws-s2."


def test_the_long_studys_gap_table_reads_each_arms_val_nll_at_30_the_cache_start_and_the_end(tmp_path):
    """benchmarks/studies/long_study.py: the val-NLL differences of every pair of arms at epoch 30, at the cache's start
    (60 % of the run) and at the last epoch, each with the t-test's threshold; the report's fall over the last 20
    epochs and the curves' figure."""
    import argparse

    from benchmarks.studies import long_study

    spe = 10  # steps per epoch: the val at the end of epoch e is logged at step 10 e - 1

    def record(arm: str, seed: int, offset: float) -> dict:
        slope = 0.2 if arm == "rws" else 0.22  # nats per epoch: the JSA arms gain on RWS
        nll = [[10 * epoch - 1, 100.0 - slope * epoch + offset] for epoch in range(5, 55, 5)]
        return {"name": f"mnist-{arm}-s{seed}", "arm": arm, "seed": seed, "seconds": 60.0, "test": {"nll": 80.0},
                "curves": {"nll": nll, "acceptance_rate": [[0, 0.2], [9, 0.1]]}, "command": "python train.py"}

    by_arm = {"rws": [record("rws", 0, 1.0), record("rws", 1, 1.2)],
              "jsa-never": [record("jsa-never", 0, 0.0), record("jsa-never", 1, 0.2)],
              "jsa-cache": [record("jsa-cache", 0, 0.5), record("jsa-cache", 1, 0.5)]}
    args = argparse.Namespace(out=tmp_path, epochs=50, cache_arm=[], val_every=5, val_samples=100, steps_per_epoch=spe,
                              seeds=2, arms=list(long_study.ARMS))
    lines = long_study.gap_over_budget_lines(by_arm, long_study.arms(args), args)
    # epochs 30 and 50 (the end); the cache starts at 30 too. RWS − JSA at 30: 95.1 − 93.5 = +1.60, at 50: 91.1 − 89.1 =
    # +2.00; pooled sd 0.141, t(2) = 4.303 × 0.141 → 0.61. RWS − cache arm at 30: 95.1 − 93.9 = +1.20 (pooled sd 0.1 →
    # 0.43); JSA − cache arm: −0.40 at every epoch.
    assert [line for line in lines if line.startswith("| RWS − JSA, no cache")] == [
        "| RWS − JSA, no cache | 30 | +1.60 | 0.61 | yes |", "| RWS − JSA, no cache | 50 | +2.00 | 0.61 | yes |"]
    assert "| JSA, no cache − JSA, cache from epoch 30 | 50 | -0.40 | 0.43 | no |" in lines
    assert "| RWS − JSA, cache from epoch 30 | 30 | +1.20 | 0.43 | yes |" in lines
    (tmp_path / "runs").mkdir()
    for runs in by_arm.values():
        for r in runs:
            (tmp_path / "runs" / f"{r['name']}.json").write_text(json.dumps(r))
    by_arm["jsa-cache"][0]["command"] = "python train.py model=jsa model.cache_start_epoch=30 model.cache_refresh=0.2"
    by_arm["jsa-cache"][1]["command"] = by_arm["jsa-cache"][0]["command"]
    for runs in by_arm.values():
        for r in runs:
            (tmp_path / "runs" / f"{r['name']}.json").write_text(json.dumps(r))
    resumed = by_arm["rws"][1]  # resumed at epoch 2: the epoch is logged twice, the recorded seconds are the last stretch
    resumed["epoch_time_s"] = [[9, 600.0], [19, 900.0], [19, 30.0], [29, 30.0]]
    (tmp_path / "runs" / f"{resumed['name']}.json").write_text(json.dumps(resumed))
    report = long_study.write_report(args).read_text()
    # 600 + 30 + 30 s of epochs (the repeated epoch's last time) = 11 min, against 1 min recorded
    assert ("Resumed runs, whose minutes above count only the stretch after their last resume: mnist-rws-s1 1 min recorded, "
            "its epochs 11 min in all (the longest 15 min") in report
    # Holm over every test of the tables: 3 test-NLL differences and 3 at each of the 2 val epochs
    family = [line for line in report.splitlines() if line.startswith(("| test NLL |", "| val NLL, epoch"))]
    assert len(family) == 9 and "Every test of the difference tables above (9)" in report
    from scipy.stats import ttest_ind

    p = ttest_ind([100 - 0.2 * 30 + 1.0, 100 - 0.2 * 30 + 1.2], [100 - 0.22 * 30, 100 - 0.22 * 30 + 0.2]).pvalue
    assert f"| val NLL, epoch 30 | RWS − JSA, no cache | {p:.3f} |" in report  # as above: +1.60 at epoch 30
    # the test NLL is 80 in every run: no spread, no test (–), and Holm counts the 6 tests made
    assert sum(line.endswith("| – | – |") for line in family) == 3
    made = [line for line in family if not line.endswith("| – | – |")]
    assert min(float(line.split("|")[-2]) for line in made) == pytest.approx(min(float(line.split("|")[-3]) for line in made) * 6, abs=0.01)
    assert "| JSA, cache from epoch 30 (model.cache_refresh=0.2) | 2 |" in report  # as trained, --cache-arm not given
    assert "| RWS | 2 | 80.00 ± 0.00 | 91.10 ± 0.14 | 50, 50 | 2 of 2 | 4.00 ± 0.00 |" in report  # 20 epochs at 1/5 a nat each
    assert (tmp_path / "long_curves.png").stat().st_size > 0


def test_a_finished_runs_is_measurement_is_kept_and_not_redone_and_a_run_without_logs_is_named(tmp_path, capsys, monkeypatch):
    """benchmarks/lib/at_checkpoints.py: measure_finished_runs: each wanted, unmeasured run once, from its best checkpoint;
    one whose logs are gone is named and skipped; a second pass measures nothing again, and a pass on another device
    measures every run again."""
    from benchmarks.lib import at_checkpoints

    (tmp_path / "runs").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "runs" / f"{name}.json").write_text(json.dumps({"name": name, "command": "python train.py", "arm": name}))
    measured = []

    def best_checkpoint(log_dir):
        if log_dir.name == "b":
            raise SystemExit("no checkpoint under b")
        return log_dir / "best.ckpt"

    monkeypatch.setattr(at_checkpoints, "best_checkpoint", best_checkpoint)
    monkeypatch.setattr(at_checkpoints, "is_resolution", lambda runs, images, counts, device: measured.extend(runs) or
                        {"is_resolution": {name: {str(k): {"nll": [1.0], "device": device} for k in counts} for name in runs}})
    for _ in range(2):
        at_checkpoints.measure_finished_runs(tmp_path, tmp_path / "logs", lambda r: r["arm"] != "c", 1, [5000, 100])
    assert measured == ["a"]
    kept = json.loads((tmp_path / "is-resolution.json").read_text())
    assert kept["settings"] == {"images": 1, "samples": [100, 5000], "device": "cpu"} and list(kept["runs"]) == ["a"]
    assert capsys.readouterr().out.count("IS resolution of b: skipped (no checkpoint under b)") == 2

    at_checkpoints.measure_finished_runs(tmp_path, tmp_path / "logs", lambda r: r["arm"] != "c", 1, [5000, 100], "cuda")
    kept = json.loads((tmp_path / "is-resolution.json").read_text())
    assert measured == ["a", "a"] and kept["settings"]["device"] == "cuda" and kept["runs"]["a"]["100"]["device"] == "cuda"


def test_a_record_written_meanwhile_by_another_machine_is_not_redone(tmp_path):
    started = []

    def run(name: str) -> dict:
        started.append(name)
        (tmp_path / "b.json").write_text("{}")  # another machine (--only) finishes b while this one runs a
        return {}

    runner.run_pending(["a", "b", "c"], tmp_path, run, lambda record: "")
    assert started == ["a", "c"] and (tmp_path / "b.json").read_text() == "{}"


def test_reports_say_which_machine_made_each_run_and_its_minutes_apart():
    records = [{"name": "a", "seconds": 2640.0, "machine": "AMD EPYC, 2 cores"}, {"name": "b", "seconds": 186.0, "machine": "NVIDIA H200"},
               {"name": "c", "seconds": 2700.0, "machine": "AMD EPYC, 2 cores"}]
    assert runner.minutes_by_machine(records) == "44 (AMD EPYC); 3.1 (H200)"
    assert runner.machines_line(records) == "Made on: AMD EPYC, 2 cores: 2 (a, c); NVIDIA H200: 1 (b)."
    assert runner.machines_line(records[:1]) == "Made on: AMD EPYC, 2 cores: all 1."
    assert runner.machines_line([{"name": "d", "seconds": 60.0}]) == "Made on: machine not recorded: all 1."  # not assumed


def test_the_priors_second_stage_waits_for_the_first_stages_record_in_two_lanes(tmp_path, monkeypatch):
    """benchmarks/studies/prior_study.py with --lanes 2: the VQ-VAE's second stage starts from the first stage's last checkpoint,
    so it starts only once that run's record is written, though a lane is free before."""
    import threading
    import time

    from benchmarks.studies import prior_study as priors

    out, logs = tmp_path / "out", tmp_path / "logs"
    (out / "runs").mkdir(parents=True)
    (out / "cost.json").write_text("{}")  # the cost table counts as measured: runs only
    finished, started = [], {}
    lock = threading.Lock()

    def fake_train(name, overrides, log_dir):
        with lock:
            started[name] = list(finished)  # which runs had finished when this one started
        time.sleep(0.3 if name == priors.STAGE1 else 0.05)
        with lock:
            finished.append(name)
        return log_dir, 0.0, f"python train.py {' '.join(overrides)}"

    monkeypatch.setattr(priors.runner, "train", fake_train)
    monkeypatch.setattr(priors, "read_curves", lambda run_dir: {"curves": {"nll": [[1, 100.0]]}, "epoch_time_s": [1.0]})
    # The stage-1 run's last.ckpt exists once that run has finished (and not before).
    monkeypatch.setattr(priors.runner, "last_checkpoint", lambda log_dir: log_dir / "last.ckpt" if log_dir.name in finished else None)
    priors.main(["--lanes", "2", "--seeds", "1", "--only", f"{priors.STAGE1},*stage2*", "--out", str(out), "--logs", str(logs)])
    assert started == {priors.STAGE1: [], priors.STAGE2: [priors.STAGE1]}
    assert "model.autoencoder_checkpoint=" + str(logs / priors.STAGE1 / "last.ckpt") in json_command(out, priors.STAGE2)


def json_command(out, name):
    import json

    return json.loads((out / "runs" / f"{name}.json").read_text())["command"]


def test_the_priors_study_refuses_an_only_that_matches_nothing_before_measuring(tmp_path, capsys):
    import pytest

    from benchmarks.studies import prior_study as priors

    with pytest.raises(SystemExit):
        priors.main(["--only", "nope-*", "--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs")])
    assert "--only nope-*: no planned run matches" in capsys.readouterr().err
    assert not (tmp_path / "out" / "cost.json").exists()  # the cost table was not measured first


@pytest.mark.parametrize("study", ["field.study", "jsa_study", "cache.study", "long_study", "prior_study"])
def test_every_study_refuses_a_file_for_out_or_logs_and_an_empty_report_before_writing(study, tmp_path, capsys):
    """One line each, and nothing written: an --out or --logs that is a file (or lies under one), and --report-only
    on a folder without records (a mistyped --out gave an empty report)."""
    import importlib

    main = importlib.import_module(f"benchmarks.studies.{study}").main
    a_file = tmp_path / "afile"
    a_file.write_text("")
    for option in (["--out", str(a_file)], ["--logs", str(a_file / "logs")]):
        with pytest.raises(SystemExit):
            main(option)
        assert "is a file; expected a directory to write in" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"^--report-only: no records under .*nowhere/runs"):
        main(["--report-only", "--out", str(tmp_path / "nowhere")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_corrupt_record_is_skipped_with_one_line_naming_it(tmp_path, capsys):
    """A record that is not one leaves the report (as if its run had not finished), named in one line (a
    bad record does not take the whole report down)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "a.json").write_text(json.dumps({"name": "a"}))
    (runs / "b.json").write_text("{")
    assert runner.read_records(tmp_path) == {"a": {"name": "a"}}
    assert re.search(r"^skipped .*b\.json: not a readable record \(JSONDecodeError", capsys.readouterr().out, re.M)
    (runs / "b.json").write_text("[1, 2]")
    assert runner.read_records(tmp_path) == {"a": {"name": "a"}}
    assert re.search(r"^skipped .*b\.json: not a record \(a JSON object expected, found list\)", capsys.readouterr().out, re.M)
    with pytest.raises(SystemExit, match=r"b\.json: not a record"):  # read alone (a study's own file), it still refuses
        runner.read_json(runs / "b.json")
    (runs / "b.json").unlink()
    assert runner.read_records(tmp_path, report_only=True) == {"a": {"name": "a"}}


def test_only_patterns_drop_spaces_refuse_empty_ones_and_name_those_that_match_nothing(tmp_path, capsys):
    assert runner.patterns("main-vae-s0, main-jsa-*") == ["main-vae-s0", "main-jsa-*"]
    with pytest.raises(Exception, match="an empty pattern"):
        runner.patterns("main-vae-s0,,x")
    ran = []
    runner.run_pending(["a", "b"], tmp_path, lambda name: ran.append(name) or {"name": name}, lambda r: "", only=["a", "zzz"])
    assert ran == ["a"] and "'zzz' matches no planned run" in capsys.readouterr().out


def test_the_cache_studys_remedy_arms_set_their_options():
    """Each remedy arm reads the cache from the middle of the run and sets its one remedy; the plan runs seed 0 of
    every remedy (the ρ scan) and the other seeds of q_states=fresh and of the chosen ρ only."""
    import argparse

    from benchmarks.studies.cache import study as cache_study

    assert cache_study.cache_overrides("middle-fresh", 30) == ["model.cache_start_epoch=15", "model.q_states=fresh"]
    assert cache_study.cache_overrides("middle-refresh0.05", 30) == ["model.cache_start_epoch=15", "model.cache_refresh=0.05"]
    assert cache_study.cache_overrides("never", 30) == ["model.use_cache=false"]
    args = argparse.Namespace(seeds=3, small_l_seeds=1, models=list(cache_study.MODELS), refresh=0.5)
    names = [name for name, *_ in cache_study.plan(args)]
    assert {f"bern200-middle-refresh{r}-s0" for r in cache_study.REFRESH_RATES} <= set(names)
    assert "L20-middle-refresh0.5-s2" in names and "L20-middle-refresh0.2-s2" not in names and "bern200-middle-fresh-s1" in names
    assert len(names) == len(set(names))


def test_the_is_measurement_on_a_missing_gpu_is_one_line(monkeypatch):
    """--is-device cuda where there is none: one line naming the option, before any checkpoint is read."""
    import torch

    from benchmarks.lib import at_checkpoints

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="^error: --is-device cuda: no CUDA device on this machine$"):
        at_checkpoints.is_resolution({"a": (Path("nowhere.ckpt"), "python train.py")}, 1, [10], device="cuda")


def test_the_cache_studys_first_runs_of_a_rerun_arm_are_reported_beside_the_reruns(tmp_path):
    """benchmarks/studies/cache/study.py: the records under --out/first-runs (runs trained again, their first records
    kept) get rows of their own in the arm table and the difference tables, named "<arm>, first runs", and the report
    names the files; the reruns' rows are unchanged."""
    from benchmarks.studies.cache import study as cache_study

    def record(arm: str, seed: int, nll: float) -> dict:
        return {"name": f"L20-{arm}-s{seed}", "model": "L20", "arm": arm, "seed": seed, "epochs": 30, "seconds": 60.0,
                "command": "python train.py", "machine": "NVIDIA H200", "test": {"nll": nll, "elbo": -nll - 20},
                "curves": {"nll": [[274, nll + 5], [8249, nll + 4]], "acceptance_rate": [[0, 0.2]]}}

    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "first-runs").mkdir()
    for seed, (never, middle, rerun, first) in enumerate([(80.0, 79.0, 79.5, 80.5), (80.2, 79.2, 79.7, 80.7)]):
        for arm, nll in (("never", never), ("middle", middle), ("middle-refresh0.2", rerun)):
            (out / "runs" / f"L20-{arm}-s{seed}.json").write_text(json.dumps(record(arm, seed, nll)))
        (out / "first-runs" / f"L20-middle-refresh0.2-s{seed}.json").write_text(json.dumps(record("middle-refresh0.2", seed, first)))
    cache_study.main(["--report-only", "--out", str(out), "--logs", str(tmp_path / "logs"), "--models", "L20"])
    report = (out / "report.md").read_text()
    assert "| categorical 20×10, L = 20 | middle-refresh0.2 | 2 | 79.60 ± 0.14 |" in report
    assert "| categorical 20×10, L = 20 | middle-refresh0.2, first runs | 2 | 80.60 ± 0.14 |" in report
    assert "| categorical 20×10, L = 20 | middle-refresh0.2 | never | -0.50 |" in report
    assert "| categorical 20×10, L = 20 | middle-refresh0.2, first runs | never | +0.50 |" in report
    assert "| categorical 20×10, L = 20 | middle-refresh0.2, first runs | middle | +1.50 |" in report
    assert "(first-runs/: L20-middle-refresh0.2-s0, L20-middle-refresh0.2-s1)" in report


@pytest.mark.slow
def test_runs_that_differ_in_their_seed_alone_train_as_replicas_of_one_process(tmp_path, monkeypatch):
    """--replicas-per-process 2: seeds 0 and 1 of one configuration train in one train.py process, seed 0 of another
    alone; every run's record is made from its own TensorBoard run as before, and a rerun trains nothing again."""
    import argparse

    from benchmarks.lib.packing import PACKED
    from tests import preloaded

    preloaded.studies_fork_train_py(monkeypatch)

    tiny = ["data.val_size=59900", "data.batch_size=50", "trainer.max_epochs=1", "trainer.limit_val_batches=1",
            "model.val_num_samples=2", "model.num_latents=4", "model.mis_steps=3", "~callbacks.image_grids"]
    plan = [("a-s0", "3", 0), ("a-s1", "3", 1), ("b-s0", "4", 0)]
    args = argparse.Namespace(out=tmp_path / "out", logs=tmp_path / "logs", lanes=1, only=None, replicas_per_process=2)
    (args.out / "runs").mkdir(parents=True)

    def overrides(steps: str, seed: int) -> list[str]:
        return [*tiny, f"model.mis_steps={steps}", f"seed={seed}"]

    def run_job(name, steps, seed, args):
        run_dir, seconds, command = runner.train(name, overrides(steps, seed), args.logs / name)
        return {"name": name, "run": str(run_dir.relative_to(args.logs)), "seconds": seconds, "command": command}

    runner.run_plan(plan, run_job, args, train_request=lambda name, steps, seed, args: (overrides(steps, seed), args.logs / name))
    records = {name: json.loads((args.out / "runs" / f"{name}.json").read_text()) for name, *_ in plan}
    assert (args.logs / "a-s0" / PACKED).exists() and (args.logs / "a-s1" / PACKED).exists()
    assert not (args.logs / "b-s0" / PACKED).exists()
    assert "replicas.seeds=[0,1]" in records["a-s0"]["command"] and records["a-s0"]["command"] == records["a-s1"]["command"]
    for name in ("a-s0", "a-s1", "b-s0"):
        run = args.logs / records[name]["run"]
        assert list(run.glob("events.out.tfevents.*")) and (run / "checkpoints" / "last.ckpt").exists(), name
    log = (args.logs / "packs" / "a-s0-x2" / "train.log").read_text()
    assert log.count("$ ") == 1
    for name, *_ in plan:
        (args.out / "runs" / f"{name}.json").unlink()
    runner.run_plan(plan, run_job, args, train_request=lambda name, steps, seed, args: (overrides(steps, seed), args.logs / name))
    assert (args.logs / "packs" / "a-s0-x2" / "train.log").read_text() == log  # packed before: not trained again


def test_a_replicated_process_starts_from_its_trunk_resumes_from_its_own_checkpoint_and_hands_each_run_over(tmp_path, monkeypatch):
    """packing.train_process: from `start_from` until the process has a last.ckpt of its own (written at a validation),
    then from that one (a process cut by a timeout goes on where it stopped); a fresh start first removes what a process
    cut before its first checkpoint left. hand_over moves a replica's run once, and finds it where it lies after."""
    from benchmarks.lib import packing

    process_dir, commands, found = tmp_path / "process", [], []

    def fake_train(cmd, **kwargs):
        commands.append(cmd)
        found.append(sorted(p.name for p in process_dir.glob("tensorboard/*")))  # what the process finds at its start
        run = process_dir / "tensorboard" / "jsa-seed3-cache_start_epoch2" / "version_0"
        run.mkdir(parents=True, exist_ok=True)
        if len(commands) > 1:  # the first try is cut before its first checkpoint
            (process_dir / "replicas" / "jsa" / "t-1" / "checkpoints").mkdir(parents=True, exist_ok=True)
            (process_dir / "replicas" / "jsa" / "t-1" / "checkpoints" / "last.ckpt").write_text("saved")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(packing.subprocess, "run", fake_train)
    trunk = tmp_path / "trunk" / "last.ckpt"
    for _ in range(3):
        seconds, shown = packing.train_process("arms", ["replicas.seeds=[3]", "trainer.max_epochs=4"], process_dir, runner.run_lock, trunk)
    own = process_dir / "replicas" / "jsa" / "t-1" / "checkpoints" / "last.ckpt"
    assert [cmd[-1] for cmd in commands] == [f"ckpt_path={trunk}", f"ckpt_path={trunk}", f"ckpt_path={own}"]
    assert found == [[], [], ["jsa-seed3-cache_start_epoch2"]]  # a fresh start's leftovers removed, a resumed run kept
    assert shown == "python train.py 'replicas.seeds=[3]' trainer.max_epochs=4" and seconds >= 0
    assert packing.process_checkpoint(process_dir) == own
    moved = packing.hand_over(process_dir, "*-seed3-cache_start_epoch2", tmp_path / "run")
    assert moved == tmp_path / "run" / "tensorboard" / "jsa-seed3-cache_start_epoch2" / "version_0" and moved.is_dir()
    assert packing.hand_over(process_dir, "*-seed3-cache_start_epoch2", tmp_path / "run") == moved
    assert not (process_dir / "tensorboard" / "jsa-seed3-cache_start_epoch2" / "version_0").exists()
    with pytest.raises(SystemExit, match=r"process: expected one replica run tensorboard/\*-seed4/version_0 from its process, found 0"):
        packing.hand_over(process_dir, "*-seed4", tmp_path / "run4")


def test_a_failed_replicated_process_is_one_line_naming_its_log(tmp_path, monkeypatch):
    from benchmarks.lib import packing

    monkeypatch.setattr(packing.subprocess, "run", lambda cmd, **kwargs: subprocess.CompletedProcess(cmd, 2))
    with pytest.raises(SystemExit, match=r"^rws-s0-4 failed \(exit 2\); its output: .*/process/train.log$"):
        packing.train_process("rws-s0-4", ["model=rws"], tmp_path / "process", runner.run_lock)


def users_folder(tmp_path: Path) -> Path:
    """A folder of the user's that a received study folder links to: an unfinished run's leftovers and a note."""
    users = tmp_path / "users-folder"
    (users / "tensorboard" / "x" / "version_0").mkdir(parents=True)
    (users / "tensorboard" / "x" / "version_0" / "notes.txt").write_text("years of work")
    (users / "replicas").mkdir()
    (users / "replicas" / "notes.txt").write_text("years of work")
    return users


def untouched(users: Path) -> bool:
    return sorted(p.relative_to(users).as_posix() for p in users.rglob("*")) == [
        "replicas", "replicas/notes.txt", "tensorboard", "tensorboard/x", "tensorboard/x/version_0",
        "tensorboard/x/version_0/notes.txt"]


def test_a_run_folder_that_links_out_of_logs_is_refused_and_nothing_there_is_removed(tmp_path, monkeypatch):
    """A received --logs whose run folder is a link to the user's folder: a single run, and a replicated process, are
    refused in one line before their leftovers are removed (or anything is trained or written there)."""
    from benchmarks.lib import packing

    users = users_folder(tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "r").symlink_to(users)
    monkeypatch.setattr(runner, "run_train_py", lambda *a: pytest.fail("trained"))
    monkeypatch.setattr(packing, "run_train_py", lambda *a: pytest.fail("trained"))
    with pytest.raises(SystemExit, match=f"^{tmp_path}/logs/r leads through a symbolic link to {users}, outside {tmp_path}/logs"):
        runner.train("r", [], tmp_path / "logs" / "r")
    with pytest.raises(SystemExit, match="leads through a symbolic link"):
        packing.train_process("r", [], tmp_path / "logs" / "r", runner.run_lock)
    assert untouched(users)


@pytest.mark.parametrize("study", ["jsa_study", "prior_study"])
def test_a_records_folder_that_links_out_of_out_is_refused_before_anything_is_written(study, tmp_path):
    import importlib

    users = users_folder(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "runs").symlink_to(users)
    with pytest.raises(SystemExit, match=f"^{tmp_path}/out/runs leads through a symbolic link to {users}"):
        importlib.import_module(f"benchmarks.studies.{study}").main(["--report-only", "--out", str(tmp_path / "out"),
                                                                        "--logs", str(tmp_path / "logs")])
    assert untouched(users) and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["runs"]


def test_a_json_file_of_another_kind_among_the_records_is_skipped_naming_it(tmp_path, capsys):
    """A runs/ folder holding a measurement's file, or a record renamed, beside a run's record: each left out in one
    line naming it (a report, and the measurements of finished runs, read the others)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "a.json").write_text(json.dumps({"name": "a", "seconds": 1.0}))
    (runs / "is-resolution.json").write_text(json.dumps({"settings": {"images": 500}, "runs": {}}))
    (runs / "b.json").write_text(json.dumps({"name": "../../elsewhere"}))
    assert runner.read_records(tmp_path) == {"a": {"name": "a", "seconds": 1.0}}
    out = capsys.readouterr().out.splitlines()
    assert out == [f"skipped {runs}/b.json: its 'name' is '../../elsewhere', not 'b': not a run's record (a JSON file of "
                   "another kind); delete it to run it again",
                   f"skipped {runs}/is-resolution.json: its 'name' is 'None', not 'is-resolution': not a run's record (a "
                   "JSON file of another kind); delete it to run it again"]
