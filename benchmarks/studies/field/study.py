"""The field study: is JSA better than its rivals, and at what cost? Every discrete estimator under the JSA paper's
protocol for 30 epochs and three seeds, with the uniform and the MADE prior, the Gaussian VAE beside them, binarized
Fashion-MNIST too, every model at equal training time, the IS estimator's resolution and the gradients' noise.

    python -m benchmarks.studies.field.study                  # every run and measurement (resumable), then the report
    python -m benchmarks.studies.field.study --report-only    # the report from the finished records
    python -m benchmarks.studies.field.study --lanes 2        # two runs at once, one thread each (results' lanes.md)
    python -m benchmarks.studies.field.study --only 'mnist-*-s1,mnist-*-s2' --lanes 4   # a subset, on another machine

The order of the runs and the measurements: benchmarks/results/field-study/README.md."""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.lib import runner
from benchmarks.lib.records import read_curves
from benchmarks.studies.field.plan import (DATASETS, LABELS, REFERENCE, REFERENCE_EPOCHS, TWENTY_PARTICLES, Job,
                                               plan, read_records, seed0_mnist_runs)

MEASURING = threading.Lock()  # the in-process measurements one at a time (Hydra's config state is global)


def train_overrides(job: Job, args: argparse.Namespace) -> list[str]:
    settings = ["experiment=jsa_paper", f"model={job.model}", f"data={job.data}", f"seed={job.seed}",
                f"trainer.max_epochs={job.epochs}", f"trainer.check_val_every_n_epoch={args.val_every}",
                f"model.val_num_samples={args.val_samples}", "run_test=true"]
    if job.prior:
        settings.append(f"model.prior={job.prior}")
    if job.name == REFERENCE:  # its parameters at each validation, for the gradient measurements
        settings.append("+callbacks.epoch_checkpoints={_target_:lightning.pytorch.callbacks.ModelCheckpoint,"
                        "every_n_epochs:1,save_top_k:-1,filename:'after-epoch{epoch:03d}',auto_insert_metric_name:false}")
    return settings + job.overrides + args.extra


def minutes_per_epoch(records: dict[str, dict], name: str, args: argparse.Namespace) -> float:
    """A run's training minutes per epoch at the step cost measured side by side (measure-step-cost), not from its own
    log: the runs share the machine with different work at different times (their logged epoch times vary 2x)."""
    return records["measure-step-cost"]["ms_per_step"][name] * args.steps_per_epoch / 60_000


def equal_time_epochs(records: dict[str, dict], model: str, args: argparse.Namespace) -> int:
    """Epochs that give `model` at least the training time of the 20-particle estimators' seed-0 MNIST runs (their
    median), in whole validation periods."""
    budget = statistics.median(records[name]["epochs"] * minutes_per_epoch(records, name, args)
                               for name in seed0_mnist_runs(args, TWENTY_PARTICLES))
    epochs = math.ceil(budget / minutes_per_epoch(records, f"mnist-{model}-s0", args))
    return max(args.val_every, math.ceil(epochs / args.val_every) * args.val_every)


def run_job(job: Job, args: argparse.Namespace) -> dict:
    records = read_records(args.out)

    def needs(names: list[str]) -> None:
        missing = [name for name in names if name not in records]
        if missing:
            raise runner.NotYet(f"needs {', '.join(missing)}")

    if job.kind == "equal_time":
        needs(seed0_mnist_runs(args) + ["measure-step-cost"])
        job.epochs = equal_time_epochs(records, job.model, args)
    if job.kind in ("train", "equal_time"):
        run_dir, seconds, command = runner.train(job.name, train_overrides(job, args), args.logs / job.name)
        return {**asdict(job), "command": command, "seconds": seconds, **read_curves(run_dir)}
    needs(seed0_mnist_runs(args))
    with MEASURING:
        return {**asdict(job), **measure(job, records, args)}


