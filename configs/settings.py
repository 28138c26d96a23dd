"""What every model and data module can be told: each setting's name, type, default and range, declared once.

A model's constructor takes its settings as keyword arguments and builds its settings object from them
(`JSA(mis_steps=5)` holds `JSASettings(mis_steps=5)`), which checks them: types (`common.settings.check_types`) and
ranges (each class's `check`). LightningCLI lists them from there (`--model.mis_steps`), Hydra's config groups
take their defaults from there, and both front ends check a command line against them before torch is imported:
this module imports nothing heavy. What needs the built network (a likelihood that can sample, a factorized prior)
is checked by the constructor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from common.settings import check_applies, check_at_least, check_seed, check_share, check_types

LikelihoodName = Literal["bernoulli", "discretized_logistic", "categorical", "gaussian"]
SigmaShape = Literal["image", "channel", "pixel"]
BackboneName = Literal["mlp", "conv"]
Activation = Literal["relu", "leaky_relu"]
CompileMode = Literal["networks", "step"]
Embedding = Literal["auto", "per_position", "shared"]
GradientStates = Literal["final", "chain", "expected"]
QStates = Literal["chain", "fresh"]
ChainRows = Literal["auto", "static", "distinct"]
Estimator = Literal["reinforce", "gumbel"]
ControlVariate = Literal["optimal", "running_mean", "none"]
Binarize = Literal["none", "dynamic", "static"]
# A model's constructor arguments that are not settings: the front ends pass them, and a checkpoint's hyperparameters
# hold the data's shape apart (models/base.py).
MODEL_ARGUMENTS = ("data_shape", "optimizer", "scheduler")
# The data settings that say where this machine keeps the data and how it loads it, not what a run trains on: a run
# started from a checkpoint takes the others from it (launch/run_builder.py: resumed_settings), these from its command.
MACHINE_DATA_SETTINGS = ("data_dir", "num_workers", "download", "pin_memory", "eval_batch_size")
MAX_CACHE_SIZE = 10**7  # JSA's cache holds one chain state per training example: more is surely a mistake


@dataclass(frozen=True)
class Settings:
    """A class's settings, checked when built: each field's type, then the class's own `check` of ranges."""

    def __post_init__(self) -> None:
        check_types(self)
        self.check()

    def check(self) -> None:
        """Ranges and combinations; a ValueError names the setting, what it takes and what it got."""


@dataclass(frozen=True)
class ModelSettings(Settings):
    """The settings every model shares (models/base.py).

    Args:
        likelihood: `bernoulli` (binarized data), `discretized_logistic` or `categorical` (8-bit data, exact
            bits/dim), `gaussian` (dequantized data); None: the one that suits the data, which both front
            ends of train.py take from the data module (`bernoulli` when the model is built without one).
        sigma: standard deviation of the gaussian likelihood (its initial value if learned).
        learn_sigma: learn the sigma of the gaussian likelihood.
        sigma_shape: one sigma per `image`, per `channel` or per `pixel` (gaussian).
        num_mixtures: logistics per channel and pixel of the discretized_logistic likelihood.
        lr: Adam learning rate (when the model's `optimizer` is left out; the hyperparameters record the given
            optimizer's own).
        val_num_samples: importance samples per image for `val/nll`.
        test_num_samples: importance samples per image for `test/nll`.
        eval_chunk_size: importance samples scored in one decoder pass (bounds the memory; on a GPU a larger chunk
            may be faster).
        test_seed: seed of the test stage's importance samples, so that test estimates are reproducible.
        activation: nonlinearity of the MLP backbone's hidden layers, `relu` or `leaky_relu` (slope 0.2, as
            in the JSA paper's code).
        compile: what torch.compile compiles when a Trainer runs the model. `networks` (or true): the encoder and
            decoder, in place; `step`: the whole training step, loss and backward, as one graph, with CUDA graphs on
            a CUDA device; evaluation runs eagerly (docs/mis.md#compiling-the-whole-step). false: nothing.
    """

    likelihood: LikelihoodName | None = None
    sigma: float = 0.1
    learn_sigma: bool = False
    sigma_shape: SigmaShape = "image"
    num_mixtures: int = 5
    lr: float = 1e-3
    val_num_samples: int = 100
    test_num_samples: int = 1000
    eval_chunk_size: int = 20
    test_seed: int = 0
    activation: Activation = "relu"
    compile: bool | CompileMode = False

    def check(self) -> None:
        for name in ("lr", "sigma"):
            value = getattr(self, name)
            if not 0.0 < value < float("inf"):  # inf: the first step would leave every weight NaN
                raise ValueError(f"{name} must be > 0 and finite, got {value}")
        for name in ("num_mixtures", "val_num_samples", "test_num_samples", "eval_chunk_size"):
            check_at_least(name, getattr(self, name), 1)
        check_seed("test_seed", self.test_seed)
        if self.likelihood is not None:  # None: the data's, which the front ends set before the model is built
            check_applies(self, "likelihood", self.likelihood, {"sigma": "gaussian", "learn_sigma": "gaussian",
                                                                "sigma_shape": "gaussian", "num_mixtures": "discretized_logistic"},
                          where=", on 8-bit pixels (data.binarize=none; LightningCLI: --data.binarize=none)")


