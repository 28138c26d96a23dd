"""The training step inside `python train.py` (Trainer.fit with every default callback, the TensorBoard logger and the
progress bar) against the bare step, so that a feature cannot quietly add host syncs or per-step work.

    python -m benchmarks.loop_overhead [--models jsa,vae] [--steps 120] [--repeats 3]

For each model, alternately `--repeats` times, on the same real MNIST batches (DATA_DIR):

* `fit`: `train.run` on the composed Hydra config (`model=<name>`, fewer steps than an epoch so that only training
  steps run), with one more callback that notes the time at the start of every training batch: a step is the time from
  one batch's start to the next (the step, logging, callbacks, fetching the next batch);
* `bare`: the same model and data module built from the same config, and a plain loop over the same loader:
  `training_loss`, `zero_grad`, `backward`, `optimizer.step`, the next batch.

The first 10 steps of each are left out (warm-up). Reported: the median step of each, their ratio (issue target
<= 1.05), and the mean ratio (which also carries what happens every N steps, e.g. logging every 50).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

WARM_UP = 10


class StepClock(L.Callback):
    """Notes the time at the start of every training batch (benchmarks.loop_overhead)."""

    starts: list[float] = []  # class-level: train.run builds the instance from the config

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        StepClock.starts.append(time.perf_counter())


def compose(model: str, steps: int, log_dir: str):
    from tests.test_configs import composed

    # Fewer steps than an epoch (430 batches of 128): no validation runs before max_steps stops the run.
    return composed([f"model={model}", f"trainer.max_steps={steps}", "trainer.num_sanity_val_steps=0",
                     "run_test=false", f"log_dir={log_dir}", "+callbacks.step_clock._target_=benchmarks.loop_overhead.StepClock"])


def fit_steps(model: str, steps: int) -> list[float]:
    import train

    from benchmarks import loop_overhead  # the module the config names (this file may run as __main__)

    with tempfile.TemporaryDirectory() as log_dir:
        loop_overhead.StepClock.starts = []
        train.run(compose(model, steps, log_dir))
        starts = loop_overhead.StepClock.starts
    return [b - a for a, b in zip(starts, starts[1:])][WARM_UP:]


def bare_steps(model: str, steps: int) -> list[float]:
    import train

    with tempfile.TemporaryDirectory() as log_dir:
        cfg = compose(model, steps, log_dir)
    L.seed_everything(cfg.seed, workers=True)
    datamodule, module = train.build(cfg)
    datamodule.setup("fit")
    optimizer = module.configure_optimizers()
    module.train()
    batches = iter(datamodule.train_dataloader())
    starts = []
    for _ in range(steps):
        starts.append(time.perf_counter())
        x, index = next(batches)
        loss = module.training_loss(module.likelihood.prepare(x), index)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    starts.append(time.perf_counter())
    return [b - a for a, b in zip(starts, starts[1:])][WARM_UP:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=lambda text: text.split(","), default=["jsa", "vae"])
    parser.add_argument("--steps", type=int, default=120, help="training steps of each timed run (default 120, < 430)")
    parser.add_argument("--repeats", type=int, default=3, help="fit and bare runs, alternately, per model (default 3)")
    args = parser.parse_args(argv)
    if not WARM_UP + 1 < args.steps < 430:
        parser.error(f"--steps must be > {WARM_UP + 1} (the first {WARM_UP} steps are warm-up) and < 430 (one epoch)")
    print(f"threads={torch.get_num_threads()} steps={args.steps} repeats={args.repeats} torch={torch.__version__}")
    print(f"{'model':>6} {'fit median ms':>14} {'bare median ms':>15} {'ratio':>6} {'fit mean ms':>12} {'bare mean ms':>13} {'mean ratio':>11}")
    for model in args.models:
        fit, bare = [], []
        for _ in range(args.repeats):
            bare += bare_steps(model, args.steps)
            fit += fit_steps(model, args.steps)
        fit_median, bare_median = statistics.median(fit), statistics.median(bare)
        fit_mean, bare_mean = statistics.fmean(fit), statistics.fmean(bare)
        print(f"{model:>6} {1e3 * fit_median:>14.2f} {1e3 * bare_median:>15.2f} {fit_median / bare_median:>5.3f}x "
              f"{1e3 * fit_mean:>12.2f} {1e3 * bare_mean:>13.2f} {fit_mean / bare_mean:>10.3f}x", flush=True)


if __name__ == "__main__":
    main()
