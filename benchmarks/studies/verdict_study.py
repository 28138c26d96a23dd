"""The verdict at convergence (issue 56): JSA under the JSA paper's full protocol, 500 epochs with its cache read from
epoch 300, against RWS, five seeds an arm, with the comparisons fixed here before any run (benchmarks/results/
verdict-study/PLAN.md says the same in words; a test holds the two together).

    python -m benchmarks.studies.verdict_study --lanes 8           # every run (resumable), then the report
    python -m benchmarks.studies.verdict_study --only 'jsa-*-s0'   # a subset, to spread the study over leases
    python -m benchmarks.studies.verdict_study --is-resolution     # finished runs' NLL at 1000 and 20,000 samples
    python -m benchmarks.studies.verdict_study --refit-q           # a fresh q for each final decoder, NLL at 5000
    python -m benchmarks.studies.verdict_study --report-only       # the report from the records

Arms, each `python train.py experiment=jsa_paper ...` (configs/experiment/jsa_paper.yaml: 500 epochs, validation
every 5 with 1000 importance samples, test at the best validation):
- `jsa-never`: JSA with its cache written and never read (`model.cache_start_epoch=null`). It trains in two stages in
  one log directory: `jsa-never-s<seed>-to300` to epoch 300 (no test), whose last.ckpt is copied to
  `--logs/branch-points/` (the branch point), then `jsa-never-s<seed>` resumes it to epoch 500.
- `jsa-cache300` (the paper's cache, read from epoch 300, ρ = 0) and `jsa-cache300-rho0.2` (ρ = 0.2): each starts
  from its seed's branch point (runner.train's `start_from`: parameters, Adam state, epoch and the cache filled over
  300 epochs) and trains epochs 301-500 with the cache read. The pair shares its first 300 epochs exactly (one file,
  its sha256 kept in both records), so cache − no cache is a paired comparison per seed.
- `rws`, and `vimco` with --vimco: 500 epochs from scratch.

A run's record is written the moment it finishes (benchmarks/lib/runner.py); an interrupted run resumes from its
last.ckpt (written at every validation), so a lease that ends loses at most the epochs since the last validation.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks.lib import runner
from benchmarks.lib.plots import curve_grid
from benchmarks.lib.records import epoch_of, read_curves
from benchmarks.lib.stats import fmt, holm, paired_interval, paired_p, t_threshold, two_sample_p
from benchmarks.studies.cache.study import DIAGNOSTICS

EPOCHS = 500  # the paper's `--epoch 500`
BRANCH_EPOCH = 300  # the paper's `start = 300`: the cache is read from here on
SEEDS = 5

# arm -> (label, train.py overrides after `experiment=jsa_paper`)
ARMS = {
    "jsa-never": ("JSA, no cache", ["model=jsa", "model.cache_start_epoch=null"]),
    "jsa-cache300": ("JSA, the paper's cache (from epoch 300, ρ = 0)", ["model=jsa", f"model.cache_start_epoch={BRANCH_EPOCH}"]),
    "jsa-cache300-rho0.2": ("JSA, cache from epoch 300, ρ = 0.2",
                            ["model=jsa", f"model.cache_start_epoch={BRANCH_EPOCH}", "model.cache_refresh=0.2"]),
    "rws": ("RWS", ["model=rws"]),
    "vimco": ("VIMCO", ["model=vimco"]),  # with --vimco only; described, in no pre-registered comparison
}
BRANCHES = ("jsa-cache300", "jsa-cache300-rho0.2")  # continued from jsa-never's epoch-300 checkpoint


@dataclass(frozen=True)
class Comparison:
    """One pre-registered difference, a − b (negative: a has the lower NLL, the better model)."""

    a: str
    b: str
    paired: bool  # by seed: b's and a's runs share their first 300 epochs


# Fixed before the runs (issue 56): each at both measures, Holm over all of them together.
COMPARISONS = (
    Comparison("rws", "jsa-never", paired=False),
    Comparison("rws", "jsa-cache300", paired=False),
    Comparison("rws", "jsa-cache300-rho0.2", paired=False),
    Comparison("jsa-cache300", "jsa-never", paired=True),
    Comparison("jsa-cache300-rho0.2", "jsa-never", paired=True),
)
MEASURES = ("test NLL, 1000 samples", "NLL, 20000 samples")  # the run's own test; the --is-resolution measurement
REFIT_MEASURE = "NLL, 5000 samples, q refitted"  # --refit-q (benchmarks/lib/refit_q.py): secondary, Holm of its own


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-s{seed}"


def trunk_name(seed: int) -> str:
    return f"jsa-never-s{seed}-to{BRANCH_EPOCH}"


def plan(args: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    """(run name, stage, arm, seed): the trunks and RWS of every seed first (they wait for nothing), then what waits
    for a trunk: the no-cache continuation and the branches."""
    arms = [arm for arm in args.arms if arm != "vimco" or args.vimco]
    jobs = [(trunk_name(seed), "trunk", "jsa-never", seed) for seed in range(args.seeds) if "jsa-never" in arms]
    jobs += [(run_name(arm, seed), "scratch", arm, seed) for seed in range(args.seeds) for arm in ("rws", "vimco") if arm in arms]
    jobs += [(run_name(arm, seed), "continued" if arm == "jsa-never" else "branch", arm, seed)
             for seed in range(args.seeds) for arm in ("jsa-never", *BRANCHES) if arm in arms]
    return jobs


def overrides(arm: str, seed: int, epochs: int, args: argparse.Namespace) -> list[str]:
    return ["experiment=jsa_paper", f"seed={seed}", f"trainer.max_epochs={epochs}",
            f"trainer.check_val_every_n_epoch={args.val_every}", f"model.val_num_samples={args.val_samples}",
            *ARMS[arm][1], *args.extra]


def branch_point(args: argparse.Namespace, seed: int) -> Path:
    return args.logs / "branch-points" / f"{trunk_name(seed)}.ckpt"


def sha256(path: Path) -> str:
    """The branch point's digest, as the checkpoint files' own checksum computes it (imported here: it brings torch)."""
    from checkpoints.file_format import file_digest

    return file_digest(path)


def train_request(name: str, stage: str, arm: str, seed: int, args: argparse.Namespace) -> tuple[list[str], Path] | None:
    """With --replicas-per-process N, the trunks of N seeds train as one process (benchmarks/lib/packing.py); the branches
    start from their trunk's checkpoint and RWS tests after training (experiment=jsa_paper's run_test): each alone."""
    if stage != "trunk":
        return None
    return overrides(arm, seed, BRANCH_EPOCH, args) + ["run_test=false"], args.logs / run_name(arm, seed)


def run_job(name: str, stage: str, arm: str, seed: int, args: argparse.Namespace) -> dict:
    """Train one planned run; the continuation and the branches wait (runner.NotYet) for their seed's trunk record."""
    log_dir = args.logs / run_name(arm, seed)  # the trunk and its continuation share one
    start_from, trunk = None, {}
    if stage in ("continued", "branch"):
        trunk_record = args.out / "runs" / f"{trunk_name(seed)}.json"
        if not trunk_record.exists():
            raise runner.NotYet(f"{trunk_name(seed)} has not finished")
        trunk = runner.read_json(trunk_record)
    if stage == "branch":
        start_from = branch_point(args, seed)
        if not start_from.is_file() or sha256(start_from) != trunk["branch_sha256"]:
            raise SystemExit(f"{name}: its branch point {start_from} is missing or is not the file {trunk_name(seed)} "
                             f"wrote (sha256 {trunk['branch_sha256'][:12]}…); a branch starts only from its trunk's epoch "
                             f"{BRANCH_EPOCH}: train the trunk again (delete its record) or restore the file")
    epochs = BRANCH_EPOCH if stage == "trunk" else args.epochs
    extra = ["run_test=false"] if stage == "trunk" else []  # the trunk's test would be at epoch <= 300: not the study's
    run_dir, seconds, command = runner.train(name, overrides(arm, seed, epochs, args) + extra, log_dir, start_from)
    record = {"name": name, "arm": arm, "seed": seed, "stage": stage, "epochs": epochs, "command": command, "seconds": seconds}
    if stage == "trunk":
        point = branch_point(args, seed)
        point.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(runner.last_checkpoint(log_dir), point)  # outside the run: a branch logs a run of its own
        record["branch_sha256"] = sha256(point)
    elif trunk:
        record["branch_sha256"] = trunk["branch_sha256"]  # the epochs 1-300 this run shares with its seed's others
    return {**record, **read_curves(run_dir, extra_tags=[f"train/{tag}" for tag in DIAGNOSTICS])}


