"""The field study's plan (benchmarks/studies/field/study.py): a Fashion-MNIST arm gets three seeds when its seed-0 test NLL
is within CLOSE nats of an arm it is compared with, and one otherwise; the study adds those seeds in the same
invocation, once the seed-0 records exist."""

from __future__ import annotations

from benchmarks.studies.field import plan as field_study_plan, study as field_study

# Seed-0 Fashion-MNIST test NLLs: JSA and RWS (uniform) 0.5 apart, VIMCO 2 nats from JSA; with the MADE prior JSA
# and RWS 3 apart, and each 3 or more from its uniform arm.
SEED0 = {("jsa", "uniform"): 90.0, ("rws", "uniform"): 90.5, ("vimco", "uniform"): 92.0,
         ("jsa", "autoregressive"): 86.0, ("rws", "autoregressive"): 89.0, ("vimco", "autoregressive"): 95.0}


def fake_run(job: field_study_plan.Job, args) -> dict:
    """A training job's record, its test NLL from SEED0 (+0.1 per seed); no training."""
    return {"name": job.name, "kind": job.kind, "data": job.data, "model": job.model, "prior": job.prior,
            "seed": job.seed, "seconds": 0.0, "test": {"nll": SEED0[(job.model, job.prior)] + 0.1 * job.seed}}


