"""Collect the parameter samples of a stochastic-gradient MCMC run (optimizer=sgld|sghmc|sgnht).

With an SG-MCMC sampler as the optimizer, the parameters after each step are a Markov chain whose stationary
distribution is the posterior p(θ | X) (samplers/sgmcmc.py). They go to a `samplers.SampleCollector` (burn-in,
thinning, `keep`), available as `model.posterior_samples`; with `use_mean=True` the parameters are set to the posterior
mean at the end of training, so that `trainer.test` evaluates it.
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch

from checkpoints.errors import CheckpointError
from common.log_steps import is_logging_step
from samplers.sgmcmc import SampleCollector


class PosteriorSamples(L.Callback):
    def __init__(self, burn_in: int = 1000, thin: int = 100, keep: Literal["mean", "list"] = "mean", use_mean: bool = False) -> None:
        for name, value, least in (("burn_in", burn_in, 0), ("thin", thin, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if keep not in ("mean", "list"):
            raise ValueError(f"keep must be 'mean' or 'list', got {keep!r}")
        if not isinstance(use_mean, bool):
            raise ValueError(f"use_mean must be true or false, got {use_mean!r}")
        self.burn_in, self.thin, self.keep, self.use_mean = burn_in, thin, keep, use_mean
        self.collector: SampleCollector | None = None
        self._restored: dict[str, Any] | None = None  # the collector's state from a checkpoint, until training starts

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.collector = SampleCollector(pl_module, burn_in=self.burn_in, thin=self.thin, keep=self.keep)
        if self._restored is not None:  # a resumed run: the chain's samples and step count go on from the checkpoint
            state, device = self._restored, pl_module.device
            for key in ("keep", "burn_in", "thin"):  # the collection so far was made with these
                if state[key] != getattr(self, key):
                    raise CheckpointError(f"callbacks.posterior_samples.{key}={getattr(self, key)}: the checkpoint's samples "
                                          f"were collected with {key}={state[key]}; resume with that")
            self.collector.num_steps, self.collector.num_kept = state["num_steps"], state["num_kept"]
            self.collector.samples = [tuple(t.to(device) for t in sample) for sample in state["samples"]]
            self.collector._mean = [t.to(device) for t in state["mean"]]
            self.collector._squared_deviation = [t.to(device) for t in state["squared_deviation"]]
            self._restored = None
        else:  # a checkpoint without the collector's state: the steps already taken count towards the burn-in
            self.collector.num_steps = min(trainer.global_step, self.burn_in)
        pl_module.posterior_samples = self.collector

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        self.collector()
        if is_logging_step(trainer):
            pl_module.log("train/posterior_samples", float(self.collector.num_kept))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.use_mean and self.collector.num_kept > 0:
            with torch.no_grad():
                for param, mean in zip(self.collector.params, self.collector.mean()):
                    param.copy_(mean)

    # ---- checkpoints carry the collection, so that a resumed run continues it (keep="list": every kept snapshot,
    # so each checkpoint grows by one copy of the parameters per sample; keep="mean": two copies in all) ----------
    def state_dict(self) -> dict[str, Any]:
        if self.collector is None:
            return {} if self._restored is None else dict(self._restored)
        collector = self.collector
        return {"keep": collector.keep, "burn_in": collector.burn_in, "thin": collector.thin,
                "num_steps": collector.num_steps, "num_kept": collector.num_kept, "samples": list(collector.samples),
                "mean": list(collector._mean), "squared_deviation": list(collector._squared_deviation)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = dict(state_dict) if state_dict else None
