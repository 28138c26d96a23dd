"""The field study's report (benchmarks/studies/field/study.py): FINDINGS.md (written by hand from the tables) first, then
the tables and plots regenerated from the run records in `--out/runs/`."""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from benchmarks.lib import markdown, runner
from benchmarks.studies.field.plan import (CLOSE, DATASETS, LABELS, PRIOR_LABELS, REFERENCE, TWENTY_PARTICLES, arm_name,
                                    compared_pairs, decoder_rows, plan, read_records)
from benchmarks.lib.records import epoch_of
from benchmarks.lib.stats import fmt, t_threshold
from benchmarks.lib.plots import save_figure
from common.files import read_regular, write_file


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}"


def arms(records: dict[str, dict], data: str) -> dict[str, list[dict]]:
    """arm name -> its finished training runs on `data`, seeds in order."""
    grouped: dict[str, list[dict]] = {}
    for r in sorted(records.values(), key=lambda r: r["seed"]):
        if r["kind"] == "train" and r["data"] == data and "nll" in r["test"]:
            grouped.setdefault(arm_name(data, r["model"], r["prior"]), []).append(r)
    return grouped


def label(r: dict) -> str:
    return f"{LABELS[r['model']]}, {PRIOR_LABELS[r['prior']]} prior"


def cost_minutes(records: dict[str, dict], r: dict, spe: int) -> float | None:
    """Minutes per epoch of run r at the step cost measured side by side (measure-step-cost); the equal-time run has
    its seed-0 run's cost. None before that measurement."""
    costs = records.get("measure-step-cost", {}).get("ms_per_step", {})
    name = f"mnist-{r['model']}-s0" if r["kind"] == "equal_time" else r["name"]
    return costs[name] * spe / 60_000 if name in costs else None


def results_table(records: dict[str, dict], grouped: dict[str, list[dict]], spe: int, args: argparse.Namespace) -> list[str]:
    lines = ["| model | seeds | test NLL (1000 samples) | test −ELBO | epoch of best val NLL | ms per step (side by side) | "
             "decoder rows per example and step, forward / backward (JSA: 21 + r / r, r ≈ 1 + aL distinct states) | "
             "training min at that cost |",
             "|---|---|---|---|---|---|---|---|"]
    for runs in sorted(grouped.values(), key=lambda runs: statistics.mean(r["test"]["nll"] for r in runs)):
        best_epochs = [epoch_of(min(r["curves"]["nll"], key=lambda p: p[1])[0], spe) for r in runs if r["curves"]["nll"]]
        forward, backward = decoder_rows(runs[0])
        per_epoch = cost_minutes(records, runs[0], spe) if runs[0]["data"] == "mnist" else None
        lines.append(markdown.table_row([
            label(runs[0]), len(runs), mean_sd([r["test"]["nll"] for r in runs]), mean_sd([-r["test"]["elbo"] for r in runs]),
            ", ".join(map(str, best_epochs)), fmt(per_epoch * 60_000 / spe if per_epoch else None, 0),
            f"{forward:.1f} / {backward:.1f}", fmt(per_epoch * runs[0]["epochs"] if per_epoch else None, 1)]))
    return lines


def differences(grouped: dict[str, list[dict]], data: str) -> list[str]:
    """The compared pairs (plan.compared_pairs) whose arms both have records."""
    lines = ["| A | B | mean A − mean B (nats) | t × s.e. (95%) | beyond the seed noise? |", "|---|---|---|---|---|"]
    for a, b in compared_pairs(data):
        if a not in grouped or b not in grouped:
            continue
        va, vb = ([r["test"]["nll"] for r in grouped[name]] for name in (a, b))
        sd = [statistics.stdev(v) if len(v) > 1 else float("nan") for v in (va, vb)]
        threshold = t_threshold(sd[0], len(va), sd[1], len(vb))
        difference = statistics.mean(va) - statistics.mean(vb)
        verdict = "–" if not math.isfinite(threshold) else ("yes" if abs(difference) > threshold else "no")
        lines.append(markdown.table_row([label(grouped[a][0]), label(grouped[b][0]), f"{difference:+.2f}", fmt(threshold), verdict]))
    return lines


