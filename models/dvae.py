"""Discrete VAE: JSA's categorical model trained on the ELBO, a baseline of JSA (docs/score-function.md).

    ELBO(x) = E_q[ f(h) ],    f(h) = log p_θ(x, h) - log q_φ(h | x);   `train/loss` is the (relaxed) negative ELBO.

`reinforce`: E_q[∇φ log q · (f - B)] with S samples (samplers/score_function.py), B = `optimal` (leave-one-out B*),
`running_mean` or `none`; unbiased. `gumbel`: h relaxed to y = softmax((logits + g) / τ), g ~ Gumbel(0, 1),
τ_t = max(τ_min, τ_0 exp(-r t)), KL(q || p) in closed form; biased for τ > 0; `straight_through` decodes the argmax.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from configs.settings import ControlVariate, DiscreteVAESettings
from models.categorical import CategoricalLatentModel
from models.components.optimizers import OptimizerFactory, SchedulerFactory
from models.components.priors import factorized_priors
from samplers.score_function import (
    categorical_score_norm_sq,
    leave_one_out_optimal_baseline,
    score_function_surrogate,
)

DEFAULT_NUM_SAMPLES = {"reinforce": 4, "gumbel": 1}


class DiscreteVAE(CategoricalLatentModel):
    """The categorical latent-variable model of JSA trained on the ELBO by REINFORCE or Gumbel-softmax. Its settings:
    configs/settings.py's DiscreteVAESettings (the estimator and its settings) and CategoricalSettings."""

    def __init__(self, data_shape: Sequence[int] = (1, 28, 28), optimizer: OptimizerFactory | None = None,
                 scheduler: SchedulerFactory | None = None, **settings: Any) -> None:
        super().__init__(DiscreteVAESettings(**settings), data_shape, optimizer, scheduler)
        s = self.settings
        estimator, control_variate = s.estimator, s.control_variate
        num_samples = DEFAULT_NUM_SAMPLES[estimator] if s.num_samples is None else s.num_samples  # each estimator's own
        self.estimator, self.num_samples, self.control_variate = estimator, num_samples, control_variate
        self.record_resolved(num_samples=num_samples)
        self.baseline_decay = s.baseline_decay
        self.temperature, self.temperature_min, self.anneal_rate = s.temperature, s.temperature_min, s.anneal_rate
        self.straight_through = s.straight_through
        if estimator == "gumbel" and not self.prior.is_factorized:
            raise ValueError(
                f"estimator=gumbel takes the KL to the prior in closed form, which needs a factorized prior "
                f"(prior={' or '.join(factorized_priors())}), not prior={self.prior_name}; use estimator=reinforce (model=dvae) "
                "for an autoregressive prior"
            )
        self.register_buffer("baseline_mean", torch.zeros(()))  # running mean of f (in checkpoints)

    # ---- the two estimators: each returns (loss to back-propagate, per-example ELBO estimate) ----
    run_tag_keys = ("backbone", "num_categories", "estimator", "control_variate", "temperature_min", "prior")
    # In the run's name when not the default, e.g. -S20, -st, -temp2, -anneal0.001, -decay0.9
    estimator_settings = {"num_samples": "S", "straight_through": "st", "temperature": "temp", "anneal_rate": "anneal",
                          "baseline_decay": "decay"}

    @property
    def config_name(self) -> str:
        """As in configs/model/ and the run names."""
        return "dvae_gumbel" if self.estimator == "gumbel" else "dvae"

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/<model>-<data>-<run_tag>)."""
        if self.estimator == "gumbel":
            return f"{self.backbone}-K{self.num_categories}-tau{self.temperature_min}" + self.prior_tag + self.estimator_tag
        return f"{self.backbone}-K{self.num_categories}-reinforce-{self.control_variate}" + self.prior_tag + self.estimator_tag

    def setting_default(self, name: str) -> Any:
        """num_samples left out is the estimator's own default (DEFAULT_NUM_SAMPLES)."""
        return DEFAULT_NUM_SAMPLES[self.estimator] if name == "num_samples" else super().setting_default(name)

    def reinforce_loss(self, x: Tensor, log_q: Tensor, control_variate: ControlVariate | None = None) -> tuple[Tensor, Tensor]:
        """(loss whose gradient is the REINFORCE estimate, per-example ELBO estimate (B,))."""
        control_variate = control_variate or self.control_variate
        # S samples (B, S, V); log p(x, h_s) with gradient to θ, log q(h_s | x) with gradient to φ, (B, S) each
        latent, log_joint, log_proposal = self.score_proposals(x, log_q, self.num_samples)
        signal = (log_joint - log_proposal).detach()  # f(h_s)
        if control_variate == "optimal":
            baseline = leave_one_out_optimal_baseline(signal, categorical_score_norm_sq(log_q.detach(), latent))
        elif control_variate == "running_mean":
            baseline = self.baseline_mean
        else:
            baseline = 0.0
        surrogate = log_joint.mean(1) + score_function_surrogate(log_proposal, signal, baseline)
        elbo = signal.mean(1)
        # value: -ELBO; gradient: -(∇θ E[log p] + the score-function estimate for φ)
        return -(elbo + surrogate - surrogate.detach()).mean(), elbo

    def gumbel_loss(self, x: Tensor, log_q: Tensor) -> tuple[Tensor, Tensor]:
        """(negative relaxed ELBO, per-example relaxed ELBO (B,)) at the current temperature, the expected
        log-likelihood averaged over S = num_samples relaxed samples per example (the particles the other
        estimators get)."""
        num_samples = self.num_samples
        logits = log_q.unsqueeze(1).expand(-1, num_samples, -1, -1)  # (B, S, V, K)
        relaxed = F.gumbel_softmax(logits, tau=self.current_temperature(), hard=self.straight_through)
        out = self.decoder_output_relaxed(relaxed.flatten(0, 1))  # one decoder pass over the B * S samples
        log_px = self.likelihood.log_prob(x.unsqueeze(1), out.unflatten(0, (-1, num_samples))).mean(1)
        log_prior = self.prior.log_probs()
        kl = (log_q.exp() * (log_q - log_prior)).sum((-2, -1))  # KL(q(h|x) || p(h)), closed form
        elbo = log_px - kl
        return -elbo.mean(), elbo

    def current_temperature(self) -> float | Tensor:
        """τ at this step (a step input: a compiled step reads it from a tensor, models/compiled_step.py)."""
        return self.step_input("temperature")

    def step_inputs(self, epoch: int, step: int) -> dict[str, float]:
        return {"temperature": self.temperature_at(step)}

    def temperature_at(self, step: int) -> float:
        """τ_t = max(τ_min, τ_0 exp(-r t)), the annealing schedule at training step t."""
        return max(self.temperature_min, self.temperature * math.exp(-self.anneal_rate * step))

    # ---- training (see LatentVariableModel.training_step) ---------------------------
    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        log_q = self.posterior(x)
        if self.estimator == "reinforce":
            loss, elbo = self.reinforce_loss(x, log_q)
            if self.control_variate == "running_mean" and self.training:
                self.baseline_mean.lerp_(elbo.mean().detach(), 1 - self.baseline_decay)
            terms = {"loss": loss}
            if self.control_variate == "running_mean":
                terms["baseline"] = self.baseline_mean.clone()
        else:
            loss, _ = self.gumbel_loss(x, log_q)
            temperature = self.current_temperature()
            terms = {"loss": loss, "temperature": temperature.clone() if torch.is_tensor(temperature) else x.new_tensor(temperature)}
        return terms

    def gradient_estimates(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """One fresh draw of the estimator (and, for REINFORCE, of the one without control variate, `_no_cv`)."""
        log_q = self.posterior(x)
        if self.estimator == "gumbel":
            return {"": self.gumbel_loss(x, log_q)[0]}
        return {"": self.reinforce_loss(x, log_q)[0], "_no_cv": self.reinforce_loss(x, log_q, "none")[0]}
