"""Collect the parameter samples of a stochastic-gradient MCMC run (optimizer=sgld|sghmc|sgnht).

With an SG-MCMC sampler as the optimizer, the parameters after each step are a Markov chain
whose stationary distribution is the posterior p(θ | X) (samplers/sgmcmc.py). This callback
hands them to a `samplers.SampleCollector`: after `burn_in` steps it keeps every `thin`-th
snapshot (`keep="list"`) or only their running mean and variance (`keep="mean"`), and makes the
collector available as `model.posterior_samples`. With `use_mean=True` the model's parameters are
set to the posterior mean at the end of training, so that `trainer.test` evaluates it.
"""

from __future__ import annotations

import lightning as L
import torch

from samplers.sgmcmc import SampleCollector


class PosteriorSamples(L.Callback):
    def __init__(self, burn_in: int = 1000, thin: int = 100, keep: str = "mean", use_mean: bool = False) -> None:
        self.burn_in, self.thin, self.keep, self.use_mean = burn_in, thin, keep, use_mean
        self.collector: SampleCollector | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Steps already taken (a resumed run) count towards the burn-in.
        self.collector = SampleCollector(pl_module, burn_in=max(0, self.burn_in - trainer.global_step), thin=self.thin, keep=self.keep)
        pl_module.posterior_samples = self.collector

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        self.collector()
        pl_module.log("train/posterior_samples", float(self.collector.num_kept))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.use_mean and self.collector.num_kept > 0:
            with torch.no_grad():
                for param, mean in zip(self.collector.params, self.collector.mean()):
                    param.copy_(mean)