def test_close_fashion_arms_get_three_seeds_in_the_same_invocation(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(field_study, "run_job", lambda job, args: ran.append(job.name) or fake_run(job, args))
    monkeypatch.setattr(field_study, "write_report", lambda args: tmp_path / "report.md")
    field_study.main(["--datasets", "fashion_mnist", "--models", "jsa,rws,vimco", "--out", str(tmp_path / "out"),
                      "--logs", str(tmp_path / "logs")])
    seed0 = [f"fashion_mnist-{m}-{p}-s0" for m, p in field_study_plan.FASHION_ARMS if m in ("jsa", "rws", "vimco")]
    close = ["fashion_mnist-jsa-uniform", "fashion_mnist-rws-uniform"]
    assert ran == seed0 + [f"{arm}-s{s}" for s in (1, 2) for arm in close]
    written = {p.stem for p in (tmp_path / "out" / "runs").glob("*.json")}
    assert written == set(ran)

    # Run again: every record exists, nothing runs, and the plan still holds the extra seeds.
    ran.clear()
    field_study.main(["--datasets", "fashion_mnist", "--models", "jsa,rws,vimco", "--out", str(tmp_path / "out"),
                      "--logs", str(tmp_path / "logs")])
    assert ran == []


def test_close_arms_reads_only_seed_0_of_its_data_set(tmp_path):
    records = {f"fashion_mnist-{m}-{p}-s0": fake_run(field_study_plan.Job(f"fashion_mnist-{m}-{p}-s0", "train", "fashion_mnist",
                                                                      m, p, 0), None) for m, p in SEED0}
    assert field_study_plan.close_arms(records, "fashion_mnist") == {"fashion_mnist-jsa-uniform", "fashion_mnist-rws-uniform"}
    assert field_study_plan.close_arms(records, "mnist") == set()
    # A later seed far from its seed 0 changes nothing: the rule reads seed 0.
    records["fashion_mnist-vimco-uniform-s1"] = {**records["fashion_mnist-vimco-uniform-s0"], "seed": 1,
                                                "test": {"nll": 90.2}}
    assert field_study_plan.close_arms(records, "fashion_mnist") == {"fashion_mnist-jsa-uniform", "fashion_mnist-rws-uniform"}


def test_the_is_resolution_table_pairs_each_run_with_jsa_over_the_same_images():
    from benchmarks.studies.field import report as field_study_report

    # Per-image NLLs at K = 10 and 100: RWS is 1 nat below JSA on every image at K = 10, 2 nats at K = 100.
    # RWS first: the pairing is with the JSA run wherever it stands.
    record = {"is_resolution": {
        "mnist-rws-uniform-s0": {"10": {"nll": [79.0, 81.0, 89.0], "elbo": [-97.0] * 3},
                                 "100": {"nll": [77.0, 79.0, 87.0], "elbo": [-97.0] * 3}},
        "mnist-jsa-uniform-s0": {"10": {"nll": [80.0, 82.0, 90.0], "elbo": [-95.0] * 3},
                                 "100": {"nll": [79.0, 81.0, 89.0], "elbo": [-95.0] * 3}}}}
    lines = field_study_report.is_resolution(record)
    assert "| mnist-rws-uniform-s0 | -1.00 ± 0.00 | -2.00 ± 0.00 |" in lines
    assert "| mnist-jsa-uniform-s0 | 84.00 | 83.00 | 95.00 | +1.000 ± 0.000 |" in lines


def test_equal_time_reads_every_run_at_the_shortest_and_the_median_training_time():
    from benchmarks.studies.field import report as field_study_report

    spe = 10  # steps per epoch; a validation after every epoch (its logged step is the epoch's last batch)

    def run(name, model, ms, nlls, kind="train"):
        curve = [[epoch * spe - 1, v] for epoch, v in enumerate(nlls, 1)]
        return {"name": name, "kind": kind, "data": "mnist", "model": model, "prior": "uniform", "seed": 0,
                "epochs": len(nlls), "curves": {"nll": curve}}

    # At 6000 ms per step an epoch is one minute: JSA trains 3 min, RWS 6 (at 2 min an epoch), VIMCO 12. VIMCO's val
    # NLL rises at its second validation: the best within the time, not the last, is read.
    records = {"measure-step-cost": {"ms_per_step": {"mnist-jsa-uniform-s0": 6000, "mnist-rws-uniform-s0": 12000,
                                                     "mnist-vimco-uniform-s0": 18000}},
               "mnist-jsa-uniform-s0": run("mnist-jsa-uniform-s0", "jsa", 6000, [90, 85, 80]),
               "mnist-rws-uniform-s0": run("mnist-rws-uniform-s0", "rws", 12000, [88, 84, 79]),
               "mnist-vimco-uniform-s0": run("mnist-vimco-uniform-s0", "vimco", 18000, [87, 89, 78, 77])}
    budgets, lines = field_study_report.equal_time(records, spe)
    assert budgets == [3.0, 6.0]  # the shortest run (JSA) and the median (RWS)
    assert "| JSA, uniform prior | 3.0 | 80.00 (3.0) | 80.00 (3.0) (its run stopped sooner) |" in lines
    assert "| RWS, uniform prior | 6.0 | 88.00 (2.0) | 79.00 (6.0) |" in lines
    assert "| VIMCO, uniform prior | 12.0 | 87.00 (3.0) | 87.00 (3.0) |" in lines


def test_the_t_threshold_uses_students_quantile_at_every_number_of_seeds():
    """t × s.e. of the seed comparisons: Student's exact 97.5% quantile (computed without scipy, which is only a test
    dependency, and equal to scipy's to 1e-9 at every number of degrees of freedom: 2.776, not a rounded 2.78, at
    three seeds a side), times the pooled s.e.; the t CDF it inverts matches scipy's on both tails."""
    import math

    from scipy.stats import t

    from benchmarks.lib.stats import student_t_cdf, t_975, t_threshold

    for dof in [*range(1, 40), 50, 75, 100, 250, 1000]:
        assert abs(t_975(dof) - t.ppf(0.975, dof)) < 1e-9, dof
    for dof in (1, 2, 4, 9, 30):
        for x in (-40.0, -3.0, -1.2, 0.0, 0.7, 2.5, 12.0):
            assert abs(student_t_cdf(x, dof) - t.cdf(x, dof)) < 1e-12, (x, dof)
    # 7 seeds a side: 12 degrees of freedom; equal sds give the pooled sd itself
    assert math.isclose(t_threshold(0.5, 7, 0.5, 7), t.ppf(0.975, 12) * 0.5 * math.sqrt(2 / 7), rel_tol=1e-9)
    assert math.isnan(t_threshold(0.5, 1, 0.5, 3))


def test_the_report_says_the_plan_may_grow_while_a_fashion_seed_0_run_is_missing(tmp_path, monkeypatch):
    """Its record count is 'N of M so far', and 'all M' once done; M can still grow while a Fashion-MNIST seed-0 run
    is to come (it may land within CLOSE of another arm and add seeds), and the report says so until none is missing."""
    def full_record(job, args):  # with what the report's tables read
        record = fake_run(job, args)
        record["test"]["elbo"] = -record["test"]["nll"] - 10
        return {**record, "epochs": 30, "curves": {"nll": [[30 * 275 - 1, record["test"]["nll"] + 1]], "acceptance_rate": []}}

    monkeypatch.setattr(field_study, "run_job", full_record)
    argv = ["--datasets", "fashion_mnist", "--models", "jsa,rws,vimco", "--out", str(tmp_path / "out"),
            "--logs", str(tmp_path / "logs")]
    field_study.main([*argv, "--only", "fashion_mnist-jsa-uniform-s0"])
    assert "the plan grows if" in (tmp_path / "out" / "report.md").read_text()
    field_study.main(argv)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "(all 10 records)" in report  # 6 seed-0 runs; seeds 1, 2 of the close JSA and RWS, uniform prior


def test_mnist_beside_fashion_ranks_the_arms_on_each_data_set_by_seed_0_and_by_mean():
    from benchmarks.studies.field import report as field_study_report

    def record(data, model, seed, nll):
        return {"name": f"{data}-{model}-uniform-s{seed}", "kind": "train", "data": data, "model": model, "prior": "uniform",
                "seed": seed, "test": {"nll": nll, "elbo": -nll - 10}}

    # MNIST: JSA ahead at seed 0 and on the mean. Fashion: RWS ahead at seed 0, JSA ahead on the mean of 3 seeds.
    # VIMCO has no Fashion run: it is left out of both rankings.
    rows = [record("mnist", "jsa", s, 80 + s) for s in range(3)] + [record("mnist", "rws", s, 81 + s) for s in range(3)]
    rows += [record("mnist", "vimco", 0, 70.0)]
    rows += [record("fashion_mnist", "jsa", s, v) for s, v in enumerate([121.0, 118.0, 118.0])]
    rows += [record("fashion_mnist", "rws", s, v) for s, v in enumerate([120.0, 120.0, 120.0])]
    lines = field_study_report.across_data_sets({r["name"]: r for r in rows})
    assert lines[2] == "| JSA, uniform prior | 81.00 ± 1.00 (3) | 1 / 1 | 10.00 | 119.00 ± 1.73 (3) | 2 / 1 | 10.00 |"
    assert lines[3] == "| RWS, uniform prior | 82.00 ± 1.00 (3) | 2 / 2 | 10.00 | 120.00 ± 0.00 (3) | 1 / 2 | 10.00 |"
    assert len(lines) == 4 and field_study_report.across_data_sets({r["name"]: r for r in rows[:6]}) == []


def test_a_gpu_step_cost_is_a_record_of_its_own_beside_the_cpus(tmp_path, monkeypatch):
    """--cost-device cuda plans measure-step-cost-cuda and hands the device to the timing; the CPU record (the
    equal-time runs' time axis) keeps its name."""
    measured = []
    monkeypatch.setattr(field_study, "write_report", lambda args: tmp_path / "report.md")
    monkeypatch.setattr(field_study, "run_job", lambda job, args: measured.append((job.name, args.cost_device)) or
                        {"name": job.name, "kind": job.kind})
    common = ["--datasets", "mnist", "--models", "jsa", "--out", str(tmp_path / "out"), "--logs", str(tmp_path / "logs")]
    field_study.main(common + ["--cost-device", "cuda", "--only", "measure-step-cost*"])
    assert measured == [("measure-step-cost-cuda", "cuda")]
    field_study.main(common + ["--only", "measure-step-cost*"])
    assert measured[1:] == [("measure-step-cost", "cpu")]
