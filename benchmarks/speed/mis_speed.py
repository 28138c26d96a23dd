"""Index-cached MIS against the naive MIS (docs/mis.md#cost-model), and JSA's training step against the VAE's.

    python -m benchmarks.speed.mis_speed [--batch-size 128] [--device cpu] [--precision bf16-mixed] [--rounds 5]

Cached against naive MIS calls for L in {1, 4, 16, 64}, the JSA/VAE step ratio beside the cost model's prediction,
and the sequential chain's share of a call, on the same networks and batch in alternating rounds.
How: benchmarks/results/speed/README.md#how-each-benchmark-measures.
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch

from benchmarks.lib import arguments
from benchmarks.lib.timing import median_seconds, paired
from models import JSA, VAE
from samplers import index_cached_mis, mis_chain, naive_mis


MIN_RUN_TIME_S = 1.0  # per measurement, over all its rounds (--min-run-time)
ROUNDS = 5  # --rounds
PRECISIONS = {"32-true": None, "bf16-mixed": torch.bfloat16}  # trainer.precision -> the autocast dtype
AUTOCAST_DTYPE: torch.dtype | None = None  # --precision


def autocast(x: torch.Tensor, dtype: torch.dtype | None):
    return torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None)


def median_ms(fn, min_run_time: float | None = None) -> float:
    return 1e3 * median_seconds(fn, MIN_RUN_TIME_S if min_run_time is None else min_run_time)  # on one thread


def paired_ms(first: Callable[[], object], second: Callable[[], object]) -> tuple[float, float, float]:
    """(first ms, second ms, first / second) over `ROUNDS` alternating rounds (benchmarks/lib/timing.py)."""
    return paired(first, second, lambda fn: median_ms(fn, MIN_RUN_TIME_S / ROUNDS), ROUNDS)


def mnist_like_batch(batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.bernoulli(torch.full((batch_size, 1, 28, 28), 0.13), generator=generator)
    return x.to(device), torch.arange(batch_size, device=device)


def bench_mis_calls(jsa: JSA, x: torch.Tensor, steps: list[int]) -> None:
    print("\n1. One MIS call (ms): cached (index form) vs naive (docs/mis.md#naive-mis)")
    print(f"{'L':>4} {'naive':>10} {'cached':>10} {'speed-up':>9} {'predicted (5L+1)/(L+2)':>24}")
    with torch.no_grad(), autocast(x, AUTOCAST_DTYPE):
        for num_steps in steps:
            naive, cached, speed_up = paired_ms(
                lambda: naive_mis(lambda: jsa.posterior(x), lambda h: jsa.log_joint(x, h), num_steps),
                lambda: index_cached_mis(jsa.posterior(x), lambda h: jsa.log_joint(x, h), num_steps),
            )
            predicted = (5 * num_steps + 1) / (num_steps + 2)
            print(f"{num_steps:>4} {naive:>10.2f} {cached:>10.2f} {speed_up:>8.2f}x {predicted:>23.2f}x")


def train_step_fn(model, x, index, autocast_dtype: torch.dtype | None = None, training_loss=None, fused_adam: bool = False):
    """One forward + backward + Adam step of `model.training_loss` (or of `training_loss`, e.g. the compiled step's
    `model.compiled_training_loss`), under autocast to `autocast_dtype` if given; `fused_adam`: Adam(fused=True)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, **({"fused": True} if fused_adam else {}))
    training_loss = training_loss or model.training_loss

    def step() -> None:
        with autocast(x, autocast_dtype):
            loss = training_loss(x, index)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def bench_train_steps(x: torch.Tensor, index: torch.Tensor, steps: list[int]) -> None:
    print("\n2. One training step (forward + backward + Adam, ms): JSA vs VAE, same MLP backbone")
    vae_step = train_step_fn(VAE(latent_dim=32).to(x.device), x, index, AUTOCAST_DTYPE)
    print(f"{'L':>4} {'JSA':>10} {'VAE':>10} {'JSA/VAE':>9} {'linear model 1+(L+1)/6':>24}")
    for num_steps in steps:
        jsa = JSA(mis_steps=num_steps, cache_size=x.shape[0]).to(x.device)
        jsa_ms, vae_ms, ratio = paired_ms(train_step_fn(jsa, x, index, AUTOCAST_DTYPE), vae_step)
        print(f"{num_steps:>4} {jsa_ms:>10.2f} {vae_ms:>10.2f} {ratio:>8.2f}x {1 + (num_steps + 1) / 6:>23.2f}x")


def bench_loop_share(jsa: JSA, x: torch.Tensor, num_steps: int = 64) -> None:
    print(f"\n3. Share of one cached MIS call spent in the sequential accept/reject loop, L={num_steps}")
    with torch.no_grad(), autocast(x, AUTOCAST_DTYPE):
        sample = index_cached_mis(jsa.posterior(x), lambda h: jsa.log_joint(x, h), num_steps)
        total = median_ms(lambda: index_cached_mis(jsa.posterior(x), lambda h: jsa.log_joint(x, h), num_steps))
        loop = median_ms(lambda: mis_chain(sample.log_target, sample.log_proposal))
    print(f"MIS call {total:.2f} ms, mis_chain {loop:.2f} ms: {100 * loop / total:.1f}% (target < 10%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=arguments.integer(1), default=128)
    parser.add_argument("--device", type=arguments.device, default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--mis-steps", type=arguments.integer(1), nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--train-steps", type=arguments.integer(1), nargs="+", default=[1, 4, 16])
    parser.add_argument("--min-run-time", type=arguments.number(0), default=1.0, help="seconds each timing runs for, over all its rounds (default 1)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of each compared pair (default 5)")
    parser.add_argument("--precision", choices=PRECISIONS, default="32-true", help="32-true (default) or bf16-mixed")
    args = parser.parse_args()
    global MIN_RUN_TIME_S, AUTOCAST_DTYPE, ROUNDS
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    MIN_RUN_TIME_S, AUTOCAST_DTYPE, ROUNDS = args.min_run_time, PRECISIONS[args.precision], args.rounds
    torch.manual_seed(0)
    device = torch.device(args.device)
    x, index = mnist_like_batch(args.batch_size, device)
    print(f"device={device} threads={torch.get_num_threads()} (timings on 1) batch={args.batch_size} rounds={args.rounds} precision={args.precision} "
          f"torch={torch.__version__}")
    jsa = JSA(cache_size=args.batch_size).to(device)
    bench_mis_calls(jsa, x, args.mis_steps)
    bench_train_steps(x, index, args.train_steps)
    bench_loop_share(jsa, x)


if __name__ == "__main__":
    main()
