"""A resumed run trains with the optimizer and scheduler settings it is given, not the checkpoint's. Lightning restores
each optimizer's parameter groups and each scheduler's attributes whole, settings together with state; here the state
stays (moments, step counts, the scheduler's epoch) and each setting that differs is set back to this run's value and
logged: an optimizer's hyperparameters (`lr`, `weight_decay`, ...), a scheduler's (`T_max`, `step_size`, ...) and the
rate it starts from (`base_lrs`, this run's `lr`). A scheduler with a closed form (cosine, step) then sets the rate of
the epoch it has reached under this run's settings, as a run begun with them would have it there."""

from __future__ import annotations

import copy
import inspect
import logging
from typing import Any

import lightning as L

from common.private_api import closed_form_rates, set_scheduler_rates
from common.settings import same

log = logging.getLogger(__name__)

# Optimizer constructor flags that choose an implementation, not a hyperparameter of the update.
IMPLEMENTATION_FLAGS = {"foreach", "fused", "capturable", "differentiable", "maximize"}
# Constructor arguments of a torch scheduler that are not settings to carry over: its optimizer and where it starts.
NOT_SCHEDULER_SETTINGS = {"optimizer", "last_epoch", "verbose"}


def scheduler_settings(scheduler: Any) -> dict[str, Any]:
    """A scheduler's settings: the rates it starts from (`base_lrs`, this run's `lr`) and its constructor's arguments
    that it keeps under their own names in its state (T_max, step_size, gamma, ReduceLROnPlateau's patience, ...).
    Everything else in its state is progress (the epoch, ReduceLROnPlateau's best value, a warm restart's current
    period) or cannot be restored (a LambdaLR's function)."""
    arguments = {"base_lrs", *inspect.signature(type(scheduler).__init__).parameters} - NOT_SCHEDULER_SETTINGS
    return {key: copy.deepcopy(value) for key, value in scheduler.state_dict().items() if key in arguments}


def built_scheduler_settings(trainer: L.Trainer) -> list[dict[str, Any]]:
    """Each scheduler's settings as this run built it, before a checkpoint's state replaces them."""
    return [scheduler_settings(config.scheduler) for config in trainer.lr_scheduler_configs]


def take_this_runs_settings(trainer: L.Trainer, built_schedulers: list[dict[str, Any]]) -> None:
    """After Lightning restored the checkpoint's optimizers and schedulers (module docstring)."""
    def say(*line: Any) -> None:
        if trainer.is_global_zero:
            log.warning(*line)

    for config, built in zip(trainer.lr_scheduler_configs, built_schedulers):
        scheduler = config.scheduler
        changed = {key: value for key, value in built.items() if not same(getattr(scheduler, key, None), value)}
        for key, value in changed.items():
            say("resuming: scheduler %s %r (checkpoint) -> %r (this run)", key, getattr(scheduler, key, None), value)
            setattr(scheduler, key, value)
        for group, base in zip(scheduler.optimizer.param_groups, getattr(scheduler, "base_lrs", ())):
            group["initial_lr"] = base  # what the scheduler counts from (the restored groups hold the checkpoint's)
        rates = closed_form_rates(scheduler) if changed else None
        if rates is not None:
            set_scheduler_rates(scheduler, rates)
        elif changed:
            say("resuming: %s has no closed form: the rate goes on from the checkpoint's, %r", type(scheduler).__name__,
                [group["lr"] for group in scheduler.optimizer.param_groups])
    # What the schedulers set: the rate, and the momentum of one that cycles it (CyclicLR, OneCycleLR)
    cycled = any(getattr(config.scheduler, "cycle_momentum", False) for config in trainer.lr_scheduler_configs)
    scheduled = ({"lr"} if trainer.lr_scheduler_configs else set()) | ({"momentum", "betas"} if cycled else set())
    for optimizer in trainer.optimizers:
        for group in optimizer.param_groups:
            for key, value in optimizer.defaults.items():  # `defaults`: what this run's constructor got
                if key not in IMPLEMENTATION_FLAGS | scheduled and key in group and not same(group[key], value):
                    say("resuming: optimizer %s %r (checkpoint) -> %r (this run)", key, group[key], value)
                    group[key] = value

