"""The JSA study: JSA against RWS, VIMCO, REINFORCE+B* and Gumbel-softmax on one categorical model, under the JSA
paper's protocol, with the Gaussian VAE and the VQ-VAE at matched networks as context, seed spread, and an ablation
of JSA's settings (the groups of runs: benchmarks/results/jsa-study/README.md).

    python -m benchmarks.studies.jsa_study                       # the whole study (resumable), then the report
    python -m benchmarks.studies.jsa_study --report-only         # the report from the finished runs
    python -m benchmarks.studies.jsa_study --epochs 500 --short-epochs 50 --val-samples 1000 --out benchmarks/results/jsa-study-500
                                                         # the paper's 500 epochs: a GPU machine's job
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.lib import markdown, runner
from benchmarks.lib.records import epoch_of, read_curves
from benchmarks.lib.stats import fmt, t_threshold
from benchmarks.lib.plots import save_figure
from common.files import read_regular, write_file

ESTIMATORS = ["jsa", "rws", "vimco", "dvae", "dvae_gumbel"]  # the discrete estimators (dvae: REINFORCE with B*)
CONTEXT = ["vae", "vqvae"]
LABELS = {"jsa": "JSA", "rws": "RWS", "vimco": "VIMCO", "dvae": "REINFORCE+B*", "dvae_gumbel": "Gumbel-softmax",
          "vae": "Gaussian VAE", "vqvae": "VQ-VAE (uniform-prior bound)"}
COLORS = {model: f"C{i}" for i, model in enumerate(ESTIMATORS + CONTEXT)}  # one colour per model in every plot
ABLATION = {  # JSA's settings under jsa_paper, one changed at a time
    "L1": ["model.mis_steps=1"],
    "L5": ["model.mis_steps=5"],
    "cache_from_epoch0": ["model.cache_start_epoch=0"],
    "final_state_gradient": ["model.gradient_states=final"],
    "learned_prior": ["model.prior=factorized"],
}


@dataclass
class Job:
    name: str
    group: str  # main | seeds | ablation
    model: str
    seed: int
    epochs: int
    overrides: list[str] = field(default_factory=list)
    test: bool = False


def plan(args: argparse.Namespace) -> list[Job]:
    # The cheap context runs first, then JSA and the other estimators; the ablation before the extra seeds.
    models = [m for m in CONTEXT + ["dvae_gumbel", "jsa", "vimco", "rws", "dvae"] if m in args.models]
    jobs = [Job(f"main-{m}-s0", "main", m, 0, args.epochs, test=True) for m in models]
    if "jsa" in args.models:
        jobs += [Job(f"ablation-jsa-{name}-s0", "ablation", "jsa", 0, args.short_epochs, ABLATION[name]) for name in args.ablations]
    jobs += [Job(f"seeds-{m}-s{s}", "seeds", m, s, args.short_epochs) for s in range(1, args.seeds) for m in ESTIMATORS if m in args.models]
    return jobs


def overrides(job: Job, args: argparse.Namespace) -> list[str]:
    return ["experiment=jsa_paper", f"model={job.model}", f"seed={job.seed}",
            f"trainer.max_epochs={job.epochs}", f"trainer.check_val_every_n_epoch={args.val_every}",
            f"model.val_num_samples={args.val_samples}", f"run_test={str(job.test).lower()}", *job.overrides, *args.extra]


def run_job(job: Job, args: argparse.Namespace) -> dict:
    """Train (or resume) one run, then read its curves and test numbers from TensorBoard into a JSON record."""
    run_dir, seconds, command = runner.train(job.name, overrides(job, args), args.logs / job.name)
    return {**asdict(job), "command": command, "seconds": seconds, **read_curves(run_dir)}


def decoder_evaluations(record: dict) -> str:
    """Decoder passes per example and step, without / with gradient (the cost the estimators are compared at)."""
    model, settings = record["model"], dict(o.split("=", 1) for o in record["overrides"])
    if model == "jsa":
        steps = int(settings.get("model.mis_steps", 20))
        with_grad = steps if settings.get("model.gradient_states", "chain") == "chain" else 1
        return f"{steps + 1} + {with_grad}"
    if model in ("rws", "vimco", "dvae"):
        return f"0 + {settings.get('model.num_samples', 20)}"
    return "0 + 1"


def value_at_epoch(record: dict, epoch: int, steps_per_epoch: int) -> float | None:
    for step, value in record["curves"]["nll"]:
        if epoch_of(step, steps_per_epoch) == epoch:
            return value
    return None


def training_minutes(record: dict, steps_per_epoch: int) -> dict[int, float]:
    """Epoch -> minutes of training up to its end, as epochs × the run's median epoch time: the epochs' times
    (validation excluded) less the time the gradient-variance measurements took (logged by runs from the
    callback's second version on). The median keeps an epoch slowed by other load on the machine from
    counting (a CPU benchmark shares the machine with the work around it)."""
    measuring: dict[int, float] = {}
    for step, seconds in record["curves"].get("grad_variance_time_s", []):
        epoch = int(step // steps_per_epoch) + 1
        measuring[epoch] = measuring.get(epoch, 0.0) + seconds
    net = {epoch_of(step, steps_per_epoch): seconds for step, seconds in record["epoch_time_s"]}
    net = {epoch: seconds - measuring.get(epoch, 0.0) for epoch, seconds in net.items()}
    if not net:
        return {}
    typical = statistics.median(net.values())
    return {epoch: epoch * typical / 60 for epoch in sorted(net)}


def write_report(args: argparse.Namespace) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = runner.read_records(args.out)
    by_group = {g: [r for r in records.values() if r["group"] == g] for g in ("main", "seeds", "ablation")}
    spe = args.steps_per_epoch
    lines = ["# JSA study: JSA against RWS, VIMCO, REINFORCE+B* and Gumbel-softmax", "",
             f"Protocol: `experiment=jsa_paper` (configs/experiment/jsa_paper.yaml; docs/jsa.md#the-papers-protocol) with "
             f"val NLL from {args.val_samples} importance samples every {args.val_every} epochs and test NLL from 1000 "
             "samples at the epoch of best val NLL. Written by `python -m benchmarks.studies.jsa_study` "
             f"({len(records)} of {len(plan(args))} runs finished); every run's command is in commands.txt.", ""]

    main = sorted(by_group["main"], key=lambda r: (r["model"] in CONTEXT, r["test"].get("nll", math.inf)))
    lines += [f"## Main runs: {args.epochs} epochs, seed 0", "",
              "| model | test NLL (nats, 1000 samples) | best val NLL | epoch of best val | ms per step | "
              "decoder passes per example and step (no grad + grad) | training time (min) | encoder grad variance (last) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in main:
        nll = r["curves"]["nll"]
        best = min(nll, key=lambda sv: sv[1]) if nll else None
        step_ms = statistics.median(v for _, v in r["curves"]["step_time_ms"]) if r["curves"]["step_time_ms"] else None
        enc = r["curves"]["encoder_grad_variance"]
        lines.append(markdown.table_row([
            LABELS[r["model"]], fmt(r["test"].get("nll")), fmt(best[1] if best else None), epoch_of(best[0], spe) if best else "–",
            fmt(step_ms, 0), decoder_evaluations(r), fmt(max(training_minutes(r, spe).values(), default=None), 1),
            fmt(enc[-1][1], 3) if enc else "–"]))

    # Equal wall time: the shortest total training time among the 20-particle estimators; each model's best
    # val NLL among the validations it reached within that time.
    budgets = [max(training_minutes(r, spe).values()) for r in main if r["model"] in ("jsa", "rws", "vimco", "dvae") and r["epoch_time_s"]]
    if budgets:
        budget = min(budgets)
        lines += ["", f"At equal training time ({budget:.1f} min of training, validation and gradient-variance measurements "
                  f"excluded: the shortest run of the 20-particle estimators), the best val NLL each model had reached:", "",
                  "| model | best val NLL within the time | epochs done by then |", "|---|---|---|"]
        for r in main:
            reached = training_minutes(r, spe)
            within = [v for st, v in r["curves"]["nll"] if reached.get(epoch_of(st, spe), math.inf) <= budget * 1.001]
            epochs = max((e for e, t in reached.items() if t <= budget * 1.001), default=0)
            lines.append(markdown.table_row([LABELS[r["model"]], fmt(min(within) if within else None), epochs]))

    lines += ["", f"## Seed spread: val NLL (nats, {args.val_samples} samples) after {args.short_epochs} epochs", "",
              "| estimator | seeds | mean | sd | values |", "|---|---|---|---|---|"]
    spread = {}
    for model in ESTIMATORS:
        runs = [r for r in by_group["main"] + by_group["seeds"] if r["model"] == model]
        values = [v for v in (value_at_epoch(r, args.short_epochs, spe) for r in runs) if v is not None]
        if values:
            sd = statistics.stdev(values) if len(values) > 1 else float("nan")
            spread[model] = (statistics.mean(values), sd, len(values))
            lines.append(markdown.table_row([LABELS[model], len(values), fmt(spread[model][0]), fmt(sd), ", ".join(fmt(v) for v in values)]))
    if "jsa" in spread:
        lines += ["", "Differences from JSA (means over seeds). A difference counts as larger than the seed noise when it "
                  "exceeds t × s.e., the 95% threshold of a two-sample t-test with pooled variance (s.e. = "
                  "s_pooled · sqrt(1/n_a + 1/n_b), t with n_a + n_b − 2 degrees of freedom):", "",
                  "| estimator | mean − JSA's mean | t × s.e. | larger than the seed noise? |", "|---|---|---|---|"]
        mean_j, sd_j, n_j = spread["jsa"]
        for model, (mean, sd, n) in spread.items():
            if model == "jsa":
                continue
            se2 = t_threshold(sd, n, sd_j, n_j)
            verdict = "–" if not math.isfinite(se2) else ("yes" if abs(mean - mean_j) > se2 else "no")
            lines.append(markdown.table_row([LABELS[model], f"{mean - mean_j:+.2f}", fmt(se2), verdict]))

    lines += ["", f"## JSA ablation: val NLL after {args.short_epochs} epochs, seed 0, one setting changed", "",
              "| variant | val NLL | acceptance rate (last) | cache hit rate (last) | ms per step |", "|---|---|---|---|---|"]
    base = next((r for r in by_group["main"] if r["model"] == "jsa"), None)
    for name, r in [("paper setting (L=20, chain gradient, cache from epoch 300, uniform prior)", base)] + [
            (r["name"].removeprefix("ablation-jsa-").removesuffix("-s0"), r) for r in by_group["ablation"]]:
        if r is None:
            continue
        # The same budget for every row: the main run's values up to the short budget's end.
        acc, hit = ([p for p in r["curves"][tag] if p[0] < args.short_epochs * spe] for tag in ("acceptance_rate", "cache_hit_rate"))
        early = [v for s, v in r["curves"]["step_time_ms"] if s <= args.short_epochs * spe]
        lines.append(markdown.table_row([name, fmt(value_at_epoch(r, args.short_epochs, spe)), fmt(acc[-1][1], 3) if acc else "–",
                                         fmt(hit[-1][1], 3) if hit else "–", fmt(statistics.median(early), 0) if early else "–"]))
    if "jsa" in spread:
        lines.append(f"\nJSA's seed-to-seed sd at this budget is {fmt(spread['jsa'][1])} nats; two single runs differ by "
                     f"sqrt(2) × that from noise alone, so differences below {fmt(2 * math.sqrt(2) * spread['jsa'][1])} nats "
                     "(two standard deviations of the difference) are not evidence.")

    plot_study(plt, records, args)
    lines += ["", "## Plots", "", "![val NLL against epochs](val_nll_epochs.png)", "",
              "![val NLL against training time](val_nll_time.png)", "",
              "![encoder gradient variance](grad_variance.png)", "", "![JSA's sampler](jsa_sampler.png)", ""]
    findings = args.out / "FINDINGS.md"
    if findings.exists():
        lines += [read_regular(findings).decode()]
    write_file(args.out / "commands.txt", "\n".join(r["command"] for r in records.values()) + "\n")
    report = args.out / "report.md"
    write_file(report, "\n".join(lines) + "\n")
    return report


def plot_study(plt, records: dict, args: argparse.Namespace) -> None:
    main = [r for r in records.values() if r["group"] == "main"]
    spe = args.steps_per_epoch
    for name, x_of in (("val_nll_epochs", lambda r, s: epoch_of(s, spe)), ("val_nll_time", None)):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in main:
            points = r["curves"]["nll"]
            if x_of is None:  # training minutes (validation and measurements excluded) up to each val point
                minutes = training_minutes(r, spe)
                xs = [minutes.get(epoch_of(s, spe), math.nan) for s, _ in points]
            else:
                xs = [x_of(r, s) for s, _ in points]
            ax.plot(xs, [v for _, v in points], marker="o", label=LABELS[r["model"]], color=COLORS[r["model"]])
        ax.set_xlabel("epoch" if x_of else "training time (min, CPU, 2 cores)")
        ax.set_ylabel("val NLL (nats)")
        ax.set_ylim(top=min(140, ax.get_ylim()[1]))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        save_figure(fig, args.out / f"{name}.png", dpi=110)
        plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, group in zip(axes, ("encoder", "decoder")):
        for r in main:
            points = r["curves"][f"{group}_grad_variance"]
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], label=LABELS[r["model"]], color=COLORS[r["model"]])
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(f"trace of the {group}'s gradient covariance")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, args.out / "grad_variance.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in records.values():
        if r["model"] != "jsa" or r["group"] == "seeds":
            continue
        label = "paper setting" if r["group"] == "main" else r["name"].removeprefix("ablation-jsa-").removesuffix("-s0")
        for ax, tag in zip(axes, ("acceptance_rate", "cache_hit_rate")):
            points = r["curves"][tag]
            ax.plot([(s + 1) / spe for s, _ in points], [v for _, v in points], label=label)
    for ax, tag in zip(axes, ("MIS acceptance rate", "cache hit rate")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(tag)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, args.out / "jsa_sampler.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=30, help="epochs of the main runs (default 30)")
    parser.add_argument("--short-epochs", type=int, default=5, help="epochs of the seed and ablation runs (default 5)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per estimator at the short budget (default 3)")
    runner.add_study_arguments(parser, out="benchmarks/results/jsa-study", logs="logs/jsa-study")
    parser.add_argument("--models", type=lambda text: text.split(","), default=CONTEXT + ESTIMATORS,
                        help=f"comma-separated subset of {','.join(CONTEXT + ESTIMATORS)} (default: all)")
    parser.add_argument("--ablations", type=lambda text: text.split(","), default=list(ABLATION),
                        help=f"comma-separated subset of JSA's ablation runs {','.join(ABLATION)} (default: all)")
    args = parser.parse_args(argv)
    runner.check_study_arguments(parser, args, ("epochs", "short_epochs", "lanes", "val_every", "val_samples", "steps_per_epoch", "seeds"),
                                 {"models": (args.models, CONTEXT + ESTIMATORS), "ablations": (args.ablations, list(ABLATION))})
    if args.short_epochs % args.val_every or args.short_epochs > args.epochs:
        parser.error("need --short-epochs a multiple of --val-every and at most --epochs")
    if not args.report_only:
        jobs = {job.name: job for job in plan(args)}
        runner.run_pending(list(jobs), args.out / "runs", lambda name: run_job(jobs[name], args), runner.test_nll,
                           lanes=args.lanes, only=args.only)
    print(f"report: {write_report(args)}")


if __name__ == "__main__":
    main()
