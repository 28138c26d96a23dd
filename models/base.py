"""What every latent-variable model in the collection shares: one evaluation
protocol, one set of TensorBoard tags, one optimizer set-up.

A subclass says how to train and how to score; this class does the rest:

* `training_loss(x, index) -> dict` with key "loss" (plus terms to log as `train/<name>`);
* `log_importance_weights(x, num_samples) -> (S, B)` tensor of log p(x, z) - log q(z | x);
* `reconstruct(x)` and `sample_prior(n)`: decoder outputs, turned into images by the likelihood.

Tags (identical for every model, so TensorBoard overlays them):
`train/loss`, `{val,test}/nll` (importance-sampled -log p(x), nats per image of the
8-bit data), `{val,test}/bpd`, `{val,test}/elbo`, `{val,test}/recon_mse`, `{val,test}/psnr`,
the image grids `{val,test}/reconstructions`, `{val,test}/samples`, the training speed
(`train/step_time_ms`, `train/samples_per_s`, `train/epoch_time_s`, models/speed.py), and the
final metrics `hp/*` that TensorBoard's HPARAMS tab shows next to the hyperparameters.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Iterable, Sequence

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.image import PeakSignalNoiseRatio
from torchvision.utils import make_grid

from models.likelihoods import LikelihoodName, bits_per_dim, build_likelihood
from models.speed import TrainingSpeed
from samplers.importance import importance_log_likelihood
from samplers.sgmcmc import SGMCMC

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]

EVAL_METRICS = ("nll", "bpd", "elbo", "recon_mse")
# Shown in TensorBoard's HPARAMS tab as `hp/<stage>_<name>` (the last value logged).
HPARAM_METRICS = {"val": ("nll", "bpd"), "test": ("nll", "bpd", "recon_mse", "psnr")}


class LatentVariableModel(L.LightningModule):
    """Shared base of VAE, VQ-VAE and JSA.

    Args:
        data_shape: (C, H, W) of the images.
        likelihood: `bernoulli` (binarized data) or `gaussian` (continuous data, dequantized).
        sigma: standard deviation of the gaussian likelihood (its initial value if learned).
        learn_sigma: learn a scalar sigma of the gaussian likelihood.
        lr: Adam learning rate (when `optimizer` is left out).
        optimizer: builds the optimizer from the parameters, e.g. `functools.partial(SGLD, lr=1e-7)`
            (Hydra: `optimizer=sgld`; CLI: `--model.optimizer=samplers.SGLD`); None: Adam(lr). With a
            stochastic-gradient MCMC sampler (samplers/sgmcmc.py) the loss handed to it is the
            potential U(θ) = N · (the batch-mean loss), N the training-set size: the minibatch
            estimate of -log p(X | θ) under a flat prior, so the sampler draws θ from the posterior.
        val_num_samples: importance samples per image for `val/nll`.
        test_num_samples: importance samples per image for `test/nll`.
        eval_chunk_size: importance samples scored in one decoder pass (memory bound).
        num_images: images shown in the reconstruction and sample grids.
        test_seed: seed of the test stage's randomness (importance samples, dynamic binarization),
            so that every model is tested on the same binarized images with reproducible estimates.
    """

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
        num_images: int = 32,
        test_seed: int = 0,
    ) -> None:
        super().__init__()
        self.data_shape = tuple(int(d) for d in data_shape)
        self.num_dims = math.prod(self.data_shape)
        self.likelihood = build_likelihood(likelihood, sigma=sigma, learn_sigma=learn_sigma)
        self.lr = lr
        self.optimizer_factory = optimizer
        self.potential_scale = 1.0  # N under an SG-MCMC sampler (set in on_train_start), else 1
        self.eval_num_samples = {"val": val_num_samples, "test": test_num_samples}
        self.eval_chunk_size = eval_chunk_size
        self.num_images = num_images
        self.test_seed = test_seed
        # Per loss term, whether it stayed finite since the last check (device tensors: no host sync per step).
        self._finite_since_check: dict[str, Tensor] = {}
        # Random states read from a checkpoint, applied when training starts (on_train_start).
        self._rng_state_to_restore: dict[str, Tensor] | None = None
        self._sampler_noise_state: Tensor | None = None
        # torchmetrics accumulate over the epoch and reduce across devices under DDP.
        # PSNR is that of the mean squared error over the whole split, 10 log10(1 / MSE), pixels in [0, 1].
        self.eval_metrics = torch.nn.ModuleDict(
            {
                stage: torch.nn.ModuleDict(
                    {**{name: MeanMetric() for name in EVAL_METRICS}, "psnr": PeakSignalNoiseRatio(data_range=1.0)}
                )
                for stage in ("val", "test")
            }
        )

    # ---- what a subclass provides -------------------------------------------------
    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        raise NotImplementedError

    def log_importance_weights(self, x: Tensor, num_samples: int) -> Tensor:
        raise NotImplementedError

    def reconstruct(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def sample_prior(self, num_samples: int) -> Tensor:
        raise NotImplementedError

    # ---- checks --------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
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

    # ---- training ------------------------------------------------------------------
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, index = batch
        terms = self.training_loss(self.likelihood.prepare(x), index)
        self._track_finite(terms)
        # Logged per step only, so the tags are exactly `train/<name>` (no _step/_epoch suffix).
        self.log("train/loss", terms["loss"], prog_bar=True)
        self.log_dict({f"train/{k}": v for k, v in terms.items() if k != "loss"})
        return terms["loss"] * self.potential_scale

    # ---- NaN / inf: stop with the name of the term, never checkpoint non-finite state ----
    def _track_finite(self, terms: dict[str, Tensor]) -> None:
        for name, value in terms.items():
            finite = torch.isfinite(value.detach()).all()
            previous = self._finite_since_check.get(name)
            self._finite_since_check[name] = finite if previous is None else previous & finite

    def _raise_if_nonfinite(self) -> None:
        """One host sync: raise if a loss term was NaN or inf at any step since the last check."""
        if not self._finite_since_check:
            return
        names = list(self._finite_since_check)
        finite = torch.stack([self._finite_since_check[n] for n in names])
        if self._trainer is not None and self.trainer.world_size > 1:
            finite = self.all_gather(finite.to(torch.uint8)).all(dim=0)  # all ranks stop together: none waits in a collective
        finite = finite.tolist()
        self._finite_since_check = {}
        bad = [f"train/{name}" for name, ok in zip(names, finite) if not ok]
        if bad:
            last = self.trainer.checkpoint_callback.last_model_path if self.trainer.checkpoint_callback else ""
            raise FloatingPointError(
                f"{', '.join(bad)} became NaN or inf (at or before step {self.global_step}); training stopped and no "
                f"checkpoint was written with that state. Last good checkpoint: {last or 'none yet'}. Resume from it "
                "with a smaller learning rate (model.lr) or gradient clipping (trainer.gradient_clip_val)."
            )

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if (batch_idx + 1) % self.trainer.log_every_n_steps == 0:
            self._raise_if_nonfinite()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.optimizer_factory is None:
            return torch.optim.Adam(self.parameters(), lr=self.lr)
        optimizer = self.optimizer_factory(self.parameters())
        if isinstance(optimizer, SGMCMC) and optimizer.generator is None:
            # The injected noise must be the same on every rank (DDP averages the gradients but never
            # re-syncs the parameters), so it comes from a generator seeded alike on all of them.
            optimizer.generator = torch.Generator(device=self.device).manual_seed(int(os.environ.get("PL_GLOBAL_SEED", 0)))
        return optimizer

    def configure_callbacks(self) -> list[L.Callback]:
        return [TrainingSpeed()]

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def on_train_start(self) -> None:
        self._start_random_streams()
        if isinstance(self.trainer.optimizers[0], SGMCMC):
            datamodule = getattr(self.trainer, "datamodule", None)
            if datamodule is None or not hasattr(datamodule, "num_train_examples"):
                raise ValueError("an SG-MCMC optimizer needs the training-set size: train with one of the data modules")
            self.potential_scale = float(datamodule.num_train_examples)
        if isinstance(self.logger, TensorBoardLogger) and self.global_rank == 0:
            self._log_hparams_with_metrics()

    def _start_random_streams(self) -> None:
        """Continue a checkpoint's random streams, or give each DDP rank its own seeded one."""
        optimizer = self.trainer.optimizers[0]
        if isinstance(optimizer, SGMCMC) and self._sampler_noise_state is not None:
            optimizer.generator.set_state(self._sampler_noise_state)
        if self._rng_state_to_restore is not None:
            state = self._rng_state_to_restore
            torch.set_rng_state(state["cpu"])
            if "cuda" in state and self.device.type == "cuda":
                torch.cuda.set_rng_state(state["cuda"], self.device)
            self._rng_state_to_restore = None
        elif self.trainer.world_size > 1:
            # Every rank was seeded alike (seed_everything); give each its own stream, so that the
            # ranks' MIS proposals and sampling noise are independent, and still determined by the seed.
            torch.manual_seed(torch.initial_seed() + self.global_rank)

    def _log_hparams_with_metrics(self) -> None:
        """Lightning has written the hyperparameters (model + data) without metrics; write them again
        with the metrics the HPARAMS tab should show, as Lightning documents for TensorBoard."""
        metrics = {f"hp/{stage}_{name}": float("nan") for stage, names in HPARAM_METRICS.items() for name in names}
        optimizer = self.trainer.optimizers[0]
        batch_size = getattr(getattr(self.trainer, "datamodule", None), "batch_size", None)
        params = {
            **self.logger.hparams,
            "model_class": type(self).__name__,
            "num_params": self.num_params,
            "optimizer": type(optimizer).__name__,
            "optimizer_lr": optimizer.defaults.get("lr"),
            # data.batch_size is per device; one optimizer step sees this many examples:
            "effective_batch_size": batch_size and batch_size * self.trainer.world_size * self.trainer.accumulate_grad_batches,
        }
        self.logger.log_hyperparams(params, metrics=metrics)

    # ---- evaluation: one protocol for every model ---------------------------------
    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, batch_idx, "test")

    def on_test_epoch_start(self) -> None:
        # The batches are drawn (and dynamically binarized) after this hook, in this process.
        torch.manual_seed(self.test_seed + self.global_rank)

    @torch.no_grad()
    def _evaluate(self, batch: tuple[Tensor, Tensor], batch_idx: int, stage: str) -> None:
        x, _ = batch
        x_eval = self.likelihood.prepare(x)
        estimate = importance_log_likelihood(
            lambda n: self.log_importance_weights(x_eval, n), self.eval_num_samples[stage], self.eval_chunk_size
        )
        offset = self.likelihood.nll_offset(self.num_dims)
        nll = offset - estimate.log_likelihood
        recon = self.likelihood.mean(self.reconstruct(x_eval))
        values = {
            "nll": nll,
            "bpd": bits_per_dim(nll, self.num_dims),
            "elbo": estimate.elbo - offset,
            "recon_mse": (recon - x).square().flatten(1).mean(1),
        }
        metrics = self.eval_metrics[stage]
        for name, value in values.items():
            metrics[name].update(value)
        metrics["psnr"].update(recon, x)
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, prog_bar=name == "nll")
            if name in HPARAM_METRICS[stage]:
                self.log(f"hp/{stage}_{name}", metric)
        if batch_idx == 0 and self.global_rank == 0:
            self._log_images(stage, x[: self.num_images], recon[: self.num_images])

    def _log_images(self, stage: str, x: Tensor, recon: Tensor) -> None:
        if not isinstance(self.logger, TensorBoardLogger):
            return
        writer = self.logger.experiment
        nrow = int(math.ceil(math.sqrt(2 * x.shape[0])))
        nrow += nrow % 2  # keep each input next to its reconstruction
        pairs = torch.stack([x, recon], dim=1).flatten(0, 1)
        writer.add_image(f"{stage}/reconstructions", make_grid(pairs.clamp(0, 1), nrow=nrow), self.global_step)
        samples = self.likelihood.mean(self.sample_prior(self.num_images))
        writer.add_image(f"{stage}/samples", make_grid(samples.clamp(0, 1), nrow=nrow // 2 or 1), self.global_step)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        expected = f"{type(self).__module__}.{type(self).__qualname__}"
        found = checkpoint.get("model_class")
        if found is not None and found != expected:
            raise ValueError(f"this checkpoint was written by {found}, not {expected}; load it with that class")
        # Resume the random streams (MIS proposals, reparameterization noise, ...) where they stopped,
        # each rank its own, once training starts (after any sanity check, which draws numbers too);
        # a checkpoint from another number of processes leaves them as seeded.
        states = checkpoint.get("rng_states")
        if states is not None and self._trainer is not None and len(states) == self.trainer.world_size:
            self._rng_state_to_restore = states[self.global_rank]
        self._sampler_noise_state = checkpoint.get("sgmcmc_noise_state")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._raise_if_nonfinite()  # before anything is written
        checkpoint["model_class"] = f"{type(self).__module__}.{type(self).__qualname__}"
        # The CPU random state of every rank (called on all ranks; rank 0 writes the file), so that a
        # resumed run draws the same random numbers as an uninterrupted one (tests/test_resume.py).
        state = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        if self._trainer is not None and self.trainer.world_size > 1:
            state = {k: self.all_gather(v.to(self.device)).cpu() for k, v in state.items()}
            checkpoint["rng_states"] = [{k: v[rank] for k, v in state.items()} for rank in range(self.trainer.world_size)]
        else:
            checkpoint["rng_states"] = [state]
        if self._trainer is not None and isinstance(self.trainer.optimizers[0], SGMCMC):
            checkpoint["sgmcmc_noise_state"] = self.trainer.optimizers[0].generator.get_state()
