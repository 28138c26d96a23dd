"""Gaussian-latent VAE (Kingma & Welling, 2014), trained on the ELBO with the reparameterization z = mu + sigma * eps,
eps ~ N(0, I) (docs/vae.md#reparameterization) and the Gaussian KL in closed form:

    q(z | x) = N(z; mu(x), diag sigma^2(x)),  p(z) = N(0, I),  p(x | z) from the shared likelihoods,
    ELBO = E_q[log p(x | z)] - KL(q(z | x) || p(z)),   KL = 1/2 sum(mu^2 + sigma^2 - 1 - log sigma^2).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor

from configs.settings import VAESettings
from models.components.backbones import build_backbone
from models.components.optimizers import OptimizerFactory, SchedulerFactory
from models.components.precision import full_precision
from models.base import LatentVariableModel, inference

_LOG_2PI = math.log(2 * math.pi)


def _log_normal(z: Tensor, mean: Tensor, log_var: Tensor) -> Tensor:
    """log N(z; mean, exp(log_var)) summed over all latent dims (dims after the first two)."""
    log_density = -0.5 * ((z - mean).square() * torch.exp(-log_var) + log_var + _LOG_2PI)
    return log_density.flatten(2).sum(-1)


class VAE(LatentVariableModel):
    """Gaussian-latent VAE on the shared backbones. Its settings:
    configs/settings.py's VAESettings (backbone, latent_dim, hidden_channels) and ModelSettings."""

    config_name = "vae"  # as in configs/model/ and the run names
    run_tag_keys = ("backbone", "latent_dim")

    def __init__(self, data_shape: Sequence[int] = (1, 28, 28), optimizer: OptimizerFactory | None = None,
                 scheduler: SchedulerFactory | None = None, **settings: Any) -> None:
        super().__init__(VAESettings(**settings), data_shape, optimizer, scheduler)
        backbone, latent_dim = self.settings.backbone or "mlp", self.settings.latent_dim
        self.encoder, self.decoder, self.grid = build_backbone(
            backbone, self.data_shape, 2 * latent_dim, latent_dim, self.settings.hidden_channels,
            output_channels=self.output_channels, activation=self.activation,
        )
        self.latent_shape = (latent_dim, *self.grid)
        self.backbone, self.latent_dim = backbone, latent_dim
        self.record_resolved(backbone=backbone)

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/vae-<data>-<run_tag>)."""
        return f"{self.backbone}-z{self.latent_dim}" + self.estimator_tag

    def posterior(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and log-variance of q(z | x), each (B, *latent_shape)."""
        mean, log_var = full_precision(self.encoder(x)).chunk(2, dim=1)  # float32 (models/components/precision.py)
        return mean, log_var

    @inference
    def encode(self, x: Tensor) -> Tensor:
        """The posterior mean of z, (B, *latent_shape)."""
        self.check_images(x)
        return self.posterior(x)[0]

    def decoder_output(self, z: Tensor) -> Tensor:
        return self.decoder(z)

    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        mean, log_var = self.posterior(x)
        z = mean + torch.exp(0.5 * log_var) * torch.randn_like(mean)
        log_px = self.likelihood.log_prob(x, self.decoder(z))
        kl = 0.5 * (mean.square() + log_var.exp() - 1.0 - log_var).flatten(1).sum(1)
        return {"loss": (kl - log_px).mean(), "recon": -log_px.mean(), "kl": kl.mean()}

    def gradient_estimates(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """One fresh draw of the reparameterized ELBO gradient (the context for the discrete estimators' variance)."""
        return {"": self.training_loss(x, index)["loss"]}

    def log_importance_weights(self, x: Tensor, posterior: tuple[Tensor, Tensor], num_samples: int) -> Tensor:
        mean, log_var = posterior
        eps = torch.randn(num_samples, *mean.shape, device=x.device, dtype=mean.dtype)
        z = mean + torch.exp(0.5 * log_var) * eps  # (S, B, *latent_shape)
        out = self.decoder(z.flatten(0, 1)).unflatten(0, (num_samples, x.shape[0]))
        log_px = self.likelihood.log_prob(x, out)
        log_pz = _log_normal(z, torch.zeros_like(z), torch.zeros_like(z))
        log_qz = _log_normal(z, mean.expand_as(z), log_var.expand_as(z))
        return log_px + log_pz - log_qz

    def decode_posterior_mode(self, posterior: tuple[Tensor, Tensor]) -> Tensor:
        return self.decoder(posterior[0])

    def sample_prior(self, num_samples: int) -> Tensor:
        return self.decoder(torch.randn(num_samples, *self.latent_shape, device=self.device))
