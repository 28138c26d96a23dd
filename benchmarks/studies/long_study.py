"""Is JSA's deficit to RWS a 30-epoch artefact? JSA without its cache, JSA with a cache setting, and RWS under the JSA
paper's protocol for --epochs (default 100), three seeds each, on MNIST (the arms and the report:
benchmarks/results/long-study/README.md).

    python -m benchmarks.studies.long_study                   # every run (resumable), then the report
    python -m benchmarks.studies.long_study --report-only     # the report from the finished runs
    python -m benchmarks.studies.long_study --is-resolution   # only the finished runs' IS-NLL at 100, 1000, 5000 samples
    python -m benchmarks.studies.long_study --arms jsa-never,rws --lanes 2 --logs /scratch/long-study
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks.lib import markdown, runner
from benchmarks.lib.plots import curve_grid
from benchmarks.lib.records import epoch_of, read_curves
from benchmarks.lib.stats import difference_cells, fmt, holm, two_sample_p
from benchmarks.studies.cache.study import DIAGNOSTICS
from common.files import read_regular, write_file

LAST_STRETCH = 20  # epochs: a run still falling over its last 20 has not converged
CACHE_START = 0.6  # of the run: the paper's `start = 300` of 500 epochs
ARMS = ("jsa-never", "rws", "jsa-cache")
PAIRS = (("rws", "jsa-never"), ("rws", "jsa-cache"), ("jsa-never", "jsa-cache"))  # the differences each table gives


def arms(args: argparse.Namespace) -> dict[str, tuple[str, list[str]]]:
    """arm -> (label, train.py overrides)."""
    return {
        "jsa-never": ("JSA, no cache", ["model=jsa", "model.use_cache=false"]),
        "jsa-cache": (f"JSA, cache from epoch {int(CACHE_START * args.epochs)}" + (f" ({' '.join(args.cache_arm)})" if args.cache_arm else ""),
                      ["model=jsa", f"model.cache_start_epoch={int(CACHE_START * args.epochs)}", *args.cache_arm]),
        "rws": ("RWS", ["model=rws"]),
    }


def plan(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(run name, arm, seed): seed 0 of every arm first, then seeds 1, 2, ..."""
    return [(f"mnist-{arm}-s{seed}", arm, seed) for seed in range(args.seeds) for arm in args.arms]


def overrides(arm: str, seed: int, args: argparse.Namespace) -> list[str]:
    return ["experiment=jsa_paper", f"seed={seed}", f"trainer.max_epochs={args.epochs}",
            f"trainer.check_val_every_n_epoch={args.val_every}", f"model.val_num_samples={args.val_samples}",
            *arms(args)[arm][1], *args.extra]


def run_job(name: str, arm: str, seed: int, args: argparse.Namespace) -> dict:
    run_dir, seconds, command = runner.train(name, overrides(arm, seed, args), args.logs / name)
    record = {"name": name, "arm": arm, "seed": seed, "epochs": args.epochs, "command": command, "seconds": seconds}
    return {**record, **read_curves(run_dir, extra_tags=[f"train/{tag}" for tag in DIAGNOSTICS])}


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{values[0]:.2f} (1 seed)" if len(values) == 1 else f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def differences(values: dict[str, list[float]], labels: dict, family: list | None = None, measure: str = "") -> list[list[str]]:
    """The cells of a table row "a − b" for each of the PAIRS with values on both sides: the difference of the seed
    means, the t-test's 95 % threshold and whether the difference passes it. Each test is added to `family` as
    (measure, difference, a, b), so that the report can correct for all of its tests at once (`family_lines`)."""
    rows = []
    for a, b in PAIRS:
        if values.get(a) and values.get(b):
            rows.append([f"{labels[a][0]} − {labels[b][0]}", *difference_cells(values[a], values[b])])
            if family is not None:
                family.append((measure, f"{labels[a][0]} − {labels[b][0]}", values[a], values[b]))
    return rows


