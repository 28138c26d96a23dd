"""Is q fed stale states, or did the posterior get harder? With p_θ frozen at a mid-run checkpoint of the Bernoulli-200
JSA (the cache study's `middle` arm), q is retrained on the cached chain's states (`q_states=chain`) and on fresh
proposals (`q_states=fresh`), and both q's are judged against the same posterior by −ELBO and the IS-NLL with 100 and
5000 samples (benchmarks/results/cache-study/README.md). Writes `--out/diagnosis.json` and `--out/diagnosis.md`.

    python -m benchmarks.studies.cache.diagnosis                 # the checkpoint run (resumable), then the measurement
    python -m benchmarks.studies.cache.diagnosis --q-steps 550   # two epochs of q steps (the default)
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch

from benchmarks.lib import arguments, markdown, runner
from common.files import write_file

MODEL = ["experiment=jsa_paper", "model=jsa", "model.mis_steps=20", "model.num_latents=200", "model.num_categories=2"]


def checkpoint_run(args: argparse.Namespace) -> tuple[Path, str]:
    """Train (or resume) the Bernoulli-200 JSA with the cache read from --cache-from on: (its last.ckpt, its command)."""
    overrides = [*MODEL, f"seed={args.seed}", f"trainer.max_epochs={args.epochs}", f"model.cache_start_epoch={args.cache_from}",
                 f"trainer.check_val_every_n_epoch={args.epochs}", "model.val_num_samples=100", "run_test=false", *args.extra]
    run_dir, _, command = runner.train("bern200-middle", overrides, args.logs / "bern200-middle")
    return run_dir / "checkpoints" / "last.ckpt", command


def retrain_q(model, datamodule, q_states: str, steps: int, lr: float, seed: int) -> tuple[torch.nn.Module, dict]:
    """A copy of `model` whose q took `steps` Adam steps of JSA's q loss with `q_states`, θ frozen; the chains continue
    from (and write to) a copy of the checkpoint's cache, read from the first step."""
    model = copy.deepcopy(model).train()
    model.q_states, model.cache_start_epoch = q_states, 0
    encoder = list(model.encoder_parameters())
    trainable = {id(p) for p in encoder}
    for p in model.parameters():
        p.requires_grad_(id(p) in trainable)
    optimizer = torch.optim.Adam(encoder, lr=lr)
    torch.manual_seed(seed)
    diagnostics: dict[str, list[float]] = {}
    done = 0
    while done < steps:
        for x, index in datamodule.train_dataloader():
            terms = model.training_loss(model.likelihood.prepare(x), index)
            optimizer.zero_grad(set_to_none=True)
            terms["loss_q"].backward()
            optimizer.step()
            for name in ("acceptance_rate", "cache_stuck_rate", "cache_log_weight_gap", "loss_q"):
                diagnostics.setdefault(name, []).append(float(terms[name].detach()))  # off the training path: a measurement
            done += 1
            if done == steps:
                break
    last_fifth = max(1, steps // 5)
    return model.eval(), {name: statistics.mean(values[-last_fifth:]) for name, values in diagnostics.items()}


def evaluate(model, x: torch.Tensor, sample_counts: list[int]) -> dict:
    """Mean IS-NLL per sample count and −ELBO (from the most samples) on the images x, the same seed for every q."""
    from benchmarks.lib.at_checkpoints import importance_estimates

    result = {}
    for count in sorted(sample_counts):
        nll, elbo = importance_estimates(model, x, count)
        result[f"nll_{count}"], result["neg_elbo"] = nll.mean().item(), -elbo.mean().item()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=arguments.integer(1), default=20, help="epochs of the checkpoint run (default 20)")
    parser.add_argument("--cache-from", type=arguments.integer(0), default=10, help="the epoch the cache is read from (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--q-steps", type=arguments.integer(1), default=550, help="q's retraining steps (default 550: two epochs)")
    parser.add_argument("--lr", type=float, default=3e-4, help="q's Adam learning rate (the protocol's, 3e-4)")
    parser.add_argument("--images", type=arguments.integer(1), default=500, help="test images of the measurement (default 500)")
    parser.add_argument("--samples", type=runner.counts, default=[100, 5000], help="importance sample counts (default 100,5000)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cache-study"), help="where diagnosis.json/.md go")
    parser.add_argument("--logs", type=Path, default=Path("logs/cache-diagnosis"), help="the checkpoint run's logs")
    parser.add_argument("extra", nargs="*", help="more train.py overrides of the checkpoint run (e.g. trainer.limit_train_batches=2)")
    args = parser.parse_args(argv)
    runner.check_directory_options(parser, args, ("out", "logs"))
    args.out.mkdir(parents=True, exist_ok=True)

    from benchmarks.lib.at_checkpoints import build, first_test_images, overrides_of

    checkpoint, command = checkpoint_run(args)
    datamodule, built = build(overrides_of(command))
    model = type(built).load_from_checkpoint(checkpoint, map_location="cpu")
    datamodule.setup("fit")
    x = model.likelihood.prepare(first_test_images(datamodule, args.images))
    results = {"checkpoint": {"command": command, **evaluate(model.eval(), x, args.samples)}}
    print(f"checkpoint: {results['checkpoint']}", flush=True)
    for q_states in ("chain", "fresh"):
        retrained, diagnostics = retrain_q(model, datamodule, q_states, args.q_steps, args.lr, args.seed)
        results[q_states] = {**evaluate(retrained, x, args.samples), **diagnostics}
        print(f"q_states={q_states}: {results[q_states]}", flush=True)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "logs")}
    write_file(args.out / "diagnosis.json", json.dumps({"settings": settings, **results}, indent=1) + "\n")
    fewest, most = f"nll_{min(args.samples)}", f"nll_{max(args.samples)}"
    rows = [markdown.table_row([name, f"{r['neg_elbo']:.2f}", f"{r[fewest]:.2f}", f"{r[most]:.2f}", f"{r[fewest] - r[most]:.2f}",
                                *(f"{r[k]:.3f}" if k in r else "–" for k in ("acceptance_rate", "cache_stuck_rate", "cache_log_weight_gap"))])
            for name, r in (("checkpoint's q", results["checkpoint"]), ("q retrained on the chain's states", results["chain"]),
                            ("q retrained on fresh proposals", results["fresh"]))]
    write_file(args.out / "diagnosis.md", "\n".join([
        "# The cache diagnosis: stale states or a harder posterior?", "",
        f"`python -m benchmarks.studies.cache.diagnosis` with θ frozen at epoch {args.epochs} of `{command}`; q retrained for "
        f"{args.q_steps} steps (Adam {args.lr}) each way; {args.images} test images, seed 0 for every estimate. Cache "
        "statistics: means over the last fifth of the retraining.", "",
        markdown.table_row(["q", "−ELBO", f"NLL, {min(args.samples)} samples", f"NLL, {max(args.samples)} samples", "gap",
                            "acceptance", "stuck on the cached state", "log-weight gap, cached − best proposal"]),
        "|---|---|---|---|---|---|---|---|", *rows, ""]))
    print(f"report: {args.out / 'diagnosis.md'}")


if __name__ == "__main__":
    main()
