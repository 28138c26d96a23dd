"""VIMCO (Mnih & Rezende, 2016) on JSA's categorical model (docs/multi-sample.md#vimco). It maximizes the S-sample bound

    L_S(x) = E_{h_1..h_S ~ q_φ(h|x)} [ log (1/S) Σ_s p_θ(x, h_s) / q_φ(h_s | x) ]  <=  log p_θ(x)

with an unbiased gradient (samplers/multi_sample.py): θ's back-propagates through the bound, φ's adds a
score-function term with leave-one-out learning signal L̂ - L̂_{-s}. `train/loss` is -L̂, `train/iw_bound` L̂.
"""

from __future__ import annotations

from typing import Any, Sequence

from torch import Tensor

from configs.settings import VIMCOSettings
from models.categorical import CategoricalLatentModel
from models.components.optimizers import OptimizerFactory, SchedulerFactory
from samplers.multi_sample import importance_weighted_bound, vimco_surrogate


class VIMCO(CategoricalLatentModel):
    """The categorical latent-variable model of JSA trained on the S-sample bound with VIMCO's gradient. Its settings:
    configs/settings.py's VIMCOSettings (num_samples) and CategoricalSettings."""

    config_name = "vimco"  # as in configs/model/ and the run names
    run_tag_keys = ("backbone", "num_categories", "num_samples", "prior")

    def __init__(self, data_shape: Sequence[int] = (1, 28, 28), optimizer: OptimizerFactory | None = None,
                 scheduler: SchedulerFactory | None = None, **settings: Any) -> None:
        super().__init__(VIMCOSettings(**settings), data_shape, optimizer, scheduler)
        self.num_samples = self.settings.num_samples

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/vimco-<data>-<run_tag>)."""
        return f"{self.backbone}-K{self.num_categories}-S{self.num_samples}" + self.prior_tag + self.estimator_tag

    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        _, log_joint, log_proposal = self.score_proposals(x, self.posterior(x), self.num_samples)
        bound = importance_weighted_bound((log_joint - log_proposal).detach()).mean()
        return {"loss": -vimco_surrogate(log_joint, log_proposal).mean(), "iw_bound": bound}

    def gradient_estimates(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        return {"": self.training_loss(x, index)["loss"]}