def family_lines(family: list) -> list[str]:
    """Every difference the report's tables test, with its two-sided p (the same pooled t-test) and its p adjusted by
    Holm's method over all of them: a difference a single table calls beyond the seed noise is one of many tests."""
    if not family:
        return []
    p_values = [two_sample_p(a, b) for *_, a, b in family]
    adjusted = holm(p_values)
    lines = ["", f"Every test of the difference tables above ({len(family)}), with its p and its p adjusted by Holm's method over "
             f"all {len(family)} (a difference counts for the report as a whole when its adjusted p is below 0.05):", "",
             "| measure | difference | p | Holm-adjusted p |", "|---|---|---|---|"]
    lines += [markdown.table_row([measure, name, fmt(p, 3), fmt(q, 2)]) for (measure, name, _, _), p, q in zip(family, p_values, adjusted)]
    return lines


def val_at(record: dict, epoch: int, steps_per_epoch: int) -> float | None:
    """The run's val NLL at the validation of `epoch`, if there was one."""
    return next((v for step, v in record["curves"]["nll"] if epoch_of(step, steps_per_epoch) == epoch), None)


def gap_over_budget_lines(by_arm: dict[str, list[dict]], labels: dict, args: argparse.Namespace, family: list | None = None) -> list[str]:
    """The differences of the val NLL (100 samples) at the field study's budget (30 epochs), at the cache's start and
    at the end: whether JSA's gap to RWS closes, stays or widens with the budget, within the same runs."""
    epochs = sorted({30, int(CACHE_START * args.epochs), args.epochs} & set(range(args.val_every, args.epochs + 1, args.val_every)))
    lines = ["", f"The gap over the budget, within these runs: val NLL ({args.val_samples} samples) at epochs "
             f"{', '.join(map(str, epochs))}; 30 is the field study's budget, {int(CACHE_START * args.epochs)} the cache "
             "arm's start (before it the two JSA arms train alike):", "",
             "| difference | epoch | mean | t × s.e. | beyond the seed noise? |", "|---|---|---|---|---|"]
    for epoch in epochs:
        values = {arm: [v for r in runs if (v := val_at(r, epoch, args.steps_per_epoch)) is not None] for arm, runs in by_arm.items()}
        lines += [markdown.table_row([name, epoch, *cells])
                  for name, *cells in differences(values, labels, family, f"val NLL, epoch {epoch}")]
    return lines


def plot(by_arm: dict[str, list[dict]], labels: dict, args: argparse.Namespace) -> Path:
    """Every run's val NLL and JSA's sampler diagnostics over training (long_curves.png)."""
    path = args.out / "long_curves.png"
    records = [r for arm in ARMS for r in by_arm.get(arm, [])]
    curve_grid([("MNIST", records)], ("nll", *DIAGNOSTICS),
               lambda r: (f"C{ARMS.index(r['arm'])}", labels[r["arm"]][0] if r["seed"] == min(x["seed"] for x in by_arm[r["arm"]]) else None),
               args.steps_per_epoch, path, nll_span=6.0)
    return path


