"""The optimizer a model trains with, given as a factory (`model.optimizer`: Adam by default, or an SG-MCMC sampler,
configs/optimizer/), checked when the model is built rather than at the first training step; and its learning-rate
scheduler, also a factory (`model.scheduler`, configs/scheduler/)."""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from samplers.hmc import HMC

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]  # configs/scheduler/


def check_optimizer_factory(optimizer: OptimizerFactory) -> None:
    """One line (ValueError "optimizer: ...") for settings the optimizer refuses, and for HMC, whose Metropolis test
    needs the full-data energy (docs/sgmcmc.md#hmc)."""
    try:
        built = optimizer([torch.nn.Parameter(torch.zeros(1))])
    except (ValueError, TypeError) as error:
        raise ValueError(f"optimizer: {error}") from None
    if isinstance(built, HMC):
        raise ValueError("optimizer: HMC is not a training optimizer: its accept/reject test needs the energy of "
                         "the whole data set, and a training step sees one minibatch (with fresh latents every "
                         "call); use sgld, sghmc, sgnht or santa")
