"""The categorical latent-variable model that JSA, RWS, VIMCO and the discrete VAEs train.

    p_θ(x, h) = p(h) p_θ(x | h),   h = (h_1, ..., h_V),  h_v ∈ {0, ..., K-1}
    q_φ(h | x) = prod_v Cat(h_v; softmax(logits_v(x)))

p(h) is a prior of models/components/priors.py, trained with the decoder; the decoder embeds the codes (a K x D table
per position, or one shared) and feeds the shared decoder backbone. Layouts: flat (`mlp`, V chosen freely, the
embeddings concatenated) or spatial (`conv`, one latent per cell of the encoder's H/4 x W/4 grid, as in a VQ-VAE).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import torch
from torch import Tensor, nn

from models.base import LatentVariableModel, inference
from models.components.backbones import BackboneName, build_backbone, latent_grid
from models.components.precision import full_precision
from models.components import priors
from models.components.priors import build_prior
from samplers.mis import categorical_log_prob, sample_categorical

Embedding = Literal["auto", "per_position", "shared"]


class CategoricalLatentModel(LatentVariableModel, abstract=True):  # a base, never picked: not registered
    """Encoder q(h|x), code embedding + decoder p(x|h), prior p(h); training is left to subclasses.

    Args:
        backbone: `mlp` (flat latent) or `conv` (a grid of latents); None: the one that suits the data
            (train.py takes it from the data module: conv for CIFAR-10), else mlp.
        num_latents: V for the flat layout (default 20); for `conv` it is the grid size and may be
            left out (given, it must equal H/4 * W/4).
        num_categories: K, classes per latent position (>= 2).
        code_dim: D, size of a code's embedding fed to the decoder.
        embedding: `per_position` (a K x D table per position), `shared` (one table, like a VQ-VAE
            codebook) or `auto` (per position for `mlp`, shared for `conv`).
        prior: p(h), a name in models/components/priors.py's PRIORS: `uniform`, `factorized` (learned logits
            per position), `autoregressive` (MADE) or `pixelcnn` (a gated PixelCNN over the grid; backbone=conv);
            the learned ones train with the decoder (docs/priors.md).
        prior_hidden: width of the autoregressive prior (None: 256 for MADE, 64 channels for the PixelCNN).
        prior_layers: its depth (None: 2 hidden layers for MADE, 5 gated layers for the PixelCNN).
        hidden_channels: width of the conv backbone.
        **kwargs: the shared arguments of `LatentVariableModel` (likelihood, lr, evaluation).
    """

    has_discrete_latent = True

    def __init__(
        self,
        data_shape: Sequence[int] = (1, 28, 28),
        backbone: BackboneName | None = None,
        num_latents: int | None = None,
        num_categories: int = 10,
        code_dim: int = 16,
        embedding: Embedding = "auto",
        prior: priors.PriorName = "uniform",
        prior_hidden: int | None = None,
        prior_layers: int | None = None,
        hidden_channels: int = 64,
        **kwargs: Any,
    ) -> None:
        super().__init__(data_shape=data_shape, **kwargs)
        backbone = backbone or "mlp"
        if num_categories < 2:
            raise ValueError(f"num_categories (K) must be >= 2, got {num_categories}")
        if code_dim < 1:
            raise ValueError(f"code_dim must be >= 1, got {code_dim}")
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
        if num_latents < 1:
            raise ValueError(f"num_latents (V) must be >= 1, got {num_latents}")
        self.backbone, self.num_latents, self.num_categories, self.code_dim = backbone, num_latents, num_categories, code_dim
        self.record_resolved(backbone=backbone, num_latents=num_latents)

        # Flat: the encoder emits V*K logits and the decoder reads V concatenated embeddings.
        # Spatial: K logit channels and D embedding channels per grid cell.
        per_cell = bool(self.grid)
        self.encoder, self.decoder, _ = build_backbone(
            backbone,
            self.data_shape,
            encoder_channels=num_categories if per_cell else num_latents * num_categories,
            decoder_channels=code_dim if per_cell else num_latents * code_dim,
            hidden_channels=hidden_channels,
            output_channels=self.output_channels,
            activation=self.activation,
        )
        self.per_position = embedding == "per_position" or (embedding == "auto" and not per_cell)
        table_size = num_latents * num_categories if self.per_position else num_categories
        self.embedding = nn.Embedding(table_size, code_dim)
        self.register_buffer("position_offset", torch.arange(num_latents) * num_categories, persistent=False)
        self.prior_name = prior
        self.prior = build_prior(prior, num_latents, num_categories, self.grid, prior_hidden, prior_layers)

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

