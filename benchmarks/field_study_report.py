"""The field study's report (benchmarks/field_study.py): FINDINGS.md (written by hand from the tables) first, then
the tables and plots regenerated from the run records in `--out/runs/`."""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from benchmarks.field_study import (DATASETS, LABELS, PRIOR_LABELS, REFERENCE, TWENTY_PARTICLES, arm_name, decoder_rows,
                                    plan)
from benchmarks.jsa_study import epoch_of, fmt, t_threshold, training_minutes


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


def results_table(grouped: dict[str, list[dict]], spe: int, args: argparse.Namespace) -> list[str]:
    lines = ["| model | seeds | test NLL (1000 samples) | test −ELBO | epoch of best val NLL | ms per step | "
             "decoder rows per example and step (forward / backward) | training min (seed 0) |", "|---|---|---|---|---|---|---|---|"]
    for runs in sorted(grouped.values(), key=lambda runs: statistics.mean(r["test"]["nll"] for r in runs)):
        best_epochs = [epoch_of(min(r["curves"]["nll"], key=lambda p: p[1])[0], spe) for r in runs if r["curves"]["nll"]]
        steps = [v for r in runs for _, v in r["curves"]["step_time_ms"]]
        forward, backward = decoder_rows(runs[0], args)
        minutes = max(training_minutes(runs[0], spe).values(), default=None)
        lines.append(f"| {label(runs[0])} | {len(runs)} | {mean_sd([r['test']['nll'] for r in runs])} | "
                     f"{mean_sd([-r['test']['elbo'] for r in runs])} | {', '.join(map(str, best_epochs))} | "
                     f"{fmt(statistics.median(steps), 0) if steps else '–'} | {forward:.1f} / {backward:.1f} | {fmt(minutes, 1)} |")
    return lines


def differences(grouped: dict[str, list[dict]], data: str) -> list[str]:
    """Each arm against JSA with the same prior, and each estimator's MADE prior against its uniform one."""
    pairs = [(arm_name(data, m, p), arm_name(data, "jsa", p)) for m in LABELS for p in ("uniform", "autoregressive") if m != "jsa"]
    pairs += [(arm_name(data, m, "autoregressive"), arm_name(data, m, "uniform")) for m in LABELS]
    pairs += [(arm_name(data, "vae", None), arm_name(data, "jsa", p)) for p in ("uniform", "autoregressive")]
    lines = ["| A | B | mean A − mean B (nats) | t × s.e. (95%) | beyond the seed noise? |", "|---|---|---|---|---|"]
    for a, b in pairs:
        if a not in grouped or b not in grouped:
            continue
        va, vb = ([r["test"]["nll"] for r in grouped[name]] for name in (a, b))
        sd = [statistics.stdev(v) if len(v) > 1 else float("nan") for v in (va, vb)]
        threshold = t_threshold(sd[0], len(va), sd[1], len(vb))
        difference = statistics.mean(va) - statistics.mean(vb)
        verdict = "–" if not math.isfinite(threshold) else ("yes" if abs(difference) > threshold else "no")
        lines.append(f"| {label(grouped[a][0])} | {label(grouped[b][0])} | {difference:+.2f} | {fmt(threshold)} | {verdict} |")
    return lines