@dataclass(frozen=True)
class VAESettings(ModelSettings):
    """The Gaussian-latent VAE (models/vae.py).

    Args:
        backbone: `mlp` (flat latent of `latent_dim`) or `conv` (a grid of `latent_dim`-channel latents); None:
            the one that suits the data (train.py takes it from the data module: conv for CIFAR-10), else mlp.
        latent_dim: latent size (channels per grid position for `conv`).
        hidden_channels: width of the conv backbone.
    """

    backbone: BackboneName | None = None
    latent_dim: int = 32
    hidden_channels: int = 64

    def check(self) -> None:
        super().check()
        check_at_least("latent_dim", self.latent_dim, 1)


@dataclass(frozen=True)
class CategoricalSettings(ModelSettings):
    """The categorical latent-variable model JSA and its rivals share (models/categorical.py).

    Args:
        backbone: `mlp` (flat latent) or `conv` (a grid of latents); None: the one that suits the data
            (train.py takes it from the data module: conv for CIFAR-10), else mlp.
        num_latents: V for the flat layout (None: 20); for `conv` it is the grid size and may be
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
    """

    backbone: BackboneName | None = None
    num_latents: int | None = None
    num_categories: int = 10
    code_dim: int = 16
    embedding: Embedding = "auto"
    prior: str = "uniform"
    prior_hidden: int | None = None
    prior_layers: int | None = None
    hidden_channels: int = 64

    def check(self) -> None:
        super().check()
        check_at_least("num_categories (K)", self.num_categories, 2)
        check_at_least("code_dim", self.code_dim, 1)
        check_at_least("num_latents (V)", self.num_latents, 1, none="")


