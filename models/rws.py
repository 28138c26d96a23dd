"""RWS: reweighted wake-sleep (Bornschein & Bengio, 2015) on JSA's categorical model (docs/multi-sample.md#rws).

θ by maximum likelihood and φ by the inclusive KL, as in JSA, but over S proposals h_s ~ q_φ(h | x) with
self-normalized weights w̃_s ∝ p_θ(x, h_s) / q_φ(h_s | x) (samplers/multi_sample.py); biased for finite S, consistent
as S grows. The optional sleep phase fits q to one dream (h, x) ~ p_θ per example.

    wake, θ:  Σ_s w̃_s ∇θ log p_θ(x, h_s)        wake, φ:  Σ_s w̃_s ∇φ log q_φ(h_s | x)"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from configs.settings import RWSSettings
from models.categorical import CategoricalLatentModel
from models.components.optimizers import OptimizerFactory, SchedulerFactory
from samplers.mis import categorical_log_prob
from samplers.multi_sample import importance_weighted_bound, rws_surrogate


class RWS(CategoricalLatentModel):
    """The categorical latent-variable model of JSA trained by reweighted wake-sleep. Its settings:
    configs/settings.py's RWSSettings (num_samples, sleep_phase) and CategoricalSettings."""

    config_name = "rws"  # as in configs/model/ and the run names
    run_tag_keys = ("backbone", "num_categories", "num_samples", "prior")

    def __init__(self, data_shape: Sequence[int] = (1, 28, 28), optimizer: OptimizerFactory | None = None,
                 scheduler: SchedulerFactory | None = None, **settings: Any) -> None:
        super().__init__(RWSSettings(**settings), data_shape, optimizer, scheduler)
        num_samples, sleep_phase = self.settings.num_samples, self.settings.sleep_phase
        if sleep_phase and not self.likelihood.can_sample:
            raise ValueError(f"sleep_phase=true draws images from the model, which the {type(self.likelihood).__name__} "
                             "cannot do; use the bernoulli or gaussian likelihood, or sleep_phase=false")
        self.num_samples, self.sleep_phase = num_samples, sleep_phase

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/rws-<data>-<run_tag>)."""
        return f"{self.backbone}-K{self.num_categories}-S{self.num_samples}" + ("-sleep" if self.sleep_phase else "") + self.prior_tag + self.estimator_tag

    def wake_loss(self, x: Tensor, log_q: Tensor) -> tuple[Tensor, Tensor]:
        """(loss whose gradient is the wake-phase estimate for θ and φ, the S-sample bound per example (B,))."""
        _, log_joint, log_proposal = self.score_proposals(x, log_q, self.num_samples)
        loss = -rws_surrogate(log_joint, log_proposal).mean()
        return loss, importance_weighted_bound((log_joint - log_proposal).detach())

    def sleep_loss(self, batch_size: int) -> Tensor:
        """-log q_φ(h | x) on dreams h ~ p(h), x ~ p_θ(x | h) (no gradient to θ)."""
        with torch.no_grad():
            latent = self.prior.sample(batch_size).unsqueeze(1)  # (B, 1, V)
            dreams = self.likelihood.sample(self.decoder_output(latent[:, 0]))
        return -categorical_log_prob(self.posterior(dreams), latent).mean()

    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        loss, bound = self.wake_loss(x, self.posterior(x))
        terms = {"loss": loss, "iw_bound": bound.mean()}
        if self.sleep_phase:
            terms["sleep_loss"] = self.sleep_loss(x.shape[0])
            terms["loss"] = loss + terms["sleep_loss"]
        return terms

    def gradient_estimates(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        return {"": self.training_loss(x, index)["loss"]}
