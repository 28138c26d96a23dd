"""What every latent-variable model of the collection shares: one training step, one evaluation
protocol with one set of TensorBoard tags, one optimizer set-up.

A subclass says how to train and how to score (the methods under "what a subclass provides");
everything else that is not the algorithm (NaN guard, random-state checkpointing, image grids,
the HPARAMS tab, training speed) is a callback in callbacks/.

Tags: `train/loss` and `train/<term>` for the other terms `training_loss` returns;
`{val,test}/nll` (importance-sampled -log p(x), nats per image, docs/vae.md#importance-sampled-log-likelihood),
`{val,test}/bpd`, `{val,test}/elbo`, `{val,test}/recon_mse`, `{val,test}/psnr`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar, Iterable, Sequence

import lightning as L
import torch
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.image import PeakSignalNoiseRatio

from callbacks.random_state import RandomStateCheckpoint
from models.components.likelihoods import LikelihoodName, bits_per_dim, build_likelihood
from samplers.importance import importance_log_likelihood
from samplers.sgmcmc import SGMCMC

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
Batch = tuple[Tensor, Tensor]  # (images in [0, 1], their indices in the split)


class LatentVariableModel(L.LightningModule):
    """Shared base of every model.

    Args:
        data_shape: (C, H, W) of the images.
        likelihood: `bernoulli` (binarized data) or `gaussian` (continuous data, dequantized).
        sigma: standard deviation of the gaussian likelihood (its initial value if learned).
        learn_sigma: learn a scalar sigma of the gaussian likelihood.
        lr: Adam learning rate (when `optimizer` is left out).
        optimizer: builds the optimizer from the parameters, e.g. `functools.partial(SGLD, lr=1e-7)`
            (Hydra: `optimizer=sgld`; CLI: `--model.optimizer=samplers.SGLD`); None: Adam(lr). An
            SG-MCMC sampler is told the training-set size N, so that it samples the posterior
            given all N examples (docs/sgmcmc.md#the-minibatch-potential).
        val_num_samples: importance samples per image for `val/nll`.
        test_num_samples: importance samples per image for `test/nll`.
        eval_chunk_size: importance samples scored in one decoder pass (bounds the memory).
        test_seed: seed of the test stage's importance samples, so that test estimates are reproducible.
    """

    # A model whose q(z | x) is a point mass (VQ-VAE): every importance sample is the same, so one suffices.
    point_mass_posterior: ClassVar[bool] = False
    # Takes `num_categories` (K) and `code_dim` (D) (JSA, DiscreteVAE, VQ-VAE): the config's `discrete_latent`.
    has_discrete_latent: ClassVar[bool] = False
    run_tag: str = ""  # key settings in the run's name (logs/tensorboard/<model>-<data>-<run_tag>)

    def __init__(
        self,
        data_shape: Sequence[int] = (1, 28, 28),
        likelihood: LikelihoodName = "bernoulli",
        sigma: float = 0.1,
        learn_sigma: bool = False,
        lr: float = 1e-3,
        optimizer: OptimizerFactory | None = None,
        val_num_samples: int = 100,
        test_num_samples: int = 1000,
        eval_chunk_size: int = 100,
        test_seed: int = 0,
    ) -> None:
        super().__init__()
        self.data_shape = tuple(int(d) for d in data_shape)
        self.num_dims = math.prod(self.data_shape)
        self.likelihood = build_likelihood(likelihood, sigma=sigma, learn_sigma=learn_sigma)
        self.lr = lr
        self.optimizer_factory = optimizer
        self.eval_num_samples = {"val": val_num_samples, "test": test_num_samples}
        self.eval_chunk_size = eval_chunk_size
        self.test_seed = test_seed
        # torchmetrics accumulate over the epoch and reduce across devices under DDP. PSNR is that
        # of the mean squared error over the whole split, 10 log10(1 / MSE), pixels in [0, 1].
        self.eval_metrics = torch.nn.ModuleDict({
            stage: torch.nn.ModuleDict({
                "nll": MeanMetric(), "bpd": MeanMetric(), "elbo": MeanMetric(), "recon_mse": MeanMetric(),
                "psnr": PeakSignalNoiseRatio(data_range=1.0),
            })
            for stage in ("val", "test")
        })

    # ---- what a subclass provides -------------------------------------------------
    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """The training objective under key "loss", plus terms to log as `train/<name>`."""
        raise NotImplementedError

    def posterior(self, x: Tensor) -> Any:
        """What describes q(z | x) (e.g. a mean and log-variance, or log-probabilities), from one encoder pass."""
        raise NotImplementedError

    def log_importance_weights(self, x: Tensor, posterior: Any, num_samples: int) -> Tensor:
        """(S, B) log p(x, z_s) - log q(z_s | x) for S fresh samples z_s ~ q(z | x)."""
        raise NotImplementedError

    def decode_posterior_mode(self, posterior: Any) -> Tensor:
        """Decoder output (likelihood parameters) at the posterior's mean or mode."""
        raise NotImplementedError

    def sample_prior(self, num_samples: int) -> Tensor:
        """Decoder output (likelihood parameters) for `num_samples` latents drawn from the prior."""
        raise NotImplementedError

    # ---- images ---------------------------------------------------------------------
    def reconstruct(self, x: Tensor) -> Tensor:
        """Reconstructions of images x in [0, 1]: the likelihood's mean at the posterior mode."""
        return self.likelihood.mean(self.decode_posterior_mode(self.posterior(x)))

    def sample(self, num_samples: int) -> Tensor:
        """`num_samples` images in [0, 1] from the model: the likelihood's mean for prior latents."""
        return self.likelihood.mean(self.sample_prior(num_samples))

    # ---- checks before training -----------------------------------------------------
    def setup(self, stage: str) -> None:
        datamodule = self.trainer.datamodule
        if datamodule is None:
            return
        image_shape = tuple(getattr(datamodule, "image_shape", self.data_shape))
        if image_shape != self.data_shape:
            raise ValueError(
                f"{type(self).__name__} was built for images of shape {self.data_shape} "
                f"but the data module yields {image_shape}; set model.data_shape to match the data"
            )
        if self.likelihood.requires_binary_data and getattr(datamodule, "binarize", "none") == "none":
            raise ValueError(
                "the bernoulli likelihood needs binary pixels, but data.binarize='none'; "
                "use data.binarize=dynamic (or static), or model.likelihood=gaussian for continuous images"
            )

    # ---- one step for training, one for validation and test ---------------------------
    def training_step(self, batch: Batch, batch_idx: int) -> dict[str, Any]:
        x, index = batch
        terms = self.training_loss(self.likelihood.prepare(x), index)
        # Logged per step only, so the tags are exactly `train/<name>` (no _step/_epoch suffix).
        self.log("train/loss", terms["loss"], prog_bar=True)
        self.log_dict({f"train/{name}": value for name, value in terms.items() if name != "loss"})
        return {"loss": terms["loss"], "terms": {name: value.detach() for name, value in terms.items()}}

    def validation_step(self, batch: Batch, batch_idx: int) -> dict[str, Any]:
        return self.evaluation_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> dict[str, Any]:
        return self.evaluation_step(batch, "test")

    def on_test_epoch_start(self) -> None:
        torch.manual_seed(self.test_seed + self.global_rank)

    def evaluation_step(self, batch: Batch, stage: str) -> dict[str, Any]:
        """One encoder pass; S importance samples in chunks (docs/vae.md#importance-sampled-log-likelihood);
        the reconstruction from the same posterior."""
        x, _ = batch
        x_eval = self.likelihood.prepare(x)
        posterior = self.posterior(x_eval)
        num_samples = 1 if self.point_mass_posterior else self.eval_num_samples[stage]
        estimate = importance_log_likelihood(
            lambda n: self.log_importance_weights(x_eval, posterior, n), num_samples, self.eval_chunk_size
        )
        recon = self.likelihood.mean(self.decode_posterior_mode(posterior))
        offset = self.likelihood.nll_offset(self.num_dims)
        nll = offset - estimate.log_likelihood
        metrics = self.eval_metrics[stage]
        metrics["nll"].update(nll)
        metrics["bpd"].update(bits_per_dim(nll, self.num_dims))
        metrics["elbo"].update(estimate.elbo - offset)
        metrics["recon_mse"].update((recon - x).square().flatten(1).mean(1))
        metrics["psnr"].update(recon, x)
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, prog_bar=name == "nll")
        return {"posterior": posterior, "reconstructions": recon}

    # ---- optimizer and the callbacks a model cannot do without ---------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.optimizer_factory is None:
            return torch.optim.Adam(self.parameters(), lr=self.lr)
        optimizer = self.optimizer_factory(self.parameters())
        if isinstance(optimizer, SGMCMC):
            num_examples = getattr(self.trainer.datamodule, "num_train_examples", None)
            if num_examples is None:
                raise ValueError("an SG-MCMC optimizer needs the training-set size: train with one of the data modules")
            # seed_everything seeded every rank alike, so the injected noise is the same on all of them.
            optimizer.attach(dataset_size=num_examples, seed=torch.initial_seed())
        return optimizer

    def configure_callbacks(self) -> list[L.Callback]:
        return [RandomStateCheckpoint()]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        found, expected = checkpoint.get("model_class"), _qualified_name(type(self))
        if found is not None and found != expected:
            raise ValueError(f"this checkpoint was written by {found}, not {expected}; load it with that class")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["model_class"] = _qualified_name(type(self))


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