# ---- the report ---------------------------------------------------------------------------------


def difference(values: dict[str, dict[int, float]], comparison: Comparison) -> tuple[float, float, float, float, int] | None:
    """(mean a − b, 95 % interval low, high, two-sided p, seeds) of one comparison over the seeds measured on both
    sides (paired: the seeds with both runs only); None below two seeds a side."""
    a, b = values.get(comparison.a, {}), values.get(comparison.b, {})
    if comparison.paired:
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            return None
        xs, ys = [a[s] for s in seeds], [b[s] for s in seeds]
        low, high = paired_interval(xs, ys)
        return statistics.mean(xs) - statistics.mean(ys), low, high, paired_p(xs, ys), len(seeds)
    xs, ys = list(a.values()), list(b.values())
    if len(xs) < 2 or len(ys) < 2:
        return None
    mean = statistics.mean(xs) - statistics.mean(ys)
    half = t_threshold(statistics.stdev(xs), len(xs), statistics.stdev(ys), len(ys))
    return mean, mean - half, mean + half, two_sample_p(xs, ys), min(len(xs), len(ys))


def comparison_lines(values_by_measure: dict[str, dict[str, dict[int, float]]], measures: tuple[str, ...] = MEASURES,
                     which: str = "The pre-registered comparisons") -> list[str]:
    """The pre-registered comparisons at every measure of `measures`, Holm-adjusted over all of them (those not yet
    measurable count as not made: the family is the registered one, and the report says how many were made)."""
    rows, p_values = [], []
    for measure in measures:
        for comparison in COMPARISONS:
            result = difference(values_by_measure.get(measure, {}), comparison)
            rows.append((measure, comparison, result))
            p_values.append(result[3] if result else float("nan"))
    adjusted = holm(p_values)
    made = sum(result is not None for *_, result in rows)
    lines = ["", f"{which} ({len(rows)}: {len(COMPARISONS)} differences at {len(measures)} measure{'s' if len(measures) > 1 else ''}; "
             f"{made} made so far), a − b, with the 95 % interval, the two-sided p and the p adjusted by Holm's method over "
             "the comparisons made:", "",
             "| measure | a − b | test | seeds | mean | 95 % interval | p | Holm-adjusted p |", "|---|---|---|---|---|---|---|---|"]
    for (measure, comparison, result), q in zip(rows, adjusted):
        name = f"{ARMS[comparison.a][0]} − {ARMS[comparison.b][0]}"
        test = "paired by seed" if comparison.paired else "two-sample"
        if result is None:
            lines.append(f"| {measure} | {name} | {test} | – | not yet measured | – | – | – |")
            continue
        mean, low, high, p, seeds = result
        lines.append(f"| {measure} | {name} | {test} | {seeds} | {mean:+.2f} | {low:+.2f} to {high:+.2f} | {fmt(p, 3)} | {fmt(q, 3)} |")
    return lines


