"""Which training steps write to the loggers, so that per-step values are handed to Lightning only there.

Lightning writes a `self.log(..., on_step=True)` value to the loggers only every `trainer.log_every_n_steps` steps
(and keeps the latest in `trainer.callback_metrics`), but each `self.log` call costs about a millisecond of Python
on every step (it moves its bookkeeping to the value's device through `apply_to_collection`), a measurable share of
a small model's step on CPU (benchmarks/speed/loop_overhead.py; figures in benchmarks/results/speed/loop_overhead.txt). Values computed at other steps would
never be written, so they are not logged there at all (but at an epoch's or the run's last step, for
`trainer.callback_metrics`).
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
