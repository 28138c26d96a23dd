"""Learned priors over discrete codes (docs/priors.md): what they cost per step, and what they buy.

    python -m benchmarks.studies.prior_study                # the cost table, the training runs (resumable), the report
    python -m benchmarks.studies.prior_study --cost-only    # the cost table only, measured again (a few minutes)
    python -m benchmarks.studies.prior_study --report-only  # the report from the finished runs
    python -m benchmarks.studies.prior_study --lanes 2      # two runs at once (one thread each on two cores)

The cost of each prior, side by side in one process, and JSA's and the VQ-VAE's quality with each at equal epochs;
the settings of both: benchmarks/results/priors/README.md."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.lib import arguments, markdown, runner
from benchmarks.lib.packing import study_folder
from benchmarks.lib.records import read_curves
from benchmarks.lib.stats import t_threshold
from common.files import read_regular, write_file

JSA_PRIORS = ["uniform", "factorized", "autoregressive"]
STAGE1 = "vqvae-mlp-autoregressive-s0"  # the VQ-VAE run whose last checkpoint the second stage starts from
STAGE2 = "vqvae-mlp-autoregressive-stage2-s0"


# ---- cost --------------------------------------------------------------------------------------
def measure_cost(data_dir: str, repeats: int, warm_up: int = 2) -> dict:
    import torch

    from datamodules import MNISTDataModule
    from models import JSA

    torch.manual_seed(0)
    datamodule = MNISTDataModule(data_dir=data_dir, binarize="static")
    datamodule.setup("fit")
    layouts = {"mlp": (128, ["uniform", "factorized", "autoregressive"]),
               "conv": (32, ["uniform", "factorized", "autoregressive", "pixelcnn"])}
    results = {}
    for backbone, (batch, priors) in layouts.items():
        x, index = datamodule.train_set.__getitems__(list(range(batch)))
        models = {p: JSA(backbone=backbone, prior=p, num_categories=10, code_dim=16, mis_steps=10, cache_size=batch) for p in priors}
        optimizers = {p: m.configure_optimizers() for p, m in models.items()}

        def train_step(prior: str) -> None:
            terms = models[prior].training_loss(x, index)
            optimizers[prior].zero_grad()
            terms["loss"].backward()
            optimizers[prior].step()

        def scoring(prior: str) -> tuple:
            model = models[prior]
            candidates = torch.randint(10, (batch, 21, model.num_latents))  # L = 20: L + 1 candidates per example
            return (lambda: model.prior.log_prob(candidates),
                    lambda: model.likelihood.log_prob(x.unsqueeze(1), model.decoder_output(candidates.flatten(0, 1)).unflatten(0, (batch, 21))))

        times: dict[str, list[float]] = {}
        with torch.no_grad():
            score_fns = {p: scoring(p) for p in priors}
        for repeat in range(warm_up + repeats):  # round robin, so that drift hits every prior alike; warm-up rounds first
            for prior in priors:
                for name, fn in (("step", lambda: train_step(prior)),
                                 ("prior_scoring", score_fns[prior][0]), ("decoder_scoring", score_fns[prior][1])):
                    grad = torch.enable_grad() if name == "step" else torch.no_grad()
                    with grad:
                        start = time.perf_counter()
                        fn()
                        elapsed = (time.perf_counter() - start) * 1000
                    if repeat >= warm_up:
                        times.setdefault(f"{prior}/{name}", []).append(elapsed)
        results[backbone] = {"batch": batch, **{key: statistics.median(values) for key, values in times.items()}}
        print(f"cost {backbone}: " + ", ".join(f"{k} {v:.1f}" for k, v in results[backbone].items()), flush=True)
    return results


# ---- training runs -------------------------------------------------------------------------------
def plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    common = [f"trainer.max_epochs={args.epochs}", "trainer.check_val_every_n_epoch=1", "model.val_num_samples=100", "run_test=false"]
    jobs = [(f"jsa-{prior}-s{seed}", ["model=jsa", f"model.prior={prior}", f"seed={seed}", *common])
            for seed in range(args.seeds) for prior in JSA_PRIORS]
    flat_vqvae = ["model.backbone=mlp", "model.num_categories=10", "model.code_dim=16"]
    jobs += [(STAGE1, ["model=vqvae", *flat_vqvae, "model.prior=autoregressive", "seed=0", *common]),
             ("vqvae-conv-pixelcnn-s0", ["model=vqvae", "model.prior=pixelcnn", "seed=0", *common])]
    stage1 = runner.last_checkpoint(args.logs / STAGE1) or Path("<the stage-1 run's last.ckpt>")
    stage2 = [f"trainer.max_epochs={args.stage2_epochs}", "trainer.check_val_every_n_epoch=1", "model.val_num_samples=100", "run_test=false"]
    jobs.append((STAGE2,
                 ["model=vqvae_prior", *flat_vqvae, "model.prior=autoregressive", f"model.autoencoder_checkpoint={stage1}", "seed=0", *stage2]))
    return jobs


def run(name: str, overrides: list[str], args: argparse.Namespace) -> dict:
    if name == STAGE2 and not (args.out / "runs" / f"{STAGE1}.json").exists():
        raise runner.NotYet(f"needs the finished stage-1 run {STAGE1}")  # run_pending tries again once another finishes
    if name == STAGE2 and runner.last_checkpoint(args.logs / STAGE1) is None:  # its record was copied in without its logs
        raise SystemExit(f"{STAGE2} starts from {STAGE1}'s last.ckpt, and there is none under {args.logs / STAGE1}")
    run_dir, seconds, command = runner.train(name, [*overrides, *args.extra], args.logs / name)
    return {"name": name, "command": command, "seconds": seconds, **read_curves(run_dir)}


# ---- report ----------------------------------------------------------------------------------------
def last(record: dict, curve: str) -> float | None:
    points = record["curves"].get(curve) or []
    return points[-1][1] if points else None


def fmt(value: float | None) -> str:
    return "—" if value is None or value != value else f"{value:.2f}"  # None or nan: not measured


def write_report(args: argparse.Namespace) -> Path:
    cost_path = args.out / "cost.json"
    records = runner.read_records(args.out)
    lines = ["# Learned priors over discrete codes", "",
             "Written by `python -m benchmarks.studies.prior_study` (docs/priors.md). Machine: 2 CPU cores, no GPU.", ""]
    if cost_path.exists():
        cost = runner.read_json(cost_path)
        lines += ["## Cost", "",
                  "ms per JSA training step at L = 10 (MIS, loss, backward, Adam; medians of interleaved repeats), and the "
                  "batched scoring of all B·(L+1) candidates at L = 20 in one pass: the prior's log p(h) against the "
                  "decoder's log p(x | h).", "",
                  "| layout | batch | prior | ms/step | step / uniform step | prior scoring (ms) | decoder scoring (ms) | prior / decoder |",
                  "|---|---|---|---|---|---|---|---|"]
        for backbone, row in cost.items():
            base = row["uniform/step"]
            for prior in [k.split("/")[0] for k in row if k.endswith("/step")]:
                lines.append(markdown.table_row([
                    backbone, row["batch"], prior, f"{row[prior + '/step']:.1f}", f"{row[prior + '/step'] / base:.2f}×",
                    f"{row[prior + '/prior_scoring']:.2f}", f"{row[prior + '/decoder_scoring']:.1f}",
                    f"{row[prior + '/prior_scoring'] / row[prior + '/decoder_scoring']:.3f}"]))
        lines.append("")
    jsa = {prior: [v for name, r in records.items() if name.startswith(f"jsa-{prior}-s") and (v := last(r, "nll")) is not None]
           for prior in JSA_PRIORS}
    if any(jsa.values()):
        lines += ["## JSA with each prior", "",
                  f"MNIST (binarized), MLP, 20 latents × 10 classes, L = 10, {args.epochs} epochs; val IS-NLL (5,000 images, "
                  "100 samples) in nats, per seed; mean ± sample sd over seeds; the difference from the uniform prior "
                  "against t × s.e., the 95% threshold of a pooled two-sample t-test. Their cost per step: the table above.", "",
                  "| prior | per seed | mean ± sd | − uniform | t × s.e. |", "|---|---|---|---|---|"]
        base = jsa["uniform"]
        for prior, values in jsa.items():
            if not values:
                continue
            sd = statistics.stdev(values) if len(values) > 1 else float("nan")
            difference, threshold = "—", "—"
            if prior != "uniform" and base:
                difference = f"{statistics.mean(values) - statistics.mean(base):+.2f}"
                base_sd = statistics.stdev(base) if len(base) > 1 else float("nan")
                threshold = fmt(t_threshold(sd, len(values), base_sd, len(base)))
            lines.append(markdown.table_row([prior, ", ".join(f"{v:.2f}" for v in values),
                                             f"{statistics.mean(values):.2f} ± {fmt(sd)}", difference, threshold]))
        lines.append("")
    vq = [(n, r) for n, r in records.items() if n.startswith("vqvae-")]
    if vq:
        lines += ["## VQ-VAE: the uniform-prior bound and the learned-prior bound", "",
                  "val bounds in nats, -log p(x | z_q(x)) - log p(k(x)), from the same run: with the learned prior (fit "
                  "alongside on the stop-gradient codes; `stage2`: then alone on the frozen autoencoder) and with the "
                  "uniform prior K^-n. The `stage2` run starts from the stage-1 run's last checkpoint.", "",
                  "| run | epochs of this run | bound, uniform prior | bound, learned prior | difference |", "|---|---|---|---|---|"]
        for name, record in vq:
            learned, uniform = last(record, "nll"), last(record, "nll_uniform_prior")
            epochs = len(record["epoch_time_s"])
            diff = f"{uniform - learned:.2f}" if learned is not None and uniform is not None else "—"
            lines.append(markdown.table_row([name, epochs, fmt(uniform), fmt(learned), diff]))
        lines.append("")
    findings = args.out / "FINDINGS.md"  # written by hand from the numbers above, kept with them
    if findings.exists():
        lines += [read_regular(findings).decode().rstrip(), ""]
    if records:
        lines += ["## Commands", "", *[f"- `{markdown.one_line(r['command'])}`" for r in records.values()], ""]
    report = args.out / "report.md"
    write_file(report, "\n".join(lines))
    return report


def main(argv: list[str] | None = None) -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5, help="epochs of every training run (default 5)")
    parser.add_argument("--stage2-epochs", type=int, default=2, help="epochs of the VQ-VAE's second stage (default 2)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of each JSA run (default 3)")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats of each cost measurement (default 10)")
    parser.add_argument("--warm-up", type=arguments.integer(0), default=2, help="untimed rounds before them (default 2)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/priors"), help="report, cost.json and run records")
    parser.add_argument("--logs", type=Path, default=Path("logs/priors"), help="the runs' TensorBoard logs and checkpoints")
    parser.add_argument("--cost-only", action="store_true", help="measure the cost table (again) and nothing else")
    parser.add_argument("--report-only", action="store_true", help="write the report from what was measured")
    runner.add_run_selection_arguments(parser)
    parser.add_argument("extra", nargs="*", help="more train.py overrides for every run (e.g. trainer.limit_train_batches=2)")
    args = parser.parse_args(argv)
    if min(args.epochs, args.stage2_epochs, args.seeds, args.repeats, args.lanes) < 1:
        parser.error("--epochs, --stage2-epochs, --seeds, --repeats and --lanes must be >= 1")
    names = [name for name, _ in plan(args)]
    if args.only and not runner.selected(names, args.only):  # before the cost table's minutes, not after
        parser.error(f"--only {','.join(args.only)}: no planned run matches; the plan's runs: {', '.join(names)}")
    runner.check_directory_options(parser, args, ("out", "logs"))
    runs = study_folder(args.out, "runs")
    if args.report_only:
        runner.read_records(args.out, report_only=True)
    runs.mkdir(parents=True, exist_ok=True)
    cost_path = args.out / "cost.json"
    if args.cost_only or not (args.report_only or cost_path.exists()):  # a resumed study keeps the costs it measured
        data_dir = os.environ.get("DATA_DIR", "data")
        write_file(cost_path, json.dumps(measure_cost(data_dir, args.repeats, args.warm_up), indent=1) + "\n")
    if not (args.report_only or args.cost_only):
        # The plan is made again for each run: the second stage names the first stage's checkpoint.
        runner.run_pending([name for name, _ in plan(args)], args.out / "runs",
                           lambda name: run(name, dict(plan(args))[name], args), lambda record: f", val/nll {last(record, 'nll'):.2f}",
                           lanes=args.lanes, only=args.only)
    print(f"report: {write_report(args)}")


if __name__ == "__main__":
    main()