def across_data_sets(records: dict[str, dict]) -> list[str]:
    """Every arm on both data sets, side by side: its test NLL (mean over seeds) and −ELBO − NLL, and its rank among
    the arms the second data set has (the seed-0 runs alone on both, and the means), so the reader sees
    whether MNIST's order holds."""
    second = arms(records, "fashion_mnist")
    if not second:
        return []
    first = arms(records, "mnist")
    keys = [(m, p) for m, p in {(runs[0]["model"], runs[0]["prior"]) for runs in second.values()}
            if arm_name("mnist", m, p) in first]

    def nll(data: str, key: tuple, seed0: bool) -> float:
        runs = (first if data == "mnist" else second)[arm_name(data, *key)]
        return statistics.mean(r["test"]["nll"] for r in runs if r["seed"] == 0 or not seed0)

    def ranks(data: str, seed0: bool) -> dict[tuple, int]:
        return {key: i for i, key in enumerate(sorted(keys, key=lambda k: nll(data, k, seed0)), 1)}

    def gap(data: str, key: tuple) -> float:
        runs = (first if data == "mnist" else second)[arm_name(data, *key)]
        return statistics.mean(-r["test"]["elbo"] - r["test"]["nll"] for r in runs)

    rank = {(data, seed0): ranks(data, seed0) for data in DATASETS for seed0 in (True, False)}
    lines = ["| model | MNIST: test NLL (seeds) | rank, seed 0 / mean | −ELBO − NLL | Fashion-MNIST: test NLL (seeds) | "
             "rank, seed 0 / mean | −ELBO − NLL |", "|---|---|---|---|---|---|---|"]
    for key in sorted(keys, key=lambda k: nll("fashion_mnist", k, False)):
        cells = []
        for data, grouped in (("mnist", first), ("fashion_mnist", second)):
            runs = grouped[arm_name(data, *key)]
            cells += [f"{mean_sd([r['test']['nll'] for r in runs])} ({len(runs)})",
                      f"{rank[data, True][key]} / {rank[data, False][key]}", fmt(gap(data, key))]
        lines.append(markdown.table_row([label(first[arm_name("mnist", *key)][0]), *cells]))
    return lines


def seed0_mnist(records: dict[str, dict]) -> list[dict]:
    """The seed-0 MNIST training runs and the VAE's equal-time run."""
    return [r for r in records.values() if r.get("kind") in ("train", "equal_time") and r["data"] == "mnist" and r["seed"] == 0]


def equal_time(records: dict[str, dict], spe: int) -> tuple[list[float], list[str]]:
    """Every seed-0 MNIST run (and the VAE's longer run) at two training times, both at the step costs measured side
    by side: the shortest 20-particle run's (every 20-particle run trained at least that long, so none of them is cut
    short) and their median (the VAE's equal-time run is sized to it; a run that stopped sooner is marked). Each cell
    is the best val NLL validated within the time, with the minute of that validation (runs validate every few epochs)."""
    runs = [r for r in seed0_mnist(records) if cost_minutes(records, r, spe) is not None]
    trained = [r["epochs"] * cost_minutes(records, r, spe) for r in runs if r["kind"] == "train" and r["model"] in TWENTY_PARTICLES]
    if not trained:
        return [], []
    budgets = [min(trained), statistics.median(trained)]
    lines = [markdown.table_row(["model", "minutes trained", *(f"best val NLL within {b:.1f} min (validated at minute)" for b in budgets)]),
             "|---|---|" + "---|" * len(budgets)]
    for r in sorted(runs, key=lambda r: (r["model"], r["prior"] or "", r["kind"])):
        per_epoch = cost_minutes(records, r, spe)
        cells = []
        for budget in budgets:
            within = [(v, epoch_of(step, spe)) for step, v in r["curves"]["nll"] if epoch_of(step, spe) * per_epoch <= budget * 1.001]
            value, epoch = min(within) if within else (None, None)
            stopped = " (its run stopped sooner)" if r["epochs"] * per_epoch < budget * 0.999 else ""
            cells.append(f"{fmt(value)} ({epoch * per_epoch:.1f}){stopped}" if value is not None else "—")
        lines.append(markdown.table_row([label(r) + (" (equal-time run)" if r["kind"] == "equal_time" else ""),
                                         f"{r['epochs'] * per_epoch:.1f}", *cells]))
    return budgets, lines