def measured_values(args: argparse.Namespace, records: dict[str, dict]) -> dict[str, dict[str, dict[int, float]]]:
    """measure -> arm -> seed -> NLL: the runs' own test NLL, and the most-sample NLL of is-resolution.json."""
    finished = {name: r for name, r in records.items() if r.get("stage") != "trunk"}
    values: dict[str, dict[str, dict[int, float]]] = {MEASURES[0]: {}}
    for r in finished.values():
        if "nll" in r["test"]:
            values[MEASURES[0]].setdefault(r["arm"], {})[r["seed"]] = r["test"]["nll"]
    path = args.out / "is-resolution.json"
    if path.exists():
        kept = runner.read_json(path)
        most = str(max(kept["settings"]["samples"]))
        values[MEASURES[1]] = {}
        for name, measured in kept["runs"].items():
            if name in finished and most in measured:
                r = finished[name]
                values[MEASURES[1]].setdefault(r["arm"], {})[r["seed"]] = statistics.mean(measured[most]["nll"])
    path = args.out / "refit-q.json"
    if path.exists():
        values[REFIT_MEASURE] = {}
        for name, measured in runner.read_json(path)["runs"].items():
            if name in finished:
                r = finished[name]
                values[REFIT_MEASURE].setdefault(r["arm"], {})[r["seed"]] = statistics.mean(measured["nll"])
    return values