@dataclass(frozen=True)
class JSASettings(CategoricalSettings):
    """JSA with the index-cached MIS sampler (models/jsa.py, docs/jsa.md).

    Args:
        mis_steps: L, Metropolis-Hastings steps per training example and step (>= 1).
        use_cache: keep a per-example cache of each chain's last state (written every step; read from
            `cache_start_epoch` on). False: no cache at all.
        cache_start_epoch: read the cache from this epoch on (it is written from the start); None (the default): never,
            each chain starts from a fresh proposal (docs/mis.md#when-does-the-cache-help).
        cache_refresh: ρ, the share of chains that restart from a fresh proposal instead of their cached state, drawn
            anew each step (0: none; docs/mis.md#restarting-a-share-of-the-chains).
        q_states: the states q's gradient uses: `chain`, the states θ's gradient uses (the JSA paper); `fresh`, this
            step's fresh proposals weighted by self-normalized importance weights (docs/jsa.md#what-q-learns-from).
        gradient_states: which states the gradient step uses (docs/jsa.md#which-states-the-gradient-uses): `final`
            (the chain's last state), `chain` (the average over the L states the chain visited, as in the official
            JSA code) or `expected` (that average's expectation over the accept/reject draws given the candidates:
            Rao-Blackwellized, same mean, lower variance).
        chain_rows: how `chain` scores the states it averages, the same gradient either way
            (docs/jsa.md#static-or-distinct-rows): `distinct` re-scores the distinct visited states only (a host
            sync and a new shape each step), `static` weights all L+1 candidates by their visit counts (static
            shapes), `auto`: `static` on an accelerator and for replicas, `distinct` on the CPU.
        gradient_rows: k, the decoder rows per example that θ's gradient differentiates for `chain` and `expected`:
            the k candidates of largest weight exactly plus one drawn from the remaining weight and weighted by it
            (unbiased; docs/jsa.md#a-fixed-number-of-gradient-rows). None: every weighted row, as `chain_rows` says.
        cache_size: number of training examples; filled in from the data module when left out.
    """

    mis_steps: int = 20
    use_cache: bool = True
    cache_start_epoch: int | None = None
    gradient_states: GradientStates = "chain"
    q_states: QStates = "chain"
    cache_refresh: float = 0.0
    cache_size: int | None = None
    chain_rows: ChainRows = "auto"
    gradient_rows: int | None = None

    def check(self) -> None:
        super().check()
        check_at_least("mis_steps (L)", self.mis_steps, 1)
        check_at_least("gradient_rows", self.gradient_rows, 1, whole=True, none="every weighted row")
        check_at_least("cache_start_epoch", self.cache_start_epoch, 0, none="")
        check_share("cache_refresh", self.cache_refresh)
        check_at_least("cache_size", self.cache_size, 1, whole=True, none="the training split's size", most=MAX_CACHE_SIZE)
        if self.gradient_rows is not None and self.gradient_states == "final":
            raise ValueError("gradient_rows applies to gradient_states 'chain' and 'expected'; 'final' differentiates one row already")
        if self.chain_rows != "auto" and self.gradient_states != "chain":
            raise ValueError(f"chain_rows={self.chain_rows!r} applies to gradient_states 'chain' (how it scores the states it "
                             f"averages); '{self.gradient_states}' scores its own rows: leave chain_rows out")
        if self.gradient_rows is not None and self.chain_rows != "auto":
            raise ValueError(f"gradient_rows and chain_rows={self.chain_rows!r} both choose the rows of the gradient: set one of them")
        # Settings of the cache that cannot act without it.
        cache_only = {"cache_start_epoch": self.cache_start_epoch is not None, "cache_refresh": self.cache_refresh != 0,
                      "cache_size": self.cache_size is not None}
        given = [name for name, set_ in cache_only.items() if set_]
        if not self.use_cache and given:
            raise ValueError(f"{given[0]} sets the MIS cache, which use_cache=false turns off: leave {given[0]} out, or "
                             "set use_cache=true")
        if self.cache_refresh != 0 and self.cache_start_epoch is None:
            raise ValueError(f"cache_refresh={self.cache_refresh} restarts a share of the chains that start from the cache, "
                             "and with cache_start_epoch=null no chain does (each starts from a fresh proposal): set "
                             "cache_start_epoch too, or set cache_refresh=0 (its default)")


@dataclass(frozen=True)
class RWSSettings(CategoricalSettings):
    """Reweighted wake-sleep (models/rws.py).

    Args:
        num_samples: S, proposals from q per example and step (>= 1).
        sleep_phase: also fit q on samples (h, x) drawn from the model (needs a likelihood that can sample).
    """

    num_samples: int = 10
    sleep_phase: bool = False

    def check(self) -> None:
        super().check()
        check_at_least("num_samples (S)", self.num_samples, 1)


@dataclass(frozen=True)
class VIMCOSettings(CategoricalSettings):
    """VIMCO (models/vimco.py).

    Args:
        num_samples: S, samples from q per example and step (>= 2, for the leave-one-out baselines).
    """

    num_samples: int = 10

    def check(self) -> None:
        super().check()
        if self.num_samples < 2:
            raise ValueError(f"num_samples (S) must be >= 2 for VIMCO's leave-one-out baselines, got {self.num_samples}")


