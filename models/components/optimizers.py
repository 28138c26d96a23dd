"""The optimizer a model trains with, given as a factory (`model.optimizer`: Adam by default, or an SG-MCMC sampler,
configs/optimizer/), checked when the model is built rather than at the first training step; and its learning-rate
scheduler, also a factory (`model.scheduler`, configs/scheduler/), checked likewise."""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from samplers.hmc import HMC

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]  # configs/scheduler/


class FactoryRefusal(ValueError):
    """The optimizer's or the scheduler's settings refused (`group`), by its class (`name`) or by a check here; `setting`
    (T_max=0) where one setting is refused. Each front end names the group by its own option (`naming`)."""

    def __init__(self, group: str, name: str, reason: str, setting: str | None = None) -> None:
        self.group, self.name, self.reason, self.setting = group, name, reason, setting
        super().__init__(f"{group}: {name}'s {setting}: {reason}" if setting else f"{group}: {reason}")

    def naming(self, option: str) -> str:
        """The refusal with the group called `option` (Hydra's scheduler, LightningCLI's --lr_scheduler)."""
        return f"{option}.{self.setting} ({self.name}): {self.reason}" if self.setting else f"{option} ({self.name}): {self.reason}"


def class_name(factory: Callable) -> str:
    """The name of the class a factory builds (functools.partial(Adam, lr=...) -> Adam)."""
    built = getattr(factory, "func", factory)
    return getattr(built, "__name__", type(built).__name__)


def check_optimizer_factory(optimizer: OptimizerFactory) -> torch.optim.Optimizer:
    """The optimizer built on a stand-in parameter (its `defaults` say the settings it trains with); a FactoryRefusal
    for settings the optimizer refuses, and for HMC, whose Metropolis test needs the full-data energy
    (docs/sgmcmc.md#hmc)."""
    try:
        built = optimizer([torch.nn.Parameter(torch.zeros(1))])
    except (ValueError, TypeError) as error:
        raise FactoryRefusal("optimizer", class_name(optimizer), str(error)) from None
    if isinstance(built, HMC):
        raise FactoryRefusal("optimizer", "HMC", "HMC is not a training optimizer: its accept/reject test needs the energy of "
                             "the whole data set, and a training step sees one minibatch (with fresh latents every "
                             "call); use sgld, sghmc, sgnht or santa")
    return built


# The schedulers' periods in epochs (CosineAnnealingLR's T_max, StepLR's step_size), which torch takes unchecked: 0
# divides by zero at the end of the first epoch, and a negative T_max sets the learning rate to eta_min there.
SCHEDULER_PERIODS = ("T_max", "step_size")


def check_scheduler_factory(scheduler: SchedulerFactory, optimizer: OptimizerFactory) -> None:
    """A FactoryRefusal for settings the scheduler refuses on the model's optimizer, and for a period of fewer than one
    epoch (scheduler=cosine's T_max is trainer.max_epochs, -1 in a run bounded by trainer.max_steps alone)."""
    try:
        built = scheduler(optimizer([torch.nn.Parameter(torch.zeros(1))]))
    except (ValueError, TypeError) as error:
        raise FactoryRefusal("scheduler", class_name(scheduler), str(error)) from None
    for name in SCHEDULER_PERIODS:
        period = getattr(built, name, None)
        if isinstance(period, int) and period < 1:
            raise FactoryRefusal("scheduler", type(built).__name__, "expected a number of epochs >= 1", f"{name}={period}")