def is_resolution(record: dict) -> list[str]:
    counts = sorted(next(iter(record["is_resolution"].values())), key=int)
    lines = [markdown.table_row(["run", *(f"NLL, K = {k}" for k in counts), f"−ELBO (K = {counts[-1]})",
                                 f"NLL(K = {counts[0]}) − NLL(K = {counts[-1]}) ± s.e. over images"]), "|---|" + "---|" * (len(counts) + 2)]
    for name, by_count in record["is_resolution"].items():
        low, high = (by_count[counts[0]]["nll"], by_count[counts[-1]]["nll"])
        gap = [a - b for a, b in zip(low, high)]
        se = statistics.stdev(gap) / math.sqrt(len(gap)) if len(gap) > 1 else float("nan")
        lines.append(markdown.table_row([name, *(fmt(statistics.mean(by_count[k]["nll"])) for k in counts),
                                         fmt(-statistics.mean(by_count[counts[-1]]["elbo"])), f"{statistics.mean(gap):+.3f} ± {fmt(se, 3)}"]))
    jsa = next((name for name in record["is_resolution"] if name.split("-")[1] == "jsa"), None)
    if jsa is None:
        return lines
    # A difference between two runs at each K, paired over the same images: does it move as K grows?
    lines += ["", f"Each run − {jsa}, paired over the same images (mean ± s.e.):", "",
              markdown.table_row(["run", *(f"K = {k}" for k in counts)]), "|---|" + "---|" * len(counts)]
    for name, by_count in record["is_resolution"].items():
        if name == jsa:
            continue
        cells = []
        for k in counts:
            paired = [a - b for a, b in zip(by_count[k]["nll"], record["is_resolution"][jsa][k]["nll"], strict=True)]
            se = statistics.stdev(paired) / math.sqrt(len(paired)) if len(paired) > 1 else float("nan")
            cells.append(f"{statistics.mean(paired):+.2f} ± {fmt(se)}")
        lines.append(markdown.table_row([name, *cells]))
    return lines


def gradient_table(record: dict) -> list[str]:
    lines = ["| after epoch | estimator | encoder: tr Cov | encoder: SNR | decoder: tr Cov | decoder: SNR |", "|---|---|---|---|---|---|"]
    for epoch, by_model in record["gradients"].items():
        for model, groups in by_model.items():
            lines.append(markdown.table_row([epoch, LABELS[model], f"{groups['encoder']['variance']:.3g}", f"{groups['encoder']['snr']:.3g}",
                                             f"{groups['decoder']['variance']:.3g}", f"{groups['decoder']['snr']:.3g}"]))
    return lines


def plot_equal_cost(records: dict[str, dict], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spe, batch = args.steps_per_epoch, 200
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5), sharey=True)
    for i, r in enumerate(sorted(seed0_mnist(records), key=lambda r: (r["model"], r["prior"] or "", r["kind"]))):
        points = r["curves"]["nll"]
        per_epoch = cost_minutes(records, r, spe) or math.nan
        forward, backward = decoder_rows(r)
        style = dict(marker="o", markersize=3, label=label(r) + (" (equal time)" if r["kind"] == "equal_time" else ""),
                     color=f"C{i % 10}", linestyle="--" if r["prior"] == "autoregressive" else "-")
        axes[0].plot([epoch_of(s, spe) * per_epoch for s, _ in points], [v for _, v in points], **style)
        # Forward and backward rows apart: JSA scores 21 candidates without gradient but back-propagates few.
        axes[1].plot([(s + 1) * batch * forward for s, _ in points], [v for _, v in points], **style)
        axes[2].plot([(s + 1) * batch * backward for s, _ in points], [v for _, v in points], **style)
    axes[0].set_xlabel("training time (min: epochs x the step cost measured side by side, one thread)")
    axes[1].set_xlabel("decoder rows run forward")
    axes[2].set_xlabel("decoder rows run backward")
    axes[0].set_ylabel("val NLL (nats)")
    for ax in axes[1:]:
        ax.set_xscale("log")
    for ax in axes:
        ax.set_ylim(top=min(120, ax.get_ylim()[1]))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, args.out / "equal_cost.png", dpi=110)
    plt.close(fig)