@dataclass(frozen=True)
class DiscreteVAESettings(CategoricalSettings):
    """The discrete VAE trained by REINFORCE or Gumbel-softmax (models/dvae.py).

    Args:
        estimator: `reinforce` (score function) or `gumbel` (Gumbel-softmax relaxation).
        num_samples: S, samples of h per example and step (REINFORCE: >= 2 for the `optimal` baseline;
            Gumbel: relaxed samples whose log-likelihoods are averaged); None: 4 for REINFORCE, 1 for Gumbel.
        control_variate: REINFORCE's B: `optimal` (B*, leave-one-out), `running_mean` or `none`.
        baseline_decay: decay of the running mean of f (`running_mean`).
        temperature: τ_0 of the Gumbel-softmax; temperature_min: τ_min; anneal_rate: r per step.
        straight_through: Gumbel: decode the hard argmax, back-propagate through the relaxed sample.
    """

    estimator: Estimator = "reinforce"
    num_samples: int | None = None
    control_variate: ControlVariate = "optimal"
    baseline_decay: float = 0.99
    temperature: float = 1.0
    temperature_min: float = 0.5
    anneal_rate: float = 1e-4
    straight_through: bool = False

    def check(self) -> None:
        super().check()
        if self.num_samples is not None and (self.num_samples < 1 or (
                self.estimator == "reinforce" and self.control_variate == "optimal" and self.num_samples < 2)):
            raise ValueError(f"num_samples must be >= 1 (>= 2 for the leave-one-out optimal baseline), got {self.num_samples}")
        if not 0 < self.temperature_min <= self.temperature:
            raise ValueError(f"need 0 < temperature_min <= temperature, got {self.temperature_min} and {self.temperature}")
        if not 0 <= self.baseline_decay < 1:
            raise ValueError(f"baseline_decay must be in [0, 1), got {self.baseline_decay}")
        if self.anneal_rate < 0:
            raise ValueError(f"anneal_rate must be >= 0, got {self.anneal_rate}")
        check_applies(self, "estimator", self.estimator, {"control_variate": "reinforce", "baseline_decay": "reinforce",
                      "temperature": "gumbel", "temperature_min": "gumbel", "anneal_rate": "gumbel", "straight_through": "gumbel"})


@dataclass(frozen=True)
class VQVAESettings(ModelSettings):
    """VQ-VAE (models/vqvae.py, docs/vqvae.md).

    Args:
        backbone: `conv` (the paper's encoder/decoder; one code per cell of the 7x7 / 8x8 grid)
            or `mlp` (a flat latent of `num_latents` codes); None: the one that suits the data, else conv.
        num_categories: K, the number of codes (the codebook size).
        code_dim: D, dimension of a code vector.
        num_latents: codes per image for `mlp` (None: 20); for `conv` the grid (leave it out).
        hidden_channels: width of the conv backbone.
        beta: commitment weight.
        ema: move the codebook by exponential moving averages instead of the codebook loss.
        decay: EMA decay (also for the usage statistics behind dead-code restarts).
        dead_code_threshold: restart codes whose EMA usage (vectors per batch) falls below this (0 = off).
            (The defaults, EMA codebook and restarts, are not the paper's main-text model:
            `ema=False, dead_code_threshold=0`; docs/vqvae.md says why.)
        kmeans_init: initialize the codebook by k-means on the first training batch.
        prior: p(k) of the likelihood bound, a name in models/components/priors.py's PRIORS: `uniform` (K^-n),
            or learned on the codes: `factorized`, `autoregressive` (MADE) or `pixelcnn` (backbone=conv).
        prior_hidden, prior_layers: width and depth of the autoregressive prior (None: its defaults).
        autoencoder_epochs: epochs in which encoder, codebook and decoder train; after them they are frozen
            and only the prior trains (the second stage). None: every epoch.
        autoencoder_checkpoint: a trained VQ-VAE's checkpoint whose encoder, codebook and decoder this run
            starts from (frozen unless autoencoder_epochs > 0): the second stage as a run of its own.
    """

    backbone: BackboneName | None = None
    num_categories: int = 512
    code_dim: int = 64
    num_latents: int | None = None
    hidden_channels: int = 64
    beta: float = 0.25
    ema: bool = True
    decay: float = 0.99
    dead_code_threshold: float = 1.0
    kmeans_init: bool = False
    prior: str = "uniform"
    prior_hidden: int | None = None
    prior_layers: int | None = None
    autoencoder_epochs: int | None = None
    autoencoder_checkpoint: str | None = None

    def check(self) -> None:
        super().check()
        check_at_least("num_categories (K, the number of codes)", self.num_categories, 2)
        check_at_least("num_latents (codes per image)", self.num_latents, 1, none="")
        check_at_least("autoencoder_epochs", self.autoencoder_epochs, 0, none="every epoch")
        if self.autoencoder_epochs == 0 and self.autoencoder_checkpoint is None:
            raise ValueError("autoencoder_epochs=0 freezes the autoencoder from the start: give the trained VQ-VAE's checkpoint "
                             "as model.autoencoder_checkpoint=PATH (its last.ckpt or best checkpoint)")
        if (self.autoencoder_epochs is not None or self.autoencoder_checkpoint is not None) and self.prior == "uniform":
            raise ValueError("autoencoder_epochs / autoencoder_checkpoint: a second stage fits a learned prior; set model.prior "
                             "(pixelcnn for the conv grid, autoregressive for backbone=mlp)")


