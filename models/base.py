"""What every latent-variable model shares: one training step, one evaluation protocol with one set of TensorBoard tags,
one optimizer set-up; a subclass says how to train and how to score. What is not the algorithm (NaN guard, image grids,
HPARAMS, speed) is a callback in callbacks/.

Tags: `train/loss`, `train/<term>` for the other terms of `training_loss`; `{val,test}/nll` (importance-sampled
-log p(x), nats per image, docs/vae.md#importance-sampled-log-likelihood), `/bpd`, `/elbo`, `/recon_mse`, `/psnr`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
from typing import Any, Callable, ClassVar, Iterable, Sequence

import lightning as L
import torch
from torch import Tensor
from torchmetrics import MeanMetric
from torchmetrics.image import PeakSignalNoiseRatio

from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from checkpoints.model_class import load_checked
from common.log_steps import is_logging_step
from common.private_api import raise_recompile_limit, record_hyperparameter
from common.registry import register
from common.signatures import SavesItsSettings, constructor_defaults, own_arguments, settings_of
from configs.settings import MODEL_ARGUMENTS, ModelSettings
from models.compiled_step import (
    COMPILED_GRAPHS_LIMIT,
    compile_step,
    graph_mode,
    held_step_input,
    hold_step_inputs,
    run_compiled,
)
from models.components.likelihoods import bits_per_dim, build_likelihood
from models.components.optimizers import (
    OptimizerFactory,
    SchedulerFactory,
    check_optimizer_factory,
    check_scheduler_factory,
)
from samplers.importance import importance_log_likelihood
from samplers.sgmcmc import SGMCMC


def inference(method: Callable) -> Callable:
    """For the inference methods (encode, decode, ...): no gradient, and the model in evaluation mode while
    they run (so that a VQ-VAE's codebook statistics do not move), restored afterwards."""

    @functools.wraps(method)
    def wrapped(self: "LatentVariableModel", *args: Any, **kwargs: Any) -> Any:
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return method(self, *args, **kwargs)
        finally:
            self.train(was_training)

    return wrapped
Batch = tuple[Tensor, Tensor]  # (images in [0, 1], their indices in the split)


def setting_tag(label: str, value: Any) -> str:
    """A setting in a run's name: <label> or no<label> for a switch, else <label><value>, a number written the same
    whichever front end parsed it (0 and 0.0 alike: dead0; 1e-4: anneal0.0001)."""
    if isinstance(value, bool):
        return label if value else f"no{label}"
    if isinstance(value, (int, float)):
        value = int(value) if float(value).is_integer() else float(value)
    return f"{label}{value}"


class LatentVariableModel(SavesItsSettings, L.LightningModule):
    """Shared base of every model. Its settings: configs/settings.py's ModelSettings (the likelihood, the learning
    rate, the evaluation, compilation)."""

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        """A model of models/ registers itself when defined: pickable (`--model=NAME`, `model_defaults/NAME`) and
        nameable by a checkpoint (common/registry.py), with no list to extend. Not an abstract base
        (`class CategoricalLatentModel(LatentVariableModel, abstract=True)`), nor a subclass defined elsewhere (a
        test's, a script's): a checkpoint may name only the collection's models. One without a `config_name` of its own
        (one's own MyVAE) names its runs by its class (myvae-mnist-...), not by the class it extends."""
        super().__init_subclass__(**kwargs)
        if not abstract and cls.__module__.startswith("models."):
            register("model", cls)
        if "config_name" not in vars(cls):
            cls.config_name = cls.__name__.lower()

    # A model whose q(z | x) is a point mass (VQ-VAE): every importance sample is the same, so one suffices.
    point_mass_posterior: ClassVar[bool] = False
    # Whether R runs of the model train as one batched step (models/replicas.py: its step runs under torch.func.vmap).
    replicable: ClassVar[bool] = True
    # Takes `num_categories` (K) and `code_dim` (D) (JSA, DiscreteVAE, VQ-VAE): the config's `discrete_latent`.
    has_discrete_latent: ClassVar[bool] = False
    config_name: str = "model"  # the model's name in configs/model/ and in run names
    run_tag: str = ""  # key settings in the run's name (logs/tensorboard/<model>-<data>-<run_tag>)
    run_tag_keys: ClassVar[tuple[str, ...]] = ()  # the settings run_tag shows (a multirun names the others it sweeps)
    # The settings that change the estimator or its cost, by their label in the run's name: run_tag appends each one
    # not at its default (`estimator_tag`), so that only runs of the same estimator share a name.
    estimator_settings: ClassVar[dict[str, str]] = {}
    latent_shape: tuple[int, ...] = ()  # one image's latent as `encode` returns it and `decode` takes it
    prior_name: str = "uniform"  # of a discrete latent: uniform or a learned prior (models/components/priors.py)
    # Of `step_inputs`: the numbers that change only with a flag (models/compiled_step.py), and the terms
    # `training_loss` returns only while a flag is true (a replica logs them only then, callbacks/replica_runs.py).
    graph_constants: ClassVar[tuple[str, ...]] = ()
    flag_terms: ClassVar[dict[str, tuple[str, ...]]] = {}

    @property
    def prior_tag(self) -> str:
        """A learned prior in the run's name, e.g. jsa-mnist-mlp-K10-L20-autoregressive (run_tag appends it)."""
        return "" if self.prior_name == "uniform" else f"-{self.prior_name}"

    @property
    def estimator_tag(self) -> str:
        """-<label><value> for each of `estimator_settings` not at its default, -<label> or -no<label> for a switch:
        e.g. JSA's gradient_rows=4 and use_cache=false give jsa-mnist-mlp-K10-L20-rows4-nocache (run_tag appends it)."""
        settings = settings_of(self)
        return "".join(f"-{setting_tag(label, settings[name])}" for name, label in self.estimator_settings.items()
                       if settings[name] != self.setting_default(name))

    def setting_default(self, name: str) -> Any:
        """The value of setting `name` when it is left out: its declared default (configs/settings.py)."""
        return constructor_defaults(type(self))[name]

    def __init__(self, settings: ModelSettings, data_shape: Sequence[int] = (1, 28, 28),
                 optimizer: OptimizerFactory | None = None, scheduler: SchedulerFactory | None = None) -> None:
        """`settings`: the model's, checked (configs/settings.py); `data_shape`: (C, H, W) of the images.

        `optimizer` builds the optimizer from the parameters, e.g. `functools.partial(SGLD, lr=1e-7)` (Hydra:
        `optimizer=sgld`); None: Adam(lr). An SG-MCMC sampler is told the training-set size N, so that it samples the
        posterior given all N examples (docs/sgmcmc.md#the-minibatch-potential). `scheduler` builds a learning-rate
        scheduler from the optimizer, stepped once per epoch (Hydra: `scheduler=cosine`); None: a constant rate.
        """
        super().__init__()
        self.settings = settings
        compile = settings.compile
        self.activation = settings.activation
        self.compile_networks = compile in (True, "networks")
        self.compile_step = compile == "step"
        self._networks_compiled = False
        self._compiled_training_loss: Callable[[Tensor, Tensor], dict[str, Tensor]] | None = None
        self.held_step_inputs: dict[str, Any] = {}  # what a compiled or batched step reads (models/compiled_step.py)
        self.batched_replicas = False  # the template of the batched step of replicas (models/replicas.py)
        self.data_shape = tuple(int(d) for d in data_shape)
        self.num_dims = math.prod(self.data_shape)
        self.likelihood = build_likelihood(settings.likelihood or "bernoulli", sigma=settings.sigma, learn_sigma=settings.learn_sigma,
                                           sigma_shape=settings.sigma_shape, num_mixtures=settings.num_mixtures,
                                           data_shape=self.data_shape)
        # The decoder emits this many maps: the likelihood's parameters for every channel of the image.
        self.output_channels = self.data_shape[0] * self.likelihood.params_per_channel
        self.lr = settings.lr
        self.optimizer_factory = optimizer
        self.optimizer_class: type = torch.optim.Adam  # what configure_optimizers builds (models/replicas.py asks)
        if optimizer is not None:  # its settings are checked now, not at the first training step (a traceback there)
            built = check_optimizer_factory(optimizer)
            self.optimizer_class, lr = type(built), built.defaults.get("lr")
            # the optimizer's own learning rate (optimizer.lr=3e-4, optimizer=sgld) is the run's, recorded as `lr`
            self.lr = float(lr) if isinstance(lr, (numbers.Real, torch.Tensor)) else self.lr
        self.scheduler_factory = scheduler
        if scheduler is not None:
            check_scheduler_factory(scheduler, self.optimizer_builder)
        self.eval_num_samples = {"val": settings.val_num_samples, "test": settings.test_num_samples}
        self.eval_chunk_size = settings.eval_chunk_size
        self.test_seed = settings.test_seed
        # torchmetrics accumulate over the epoch and reduce across devices under DDP. PSNR is that
        # of the mean squared error over the whole split, 10 log10(1 / MSE), pixels in [0, 1].
        self.eval_metrics = torch.nn.ModuleDict({
            stage: torch.nn.ModuleDict({
                "nll": MeanMetric(), "bpd": MeanMetric(), "elbo": MeanMetric(), "recon_mse": MeanMetric(),
                "psnr": PeakSignalNoiseRatio(data_range=1.0),
            })
            for stage in ("val", "test")
        })
        # Every setting, and the data's shape; not the optimizer, a callable: the HPARAMS tab names its class
        # (callbacks/hparams.py). Lightning adds how LightningCLI built the model (`_instantiator`). A subclass of one's
        # own may take settings of its own (MyVAE(beta, **kwargs)): its constructors' arguments, read up the call stack
        # as Lightning's save_hyperparameters() reads them, are saved too, so that its checkpoints load and resume with them.
        declared = dataclasses.asdict(settings)
        own = own_arguments(self, inspect.currentframe().f_back, declared, MODEL_ARGUMENTS)
        self.save_settings({"data_shape": list(self.data_shape), **declared, **own})
        self.record_resolved(likelihood=settings.likelihood or "bernoulli", lr=self.lr)

    def record_resolved(self, **settings: Any) -> None:
        """The values settings resolved to (a None's likelihood, backbone or number of latents; the learning rate of
        a given optimizer), in the hyperparameters in place of the setting: hparams.yaml, the HPARAMS tab and the
        checkpoint then say what the run used, and the constructor takes them back as given (a checkpoint loads with
        its hyperparameters)."""
        for name, value in settings.items():
            if name in self.hparams:
                record_hyperparameter(self, name, value)

    # ---- what a subclass provides -------------------------------------------------
    def encode(self, x: Tensor) -> Tensor:
        """The latent of images x a user works with: codes (discrete latents) or the posterior mean (VAE)."""
        raise NotImplementedError

    def decoder_output(self, z: Tensor) -> Tensor:
        """Decoder output (likelihood parameters, e.g. Bernoulli logits) for latents z as `encode` returns them."""
        raise NotImplementedError

    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """The training objective under key "loss", plus terms to log as `train/<name>`."""
        raise NotImplementedError

    def gradient_estimates(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """Losses whose gradients are fresh, independent draws of the training gradient on batch x, with no side
        effect (no cache write, no running statistics), for `callbacks.GradientVariance`: {"": the estimator,
        "_<variant>": another estimator at the same parameters}. Empty (the default): nothing to measure."""
        return {}

    def encoder_parameters(self) -> Iterable[torch.nn.Parameter]:
        """The parameters φ of q(z | x): `train/encoder_grad_variance` measures their gradient, the rest are θ."""
        return self.encoder.parameters()

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

    # ---- inference: the same questions, names and units for every model (no gradient) --
    @inference
    def decode(self, z: Tensor) -> Tensor:
        """Images in [0, 1] (the likelihood's mean: probabilities or means) for latents z."""
        self.check_latents(z)
        return self.likelihood.mean(self.decoder_output(z))

    @inference
    def reconstruct(self, x: Tensor) -> Tensor:
        """Reconstructions of images x, in [0, 1]: decoded at the posterior's mean or mode."""
        self.check_images(x)
        return self.likelihood.mean(self.decode_posterior_mode(self.posterior(x)))

    @inference
    def sample(self, num_samples: int) -> Tensor:
        """`num_samples` images in [0, 1] from the model: the likelihood's mean for prior latents."""
        return self.likelihood.mean(self.sample_prior(num_samples))

    @inference
    def nll(self, x: Tensor, num_samples: int | None = None) -> Tensor:
        """-log p(x) per image in nats, importance-sampled with `num_samples` (default `test_num_samples`);
        for the VQ-VAE the upper bound under its prior."""
        self.check_images(x)
        return self.importance_estimate(self.likelihood.prepare(x), None, self.given_or_test_samples(num_samples))[0]

    @inference
    def elbo(self, x: Tensor, num_samples: int | None = None) -> Tensor:
        """The ELBO per image in nats, averaged over `num_samples` draws from q (default `test_num_samples`);
        for the VQ-VAE, its point-mass posterior's ELBO under its prior, -(the bound)."""
        self.check_images(x)
        return self.importance_estimate(self.likelihood.prepare(x), None, self.given_or_test_samples(num_samples))[1]

    def given_or_test_samples(self, num_samples: int | None) -> int:
        """`num_samples` (at least 1), or `test_num_samples` when it is None."""
        if num_samples is None:
            return self.eval_num_samples["test"]
        if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or num_samples < 1:
            raise ValueError(f"num_samples={num_samples!r}: expected an integer >= 1 (or None: test_num_samples)")
        return int(num_samples)

    def check_latents(self, z: Tensor) -> None:
        """Refuse latents this model cannot decode: another shape, or (discrete latents) anything but integer codes
        in 0..K-1, which would end in an index error deep inside the decoder."""
        name, shape = type(self).__name__, ", ".join(map(str, self.latent_shape))
        if tuple(z.shape[1:]) != self.latent_shape:
            raise ValueError(f"{name} decodes latents of shape (B, {shape}) as encode returns them, got {tuple(z.shape)}")
        if not self.has_discrete_latent and not z.is_floating_point():
            raise ValueError(f"{name} decodes real-valued latents, got {z.dtype}")
        if self.has_discrete_latent and (z.is_floating_point() or not ((z >= 0) & (z < self.num_categories)).all()):
            low, high = z.min().item(), z.max().item()  # sync: decode's input check (inference), not a training step
            raise ValueError(f"{name} decodes codes: integers in 0..{self.num_categories - 1} "
                             f"(num_categories={self.num_categories}), got {z.dtype} values from {low} to {high}")

    def check_images(self, x: Tensor) -> None:
        """Refuse images this model cannot score: another shape, integer pixels, or grey ones under a Bernoulli
        likelihood."""
        if not x.is_floating_point():
            raise ValueError(f"{type(self).__name__} takes images as floats in [0, 1], got {x.dtype} (8-bit pixels: x.float() / 255)")
        if tuple(x.shape[1:]) != self.data_shape:
            raise ValueError(f"{type(self).__name__} takes images of shape (B, {', '.join(map(str, self.data_shape))}), got {tuple(x.shape)}")
        if self.likelihood.requires_binary_data and not ((x == 0) | (x == 1)).all():
            raise ValueError(
                "this model has a bernoulli likelihood and needs binary pixels (0 or 1); binarize the images "
                "first, e.g. torch.bernoulli(x) or (x > 0.5).float()"
            )

    # ---- set-up when a Trainer runs the model ---------------------------------------------
    def configure_model(self) -> None:
        if self.compile_networks and not self._networks_compiled:  # once: Lightning calls this at every fit, validate, test
            # nn.Module.compile sends every compiled module through one frame, whose graphs Dynamo caps per process
            # (recompile_limit, 8 by default) before it runs the networks eagerly with a mere log warning: one model's
            # encoder and decoder, in training and evaluation, with and without gradients and on a short last batch,
            # already take 6. launch/run_builder.py clears them between the jobs of a multirun.
            raise_recompile_limit(COMPILED_GRAPHS_LIMIT)
            self.encoder.compile()
            self.decoder.compile()
            self._networks_compiled = True

    def compiled_training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """`training_loss` compiled whole (model.compile=step, docs/mis.md#compiling-the-whole-step): one graph for the
        loss, and the one AOTAutograd derives from it for the backward; on CUDA both replayed as CUDA graphs. Compiled at
        the first step, when the device is known (tests/models/test_accelerator_step.py compiles every model's step)."""
        if self._compiled_training_loss is None:
            self._compiled_training_loss = self.compile_training_loss(mode=graph_mode(x.device))
        hold_step_inputs(self, self.current_epoch, self.global_step)
        return run_compiled(self._compiled_training_loss, x, index)

    def compile_training_loss(self, **options: Any) -> Callable[[Tensor, Tensor], dict[str, Tensor]]:
        """`training_loss` through models/compiled_step.py's `compile_step` with these options (mode, backend)."""
        return compile_step(self.training_loss, **options)

    # ---- what the step reads that changes as training goes on (models/compiled_step.py) -------
    def step_inputs(self, epoch: int, step: int) -> dict[str, bool | int | float]:
        """The values `training_loss` reads through `step_input` that change as training goes on, at `epoch` and `step`:
        flags (bool) and numbers, which a compiled or batched step takes as inputs rather than baking them in. None by
        default."""
        return {}

    def step_input(self, name: str) -> Any:
        """This step's value of `step_inputs[name]`: a Python value in an eager step, the held one in a compiled or
        batched step."""
        if torch.compiler.is_compiling() or self.batched_replicas:
            return held_step_input(self, name)
        return self.step_inputs(self.current_epoch, self.global_step)[name]

    def static_shapes(self, device: torch.device) -> bool:
        """Whether the step must keep every shape independent of the data: on an accelerator, where reading a size back
        waits for every queued kernel, and in the batched step of replicas, which vmap cannot batch otherwise."""
        return device.type != "cpu" or self.batched_replicas

    # ---- checks before training -----------------------------------------------------
    def setup(self, stage: str) -> None:
        if not any(getattr(callback, "guards_checkpoints", False) for callback in getattr(self.trainer, "callbacks", ())):
            rank_zero_warn("this Trainer lacks checkpoints.trainer.SafeCheckpoints: its checkpoints are written without "
                           "atomic writes or checksums, read unchecked, and a resume is not exact; build it with "
                           "Trainer(callbacks=[SafeCheckpoints(), ...]) (from checkpoints.trainer import SafeCheckpoints)")
        datamodule = self.trainer.datamodule
        if datamodule is None:
            return
        # MisconfigurationException: a setting the trainer refuses, which the front ends show as one line
        image_shape = tuple(getattr(datamodule, "image_shape", self.data_shape))
        if image_shape != self.data_shape:
            raise MisconfigurationException(
                f"{type(self).__name__} was built for images of shape {self.data_shape} "
                f"but the data module yields {image_shape}; set model.data_shape to match the data"
            )
        binarize = getattr(datamodule, "binarize", "none")
        if self.likelihood.requires_binary_data and binarize == "none":
            raise MisconfigurationException(
                "the bernoulli likelihood needs binary pixels, but data.binarize='none'; use data.binarize=dynamic "
                "(or static; LightningCLI: --data.binarize=dynamic), or leave model.likelihood out: it then follows the data"
            )
        if not self.likelihood.requires_binary_data and binarize != "none":  # its NLL: of 256 levels, two of them used
            raise MisconfigurationException(
                f"the {self.hparams.get('likelihood')} likelihood scores 8-bit pixels, but data.binarize={binarize!r} gives "
                "binary ones, and its NLL would be comparable to no other; use data.binarize=none (LightningCLI: "
                "--data.binarize=none) or model.likelihood=bernoulli, or leave model.likelihood out: it then follows the data"
            )

    # ---- one step for training, one for validation and test ---------------------------
    def training_step(self, batch: Batch, batch_idx: int) -> dict[str, Any]:
        x, index = batch
        x = self.likelihood.prepare(x)
        terms = self.compiled_training_loss(x, index) if self.compile_step else self.training_loss(x, index)
        if is_logging_step(self.trainer):  # the only steps whose values reach the loggers (common/log_steps.py)
            # Logged per step only, so the tags are exactly `train/<name>` (no _step/_epoch suffix). Not
            # prog_bar=True: Lightning would convert it to a Python float after every step (a host sync on a
            # GPU); the progress bars read it themselves when they print (callbacks/progress.py).
            self.log_dict({f"train/{name}": value for name, value in terms.items()})
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
        nll, elbo, recon, posterior = self.evaluation_terms(x_eval, self.eval_num_samples[stage])
        metrics = self.eval_metrics[stage]
        metrics["nll"].update(nll)
        metrics["bpd"].update(bits_per_dim(nll, self.num_dims))
        metrics["elbo"].update(elbo)
        metrics["recon_mse"].update((recon - x).square().flatten(1).mean(1))
        metrics["psnr"].update(recon, x)
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, prog_bar=name == "nll")
        # the images these numbers are averaged over, summed over the batches and the processes (a filled tensor: no copy
        # from the host)
        self.log(f"{stage}/num_images", x.new_full((), x.shape[0], dtype=torch.float32), reduce_fx="sum", sync_dist=True)
        return {"posterior": posterior, "reconstructions": recon, "inputs": x_eval}

    def evaluation_terms(self, x: Tensor, num_samples: int) -> tuple[Tensor, Tensor, Tensor, Any]:
        """(-log p(x), ELBO, reconstruction, posterior) of images x as `likelihood.prepare` returns them: the terms of the
        evaluation protocol, from one encoder pass (models/replicas.py computes them for every replica at once)."""
        posterior = self.posterior(x)
        nll, elbo = self.importance_estimate(x, posterior, num_samples)
        return nll, elbo, self.likelihood.mean(self.decode_posterior_mode(posterior)), posterior

    def importance_estimate(self, x: Tensor, posterior: Any, num_samples: int) -> tuple[Tensor, Tensor]:
        """(-log p(x), ELBO) per image in nats of the 8-bit data, from `num_samples` importance samples drawn
        in chunks of `eval_chunk_size`; x as `likelihood.prepare` returns it, posterior None: computed here."""
        posterior = self.posterior(x) if posterior is None else posterior
        num_samples = 1 if self.point_mass_posterior else num_samples
        estimate = importance_log_likelihood(
            lambda n: self.log_importance_weights(x, posterior, n), num_samples, self.eval_chunk_size
        )
        offset = self.likelihood.nll_offset(self.num_dims)
        return offset - estimate.log_likelihood, estimate.elbo - offset

    # ---- optimizer ----------------------------------------------------------------
    @property
    def optimizer_builder(self) -> OptimizerFactory:
        """What builds the model's optimizer over given parameters: `optimizer`, else Adam(lr)."""
        return self.optimizer_factory or functools.partial(torch.optim.Adam, lr=self.lr)

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_builder(self.parameters())
        if isinstance(optimizer, SGMCMC):
            num_examples = getattr(self.trainer.datamodule, "num_train_examples", None)
            if num_examples is None:
                raise ValueError("an SG-MCMC optimizer needs the training-set size: train with one of the data modules")
            # seed_everything seeded every rank alike, so the injected noise is the same on all of them.
            optimizer.attach(dataset_size=num_examples, seed=torch.initial_seed())
        if self.scheduler_factory is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler_factory(optimizer)}  # stepped after each epoch

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> "LatentVariableModel":
        """Lightning's loader, after the checks every checkpoint read makes (checkpoints/model_class.py): weights only
        unless the caller writes `weights_only=False`, the classes it names registered or trusted (LATENT_ZOO_TRUST),
        written by this class (before the class is built from another's hyperparameters)."""
        return load_checked(super().load_from_checkpoint, cls, checkpoint_path, *args, **kwargs)
