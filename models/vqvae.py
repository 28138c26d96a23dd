"""VQ-VAE (van den Oord et al., 2017): a deterministic encoder, a codebook (models/components/quantizer.py), a decoder.

    z_e = encoder(x);  k = argmin_j ||z_e - e_j||^2;  z_q = e_k;  x ~ p(x | z_q)
    loss = -log p(x | z_q) / num_dims  +  ||sg[z_e] - e||^2  +  beta ||z_e - sg[e]||^2
    -log p(x) <= -log p(x | z_q(x)) + n log K     (`val/nll`: uniform prior over K codes at n positions)

A learned prior p(k) (`prior=pixelcnn` or `autoregressive`) is fit to sg[k(x)] by maximum likelihood, beside the
autoencoder or alone once it is frozen (`autoencoder_epochs`, `autoencoder_checkpoint`); it tightens the bound to
-log p(x | z_q(x)) - log p(k(x)) (docs/vqvae.md#the-likelihood-bound, docs/priors.md#vq-vaes-second-stage).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import Tensor
from torchmetrics import MeanMetric

from checkpoints.errors import CheckpointError
from checkpoints.loader import load_checkpoint_file
from common.private_api import finds_unused_parameters, ignore_in_ddp
from common.signatures import constructor_defaults
from configs.settings import VQVAESettings
from models.base import LatentVariableModel, inference
from models.components.backbones import build_backbone, latent_grid
from models.components.code_usage import CodeUsage
from models.components.optimizers import OptimizerFactory, SchedulerFactory
from models.components.priors import build_prior
from models.components.quantizer import QuantizerOutput, VectorQuantizer


# The settings a second stage must share with the VQ-VAE whose autoencoder it loads.
AUTOENCODER_SETTINGS = ("backbone", "num_latents", "num_categories", "code_dim", "hidden_channels", "activation", "likelihood",
                        "sigma", "learn_sigma", "sigma_shape", "num_mixtures", "ema")
STAGE1_NETWORK = ("backbone", "num_categories", "code_dim", "hidden_channels")  # what a tensor's shape depends on


class PointMassPosterior(NamedTuple):
    """q(k | x) = 1[k = k(x)]: the quantizer's output and the decoder's output at z_q(x)."""

    quantized: QuantizerOutput
    decoded: Tensor


class VQVAE(LatentVariableModel):
    """VQ-VAE on the shared backbones. Its settings: configs/settings.py's VQVAESettings and ModelSettings."""

    run_tag_keys = ("backbone", "num_categories", "prior")
    # In the run's name when not the default, e.g. -noema-dead0 (the paper's main-text model), -beta0.5, -kmeans
    estimator_settings = {"ema": "ema", "decay": "decay", "dead_code_threshold": "dead", "beta": "beta", "kmeans_init": "kmeans"}
    has_discrete_latent = True

    def __init__(self, data_shape: Sequence[int] = (1, 28, 28), optimizer: OptimizerFactory | None = None,
                 scheduler: SchedulerFactory | None = None, **settings: Any) -> None:
        super().__init__(VQVAESettings(**settings), data_shape, optimizer, scheduler)
        s = self.settings
        backbone_name, num_categories, code_dim, num_latents = s.backbone or "conv", s.num_categories, s.code_dim, s.num_latents
        self.grid = latent_grid(backbone_name, self.data_shape)
        if self.grid and num_latents not in (None, math.prod(self.grid)):
            raise ValueError(f"with the conv backbone the codes are the {self.grid} grid; leave num_latents out (got {num_latents})")
        self.num_latents = math.prod(self.grid) if self.grid else (20 if num_latents is None else num_latents)
        self.backbone, self.num_categories, self.code_dim = backbone_name, num_categories, code_dim
        self.record_resolved(backbone=backbone_name, num_latents=self.num_latents)
        self.latent_shape = self.grid or (self.num_latents,)
        channels = code_dim if self.grid else self.num_latents * code_dim
        self.encoder, self.decoder, _ = build_backbone(backbone_name, self.data_shape, channels, channels, s.hidden_channels,
                                                       output_channels=self.output_channels, activation=self.activation)
        self.quantizer = VectorQuantizer(num_categories, code_dim, s.beta, s.ema, s.decay, dead_code_threshold=s.dead_code_threshold,
                                         kmeans_init=s.kmeans_init)
        # Spatial z_e is (B, D, H', W'): channels first; flat z_e is (B, V, D): channels last.
        self.channel_dim = 1 if self.grid else -1
        self.train_usage, self.val_usage = CodeUsage(num_categories), CodeUsage(num_categories)
        self.prior_name = s.prior
        self.prior = build_prior(s.prior, self.num_latents, num_categories, self.grid, s.prior_hidden, s.prior_layers)
        autoencoder_epochs, autoencoder_checkpoint = s.autoencoder_epochs, s.autoencoder_checkpoint
        if autoencoder_checkpoint is not None and autoencoder_epochs is None:
            autoencoder_epochs = 0  # a trained autoencoder: fit the prior only
        self.autoencoder_epochs, self.autoencoder_checkpoint = autoencoder_epochs, autoencoder_checkpoint
        if autoencoder_epochs == 0:  # frozen for good: only the prior's parameters take gradients (and DDP syncs only those)
            for name, parameter in self.named_parameters():
                parameter.requires_grad_(name.startswith("prior."))
        self.uniform_bound = torch.nn.ModuleDict({stage: MeanMetric() for stage in ("val", "test")})
        # The quantizer keeps its buffers identical on all ranks itself (all-reduced statistics);
        # DDP must not overwrite them with rank 0's copy each step.
        ignore_in_ddp(self, [f"quantizer.{name}" for name, _ in self.quantizer.named_buffers()])

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

    def step_inputs(self, epoch: int, step: int) -> dict[str, bool]:
        """Whether the autoencoder is frozen in `epoch` (a flag: a compiled step gets a new graph once, when it freezes)."""
        return {"autoencoder_frozen": self.autoencoder_epochs is not None and epoch >= self.autoencoder_epochs}

    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        if self.step_input("autoencoder_frozen"):  # the second stage: the codes of the frozen autoencoder, the prior's loss only
            with torch.no_grad():
                self.quantizer.eval()  # no codebook statistics, no restarts
                codes = self.quantize(x).codes
                self.quantizer.train(self.training)
            self.train_usage.update(codes)
            prior_nll = -self.prior.log_prob(codes.flatten(1)).mean()
            return {"loss": prior_nll, "prior_nll": prior_nll}
        vq = self.quantize(x)
        recon = -self.likelihood.log_prob(x, self.decoder_output_quantized(vq.quantized)).mean() / self.num_dims
        self.train_usage.update(vq.codes)
        terms = {
            "loss": recon + vq.loss,
            "recon_per_dim": recon,  # nats per pixel (the VAE's train/recon is per image)
            "codebook": vq.codebook_loss,
            "commitment": vq.commitment_loss,
            "perplexity": vq.perplexity,
            "restarts": vq.restarts.float(),
        }
        if self.prior_name != "uniform":  # disjoint parameters: adding it leaves the autoencoder's gradients as they were
            terms["prior_nll"] = -self.prior.log_prob(vq.codes.flatten(1)).mean()
            terms["loss"] = terms["loss"] + terms["prior_nll"]
        return terms

    def setup(self, stage: str) -> None:
        super().setup(stage)
        strategy = self.trainer.strategy
        if (stage == "fit" and self.autoencoder_epochs and self.trainer.world_size > 1
                and not finds_unused_parameters(strategy)):
            raise MisconfigurationException(  # shown as one line by the front ends (launch/errors.py)
                f"model.autoencoder_epochs={self.autoencoder_epochs} under DDP: after that epoch the autoencoder's parameters get "
                "no gradients, which DDP refuses; use trainer.strategy=ddp_find_unused_parameters_true, or train the second "
                "stage as a run of its own (model=vqvae_prior model.autoencoder_checkpoint=PATH)"
            )

    def on_fit_start(self) -> None:
        # After Lightning has restored a resumed run (trainer.ckpt_path is known from then on): a resumed run has
        # all of it in its own checkpoint, so only a new one reads the autoencoder from stage 1.
        if self.autoencoder_checkpoint is not None and self.trainer.ckpt_path is None:
            self.load_autoencoder(self.autoencoder_checkpoint)

    def load_autoencoder(self, path: str) -> None:
        """Encoder, codebook and decoder from a VQ-VAE checkpoint with the same networks (the prior is not read); a file
        that is missing or of another model is the user's to fix: CheckpointError, one line (launch/errors.py)."""
        if "://" not in str(path) and not Path(path).is_file():
            raise CheckpointError(f"model.autoencoder_checkpoint: no file {path}; give the last.ckpt or best checkpoint of a VQ-VAE run")
        checkpoint = load_checkpoint_file(path)  # the one safe loader: checksum, weights only, no URLs
        if checkpoint.get("model_class", "models.vqvae.VQVAE") != "models.vqvae.VQVAE":
            raise CheckpointError(f"model.autoencoder_checkpoint: {path} was written by {checkpoint['model_class']}, not a VQ-VAE")
        # Settings that change what the networks compute without changing a tensor's shape (or that would be
        # reported as one) must match too: a setting left out means the class's default; None on either side
        # means the data's choice (both front ends fill it in), not compared. (A checkpoint without
        # hyperparameters, e.g. a bare state_dict, is checked by its shapes only.)
        defaults = constructor_defaults(VQVAE)
        stage1 = {**defaults, **checkpoint["hyper_parameters"]} if "hyper_parameters" in checkpoint else {}
        here = {**defaults, **self.hparams}
        differing = [key for key in AUTOENCODER_SETTINGS
                     if stage1 and stage1[key] is not None and here[key] is not None and stage1[key] != here[key]]
        # the stage-1 values as settings to give (model.activation=relu; --model.activation=relu in LightningCLI)
        settings = " ".join(f"model.{key}=" + (str(stage1[key]).lower() if isinstance(stage1[key], bool) else
                                                 str(stage1[key]).replace(" ", ""))  # (a list as [1,28,28])
                            for key in (differing or [key for key in STAGE1_NETWORK if stage1.get(key) is not None]))
        settings += f" (LightningCLI: {' '.join('--' + setting for setting in settings.split())})" if settings else ""
        if differing:
            raise CheckpointError(f"model.autoencoder_checkpoint: {path} was trained with other settings "
                                  f"({'; '.join(f'{key}={stage1[key]!r} there, {here[key]!r} here' for key in differing)}); "
                                  f"give this run the stage-1 settings: {settings}")
        state = {k: v for k, v in checkpoint["state_dict"].items() if not k.startswith("prior.")}
        own = {k: v for k, v in self.state_dict().items() if not k.startswith("prior.")}
        mismatched = sorted(k for k in own if k not in state or state[k].shape != own[k].shape)
        if mismatched:
            raise CheckpointError(
                f"model.autoencoder_checkpoint: {path} holds another VQ-VAE (differs in {', '.join(mismatched[:3])}); "
                f"use the {', '.join(STAGE1_NETWORK)} it was trained with" + (f": {settings}" if settings else "")
            )
        self.load_state_dict(state, strict=False)

    @property
    def config_name(self) -> str:
        """As in configs/model/ and the run names: the second stage, a prior fit to a trained VQ-VAE, is vqvae_prior."""
        return "vqvae" if self.autoencoder_checkpoint is None else "vqvae_prior"

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/vqvae-<data>-<run_tag>)."""
        return f"{self.backbone}-K{self.num_categories}" + self.prior_tag + self.estimator_tag

    # ---- evaluation: q is a point mass, so one quantization and one decoder pass serve all -------
    point_mass_posterior = True
    replicable = False  # the codebook's running statistics update in place outside what vmap batches (models/replicas.py)

    def posterior(self, x: Tensor) -> PointMassPosterior:
        quantized = self.quantize(x)
        return PointMassPosterior(quantized, self.decoder_output_quantized(quantized.quantized))

    def log_importance_weights(self, x: Tensor, posterior: PointMassPosterior, num_samples: int) -> Tensor:
        # Every weight is log p(x | z_q) + log p(k(x)) - log 1 (the uniform prior: log p(k) = -n log K).
        log_px = self.likelihood.log_prob(x, posterior.decoded)
        return (log_px + self.prior.log_prob(posterior.quantized.codes.flatten(1))).expand(num_samples, -1)

    def uniform_prior_bound(self, x: Tensor, posterior: PointMassPosterior) -> Tensor:
        """-log p(x | z_q(x)) + n log K in nats of the 8-bit data: the bound without the learned prior."""
        log_px = self.likelihood.log_prob(x, posterior.decoded)
        return self.likelihood.nll_offset(self.num_dims) - log_px + self.num_latents * math.log(self.num_categories)

    def decode_posterior_mode(self, posterior: PointMassPosterior) -> Tensor:
        return posterior.decoded

    def sample_prior(self, num_samples: int) -> Tensor:
        """Codes drawn from the prior (uniform, or the learned one), decoded."""
        codes = self.prior.sample(num_samples)
        return self.decoder_output(codes.view(num_samples, *self.grid) if self.grid else codes)

    # ---- code usage over an epoch (torchmetrics: summed across devices) ----------------
    def evaluation_step(self, batch: tuple[Tensor, Tensor], stage: str) -> dict[str, Any]:
        outputs = super().evaluation_step(batch, stage)
        if stage == "val":
            self.val_usage.update(outputs["posterior"].quantized.codes)
        if self.prior_name != "uniform":
            self.uniform_bound[stage].update(self.uniform_prior_bound(outputs["inputs"], outputs["posterior"]))  # the same x
            self.log(f"{stage}/nll_uniform_prior", self.uniform_bound[stage])
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