def write_report(args: argparse.Namespace) -> Path:
    records = runner.read_records(args.out)
    lines = [f"# The verdict at {args.epochs} epochs: JSA with and without the paper's cache against RWS", "",
             f"Protocol: `experiment=jsa_paper`, {args.epochs} epochs, val NLL from {args.val_samples} importance samples every "
             f"{args.val_every} epochs, test NLL from 1000 samples on the 10,000 test images at the best val epoch; the cache "
             f"arms branch from their seed's no-cache run at epoch {BRANCH_EPOCH}. The plan: PLAN.md. Written by `python -m "
             f"benchmarks.studies.verdict_study` ({len(records)} of {len(plan(args))} planned runs finished).", ""]
    if records:
        lines += [runner.machines_line(list(records.values())), ""]
    lines += ["| arm | seeds | test NLL | best val NLL | epoch of best val | min per run (machine) |", "|---|---|---|---|---|---|"]
    for arm, (label, _) in ARMS.items():
        runs = [r for r in records.values() if r["arm"] == arm and r.get("stage") != "trunk"]
        if not runs:
            continue
        test = [r["test"]["nll"] for r in runs if "nll" in r["test"]]
        best = [min(r["curves"]["nll"], key=lambda point: point[1]) for r in runs if r["curves"]["nll"]]
        # a no-cache run's minutes include its trunk's (epochs 1-300, a record of its own)
        timed = [{**r, "seconds": r["seconds"] + records.get(trunk_name(r["seed"]), {}).get("seconds", 0) * (arm == "jsa-never")}
                 for r in runs]
        lines.append(f"| {label} | {len(runs)} | {mean_sd(test)} | {mean_sd([b[1] for b in best])} | "
                     f"{', '.join(str(epoch_of(b[0], args.steps_per_epoch)) for b in best)} | {runner.minutes_by_machine(timed)} |")
    lines += shared_start_lines(records)
    if any(r.get("stage") != "trunk" for r in records.values()):
        lines += ["", f"![val NLL and JSA's sampler over the {args.epochs} epochs]({plot(records, args).name})"]
    lines += sample_count_lines(args, records)
    values = measured_values(args, records)
    lines += comparison_lines(values)
    lines += comparison_lines(values, (REFIT_MEASURE,), "The refit-q check, secondary")
    findings = args.out / "FINDINGS.md"
    if findings.exists():
        lines += ["", findings.read_text()]
    (args.out / "commands.txt").write_text("".join(f"{r['command']}\n" for r in records.values()))
    report = args.out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def sample_count_lines(args: argparse.Namespace, records: dict[str, dict]) -> list[str]:
    """Per arm, mean ± sd over seeds of each run's mean NLL at every count of is-resolution.json: whether the
    estimate still falls from the fewest samples to the most."""
    path = args.out / "is-resolution.json"
    if not path.exists():
        return []
    kept = runner.read_json(path)
    counts = [str(k) for k in kept["settings"]["samples"]]
    lines = ["", f"Importance-sampled NLL of the best checkpoints on {kept['settings']['images']} test images, the same "
             "images and seed for every run (`--is-resolution`), mean ± sd over seeds:", "",
             "| arm | seeds | " + " | ".join(f"NLL, {k} samples" for k in counts) + f" | fall from {counts[0]} to {counts[-1]} |",
             "|---|---|" + "---|" * (len(counts) + 1)]
    for arm, (label, _) in ARMS.items():
        runs = [kept["runs"][name] for name, r in records.items() if r["arm"] == arm and r.get("stage") != "trunk" and name in kept["runs"]]
        if runs:
            means = {k: [statistics.mean(run[k]["nll"]) for run in runs] for k in counts}
            fall = [a - b for a, b in zip(means[counts[0]], means[counts[-1]])]
            lines.append(f"| {label} | {len(runs)} | " + " | ".join(mean_sd(means[k]) for k in counts) + f" | {mean_sd(fall)} |")
    return lines