def is_resolution_lines(args: argparse.Namespace, records: list[dict], labels: dict, family: list | None = None) -> list[str]:
    """The best checkpoints' importance-sampled NLL at every --is-samples count on the first --is-images test images
    (is-resolution.json, benchmarks/lib/at_checkpoints.py), per arm over seeds, and RWS − JSA at the most samples."""
    path = args.out / "is-resolution.json"
    if not path.exists():
        return []
    kept = runner.read_json(path)
    counts = [str(k) for k in kept["settings"]["samples"]]
    arm_of = {r["name"]: r["arm"] for r in records}
    per_arm: dict[str, list[dict]] = {}
    for name, measured in kept["runs"].items():
        if name in arm_of:
            per_arm.setdefault(arm_of[name], []).append(measured)
    lines = ["", f"Importance-sampled NLL of the best checkpoints on the first {kept['settings']['images']} test images, the "
             "same images and seed for every run (`--is-resolution`); mean ± sd over seeds:", "",
             markdown.table_row(["arm", "seeds", *(f"NLL, {k} samples" for k in counts), "−ELBO"]), "|---|---|" + "---|" * (len(counts) + 1)]
    for arm, runs in per_arm.items():
        lines.append(markdown.table_row([labels.get(arm, (arm,))[0], len(runs),
                                         *(mean_sd([statistics.mean(r[k]["nll"]) for r in runs]) for k in counts),
                                         mean_sd([-statistics.mean(r[counts[-1]]["elbo"]) for r in runs])]))
    most = {arm: [statistics.mean(r[counts[-1]]["nll"]) for r in runs] for arm, runs in per_arm.items()}
    rows = [markdown.table_row(cells) for cells in differences(most, labels, family, f"IS-NLL, {counts[-1]} samples")]
    if rows:
        lines += ["", f"Differences at {counts[-1]} samples:", "", "| difference | mean | t × s.e. | beyond the seed noise? |",
                  "|---|---|---|---|", *rows]
    unmeasured = sorted(name for name in arm_of if name not in kept["runs"])
    if unmeasured:
        lines += ["", f"Finished runs not yet in is-resolution.json: {markdown.one_line(', '.join(unmeasured))}."]
    return lines


def recorded_cache_arm(records: list[dict], args: argparse.Namespace) -> list[str]:
    """The cache arm's extra settings as its finished runs were trained (after `model.cache_start_epoch=N` in their
    command), so that the report names them whatever --cache-arm says now; --cache-arm where no run has finished."""
    for record in records:
        words = record["command"].split()
        start = next((i for i, word in enumerate(words) if word.startswith("model.cache_start_epoch=")), None)
        if record["arm"] == "jsa-cache" and start is not None:
            recorded = words[start + 1:]
            if args.cache_arm and args.cache_arm != recorded:
                print(f"note: --cache-arm {' '.join(args.cache_arm)!r} differs from the recorded runs' "
                      f"{' '.join(recorded)!r}; the report names the recorded settings", flush=True)
            return recorded
    return args.cache_arm


def epoch_minutes(record: dict) -> float:
    """The minutes a run's epochs took, each epoch counted once (a resumed run logs the epoch it resumed in twice;
    the last time is kept): beside its `seconds`, which count only the stretch after its last resume."""
    by_step = {step: seconds for step, seconds in record.get("epoch_time_s", [])}
    return sum(by_step.values()) / 60


def resumed_lines(records: list[dict]) -> list[str]:
    """The runs whose epochs took longer than their recorded time (resumed runs), named with both figures."""
    resumed = sorted((r for r in records if epoch_minutes(r) > r["seconds"] / 60), key=lambda r: r["name"])
    return ["", "Resumed runs, whose minutes above count only the stretch after their last resume: "
            + "; ".join(f"{r['name']} {r['seconds'] / 60:.0f} min recorded, its epochs {epoch_minutes(r):.0f} min in all "
                        f"(the longest {max(s for _, s in r['epoch_time_s']) / 60:.0f} min: the wall clock of a shared or "
                        "paused machine counts)" for r in resumed) + "."] if resumed else []


