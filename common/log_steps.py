"""Which training steps write to the loggers, so that per-step values are handed to Lightning only there.

Lightning writes an `on_step=True` value only every `trainer.log_every_n_steps` steps, but each `self.log` call costs
Python time on every step, a measurable share of a small model's step (benchmarks/speed/loop_overhead.py). So values
are logged only at the steps that write them, and at an epoch's or the run's last step (for `trainer.callback_metrics`).
"""

from __future__ import annotations

import lightning as L


def is_logging_step(trainer: L.Trainer) -> bool:
    """True in a training step (or its batch hooks) whose logged values reach the loggers: Lightning's rule,
    `(steps taken + 1) % log_every_n_steps == 0` for one optimizer; also at an epoch's last batch and the run's
    last step, so that `trainer.callback_metrics` ends with the final training values."""
    every = trainer.log_every_n_steps
    last = trainer.is_last_batch or trainer.should_stop or trainer.global_step + 1 == trainer.max_steps
    return last or (every > 0 and (trainer.global_step + 1) % every == 0)
