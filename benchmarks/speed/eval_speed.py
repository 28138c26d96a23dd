"""Importance-sampled evaluation against the machine's matmul throughput (docs/vae.md#importance-sampled-log-likelihood).

    python -m benchmarks.speed.eval_speed [--batch-size 64] [--samples 200] [--models vae,jsa] [--chunk-sizes 20 100]

For each model: one evaluation call against the same matrix products replayed alone (the matmul floor), their
ratio, the FLOPs and GFLOP/s, and where the rest of the time goes; `--chunk-sizes` compares `eval_chunk_size`
values, `--test-images N` times the whole test stage (needs DATA_DIR).
How: benchmarks/results/speed/README.md#how-each-benchmark-measures.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import Counter

import torch
from torch.utils.flop_counter import FlopCounterMode
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.lib import arguments
from benchmarks.lib.timing import median_seconds, paired
from configs.settings import ModelSettings
from models import JSA, VAE, VQVAE, DiscreteVAE

MODELS = {"vae": VAE, "jsa": JSA, "dvae": DiscreteVAE, "vqvae": VQVAE}
ROUNDS = 5  # alternating rounds of eval and its matmul floor (benchmarks/lib/timing.py)
# Under inference_mode nn.Linear reaches the dispatcher as aten.linear (with grad mode, as addmm).
MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default, torch.ops.aten.linear.default,
           torch.ops.aten.convolution.default}


def median_s(fn, min_run_time: float) -> float:
    return median_seconds(fn, min_run_time, num_threads=torch.get_num_threads())  # evaluation runs on all threads


class RecordMatmuls(TorchDispatchMode):
    """The shapes of every matrix product run inside the mode, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            self.calls.append((func, tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)))
        return func(*args, **(kwargs or {}))


def replay(calls: list[tuple]):
    """A function that runs the recorded matmuls on random float32 tensors of the same shapes."""
    inputs = [(func, [torch.randn(s) if isinstance(s, tuple) else s for s in shapes]) for func, shapes in calls]

    def run() -> None:
        for func, args in inputs:
            func(*args)

    return run


def top_operators(fn, rows: int = 8) -> str:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def bench_model(name: str, x: torch.Tensor, num_samples: int, chunk_size: int, min_run_time: float, profile: bool) -> dict:
    torch.manual_seed(0)
    model = MODELS[name](eval_chunk_size=chunk_size).eval()
    prepared = model.likelihood.prepare(x)

    def evaluate() -> None:
        with torch.inference_mode():
            model.importance_estimate(prepared, None, num_samples)

    evaluate()  # warm-up
    with FlopCounterMode(display=False) as flops:
        evaluate()
    with RecordMatmuls() as record:
        evaluate()
    eval_s, floor_s, ratio = paired(evaluate, replay(record.calls), lambda fn: median_s(fn, min_run_time / ROUNDS), ROUNDS)
    total = flops.get_total_flops()
    row = {"model": name, "eval_ms": 1e3 * eval_s, "floor_ms": 1e3 * floor_s, "ratio": ratio,
           "gflop": total / 1e9, "gflops_eval": total / eval_s / 1e9, "gflops_floor": total / floor_s / 1e9,
           "matmuls": dict(Counter(str(f).split(".")[-2] for f, _ in record.calls))}
    if profile:
        row["profile"] = top_operators(evaluate)
    return row


def bench_test_stage(name: str, num_images: int, batch_size: int, chunk_size: int, min_run_time: float) -> dict:
    import lightning as L

    from datamodules import MNISTDataModule

    torch.manual_seed(0)
    model = MODELS[name](eval_chunk_size=chunk_size)
    data = MNISTDataModule(batch_size=batch_size, eval_batch_size=batch_size, binarize="dynamic")
    data.setup("test")
    batch = next(iter(data.test_dataloader()))[0]
    prepared = model.likelihood.prepare(batch)

    def step() -> None:
        with torch.inference_mode():
            model.importance_estimate(prepared, None, model.eval_num_samples["test"])

    step()
    per_batch = median_s(step, min_run_time)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_test_batches=num_images // batch_size)
    started = time.perf_counter()
    trainer.test(model, datamodule=data, verbose=False)
    stage = time.perf_counter() - started
    batches = num_images // batch_size
    return {"model": name, "images": batches * batch_size, "samples": model.eval_num_samples["test"], "stage_s": stage,
            "steps_s": batches * per_batch, "ratio": stage / (batches * per_batch),
            "full_test_min": stage / (batches * batch_size) * 10_000 / 60}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=arguments.integer(1), default=64)
    parser.add_argument("--samples", type=arguments.integer(1), default=200)
    parser.add_argument("--models", type=arguments.names(list(MODELS)), default=["vae", "jsa"])
    parser.add_argument("--min-run-time", type=arguments.number(0), default=1.0, help="seconds each timing runs for, over its 5 rounds (default 1)")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's top operators of one call per model")
    parser.add_argument("--test-images", type=arguments.integer(0), default=0, help="also time Trainer.test on this many test images")
    parser.add_argument("--chunk-sizes", type=arguments.integer(1), nargs="+", default=[ModelSettings.eval_chunk_size],
                        help="eval_chunk_size values to measure side by side (default: the models' default)")
    args = parser.parse_args(argv)
    generator = torch.Generator().manual_seed(0)
    x = torch.bernoulli(torch.full((args.batch_size, 1, 28, 28), 0.13), generator=generator)
    print(f"threads={torch.get_num_threads()} batch={args.batch_size} samples={args.samples} torch={torch.__version__}")
    print(f"{'model':>6} {'chunk':>6} {'eval ms':>9} {'matmul floor ms':>16} {'ratio':>6} {'GFLOP':>7} {'GFLOP/s eval':>13} {'GFLOP/s matmuls':>16}")
    for name, chunk in itertools.product(args.models, args.chunk_sizes):
        row = bench_model(name, x, args.samples, chunk, args.min_run_time, args.profile)
        print(f"{name:>6} {chunk:>6} {row['eval_ms']:>9.1f} {row['floor_ms']:>16.1f} {row['ratio']:>5.2f}x {row['gflop']:>7.2f} "
              f"{row['gflops_eval']:>13.1f} {row['gflops_floor']:>16.1f}   {row['matmuls']}")
        if args.profile:
            print(row["profile"])
    if args.test_images:
        print(f"\nThe test stage (Trainer.test) vs its steps alone, {args.test_images} MNIST test images")
        for name, chunk in itertools.product(args.models, args.chunk_sizes):
            row = bench_test_stage(name, args.test_images, args.batch_size, chunk, args.min_run_time)
            print(f"{name:>6}, chunk {chunk}: {row['images']} images x {row['samples']} samples: stage {row['stage_s']:.1f} s, steps alone "
                  f"{row['steps_s']:.1f} s ({row['ratio']:.2f}x); the full 10k test set at this rate: {row['full_test_min']:.1f} min")


if __name__ == "__main__":
    main()
