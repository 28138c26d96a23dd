"""What JSA's per-step cache all-gather costs under DDP: 2 processes on CPU (gloo), side by side.

    python -m benchmarks.speed.ddp_cache_gather [--steps 80] [--batch-size 128]

Under DDP every rank keeps the whole MIS cache; each step all-gathers the step's (index, h*) pairs
of all ranks (B x V integers per rank) and writes them (models/jsa.py, `write_cache`). This trains
JSA (MNIST-sized MLP, V=20, K=10, L=10) twice in one run, with the gather and with a local-only
cache write, and prints the median step time of each and the median time spent in `write_cache`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import lightning as L

from datamodules import MNISTDataModule
from callbacks.guards.process_group import ReleaseProcessGroupAtExit
from models import JSA

from benchmarks.lib import arguments


class StepTimes(L.Callback):
    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.starts.append(time.perf_counter())


def timed_write_cache(model: JSA, gather: bool) -> list[float]:
    """Wrap `write_cache` to record its wall time; without `gather`, write only the local pairs."""
    spent: list[float] = []
    original = model.write_cache

    def write(index, latent):
        start = time.perf_counter()
        original(index, latent) if gather else model.cache.write(index, latent, model.step_input("epoch"))
        spent.append(time.perf_counter() - start)

    model.write_cache = write
    return spent


def run(gather: bool, steps: int, batch_size: int) -> tuple[float, float, int]:
    L.seed_everything(0)
    model = JSA(mis_steps=10)
    spent = timed_write_cache(model, gather)
    times = StepTimes()
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=steps, limit_train_batches=steps, limit_val_batches=0,
        num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[times, ReleaseProcessGroupAtExit()],
    )
    trainer.fit(model, datamodule=MNISTDataModule(binarize="dynamic", batch_size=batch_size))
    step_ms = statistics.median(b - a for a, b in zip(times.starts[10:], times.starts[11:])) * 1e3
    return step_ms, statistics.median(spent[10:]) * 1e3, trainer.global_rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=80, help="training steps per run (>= 12: the first 10 are warm-up)")
    parser.add_argument("--batch-size", type=arguments.integer(1), default=128)
    args = parser.parse_args()
    if args.steps < 12:
        parser.error(f"--steps must be at least 12 (the first 10 steps are warm-up), got {args.steps}")
    with_gather = run(True, args.steps, args.batch_size)
    local_only = run(False, args.steps, args.batch_size)
    if with_gather[2] == 0:
        print(f"2-process DDP on CPU (gloo), JSA L=10, batch {args.batch_size} per process, median over steps 11..{args.steps}")
        print(f"step with the cache all-gather:  {with_gather[0]:.2f} ms  (in write_cache: {with_gather[1]:.3f} ms)")
        print(f"step with a local-only write:     {local_only[0]:.2f} ms  (in write_cache: {local_only[1]:.3f} ms)")
        print(f"gather overhead: {with_gather[1] - local_only[1]:.3f} ms per step = "
              f"{100 * (with_gather[1] - local_only[1]) / with_gather[0]:.2f}% of the step")


if __name__ == "__main__":
    main()
