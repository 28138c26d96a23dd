"""A resumed scheduler keeps its progress and takes this run's settings (common/resumed_optimizers.py), for every kind
of torch scheduler: with a closed form, without one, with progress beyond its epoch, and with a function."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from torch.optim import lr_scheduler

from common.resumed_optimizers import built_scheduler_settings, take_this_runs_settings

SCHEDULERS = {
    "cosine": functools.partial(lr_scheduler.CosineAnnealingLR, T_max=6),
    "step": functools.partial(lr_scheduler.StepLR, step_size=2, gamma=0.5),
    "plateau": functools.partial(lr_scheduler.ReduceLROnPlateau, patience=1, factor=0.5),
    "warm restarts": functools.partial(lr_scheduler.CosineAnnealingWarmRestarts, T_0=1, T_mult=2),
    "lambda": functools.partial(lr_scheduler.LambdaLR, lr_lambda=lambda epoch: 0.9**epoch),
    "one cycle": functools.partial(lr_scheduler.OneCycleLR, max_lr=0.1, total_steps=20),
}
LOSSES = [1.0, 0.9, 0.95, 0.97, 0.99, 0.98, 0.99, 1.0]  # ReduceLROnPlateau's metric: stalls after the second epoch


def built(kind: str, **changed) -> tuple[torch.optim.Optimizer, object]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.01, momentum=0.9)
    return optimizer, SCHEDULERS[kind](optimizer, **changed)


def step(scheduler: object, epoch: int) -> None:
    scheduler.optimizer.step()
    scheduler.step(LOSSES[epoch]) if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau) else scheduler.step()


def state(scheduler: object) -> dict:
    return {key: value for key, value in scheduler.state_dict().items() if key != "lr_lambdas"}


def resumed_with(kind: str, changed: dict) -> tuple[object, object]:
    """(uninterrupted, resumed): the scheduler of `kind` stepped 3 epochs, then resumed as Lightning resumes it (its
    and its optimizer's states loaded into ones built with this run's settings, which differ by `changed`), and given
    this run's settings."""
    optimizer, straight = built(kind)
    for epoch in range(3):
        step(straight, epoch)
    saved = {"optimizer": optimizer.state_dict(), "scheduler": straight.state_dict()}
    resumed_optimizer, resumed = built(kind, **changed)
    trainer = SimpleNamespace(lr_scheduler_configs=[SimpleNamespace(scheduler=resumed)], optimizers=[resumed_optimizer],
                              is_global_zero=True)
    settings = built_scheduler_settings(trainer)
    resumed_optimizer.load_state_dict(saved["optimizer"])
    resumed.load_state_dict(saved["scheduler"])
    take_this_runs_settings(trainer, settings)
    return straight, resumed


@pytest.mark.parametrize("kind", list(SCHEDULERS))
def test_a_scheduler_resumed_with_the_same_settings_goes_on_as_if_never_stopped(kind, caplog):
    """Resumed with the same settings: the same rates and momenta, epoch after epoch, as the uninterrupted scheduler,
    its progress kept (ReduceLROnPlateau's best value and bad epochs, a warm restart's period), nothing reported."""
    straight, resumed = resumed_with(kind, {})
    assert state(resumed) == state(straight) and "resuming" not in caplog.text, caplog.text
    for epoch in range(3, len(LOSSES)):
        step(straight, epoch)
        step(resumed, epoch)
        for setting in ("lr", "momentum"):
            assert resumed.optimizer.param_groups[0][setting] == straight.optimizer.param_groups[0][setting], (kind, epoch)


def test_a_changed_setting_of_a_scheduler_with_a_closed_form_is_taken_at_the_epoch_reached(caplog):
    """StepLR resumed with another gamma: logged, and the rate is the one a run begun with it has at that epoch."""
    _, resumed = resumed_with("step", {"gamma": 0.25})
    assert "resuming: scheduler gamma 0.5 (checkpoint) -> 0.25 (this run)" in caplog.text
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.25 ** (3 // 2))


@pytest.mark.parametrize("kind, changed", [("one cycle", {"total_steps": 40}), ("plateau", {"patience": 3})])
def test_a_changed_setting_of_a_scheduler_without_a_closed_form_is_named_and_not_taken(kind, changed, caplog):
    """OneCycleLR's phases and ReduceLROnPlateau's counts were computed under the checkpoint's settings: it goes on
    with the checkpoint's schedule whole, and the line names the setting it did not take."""
    straight, resumed = resumed_with(kind, changed)
    assert state(resumed) == state(straight)
    (name,) = changed
    assert "has no closed form to resume a changed schedule at" in caplog.text and f"{name} {changed[name]!r}" in caplog.text