@dataclass(frozen=True)
class DataSettings(Settings):
    """The settings every image data module shares (datamodules/base.py).

    Args:
        data_dir: Root holding the torchvision file layout. None falls back to env DATA_DIR, then ./data.
        batch_size: Training batch size, at most the training split (train_file_size - val_size): a larger one is
            refused, as it is surely a mistake (one step per epoch, every image in it).
        num_workers: DataLoader worker processes (each builds whole batches).
        binarize: `none` (grey values in [0, 1]), `dynamic` (a Bernoulli draw per image and epoch; one fixed draw
            per val/test image) or `static` (threshold 0.5).
        val_size: Examples moved from the training file to the val split.
        split_seed: Seed of the train/val permutation.
        download: Let `prepare_data` download missing files.
        pin_memory: Pin batches in page-locked memory (for GPU training).
        eval_batch_size: Val/test batch size, at most the larger of the val and test splits. None means
            batch_size, not checked against these splits.
        seed: Seed of the training order (a permutation per epoch) and of the dynamic binarization; Hydra passes
            the run's `seed`.
    """

    data_dir: str | None = None
    batch_size: int = 128
    num_workers: int = 0
    binarize: Binarize = "none"
    val_size: int = 5000
    split_seed: int = 0
    download: bool = True
    pin_memory: bool = False
    eval_batch_size: int | None = None
    seed: int = 0

    def check(self) -> None:
        check_at_least("batch_size", self.batch_size, 1, whole=True)
        check_at_least("num_workers", self.num_workers, 0, whole=True)
        check_at_least("val_size", self.val_size, 0, whole=True)
        check_at_least("eval_batch_size", self.eval_batch_size, 1, whole=True, none="batch_size")
        check_seed("split_seed", self.split_seed)
        check_seed("seed", self.seed)


@dataclass(frozen=True)
class MNISTDataModuleSettings(DataSettings):
    """MNIST and Fashion-MNIST: dynamically binarized by default (the usual benchmark for discrete latent-variable
    models, scored with a Bernoulli likelihood); binarize="none" for grey pixels."""

    binarize: Binarize = "dynamic"


def suited_likelihood(binarize: str) -> str:
    """The likelihood that suits a data module's pixels: `bernoulli` for binarized ones; for 8-bit grey or colour ones
    the discretized logistic mixture, whose probabilities of the 256 levels give exact bits/dim
    (models/components/likelihoods.py). A model whose `likelihood` is left out gets it (launch/run_builder.py)."""
    return "discretized_logistic" if binarize == "none" else "bernoulli"


# A class's settings are `<its name>Settings` (`settings_class`); these take their parent's.
FashionMNISTDataModuleSettings = MNISTDataModuleSettings
CIFAR10DataModuleSettings = DataSettings


def settings_class(class_path: str) -> type[Settings] | None:
    """The settings declared for the class at `class_path` (`models.JSA` -> JSASettings), found by its name without
    importing it; None for a class that declares none here (a user's own, torch's, Lightning's)."""
    if class_path.split(".", 1)[0] not in ("models", "datamodules"):
        return None
    found = globals().get(class_path.rsplit(".", 1)[-1] + "Settings")
    return found if isinstance(found, type) and issubclass(found, Settings) else None