def equal_time(records: dict[str, dict], spe: int) -> tuple[float | None, list[str]]:
    """Every seed-0 MNIST run (and the VAE's longer run) at the 20-particle estimators' median training time."""
    runs = [r for r in records.values() if r["kind"] in ("train", "equal_time") and r["data"] == "mnist" and r["seed"] == 0
            and r["epoch_time_s"]]
    budgets = [max(training_minutes(r, spe).values()) for r in runs if r["kind"] == "train" and r["model"] in TWENTY_PARTICLES]
    if len(budgets) < 2:
        return None, []
    budget = statistics.median(budgets)
    lines = ["| model | epochs trained | best val NLL within the time | epochs done by then |", "|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["model"], r["prior"] or "", r["kind"])):
        reached = training_minutes(r, spe)
        within = [v for s, v in r["curves"]["nll"] if reached.get(epoch_of(s, spe), math.inf) <= budget * 1.001]
        epochs = max((e for e, t in reached.items() if t <= budget * 1.001), default=0)
        lines.append(f"| {label(r)}{' (equal-time run)' if r['kind'] == 'equal_time' else ''} | {r['epochs']} | "
                     f"{fmt(min(within) if within else None)} | {epochs} |")
    return budget, lines


def is_resolution(record: dict) -> list[str]:
    lines = ["| run | " + " | ".join(f"NLL, K = {k}" for k in record["is_resolution"][next(iter(record["is_resolution"]))]) +
             " | −ELBO | NLL(K min) − NLL(K max) ± s.e. |", "|---|" + "---|" * (len(next(iter(record["is_resolution"].values()))) + 2)]
    for name, by_count in record["is_resolution"].items():
        counts = sorted(by_count, key=int)
        low, high = (by_count[counts[0]]["nll"], by_count[counts[-1]]["nll"])
        gap = [a - b for a, b in zip(low, high)]
        se = statistics.stdev(gap) / math.sqrt(len(gap)) if len(gap) > 1 else float("nan")
        lines.append(f"| {name} | " + " | ".join(fmt(statistics.mean(by_count[k]["nll"])) for k in counts) +
                     f" | {fmt(-statistics.mean(by_count[counts[-1]]['elbo']))} | {statistics.mean(gap):+.3f} ± {fmt(se, 3)} |")
    return lines


def gradient_table(record: dict) -> list[str]:
    lines = ["| after epoch | estimator | encoder: tr Cov | encoder: SNR | decoder: tr Cov | decoder: SNR |", "|---|---|---|---|---|---|"]
    for epoch, by_model in record["gradients"].items():
        for model, groups in by_model.items():
            lines.append(f"| {epoch} | {LABELS[model]} | {groups['encoder']['variance']:.3g} | {groups['encoder']['snr']:.3g} | "
                         f"{groups['decoder']['variance']:.3g} | {groups['decoder']['snr']:.3g} |")
    return lines


def plot_equal_cost(records: dict[str, dict], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spe, batch = args.steps_per_epoch, 200
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    runs = [r for r in records.values() if r["kind"] in ("train", "equal_time") and r["data"] == "mnist" and r["seed"] == 0]
    for i, r in enumerate(sorted(runs, key=lambda r: (r["model"], r["prior"] or "", r["kind"]))):
        points = r["curves"]["nll"]
        minutes = training_minutes(r, spe)
        forward, backward = decoder_rows(r, args)
        style = dict(marker="o", markersize=3, label=label(r) + (" (equal time)" if r["kind"] == "equal_time" else ""),
                     color=f"C{i % 10}", linestyle="--" if r["prior"] == "autoregressive" else "-")
        axes[0].plot([minutes.get(epoch_of(s, spe), math.nan) for s, _ in points], [v for _, v in points], **style)
        axes[1].plot([(s + 1) * batch * (forward + backward) for s, _ in points], [v for _, v in points], **style)
    axes[0].set_xlabel("training time (min, 2-core CPU; validation and measurements excluded)")
    axes[1].set_xlabel("decoder rows processed (forward + backward)")
    axes[1].set_xscale("log")
    for ax in axes:
        ax.set_ylabel("val NLL (nats)")
        ax.set_ylim(top=min(120, ax.get_ylim()[1]))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "equal_cost.png", dpi=110)
    plt.close(fig)


def write(args: argparse.Namespace) -> Path:
    records = {p.stem: json.loads(p.read_text()) for p in sorted((args.out / "runs").glob("*.json"))}
    spe = args.steps_per_epoch
    findings = args.out / "FINDINGS.md"
    lines = [findings.read_text() if findings.exists() else "# The field study", "",
             f"Protocol: `experiment=jsa_paper` (configs/experiment/jsa_paper.yaml) for {args.epochs} epochs, val NLL from "
             f"{args.val_samples} importance samples every {args.val_every} epochs, test NLL and ELBO from 1000 samples at "
             f"the epoch of best val NLL. Written by `python -m benchmarks.field_study` ({len(records)} of {len(plan(args))} "
             "records); every run's command is in commands.txt."]
    for data, name in DATASETS.items():
        grouped = arms(records, data)
        if not grouped:
            continue
        lines += ["", f"## {name}: test NLL, mean ± sd over seeds", "", *results_table(grouped, spe, args), "",
                  "Differences (a difference counts when it exceeds t × s.e., the 95% threshold of a two-sample t-test with "
                  "pooled variance; – below two seeds a side):", "", *differences(grouped, data)]
    budget, table = equal_time(records, spe)
    if budget is not None:
        plot_equal_cost(records, args)
        lines += ["", f"## Equal cost (MNIST, seed 0): {budget:.1f} min of training each", "", *table, "",
                  "![val NLL against training time and against decoder rows](equal_cost.png)"]
    if "measure-is-resolution" in records:
        lines += ["", "## The importance-sampling estimate's resolution (MNIST, seed 0, the first "
                  f"{args.is_images} test images)", "", *is_resolution(records["measure-is-resolution"])]
    if "measure-gradients" in records:
        lines += ["", f"## Gradient noise at shared parameters ({REFERENCE}'s checkpoints; {args.grad_repeats} estimates on "
                  f"each of {args.grad_batches} training batches, means over the batches)", "",
                  *gradient_table(records["measure-gradients"])]
    (args.out / "commands.txt").write_text("\n".join(r["command"] for r in records.values() if "command" in r) + "\n")
    report = args.out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report