def plot(records: dict[str, dict], args: argparse.Namespace) -> Path:
    """Every finished run's val NLL and JSA's sampler diagnostics over training (verdict_curves.png): the no-cache
    run's curve covers epochs 5-500 (its trunk's validations are its own), a branch's starts at 305."""
    path = args.out / "verdict_curves.png"
    arms = list(ARMS)
    finished = [r for r in records.values() if r.get("stage") != "trunk"]
    first_seed = {arm: min(r["seed"] for r in finished if r["arm"] == arm) for arm in {r["arm"] for r in finished}}
    curve_grid([("MNIST", finished)], ("nll", *DIAGNOSTICS),
               lambda r: (f"C{arms.index(r['arm'])}", ARMS[r["arm"]][0] if r["seed"] == first_seed[r["arm"]] else None),
               args.steps_per_epoch, path, nll_span=6.0)
    return path


def shared_start_lines(records: dict[str, dict]) -> list[str]:
    """Whether each seed's paired runs share their first 300 epochs: the branch point every one of them names."""
    lines = []
    for seed in sorted({r["seed"] for r in records.values() if r.get("branch_sha256")}):
        names = {r["name"]: r["branch_sha256"] for r in records.values() if r["seed"] == seed and r.get("branch_sha256")}
        same = len(set(names.values())) == 1
        lines.append(f"- seed {seed}: {', '.join(sorted(names))} " + ("share one epoch-300 checkpoint (sha256 "
                     f"{next(iter(names.values()))[:12]}…)" if same else "name different epoch-300 checkpoints: NOT PAIRED"))
    return ["", "The paired runs' shared start:", "", *lines] if lines else []


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{values[0]:.2f} (1 seed)" if len(values) == 1 else f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"epochs per run (default {EPOCHS}, the paper's)")
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per arm (default {SEEDS})")
    parser.add_argument("--arms", type=lambda text: text.split(","), default=[arm for arm in ARMS if arm != "vimco"],
                        help=f"subset of {','.join(ARMS)} (default all but vimco); a cache arm needs jsa-never's trunk")
    parser.add_argument("--vimco", action="store_true", help="add the VIMCO arm (described, in no registered comparison)")
    runner.add_is_resolution_arguments(parser, "the finished runs")
    parser.add_argument("--refit-q", action="store_true", help="only refit a fresh q to each finished run's decoder and "
                        "measure its NLL (benchmarks/lib/refit_q.py; --is-device, --is-images), then the report")
    parser.add_argument("--refit-steps", type=int, help="the refit's Adam steps (default: as many as a run trained, "
                        "--epochs × --steps-per-epoch)")
    parser.add_argument("--refit-samples", type=int, default=5000, help="importance samples after the refit (default 5000)")
    runner.add_study_arguments(parser, out="benchmarks/results/verdict-study", logs="logs/verdict-study")
    # The paper's validation (1000 samples), and the full test set at 1000 and 20,000 samples.
    parser.set_defaults(val_samples=1000, is_images=10000, is_samples=[1000, 20000])
    args = parser.parse_args(argv)
    if args.vimco and "vimco" not in args.arms:
        args.arms.append("vimco")
    args.vimco = "vimco" in args.arms  # --arms naming it asks for it as --vimco does
    args.refit_steps = args.refit_steps if args.refit_steps is not None else args.epochs * args.steps_per_epoch
    runner.check_study_arguments(parser, args, ("epochs", "seeds", "lanes", "val_every", "val_samples", "steps_per_epoch",
                                                "is_images", "refit_steps", "refit_samples"),
                                 {"arms": (args.arms, list(ARMS))})
    if args.epochs <= BRANCH_EPOCH:
        parser.error(f"--epochs must be above the branch epoch {BRANCH_EPOCH}, got {args.epochs}")
    if set(BRANCHES) & set(args.arms) and "jsa-never" not in args.arms:
        parser.error("--arms: the cache arms branch from jsa-never's epoch-300 checkpoint; add jsa-never")
    if args.is_resolution:
        from benchmarks.lib import at_checkpoints  # torch: only for the measurement

        at_checkpoints.measure_finished_runs(args.out, args.logs, lambda record: record.get("stage") != "trunk",
                                             args.is_images, args.is_samples, args.is_device)
    elif args.refit_q:
        from benchmarks.lib import refit_q  # torch: only for the measurement

        refit_q.refit_finished_runs(args.out, args.logs, lambda record: record.get("stage") != "trunk", args.refit_steps,
                                    args.is_images, args.refit_samples, args.is_device)
    elif not args.report_only:
        runner.run_plan(plan(args), run_job, args, train_request=train_request)
    print(f"report: {write_report(args)}")


if __name__ == "__main__":
    main()
