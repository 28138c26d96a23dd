"""A resumed run trains with the optimizer and scheduler settings it is given, not the checkpoint's. Lightning restores
each optimizer's parameter groups and each scheduler's attributes whole, settings together with state; here the state
stays (moments, step counts, the scheduler's epoch) and each setting that differs is set back to this run's value and
logged: an optimizer's hyperparameters (`lr`, `weight_decay`, ...), a scheduler's (`T_max`, `step_size`, ...) and the
rate it starts from (`base_lrs`, this run's `lr`). A scheduler with a closed form (cosine, step) then sets the rate of
the epoch it has reached under this run's settings, as a run begun with them would have it there; one without
(OneCycleLR, CyclicLR, ReduceLROnPlateau) goes on with the checkpoint's schedule and says which settings it did not take."""

from __future__ import annotations

import copy
import logging
from typing import Any

import lightning as L

from common.private_api import closed_form_rates, set_scheduler_rates
from common.settings import same

log = logging.getLogger(__name__)

# Optimizer constructor flags that choose an implementation, not a hyperparameter of the update.
IMPLEMENTATION_FLAGS = {"foreach", "fused", "capturable", "differentiable", "maximize"}
# A torch scheduler's state entries that are its progress (or hold progress: a SequentialLR's inner schedulers), not
# its settings: the epoch, ReduceLROnPlateau's best value and counts, a warm restart's current period.
SCHEDULER_PROGRESS = {"last_epoch", "_step_count", "_last_lr", "_is_initial", "_get_lr_called_within_step", "verbose",
                      "best", "num_bad_epochs", "cooldown_counter", "T_cur", "T_i", "_schedulers"}


def scheduler_settings(scheduler: Any) -> dict[str, Any]:
    """A scheduler's settings as its state holds them: everything but its progress (T_max, gamma, the rates it starts
    from, and what it derives from its settings: OneCycleLR's phases, CyclicLR's cycle length)."""
    return {key: copy.deepcopy(value) for key, value in scheduler.state_dict().items() if key not in SCHEDULER_PROGRESS}


def built_scheduler_settings(trainer: L.Trainer) -> list[dict[str, Any]]:
    """Each scheduler's settings as this run built it, before a checkpoint's state replaces them."""
    return [scheduler_settings(config.scheduler) for config in trainer.lr_scheduler_configs]


def take_this_runs_settings(trainer: L.Trainer, built_schedulers: list[dict[str, Any]]) -> None:
    """After Lightning restored the checkpoint's optimizers and schedulers (module docstring)."""
    def say(*line: Any) -> None:
        if trainer.is_global_zero:
            log.warning(*line)

    for config, built in zip(trainer.lr_scheduler_configs, built_schedulers):
        scheduler, restored = config.scheduler, scheduler_settings(config.scheduler)
        changed = {key: value for key, value in built.items() if not same(restored.get(key), value)}
        if changed and closed_form_rates(scheduler) is None:  # its settings and progress are one schedule (OneCycleLR's)
            say("resuming: %s has no closed form to resume a changed schedule at, and goes on with the checkpoint's: "
                "this run's %s not taken (start a new run to change it)", type(scheduler).__name__,
                ", ".join(f"{key} {value!r}" for key, value in changed.items()))
            changed = {}
        for key, value in changed.items():
            say("resuming: scheduler %s %r (checkpoint) -> %r (this run)", key, restored.get(key), value)
            setattr(scheduler, key, value)
        for group, base in zip(scheduler.optimizer.param_groups, getattr(scheduler, "base_lrs", ())):
            group["initial_lr"] = base  # what the scheduler counts from (the restored groups hold the checkpoint's)
        if changed:  # the rate of the epoch it has reached, under this run's settings
            set_scheduler_rates(scheduler, closed_form_rates(scheduler))
    # What the schedulers set: the rate, and the momentum of one that cycles it (CyclicLR, OneCycleLR)
    cycled = any(getattr(config.scheduler, "cycle_momentum", False) for config in trainer.lr_scheduler_configs)
    scheduled = ({"lr"} if trainer.lr_scheduler_configs else set()) | ({"momentum", "betas"} if cycled else set())
    for optimizer in trainer.optimizers:
        for group in optimizer.param_groups:
            for key, value in optimizer.defaults.items():  # `defaults`: what this run's constructor got
                if key not in IMPLEMENTATION_FLAGS | scheduled and key in group and not same(group[key], value):
                    say("resuming: optimizer %s %r (checkpoint) -> %r (this run)", key, group[key], value)
                    group[key] = value
