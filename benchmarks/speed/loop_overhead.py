"""The training step inside `python train.py` (Trainer.fit with every default callback, the TensorBoard logger and the
progress bar) against the bare step, so that a feature cannot quietly add host syncs or per-step work.

    python -m benchmarks.speed.loop_overhead [--models jsa,vae] [--steps 120] [--repeats 3]

Each step inside the trainer is paired with a bare step taken just before it, so that the machine's drift falls on
both; fit / bare splits into Lightning's own loop (lightning / bare) and what the collection adds (fit / lightning).
How: benchmarks/results/speed/README.md#how-each-benchmark-measures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import lightning as L
import torch

from benchmarks.lib import arguments

WARM_UP = 10


class BareStep:
    """One training step of a model built from `cfg`, without Lightning: the next batch, the loss, backward, Adam."""

    def __init__(self, cfg) -> None:
        import launch.hydra_app
        from omegaconf import open_dict

        datamodule, self.module = launch.hydra_app.data_and_model(cfg)
        datamodule.setup("fit")
        if self.module.hparams.get("use_cache") and self.module.hparams.get("cache_size") is None:
            # JSA's per-example cache, which the trainer's copy sizes in `setup` (no trainer here): read and
            # written at every step, as there.
            cfg = cfg.copy()
            with open_dict(cfg):
                cfg.model.cache_size = datamodule.num_train_examples
            self.module = launch.hydra_app.data_and_model(cfg)[1]
        self.optimizer = self.module.configure_optimizers()
        self.module.train()
        self.batches = iter(datamodule.train_dataloader())

    def __call__(self) -> None:
        x, index = next(self.batches)
        loss = self.module.training_loss(self.module.likelihood.prepare(x), index)["loss"]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


class StepClock(L.Callback):
    """At the start of every training batch: note the time, then take one bare step, timed (benchmarks.speed.loop_overhead).

    Class-level state: `launch.hydra_app.run` builds the instance from the config."""

    bare: BareStep | None = None
    trainer_steps: list[float] = []
    bare_steps: list[float] = []
    _last: float | None = None

    @classmethod
    def reset(cls, bare: BareStep) -> None:
        cls.bare, cls.trainer_steps, cls.bare_steps, cls._last = bare, [], [], None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        now = time.perf_counter()
        if StepClock._last is not None:
            StepClock.trainer_steps.append(now - StepClock._last)
        StepClock.bare()
        StepClock._last = time.perf_counter()
        StepClock.bare_steps.append(StepClock._last - now)

    @classmethod
    def pairs(cls) -> tuple[list[float], list[float]]:
        """(trainer step, the bare step taken just before it), warm-up left out."""
        return cls.trainer_steps[WARM_UP:], cls.bare_steps[WARM_UP:len(cls.trainer_steps)]


def compose(model: str, steps: int, log_dir: str):
    from launch.checks.hydra_config import compose as composed

    # Fewer steps than an epoch (430 batches of 128): no validation runs before max_steps stops the run.
    return composed([f"model={model}", f"trainer.max_steps={steps}", "trainer.num_sanity_val_steps=0",
                     "run_test=false", f"log_dir={log_dir}", "+callbacks.step_clock._target_=benchmarks.speed.loop_overhead.StepClock"])


def fit_steps(model: str, steps: int) -> tuple[list[float], list[float]]:
    """(steps inside `launch.hydra_app.run`, the bare steps paired with them)."""
    import launch.hydra_app

    from benchmarks.speed import loop_overhead  # the module the config names (this file may run as __main__)

    with tempfile.TemporaryDirectory() as log_dir:
        cfg = compose(model, steps, log_dir)
        loop_overhead.StepClock.reset(BareStep(cfg))
        launch.hydra_app.run(cfg)
    return loop_overhead.StepClock.pairs()


def lightning_steps(model: str, steps: int) -> tuple[list[float], list[float]]:
    """(steps inside a plain `lightning.Trainer`, the bare steps paired with them)."""
    import launch.hydra_app

    from benchmarks.speed import loop_overhead

    with tempfile.TemporaryDirectory() as log_dir:
        cfg = compose(model, steps, log_dir)
    L.seed_everything(cfg.seed, workers=True)
    datamodule, module = launch.hydra_app.data_and_model(cfg)
    module.configure_callbacks = lambda: []  # this instance only: nothing but the loop itself
    loop_overhead.StepClock.reset(BareStep(cfg))
    trainer = L.Trainer(accelerator=cfg.trainer.accelerator, devices=1, precision=cfg.trainer.precision, max_steps=steps,
                        num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[loop_overhead.StepClock()])
    trainer.fit(module, datamodule=datamodule)
    return loop_overhead.StepClock.pairs()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=arguments.names(arguments.MODEL_CONFIGS), default=["jsa", "vae"])
    parser.add_argument("--steps", type=int, default=120, help="training steps of each timed run (default 120, < 430)")
    parser.add_argument("--repeats", type=arguments.integer(1), default=3, help="fit and lightning runs, in turn, per model (default 3)")
    args = parser.parse_args(argv)
    if not WARM_UP + 1 < args.steps < 430:
        parser.error(f"--steps must be > {WARM_UP + 1} (the first {WARM_UP} steps are warm-up) and < 430 (one epoch)")
    print(f"threads={torch.get_num_threads()} steps={args.steps} repeats={args.repeats} torch={torch.__version__}")
    print("median ms of steps paired with a bare step taken just before each (fit's bare / lightning's bare)")
    print(f"{'model':>6} {'fit ms':>7} {'bare ms':>8} {'lightning ms':>13} {'bare ms':>8} {'fit/bare':>9} "
          f"{'lightning/bare':>15} {'fit/lightning':>14} {'mean fit/bare':>14}")
    for model in args.models:
        fit, fit_bare, floor, floor_bare = [], [], [], []
        for _ in range(args.repeats):
            for trainer_steps, bare_steps, run in ((fit, fit_bare, fit_steps), (floor, floor_bare, lightning_steps)):
                paired_trainer, paired_bare = run(model, args.steps)
                trainer_steps += paired_trainer
                bare_steps += paired_bare
        fit_ms, fit_bare_ms, floor_ms, floor_bare_ms = (1e3 * statistics.median(t) for t in (fit, fit_bare, floor, floor_bare))
        fit_ratio, floor_ratio = fit_ms / fit_bare_ms, floor_ms / floor_bare_ms
        mean_ratio = statistics.fmean(fit) / statistics.fmean(fit_bare)
        print(f"{model:>6} {fit_ms:>7.2f} {fit_bare_ms:>8.2f} {floor_ms:>13.2f} {floor_bare_ms:>8.2f} {fit_ratio:>8.3f}x "
              f"{floor_ratio:>14.3f}x {fit_ratio / floor_ratio:>13.3f}x {mean_ratio:>13.3f}x", flush=True)


if __name__ == "__main__":
    main()
