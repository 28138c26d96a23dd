"""The categorical latent-variable model that JSA, RWS, VIMCO and the discrete VAEs train.

    p_θ(x, h) = p(h) p_θ(x | h),   h = (h_1, ..., h_V),  h_v ∈ {0, ..., K-1}
    q_φ(h | x) = prod_v Cat(h_v; softmax(logits_v(x)))

p(h): a prior of models/components/priors.py, trained with the decoder. The decoder embeds the codes (a K x D table per
position, or one shared), flat (`mlp`, any V) or spatial (`conv`, one latent per cell of the encoder's H/4 x W/4 grid).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from configs.settings import CategoricalSettings
from models.base import LatentVariableModel, inference
from models.components.backbones import build_backbone, latent_grid
from models.components.precision import full_precision
from models.components.priors import build_prior
from samplers.mis import categorical_log_prob, sample_categorical


class CategoricalLatentModel(LatentVariableModel, abstract=True):  # a base, never picked: not registered
    """Encoder q(h|x), code embedding + decoder p(x|h), prior p(h); training is left to subclasses. Its settings:
    configs/settings.py's CategoricalSettings."""

    has_discrete_latent = True

    def __init__(self, settings: CategoricalSettings, *args: Any) -> None:
        super().__init__(settings, *args)  # data_shape, optimizer, scheduler (models/base.py)
        backbone, num_latents, num_categories, code_dim = settings.backbone or "mlp", settings.num_latents, settings.num_categories, settings.code_dim
        self.grid = latent_grid(backbone, self.data_shape)
        if self.grid:
            grid_size = math.prod(self.grid)
            if num_latents not in (None, grid_size):
                raise ValueError(
                    f"with the conv backbone the latents are the {self.grid[0]}x{self.grid[1]} grid of the encoder "
                    f"(num_latents={grid_size}); got num_latents={num_latents}. Leave it out or use backbone=mlp"
                )
            num_latents = grid_size
        num_latents = 20 if num_latents is None else num_latents
        self.backbone, self.num_latents, self.num_categories, self.code_dim = backbone, num_latents, num_categories, code_dim
        self.record_resolved(backbone=backbone, num_latents=num_latents)
        self.latent_shape = (num_latents,)

        # Flat: the encoder emits V*K logits and the decoder reads V concatenated embeddings.
        # Spatial: K logit channels and D embedding channels per grid cell.
        per_cell = bool(self.grid)
        self.encoder, self.decoder, _ = build_backbone(
            backbone,
            self.data_shape,
            encoder_channels=num_categories if per_cell else num_latents * num_categories,
            decoder_channels=code_dim if per_cell else num_latents * code_dim,
            hidden_channels=settings.hidden_channels,
            output_channels=self.output_channels,
            activation=self.activation,
        )
        self.per_position = settings.embedding == "per_position" or (settings.embedding == "auto" and not per_cell)
        table_size = num_latents * num_categories if self.per_position else num_categories
        self.embedding = nn.Embedding(table_size, code_dim)
        self.register_buffer("position_offset", torch.arange(num_latents) * num_categories, persistent=False)
        self.prior_name = settings.prior
        self.prior = build_prior(settings.prior, num_latents, num_categories, self.grid, settings.prior_hidden, settings.prior_layers)

    # ---- q(h | x) -----------------------------------------------------------------
    def encoder_logits(self, x: Tensor) -> Tensor:
        """Logits of q(h | x), (B, V, K)."""
        out = self.encoder(x)
        if self.grid:  # (B, K, H', W') -> (B, H'W', K)
            return out.flatten(2).transpose(1, 2)
        return out.view(x.shape[0], self.num_latents, self.num_categories)

    # ---- p(x | h) p(h) --------------------------------------------------------------
    def decoder_output(self, latent: Tensor) -> Tensor:
        """Decoder output (likelihood parameters) for codes (N, V): (N, C, H, W)."""
        if self.per_position:
            latent = latent + self.position_offset
        return self._decode_embedded(self.embedding(latent))  # embeddings (N, V, D)

    def decoder_output_relaxed(self, one_hot: Tensor) -> Tensor:
        """Decoder output for relaxed (or exact) one-hot codes (N, V, K), e.g. Gumbel-softmax samples.

        The embedding of a relaxed code is the probability-weighted mix of its class embeddings,
        so an exact one-hot gives the same output as `decoder_output`.
        """
        table = self.embedding.weight
        if self.per_position:
            embedded = torch.einsum("nvk,vkd->nvd", one_hot, table.view(self.num_latents, self.num_categories, -1))
        else:
            embedded = one_hot @ table
        return self._decode_embedded(embedded)

    def _decode_embedded(self, embedded: Tensor) -> Tensor:
        if self.grid:
            embedded = embedded.transpose(1, 2).unflatten(-1, self.grid)  # (N, D, H', W')
        else:
            embedded = embedded.flatten(1)  # (N, V * D)
        return self.decoder(embedded)

    def log_prior(self, latent: Tensor) -> Tensor:
        """log p(h) for codes (..., V), shape (...)."""
        return self.prior.log_prob(latent)

    def log_joint(self, x: Tensor, latent: Tensor) -> Tensor:
        """log p(x, h) for every candidate: x (B, C, H, W), latent (B, N, V) -> (B, N).

        All B * N candidates go through the decoder in one batched pass, and through the prior in another.
        """
        batch, num = latent.shape[:2]
        out = self.decoder_output(latent.flatten(0, 1)).unflatten(0, (batch, num))
        return self.likelihood.log_prob(x.unsqueeze(1), out) + self.log_prior(latent)

    def score_proposals(self, x: Tensor, log_q: Tensor, num_samples: int) -> tuple[Tensor, Tensor, Tensor]:
        """S fresh samples h_s ~ q(h | x) (no gradient through the draw) with their log p(x, h_s) (gradient
        to θ) and log q(h_s | x) (gradient to φ through log_q): (B, S, V), (B, S), (B, S)."""
        latent = sample_categorical(log_q.detach(), num_samples)
        return latent, self.log_joint(x, latent), categorical_log_prob(log_q, latent)

    # ---- evaluation (shared protocol, see LatentVariableModel) ---------------------
    def posterior(self, x: Tensor) -> Tensor:
        """log q(h_v | x), (B, V, K), in float32 (models/components/precision.py)."""
        return full_precision(self.encoder_logits(x)).log_softmax(-1)

    @inference
    def encode(self, x: Tensor) -> Tensor:
        """The most probable codes under q(h | x), (B, V)."""
        self.check_images(x)
        return self.posterior(x).argmax(-1)

    def log_importance_weights(self, x: Tensor, posterior: Tensor, num_samples: int) -> Tensor:
        _, log_joint, log_proposal = self.score_proposals(x, posterior, num_samples)
        return (log_joint - log_proposal).T  # (S, B)

    def decode_posterior_mode(self, posterior: Tensor) -> Tensor:
        return self.decoder_output(posterior.argmax(-1))

    def sample_prior(self, num_samples: int) -> Tensor:
        return self.decoder_output(self.prior.sample(num_samples))

