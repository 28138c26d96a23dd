"""VQ-VAE (van den Oord et al., 2017): a deterministic encoder, a codebook, a decoder.

    z_e = encoder(x);  k = argmin_j ||z_e - e_j||^2;  z_q = e_k;  x ~ p(x | z_q)
    loss = -log p(x | z_q) / D  +  ||sg[z_e] - e||^2  +  beta ||z_e - sg[e]||^2

with the straight-through gradient (the decoder's input gradient is copied to the encoder) and
either a learned codebook or an EMA codebook (models/components/quantizer.py; docs/vqvae.md). Every term is a mean over
its elements (pixels for the reconstruction, latent entries for the codebook terms).

Likelihood, comparable with the other models: with a uniform prior over the K codes at each of
the n latent positions and the deterministic posterior q(k | x) = 1[k = k(x)],

    -log p(x) <= -log p(x | z_q(x)) + n log K,

which is what the shared importance-sampling evaluation gives for this q (every sample is the
same code, so the estimate is this bound whatever the number of samples). `val/nll` and `val/bpd`
of the VQ-VAE are therefore *upper bounds* under a uniform prior, not estimates
(docs/vqvae.md#the-likelihood-bound).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import torch
from torch import Tensor

from models.base import LatentVariableModel, inference
from models.components.backbones import BackboneName, build_backbone, latent_grid
from models.components.code_usage import CodeUsage
from models.components.quantizer import QuantizerOutput, VectorQuantizer


class PointMassPosterior(NamedTuple):
    """q(k | x) = 1[k = k(x)]: the quantizer's output and the decoder's output at z_q(x)."""

    quantized: QuantizerOutput
    decoded: Tensor


class VQVAE(LatentVariableModel):
    """VQ-VAE on the shared backbones.

    Args:
        backbone: `conv` (the paper's encoder/decoder; one code per cell of the 7x7 / 8x8 grid)
            or `mlp` (a flat latent of `num_latents` codes); None: the one that suits the data, else conv.
        num_categories: K, the number of codes (the codebook size).
        code_dim: D, dimension of a code vector.
        num_latents: codes per image for `mlp` (default 20); for `conv` the grid (leave it out).
        hidden_channels: width of the conv backbone.
        beta: commitment weight.
        ema: move the codebook by exponential moving averages instead of the codebook loss.
        decay: EMA decay (also for the usage statistics behind dead-code restarts).
        dead_code_threshold: restart codes whose EMA usage (vectors per batch) falls below this (0 = off).

    The defaults (EMA codebook, restarts below one vector per batch) are not the paper's main-text
    model (`ema=False, dead_code_threshold=0`): on binarized MNIST, 5 epochs, that one used 22% of
    its 512 codes (val/recon_mse 0.0136); these defaults used all of them (0.0081).
        kmeans_init: initialize the codebook by k-means on the first training batch.
        **kwargs: the shared arguments of `LatentVariableModel` (likelihood, lr, evaluation).
    """

    config_name = "vqvae"  # as in configs/model/ and the run names
    run_tag_keys = ("backbone", "num_categories")
    has_discrete_latent = True

    def __init__(
        self,
        data_shape: Sequence[int] = (1, 28, 28),
        backbone: BackboneName | None = None,
        num_categories: int = 512,
        code_dim: int = 64,
        num_latents: int | None = None,
        hidden_channels: int = 64,
        beta: float = 0.25,
        ema: bool = True,
        decay: float = 0.99,
        dead_code_threshold: float = 1.0,
        kmeans_init: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(data_shape=data_shape, **kwargs)
        backbone_name = backbone or "conv"  # (the hyperparameters record what was given: None = the default)
        self.save_hyperparameters(ignore=["optimizer"])  # a callable; the HPARAMS tab names its class (callbacks/hparams.py)
        if num_categories < 2:
            raise ValueError(f"num_categories (K, the number of codes) must be >= 2, got {num_categories}")
        self.grid = latent_grid(backbone_name, self.data_shape)
        if self.grid and num_latents not in (None, math.prod(self.grid)):
            raise ValueError(f"with the conv backbone the codes are the {self.grid} grid; leave num_latents out (got {num_latents})")
        self.num_latents = math.prod(self.grid) if self.grid else (num_latents or 20)
        self.backbone, self.num_categories, self.code_dim = backbone_name, num_categories, code_dim
        channels = code_dim if self.grid else self.num_latents * code_dim
        self.encoder, self.decoder, _ = build_backbone(backbone_name, self.data_shape, channels, channels, hidden_channels,
                                                       output_channels=self.output_channels, activation=self.activation)
        self.quantizer = VectorQuantizer(num_categories, code_dim, beta, ema, decay, dead_code_threshold=dead_code_threshold, kmeans_init=kmeans_init)
        # Spatial z_e is (B, D, H', W'): channels first; flat z_e is (B, V, D): channels last.
        self.channel_dim = 1 if self.grid else -1
        self.train_usage, self.val_usage = CodeUsage(num_categories), CodeUsage(num_categories)
        # The quantizer keeps its buffers identical on all ranks itself (all-reduced statistics);
        # DDP must not overwrite them with rank 0's copy each step.
        self._ddp_params_and_buffers_to_ignore = [f"quantizer.{name}" for name, _ in self.quantizer.named_buffers()]

    def encoder_output(self, x: Tensor) -> Tensor:
        """z_e: (B, D, H', W') for conv, (B, V, D) for mlp."""
        z_e = self.encoder(x)
        return z_e if self.grid else z_e.view(x.shape[0], self.num_latents, self.code_dim)

    def quantize(self, x: Tensor) -> QuantizerOutput:
        return self.quantizer(self.encoder_output(x), channel_dim=self.channel_dim)

    @inference
    def encode(self, x: Tensor) -> Tensor:
        """The code indices of x: (B, H', W') for conv, (B, V) for mlp."""
        self.check_images(x)
        return self.quantize(x).codes

    def decoder_output_quantized(self, z_q: Tensor) -> Tensor:
        return self.decoder(z_q if self.grid else z_q.flatten(1))

    def decoder_output(self, codes: Tensor) -> Tensor:
        """Decoder output for code indices (B, H', W') or (B, V), e.g. from a learned prior."""
        return self.decoder_output_quantized(self.quantizer.lookup(codes, channel_dim=self.channel_dim))

    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        vq = self.quantize(x)
        recon = -self.likelihood.log_prob(x, self.decoder_output_quantized(vq.quantized)).mean() / self.num_dims
        self.train_usage.update(vq.codes)
        return {
            "loss": recon + vq.loss,
            "recon": recon,
            "codebook": vq.codebook_loss,
            "commitment": vq.commitment_loss,
            "perplexity": vq.perplexity,
            "restarts": vq.restarts.float(),
        }

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/vqvae-<data>-<run_tag>)."""
        return f"{self.backbone}-K{self.num_categories}"

    # ---- evaluation: q is a point mass, so one quantization and one decoder pass serve all -------
    point_mass_posterior = True

    def posterior(self, x: Tensor) -> PointMassPosterior:
        quantized = self.quantize(x)
        return PointMassPosterior(quantized, self.decoder_output_quantized(quantized.quantized))

    def log_importance_weights(self, x: Tensor, posterior: PointMassPosterior, num_samples: int) -> Tensor:
        # Every weight is log p(x | z_q) + log p(z_q) - log 1, with the uniform prior p(z_q) = K^-n.
        log_px = self.likelihood.log_prob(x, posterior.decoded)
        return (log_px - self.num_latents * math.log(self.num_categories)).expand(num_samples, -1)

    def decode_posterior_mode(self, posterior: PointMassPosterior) -> Tensor:
        return posterior.decoded

    def sample_prior(self, num_samples: int) -> Tensor:
        """Codes drawn uniformly (the prior of the likelihood bound; no learned prior yet)."""
        shape = (num_samples, *self.grid) if self.grid else (num_samples, self.num_latents)
        return self.decoder_output(torch.randint(self.num_categories, shape, device=self.device))

    # ---- code usage over an epoch (torchmetrics: summed across devices) ----------------
    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Any]:
        outputs = super().validation_step(batch, batch_idx)
        self.val_usage.update(outputs["posterior"].quantized.codes)
        return outputs

    def on_validation_epoch_end(self) -> None:
        self._log_usage("val")

    def on_train_epoch_end(self) -> None:
        self._log_usage("train")

    def _log_usage(self, stage: str) -> None:
        usage = self.train_usage if stage == "train" else self.val_usage
        perplexity, used = usage.compute()
        # train/perplexity is logged per step; the epoch's pooled value gets its own tag.
        self.log(f"{stage}/perplexity_epoch" if stage == "train" else f"{stage}/perplexity", perplexity)
        self.log(f"{stage}/codes_used", used)
        usage.reset()