def write(args: argparse.Namespace) -> Path:
    records = read_records(args.out)
    spe = args.steps_per_epoch
    findings = args.out / "FINDINGS.md"
    jobs = plan(args, records)
    # a Fashion-MNIST seed-0 run still to come may land close to another arm and add seeds: the plan may grow
    may_grow = any(j.data == "fashion_mnist" and j.seed == 0 and j.name not in records for j in jobs)
    done = sum(j.name in records for j in jobs)
    progress = f"all {done} records" if done == len(jobs) else f"{done} of {len(jobs)} records so far" + (
        "; the plan grows if a Fashion-MNIST seed-0 run still to come lands close to another arm" if may_grow else "")
    lines = [read_regular(findings).decode() if findings.exists() else "# The field study", "",
             f"Protocol: `experiment=jsa_paper` (configs/experiment/jsa_paper.yaml) for {args.epochs} epochs, val NLL from "
             f"{args.val_samples} importance samples every {args.val_every} epochs, test NLL and ELBO from 1000 samples at "
             f"the epoch of best val NLL. Written by `python -m benchmarks.studies.field.study` ({progress}); every run's command "
             "is in commands.txt. MNIST arms get "
             f"{args.seeds} seeds; a Fashion-MNIST arm gets one, and {args.seeds} where its seed-0 test NLL is within {CLOSE:g} nat "
             "of an arm it is compared with.", "",
             runner.machines_line([r for r in records.values() if r.get("kind") in ("train", "equal_time")])]
    for data, name in DATASETS.items():
        grouped = arms(records, data)
        if not grouped:
            continue
        lines += ["", f"## {name}: test NLL, mean ± sd over seeds", "", *results_table(records, grouped, spe, args), "",
                  "Differences (a difference counts when it exceeds t × s.e., the 95% threshold of a two-sample t-test with "
                  "pooled variance; – below two seeds a side):", "", *differences(grouped, data)]
    beside = across_data_sets(records)
    if beside:
        lines += ["", "## MNIST beside Fashion-MNIST: does the order hold?", "",
                  "The arms Fashion-MNIST has, ranked on each data set among themselves, on the seed-0 runs alone "
                  "(the same footing on both) and on the means over seeds; −ELBO − NLL is the encoder's gap, mean over seeds.",
                  "", *beside]
    budgets, table = equal_time(records, spe)
    if budgets:
        plot_equal_cost(records, args)
        lines += ["", "## Equal cost (MNIST, seed 0): the same training time each, at the step costs measured side by side "
                  "(measure-step-cost, one thread)", "",
                  f"{budgets[0]:.1f} min is the shortest 20-particle run's {args.epochs} epochs, so no 20-particle run is cut "
                  f"short there; {budgets[1]:.1f} min is the median of their training times, the time the VAE's equal-time run "
                  f"was given. A run validates every {args.val_every} epochs, so each value is the best validation within the "
                  "time, at the minute in brackets.", "",
                  *table, "",
                  "![val NLL against training time, decoder rows run forward and decoder rows run backward](equal_cost.png)"]
    if "measure-is-resolution" in records:
        record = records["measure-is-resolution"]
        lines += ["", "## The importance-sampling estimate's resolution (MNIST, seed 0, the best run of each family, the "
                  f"first {record['settings']['images']} test images)", "", *is_resolution(record)]
    if "measure-gradients" in records:
        settings = records["measure-gradients"]["settings"]
        lines += ["", f"## Gradient noise at shared parameters ({REFERENCE}'s checkpoints; {settings['repeats']} estimates on "
                  f"each of {settings['batches']} training batches, means over the batches)", "",
                  "Each estimator's gradient is that of its own objective (JSA and RWS: the inclusive KL for the encoder; "
                  "VIMCO: the 20-sample bound; REINFORCE and Gumbel: the ELBO), so tr Cov compares different quantities; "
                  "the SNR, ||E g||² / tr Cov g, is scale-free and comparable across estimators.", "",
                  *gradient_table(records["measure-gradients"])]
    write_file(args.out / "commands.txt", "\n".join(r["command"] for r in records.values() if "command" in r) + "\n")
    report = args.out / "report.md"
    write_file(report, "\n".join(lines) + "\n")
    return report
