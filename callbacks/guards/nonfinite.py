"""Stop training when a loss term (`training_step`'s `terms`, models/base.py) becomes NaN or inf, and never checkpoint
such a state.

Finiteness is accumulated on the device (no host sync per step) and checked every `check_every_n_steps` steps (by
default `log_every_n_steps`) and before every checkpoint. Under DDP the ranks' flags are gathered first, so all ranks
stop together and none is left waiting in a collective.
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

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer)  # one host sync per validation: no evaluation (nor its image sampling) of a diverged state

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """Weights that became NaN or inf in one optimizer step (an infinite or huge learning rate, NaN in a resumed
        optimizer state) fail the next step in whatever reads them first, often a sampler's `torch.multinomial`, before
        a loss term could be checked. On that failure path only (no cost per step), the weights are looked at: when
        they are not finite, the exception carries this guard's line (`nonfinite_message`), which the front ends show
        in place of the traceback (launch/errors.py) and a traceback shows as a note."""
        if isinstance(exception, (FloatingPointError, KeyboardInterrupt)) or not isinstance(exception, Exception):
            return
        try:
            broken = [name for name, p in pl_module.named_parameters() if p.is_floating_point() and not torch.isfinite(p).all()]
        except Exception:  # noqa: BLE001 (a device that failed with the exception, e.g. a CUDA assert: nothing to add)
            return
        if broken:
            message = self.message(trainer, f"the model's weights ({', '.join(broken[:2])}{', ...' if len(broken) > 2 else ''})")
            exception.nonfinite_message = message  # type: ignore[attr-defined]
            exception.add_note(message)

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
            raise FloatingPointError(self.message(trainer, ", ".join(bad)))

    @staticmethod
    def message(trainer: L.Trainer, what: str) -> str:
        last = trainer.checkpoint_callback.last_model_path if trainer.checkpoint_callback else ""
        again = f"Last good checkpoint: {last}. Resume from it" if last else "No checkpoint was written yet: start again"
        return (f"{what} became NaN or inf (at or before step {trainer.global_step}); training stopped and no checkpoint "
                f"was written with that state. {again} with a smaller learning rate (model.lr) or gradient clipping "
                "(trainer.gradient_clip_val).")