def write_report(args: argparse.Namespace) -> Path:
    records = list(runner.read_records(args.out).values())
    labels = arms(argparse.Namespace(**{**vars(args), "cache_arm": recorded_cache_arm(records, args)}))
    spe = args.steps_per_epoch
    lines = [f"# JSA against RWS at {args.epochs} epochs", "",
             f"Protocol: `experiment=jsa_paper` (uniform prior, 20 particles, batch 200, Adam 3e-4, static binarization), "
             f"{args.epochs} epochs, val NLL from {args.val_samples} importance samples every {args.val_every} epochs, test "
             f"NLL from 1000 samples at the best val epoch. Written by `python -m benchmarks.studies.long_study` ({len(records)} of "
             f"{len(plan(args))} runs finished); the commands are in commands.txt.", "",
             runner.machines_line(records) if records else "No run has finished yet.", "",
             markdown.table_row(["arm", "seeds", "test NLL", "best val NLL", "epoch of best val", "best = last validation",
                                 f"val NLL fall over the last {LAST_STRETCH} epochs", "min per run (machine)"]),
             "|---|---|---|---|---|---|---|---|"]
    by_arm: dict[str, list[dict]] = {}
    for r in records:
        by_arm.setdefault(r["arm"], []).append(r)
    for arm, runs in by_arm.items():
        test = [r["test"]["nll"] for r in runs if "nll" in r["test"]]
        curves = [r["curves"]["nll"] for r in runs if r["curves"]["nll"]]
        best = [min(c, key=lambda p: p[1]) for c in curves]
        last = sum(b[0] == c[-1][0] for b, c in zip(best, curves))
        fall = [c[-1 - LAST_STRETCH // args.val_every][1] - c[-1][1] for c in curves if len(c) > LAST_STRETCH // args.val_every]
        lines.append(markdown.table_row([labels.get(arm, (arm,))[0], len(runs), mean_sd(test), mean_sd([b[1] for b in best]),
                                         ", ".join(str(epoch_of(b[0], spe)) for b in best), f"{last} of {len(best)}",
                                         mean_sd(fall), runner.minutes_by_machine(runs)]))
    lines += resumed_lines(records)
    test_nll = {arm: [r["test"]["nll"] for r in runs if "nll" in r["test"]] for arm, runs in by_arm.items()}
    family: list = []  # every test of the difference tables, for Holm's correction over all of them
    rows = [markdown.table_row(cells) for cells in differences(test_nll, labels, family, "test NLL")]
    if rows:
        lines += ["", "Test-NLL differences (95 % threshold of a pooled two-sample t-test; – below two seeds an arm):", "",
                  "| difference | mean | t × s.e. | beyond the seed noise? |", "|---|---|---|---|", *rows]
    lines += gap_over_budget_lines(by_arm, labels, args, family)
    lines += is_resolution_lines(args, records, labels, family)
    lines += family_lines(family)
    if records:
        lines += ["", f"![val NLL and JSA's sampler over training]({plot(by_arm, labels, args).name})"]
    findings = args.out / "FINDINGS.md"
    if findings.exists():
        lines += ["", read_regular(findings).decode()]
    write_file(args.out / "commands.txt", "".join(r["command"] + "\n" for r in records))
    report = args.out / "report.md"
    write_file(report, "\n".join(lines) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=100, help="epochs per run (default 100)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per arm (default 3)")
    parser.add_argument("--arms", type=lambda text: text.split(","), default=list(ARMS),
                        help="subset of jsa-never,rws,jsa-cache (default all, in that order)")
    parser.add_argument("--cache-arm", type=lambda text: text.split(), default=[],
                        help="extra train.py settings of the jsa-cache arm, space-separated (e.g. 'model.q_states=fresh')")
    runner.add_is_resolution_arguments(parser, "the finished runs")
    runner.add_study_arguments(parser, out="benchmarks/results/long-study", logs="logs/long-study")
    args = parser.parse_args(argv)
    runner.check_study_arguments(parser, args, ("epochs", "seeds", "lanes", "val_every", "val_samples", "steps_per_epoch", "is_images"),
                                 {"arms": (args.arms, list(ARMS))})
    if not args.report_only:
        if not args.is_resolution:
            runner.run_plan(plan(args), run_job, args,
                            train_request=lambda name, arm, seed, args: (overrides(arm, seed, args), args.logs / name))
        from benchmarks.lib import at_checkpoints  # torch: only for the measurement

        # Every finished run, at the best val epoch: the 1000- and 5000-sample test NLL the verdict reads.
        at_checkpoints.measure_finished_runs(args.out, args.logs, lambda record: True, args.is_images, args.is_samples, args.is_device)
    print(f"report: {write_report(args)}")


if __name__ == "__main__":
    main()
