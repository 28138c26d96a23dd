"""When does JSA's persistent MIS cache help? The same model with the cache read from epoch 0, from the middle of the
run, and never, under the JSA paper's protocol, for the categorical model at L = 20 and L = 5 and the Bernoulli-200
model, with the remedies for the mid-run cache's lock-in (`middle-fresh`, `middle-refresh<ρ>`) as arms of their own.

    python -m benchmarks.studies.cache.study                  # every run (resumable), then the report
    python -m benchmarks.studies.cache.study --report-only    # the report from the finished runs
    python -m benchmarks.studies.cache.study --is-resolution  # IS-NLL of the finished middle/never runs at 100, 1000, 5000 samples

The arms, the order of the runs and what the report shows: benchmarks/results/cache-study/README.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from benchmarks.lib import arguments, markdown, runner
from benchmarks.lib.plots import curve_grid
from benchmarks.lib.records import read_curves
from benchmarks.lib.stats import difference_cells, fmt
from common.files import read_regular, write_file

MODELS = {  # name -> (label, overrides)
    "L20": ("categorical 20×10, L = 20", ["model.mis_steps=20"]),
    "bern200": ("Bernoulli 200×2, L = 20", ["model.mis_steps=20", "model.num_latents=200", "model.num_categories=2"]),
    "L5": ("categorical 20×10, L = 5", ["model.mis_steps=5"]),
}
REFRESH_RATES = (0.05, 0.2, 0.5)  # the one-seed scan of `model.cache_refresh` (docs/mis.md#restarting-a-share-of-the-chains)
# The cache read from epoch 0, from the middle, never; and from the middle with a remedy for its lock-in: q trained on
# fresh proposals (`q_states=fresh`, docs/jsa.md#what-q-learns-from), or a share ρ of the chains restarted each step.
CACHE_ARMS = ("epoch0", "middle", "never", "middle-fresh", *(f"middle-refresh{rate}" for rate in REFRESH_RATES))
MEASURED_ARMS = tuple(arm for arm in CACHE_ARMS if arm != "epoch0")  # the IS-resolution measurement's
FIRST_RUNS = "first-runs"  # --out/first-runs: the records of runs trained again, kept beside their reruns' in runs/
DIAGNOSTICS = ("acceptance_rate", "cache_stuck_rate", "cache_age_epochs", "cache_log_weight_gap")


def cache_overrides(arm: str, epochs: int) -> list[str]:
    if arm == "never":
        return ["model.use_cache=false"]
    remedy = {"middle-fresh": ["model.q_states=fresh"]}.get(arm, [])
    if arm.startswith("middle-refresh"):
        remedy = [f"model.cache_refresh={arm.removeprefix('middle-refresh')}"]
    return [f"model.cache_start_epoch={0 if arm == 'epoch0' else epochs // 2}", *remedy]


def plan(args: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    """(run name, model, cache arm, seed), most informative first."""
    # Seed 0 of every arm; then the other seeds of the arms whose difference is the open question (the cache read from
    # the middle, or never), before those of the epoch-0 arm, which seed 0 found worse by 3 nats in both models.
    models = ("L20", "bern200")
    jobs = [(m, arm, 0) for m in models for arm in ("epoch0", "middle", "never")]
    jobs += [(m, arm, s) for s in range(1, args.seeds) for m in models for arm in ("middle", "never")]
    jobs += [(m, "epoch0", s) for s in range(1, args.seeds) for m in models]
    jobs += [("L5", arm, s) for s in range(args.small_l_seeds) for arm in ("epoch0", "middle", "never")]
    # The remedies: seed 0 of each (the ρ scan included) where the cache helped the decoder, then in the categorical
    # model; then the other seeds of `q_states=fresh` and of the ρ chosen from the scan (--refresh).
    remedies = [arm for arm in CACHE_ARMS if arm.startswith("middle-")]
    jobs += [(m, arm, 0) for m in ("bern200", "L20") for arm in remedies]
    jobs += [(m, arm, s) for s in range(1, args.seeds) for m in ("bern200", "L20") for arm in ("middle-fresh", f"middle-refresh{args.refresh}")]
    return [(f"{m}-{arm}-s{s}", m, arm, s) for m, arm, s in jobs if m in args.models]


def overrides(model: str, arm: str, seed: int, args: argparse.Namespace) -> list[str]:
    return ["experiment=jsa_paper", "model=jsa", f"seed={seed}", f"trainer.max_epochs={args.epochs}",
            f"trainer.check_val_every_n_epoch={args.val_every}", f"model.val_num_samples={args.val_samples}",
            *MODELS[model][1], *cache_overrides(arm, args.epochs), *args.extra]


def run_job(name: str, model: str, arm: str, seed: int, args: argparse.Namespace) -> dict:
    run_dir, seconds, command = runner.train(name, overrides(model, arm, seed, args), args.logs / name)
    record = {"name": name, "model": model, "arm": arm, "seed": seed, "epochs": args.epochs, "command": command, "seconds": seconds}
    return {**record, **read_curves(run_dir, extra_tags=[f"train/{tag}" for tag in DIAGNOSTICS])}


def is_resolution_table(args: argparse.Namespace, records: list[dict]) -> list[str]:
    """Per model and arm, mean ± sd over seeds of the test images' mean IS-NLL at each sample count and of the ELBO;
    and the looseness of the fewest-sample estimate, NLL(fewest) − NLL(most), which grows as q gets poorer. The
    finished middle/no-cache runs that have no entry in is-resolution.json are named, so a missing pair is seen."""
    path = args.out / "is-resolution.json"
    if not path.exists():
        return []
    kept = runner.read_json(path)
    counts = [str(k) for k in kept["settings"]["samples"]]
    arm_of = {r["name"]: (r["model"], r["arm"]) for r in records}
    lines = ["", f"Importance-sampled test NLL of the best checkpoints on the first {kept['settings']['images']} test images, "
             "the same images and seed for every run (`--is-resolution`); mean ± sd over seeds:", "",
             markdown.table_row(["model", "cache read", "seeds", *(f"NLL, {k} samples" for k in counts), "−ELBO",
                                 f"NLL({counts[0]}) − NLL({counts[-1]})"]), "|---|---|---|" + "---|" * (len(counts) + 2)]
    for model in MODELS:
        for arm in MEASURED_ARMS:
            runs = [v for name, v in kept["runs"].items() if arm_of.get(name) == (model, arm)]
            if not runs:
                continue
            nll = {k: [statistics.mean(r[k]["nll"]) for r in runs] for k in counts}
            elbo = [-statistics.mean(runs_k["elbo"]) for runs_k in (r[counts[-1]] for r in runs)]
            loose = [a - b for a, b in zip(nll[counts[0]], nll[counts[-1]])]
            lines.append(markdown.table_row([MODELS[model][0], arm, len(runs), *(mean_sd(nll[k]) for k in counts),
                                             mean_sd(elbo), mean_sd(loose)]))
    unmeasured = sorted(r["name"] for r in records if r.get("arm") in MEASURED_ARMS and r["name"] not in kept["runs"])
    if unmeasured:
        lines += ["", "Finished middle/no-cache runs with no entry in is-resolution.json, so absent from these tables: "
                  f"{markdown.one_line(', '.join(unmeasured))} (`--is-resolution` measures a run only where its checkpoints are under --logs)."]
    lines += ["", "The same, each mid-run arm − never per test image, the two arms paired by seed and image (mean ± standard error "
              "over the images: it covers the images and the estimator's noise, not the seed-to-seed spread of training, "
              "so each seed pair is a row of its own):", "",
              markdown.table_row(["model", "cache read", "seed", *(f"{k} samples" for k in counts), "−ELBO"]),
              "|---|---|---|" + "---|" * (len(counts) + 1)]
    for model, middle in ((model, arm) for model in MODELS for arm in MEASURED_ARMS if arm != "never"):
        by_seed = {(arm_of[name][1], name.rsplit("-s", 1)[1]): v for name, v in kept["runs"].items() if arm_of.get(name, ("",))[0] == model}
        for seed in sorted(seed for arm, seed in by_seed if arm == middle and ("never", seed) in by_seed):
            def paired(k: str, key: str) -> str:
                differences = [m - n for m, n in zip(by_seed[middle, seed][k][key], by_seed["never", seed][k][key])]
                sign = -1 if key == "elbo" else 1  # the column is −ELBO (+ 0.0 below: no "-0.00")
                return f"{sign * statistics.mean(differences) + 0.0:+.2f} ± {statistics.stdev(differences) / math.sqrt(len(differences)):.2f}"

            lines.append(markdown.table_row([MODELS[model][0], middle, seed, *(paired(k, "nll") for k in counts),
                                             paired(counts[-1], "elbo")]))
    return lines


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 seed)"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def late_mean(points: list[list[float]], after_step: float) -> float | None:
    """The mean of a logged series over the steps after `after_step` (the last fifth of training)."""
    values = [v for s, v in points if s > after_step]
    return statistics.mean(values) if values else None


def write_report(args: argparse.Namespace) -> Path:
    records = list(runner.read_records(args.out).values())
    spe = args.steps_per_epoch
    last_fifth = 0.8 * args.epochs * spe
    lines = ["# JSA's persistent MIS cache: when does it help?", "",
             f"Protocol: `experiment=jsa_paper` (chain-average gradient, batch 200, Adam 3e-4, static binarization), "
             f"{args.epochs} epochs, val NLL from {args.val_samples} importance samples every {args.val_every} epochs, "
             "test NLL from 1000 samples at the best val epoch; the cache read from epoch 0, from epoch "
             f"{args.epochs // 2}, or never (`model.use_cache=false`). Written by `python -m benchmarks.studies.cache.study` "
             f"({len(records)} of {len(plan(args))} runs finished); the commands are in commands.txt. Diagnostics are "
             "means over the last fifth of training.", "", runner.machines_line(records), "",
             "| model | cache read | seeds | test NLL | test −ELBO | best val NLL | acceptance | stuck on the cached state | "
             "age of cached states (epochs) | log-weight gap, cached − best proposal | min per run (machine) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    arms: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        arms.setdefault((r["model"], r["arm"]), []).append(r)
    first_runs = runner.read_records(args.out, folder=FIRST_RUNS) if (args.out / FIRST_RUNS).is_dir() else {}
    for r in first_runs.values():  # an arm of their own: "<arm>, first runs"
        arms.setdefault((r["model"], f"{r['arm']}, first runs"), []).append(r)
    shown = [arm for a in CACHE_ARMS for arm in (a, f"{a}, first runs")]
    for model in MODELS:
        for arm in shown:
            runs = arms.get((model, arm), [])
            if not runs:
                continue
            test = [r["test"]["nll"] for r in runs if "nll" in r["test"]]
            elbo = [-r["test"]["elbo"] for r in runs if "elbo" in r["test"]]  # q's bound, 1000 draws, at the best val epoch
            val = [min(v for _, v in r["curves"]["nll"]) for r in runs if r["curves"]["nll"]]
            diagnostics = [statistics.mean(d) if (d := [x for r in runs if (x := late_mean(r["curves"].get(tag, []), last_fifth)) is not None]) else None
                           for tag in DIAGNOSTICS]
            lines.append(markdown.table_row([MODELS[model][0], arm, len(runs), mean_sd(test), mean_sd(elbo), mean_sd(val),
                                             *(fmt(d, 3) for d in diagnostics), runner.minutes_by_machine(runs)]))

    lines += ["", "Test-NLL differences from the arm without the cache, and each remedy's from the plain mid-run arm (a "
              "difference counts when it exceeds t × s.e., the 95% threshold of a two-sample t-test with pooled variance; "
              "– below two seeds an arm):", "",
              "| model | cache read | against | mean difference | t × s.e. | beyond the seed noise? |", "|---|---|---|---|---|---|"]
    comparisons = [(arm, "never") for arm in shown if arm != "never"]
    comparisons += [(arm, "middle") for arm in shown if arm.startswith("middle-")]
    for model in MODELS:
        for arm, against in comparisons:
            test = [r["test"]["nll"] for r in arms.get((model, arm), []) if "nll" in r["test"]]
            base = [r["test"]["nll"] for r in arms.get((model, against), []) if "nll" in r["test"]]
            if not test or not base:
                continue
            lines.append(markdown.table_row([MODELS[model][0], arm, against, *difference_cells(test, base)]))

    if first_runs:
        lines += ["", f"Rows \"…, first runs\": the first records of runs trained again with the same commands ({FIRST_RUNS}/: "
                  f"{markdown.one_line(', '.join(sorted(first_runs)))}); the rows without it are the reruns', whose checkpoints the IS-NLL "
                  "measurement below read."]
    lines += is_resolution_table(args, records)
    plot(records, args)
    lines += ["", "![JSA's sampler over training](cache_diagnostics.png)", ""]
    findings = args.out / "FINDINGS.md"
    if findings.exists():
        lines += [read_regular(findings).decode()]
    write_file(args.out / "commands.txt", "\n".join(r["command"] for r in records) + "\n")
    report = args.out / "report.md"
    write_file(report, "\n".join(lines) + "\n")
    return report


def plot(records: list[dict], args: argparse.Namespace) -> None:
    models = [m for m in MODELS if any(r["model"] == m for r in records)]
    if models:
        curve_grid([(MODELS[m][0], [r for r in records if r["model"] == m]) for m in models], ("nll", *DIAGNOSTICS),
                   lambda r: (f"C{CACHE_ARMS.index(r['arm'])}", f"cache {r['arm']}" if r["seed"] == 0 else None),
                   args.steps_per_epoch, args.out / "cache_diagnostics.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=30, help="epochs per run (default 30)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the L = 20 and Bernoulli arms (default 3)")
    parser.add_argument("--small-l-seeds", type=arguments.integer(1), default=1, help="seeds of the L = 5 arms (default 1)")
    parser.add_argument("--refresh", type=float, choices=REFRESH_RATES, default=0.2,
                        help="the cache_refresh ρ given every seed, chosen from the one-seed scan (default 0.2)")
    parser.add_argument("--models", type=lambda text: text.split(","), default=list(MODELS), help=f"subset of {','.join(MODELS)}")
    runner.add_is_resolution_arguments(parser, "the finished middle and no-cache runs")
    runner.add_study_arguments(parser, out="benchmarks/results/cache-study", logs="logs/cache-study")
    args = parser.parse_args(argv)
    runner.check_study_arguments(parser, args, ("epochs", "seeds", "lanes", "val_every", "val_samples", "steps_per_epoch", "is_images"),
                                 {"models": (args.models, list(MODELS))})
    if args.is_resolution:
        from benchmarks.lib import at_checkpoints  # torch: only for the measurement

        at_checkpoints.measure_finished_runs(args.out, args.logs, lambda record: record["arm"] in MEASURED_ARMS, args.is_images, args.is_samples, args.is_device)
    elif not args.report_only:
        runner.run_plan(plan(args), run_job, args,
                        train_request=lambda name, model, arm, seed, args: (overrides(model, arm, seed, args), args.logs / name))
    print(f"report: {write_report(args)}")


if __name__ == "__main__":
    main()
