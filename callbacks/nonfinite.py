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
        self._finite: dict[str, Tensor] = {}  # per term: stayed finite since the last check (device tensors)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        terms = outputs.get("terms", {"loss": outputs["loss"]}) if isinstance(outputs, dict) else {}
        for name, value in terms.items():
            finite = torch.isfinite(value).all()
            previous = self._finite.get(name)
            self._finite[name] = finite if previous is None else previous & finite
        every = self.check_every_n_steps or trainer.log_every_n_steps
        if (batch_idx + 1) % every == 0:
            self.check(trainer)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.check(trainer)  # runs before the file is written

    def check(self, trainer: L.Trainer) -> None:
        """One host sync: raise if a term was NaN or inf at any step since the last check."""
        if not self._finite:
            return
        names = list(self._finite)
        finite = torch.stack([self._finite[name] for name in names])
        if trainer.world_size > 1:
            finite = trainer.strategy.all_gather(finite.to(torch.uint8)).all(dim=0)
        self._finite = {}
        bad = [f"train/{name}" for name, ok in zip(names, finite.tolist()) if not ok]
        if bad:
            last = trainer.checkpoint_callback.last_model_path if trainer.checkpoint_callback else ""
            raise FloatingPointError(
                f"{', '.join(bad)} became NaN or inf (at or before step {trainer.global_step}); training stopped and no "
                f"checkpoint was written with that state. Last good checkpoint: {last or 'none yet'}. Resume from it "
                "with a smaller learning rate (model.lr) or gradient clipping (trainer.gradient_clip_val)."
            )
