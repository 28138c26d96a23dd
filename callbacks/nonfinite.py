"""Stop training when a loss term becomes NaN or inf, and never checkpoint such a state.

A model's `training_step` returns `{"loss": ..., "terms": {name: value}}` (models/base.py). Each
term's finiteness is accumulated on the device (no host sync per step) and checked every
`check_every_n_steps` steps (by default the trainer's `log_every_n_steps`) and before every
checkpoint is written. Under DDP the ranks' flags are gathered first, so all ranks stop together
and none is left waiting in a collective.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor


class NonFiniteLossGuard(L.Callback):
    """Raises `FloatingPointError` naming the loss terms that became NaN or inf."""

    def __init__(self, check_every_n_steps: int | None = None) -> None:
        if check_every_n_steps is not None and check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be >= 1 (or null for trainer.log_every_n_steps), got {check_every_n_steps}")
        self.check_every_n_steps = check_every_n_steps
        self._names: tuple[str, ...] = ()  # the loss terms, in the order of `_finite`
        self._finite: Tensor | None = None  # per term: stayed finite since the last check (one device tensor)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        terms = outputs.get("terms", {"loss": outputs["loss"]}) if isinstance(outputs, dict) else {}
        if terms:
            names = tuple(terms)
            if self._finite is not None and names != self._names:  # other terms than before: settle the old ones first
                self.check(trainer)
            values = list(terms.values())
            if all(value.dim() == 0 for value in values):
                # The usual case, detached scalars (models/base.py): one stack, one isfinite and one `&` per step,
                # whatever their number (each torch call costs microseconds of dispatch on a CPU).
                finite = torch.isfinite(torch.stack(values))
            else:  # a term of another shape (self.log also takes one-element tensors): each reduced on its own
                finite = torch.stack([torch.isfinite(value).all() for value in values])
            self._names, self._finite = names, finite if self._finite is None else self._finite & finite
        every = self.check_every_n_steps or trainer.log_every_n_steps
        if every > 0 and (batch_idx + 1) % every == 0:  # 0 (Lightning logs nothing): checked on save only
            self.check(trainer)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.check(trainer)  # runs before the file is written

    def check(self, trainer: L.Trainer) -> None:
        """One host sync: raise if a term was NaN or inf at any step since the last check."""
        if self._finite is None:
            return
        names, finite = self._names, self._finite
        if trainer.world_size > 1:
            finite = trainer.strategy.all_gather(finite.to(torch.uint8)).all(dim=0)
        self._finite = None
        bad = [f"train/{name}" for name, ok in zip(names, finite.tolist()) if not ok]
        if bad:
            last = trainer.checkpoint_callback.last_model_path if trainer.checkpoint_callback else ""
            raise FloatingPointError(
                f"{', '.join(bad)} became NaN or inf (at or before step {trainer.global_step}); training stopped and no "
                f"checkpoint was written with that state. Last good checkpoint: {last or 'none yet'}. Resume from it "
                "with a smaller learning rate (model.lr) or gradient clipping (trainer.gradient_clip_val)."
            )