def measure(job: Job, records: dict[str, dict], args: argparse.Namespace) -> dict:
    """The in-process measurements at the seed-0 runs' parameters, with the settings they were made with."""
    from benchmarks.lib import at_checkpoints

    began = time.perf_counter()
    if job.kind == "step_cost":
        runs = {name: (at_checkpoints.best_checkpoint(args.logs / name), records[name]["command"]) for name in seed0_mnist_runs(args)}
        result = at_checkpoints.step_cost(runs, args.cost_rounds, args.cost_seconds, device=args.cost_device)
        result["settings"] = {"rounds": args.cost_rounds, "seconds": args.cost_seconds, "device": args.cost_device}
    elif job.kind == "is_resolution":
        runs = {name: (at_checkpoints.best_checkpoint(args.logs / name), records[name]["command"]) for name in best_of_each_family(records)}
        result = at_checkpoints.is_resolution(runs, args.is_images, args.is_samples)
        result["settings"] = {"images": args.is_images, "samples": sorted(args.is_samples)}
    else:
        epochs = [epoch for epoch in REFERENCE_EPOCHS if epoch <= args.epochs] or [args.epochs]  # (a short study: its end)
        checkpoints = {epoch: epoch_checkpoint(args.logs / REFERENCE, epoch) for epoch in epochs}
        models = [m for m in TWENTY_PARTICLES if m in args.models]
        result = at_checkpoints.gradient_quality(checkpoints, records[REFERENCE]["command"], models, args.grad_batches,
                                                 args.grad_repeats)
        result["settings"] = {"batches": args.grad_batches, "repeats": args.grad_repeats}
    return {**result, "seconds": time.perf_counter() - began}


def best_of_each_family(records: dict[str, dict]) -> list[str]:
    """Per model, the seed-0 MNIST run (uniform or MADE prior) with the lower test NLL."""
    best: dict[str, dict] = {}
    for r in records.values():
        if r.get("kind") == "train" and r["data"] == "mnist" and r["seed"] == 0 and "nll" in r["test"]:
            if r["model"] not in best or r["test"]["nll"] < best[r["model"]]["test"]["nll"]:
                best[r["model"]] = r
    return [r["name"] for r in best.values()]


def epoch_checkpoint(log_dir: Path, epoch: int) -> Path:
    found = sorted(log_dir.glob(f"tensorboard/*/version_0/checkpoints/after-epoch{epoch - 1:03d}.ckpt"))  # Lightning counts from 0
    if len(found) != 1:
        raise SystemExit(f"{log_dir}: no checkpoint after epoch {epoch} (written with each validation, every "
                         f"--val-every epochs); found {len(found)}")
    return found[0]


# ---- the report ---------------------------------------------------------------------------------


def write_report(args: argparse.Namespace) -> Path:
    from benchmarks.studies.field import report

    return report.write(args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=30, help="epochs of every training run (default 30)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of every MNIST arm (default 3)")
    parser.add_argument("--models", type=lambda text: text.split(","), default=list(LABELS),
                        help=f"comma-separated subset of {','.join(LABELS)} (default: all)")
    parser.add_argument("--datasets", type=lambda text: text.split(","), default=list(DATASETS),
                        help=f"comma-separated subset of {','.join(DATASETS)} (default: both)")
    parser.add_argument("--is-images", type=int, default=500, help="test images of the IS-resolution measurement")
    parser.add_argument("--is-samples", type=runner.counts, default=[1000, 5000, 20000],
                        help="importance samples of the IS-resolution measurement (default 1000,5000,20000)")
    parser.add_argument("--cost-rounds", type=int, default=5, help="alternating rounds of the step-cost timing")
    parser.add_argument("--cost-seconds", type=float, default=2.0,
                        help="seconds (at least) each model's steps are timed for in each round (default 2)")
    parser.add_argument("--cost-device", default="cpu",
                        help="where measure-step-cost times the steps: cpu (one thread, the default: the equal-time "
                             "runs' time axis) or cuda (its own record, measure-step-cost-cuda)")
    parser.add_argument("--grad-batches", type=int, default=4, help="training batches per gradient measurement")
    parser.add_argument("--grad-repeats", type=int, default=16, help="gradient estimates per batch (>= 2)")
    runner.add_study_arguments(parser, out="benchmarks/results/field-study", logs="logs/field-study")
    args = parser.parse_args(argv)
    runner.check_study_arguments(parser, args, ("epochs", "seeds", "lanes", "val_every", "val_samples", "steps_per_epoch",
                                                "is_images", "grad_batches", "cost_rounds"),
                                 {"models": (args.models, list(LABELS)), "datasets": (args.datasets, list(DATASETS))})
    if args.grad_repeats < 2:  # --is-samples: runner.counts refuses a count below 1
        parser.error("need --grad-repeats >= 2")
    if not (math.isfinite(args.cost_seconds) and args.cost_seconds > 0):
        parser.error(f"--cost-seconds must be a finite number > 0, got {args.cost_seconds}")
    planned: list[str] = []
    while not args.report_only:  # again while the finished records add runs to the plan (close Fashion-MNIST arms)
        jobs = {job.name: job for job in plan(args)}
        if list(jobs) == planned:
            break
        planned = list(jobs)
        runner.run_pending(planned, args.out / "runs", lambda name: run_job(jobs[name], args), runner.test_nll, lanes=args.lanes,
                           only=args.only)
    print(f"report: {write_report(args)}")


if __name__ == "__main__":
    main()
