"""Observation models p(x | decoder output) shared by every model, so that `val/nll` means the same for all
(docs/likelihoods.md); each gives log p(x | h) summed over pixels, one number per example:
`bernoulli` (binarized images; logits), `discretized_logistic` (8-bit; M logistics per channel discretized to 256
levels, Salimans et al., 2017, without the RGB coupling; 3M numbers per channel), `categorical` (8-bit; a 256-way
softmax per channel and pixel, van den Oord et al., 2016), `gaussian` (dequantized images x~ = (255 x + u) / 256,
u ~ U[0, 1), fixed or learned sigma; the mean).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from configs.settings import LikelihoodName, SigmaShape
from models.components.precision import full_precision

NUM_LEVELS = 256  # 8-bit pixels


class Likelihood(nn.Module):
    """Base class: `log_prob(x, out) -> (..., )` summed over the last three dims."""

    #: True when the data must be binary (the density is a probability mass function).
    requires_binary_data: bool = False
    #: True when log_prob is a density over [0, 1]^D (then bits/dim is reported).
    continuous: bool = False
    #: Decoder outputs per image channel (the decoder emits C times this many maps).
    params_per_channel: int = 1

    def log_prob(self, x: Tensor, out: Tensor) -> Tensor:
        raise NotImplementedError

    def mean(self, out: Tensor) -> Tensor:
        """The expected image E[x | h], used for reconstructions and samples."""
        raise NotImplementedError

    def sample(self, out: Tensor) -> Tensor:
        """Draw images x ~ p(x | h) (as `prepare` returns them) from decoder outputs; e.g. RWS's sleep phase."""
        raise NotImplementedError(f"the {type(self).__name__} cannot draw samples")

    @property
    def can_sample(self) -> bool:
        return type(self).sample is not Likelihood.sample

    def prepare(self, x: Tensor) -> Tensor:
        """Map a batch in [0, 1] to what `log_prob` is evaluated on (identity by default)."""
        return x

    def nll_offset(self, num_dims: int) -> float:
        """Nats added to -log p(x) to express it in the units of 8-bit data (0 for discrete)."""
        return 0.0


class BernoulliLikelihood(Likelihood):
    """p(x | h) = prod_i Bernoulli(x_i; sigmoid(logit_i)); x must be 0/1."""

    requires_binary_data = True

    def log_prob(self, x: Tensor, out: Tensor) -> Tensor:
        # log Bernoulli(x; sigmoid(l)) = x l - softplus(l), softplus computed stably. One softplus pass and one fused
        # multiply-add over the S * B decoder outputs, with x broadcast, not expanded: faster on CPU than
        # BCE-with-logits, which is most of the importance-sampled evaluation's cost beside the matmuls
        # (python -m benchmarks.speed.eval_speed measures it; figures in benchmarks/results/speed/).
        out = full_precision(out)  # summed in float32 under bf16-mixed (models/components/precision.py)
        return torch.addcmul(F.softplus(out), x, out, value=-1.0).flatten(-3).sum(-1).neg()

    def mean(self, out: Tensor) -> Tensor:
        return torch.sigmoid(out)

    def sample(self, out: Tensor) -> Tensor:
        return torch.bernoulli(torch.sigmoid(out))


class GaussianLikelihood(Likelihood):
    """p(x~ | h) = N(x~; mu(h), sigma^2 I), sigma fixed or learned: one, one per channel, or one per pixel.

    Evaluated on uniformly dequantized pixels so that -log p(x~) + D log 256 is an
    upper bound on the negative log-probability of the 8-bit image (Theis et al., 2016).
    """

    continuous = True

    def __init__(self, sigma: float = 0.1, learn_sigma: bool = False, sigma_shape: SigmaShape = "image",
                 data_shape: tuple[int, ...] = (1, 28, 28)) -> None:
        super().__init__()
        if sigma <= 0:
            raise ValueError(f"gaussian likelihood needs sigma > 0, got {sigma}")
        shapes = {"image": (), "channel": (data_shape[0], 1, 1), "pixel": tuple(data_shape)}
        if sigma_shape not in shapes:
            raise ValueError(f"sigma_shape must be one of {list(shapes)}, got {sigma_shape!r}")
        log_sigma = torch.full(shapes[sigma_shape], math.log(sigma))
        if learn_sigma:
            self.log_sigma = nn.Parameter(log_sigma)
        else:
            self.register_buffer("log_sigma", log_sigma)

    def log_prob(self, x: Tensor, out: Tensor) -> Tensor:
        # Written as -0.5 ||(x - mu) / sigma||^2 - D log sigma - D/2 log 2 pi, never expanded.
        out = full_precision(out)
        z = (x - out) * torch.exp(-self.log_sigma)
        log_density = -0.5 * z.square() - self.log_sigma - 0.5 * math.log(2 * math.pi)
        return log_density.flatten(-3).sum(-1)

    def mean(self, out: Tensor) -> Tensor:
        return out.clamp(0.0, 1.0)

    def sample(self, out: Tensor) -> Tensor:
        return out + torch.exp(self.log_sigma) * torch.randn_like(out)

    def prepare(self, x: Tensor) -> Tensor:
        # Uniform dequantization of 8-bit pixels: x in {0, 1/255, ..., 1} -> [0, 1).
        return (x * 255.0 + torch.rand_like(x)) / 256.0

    def nll_offset(self, num_dims: int) -> float:
        return num_dims * math.log(256.0)


def _levels(x: Tensor) -> Tensor:
    """The 8-bit level k of pixels x = k / 255, as long."""
    return (x * (NUM_LEVELS - 1)).round().long()


def _split_channels(out: Tensor, num_channels: int, per_channel: int) -> Tensor:
    """(..., C * P, H, W) decoder output -> (..., C, P, H, W)."""
    return out.unflatten(-3, (num_channels, per_channel))


class CategoricalLikelihood(Likelihood):
    """p(x | h) = prod over pixels and channels of Cat(k; softmax(256 logits)): exact, no ordering assumed."""

    params_per_channel = NUM_LEVELS

    def log_prob(self, x: Tensor, out: Tensor) -> Tensor:
        log_p = _split_channels(full_precision(out), x.shape[-3], NUM_LEVELS).log_softmax(-3)  # (..., C, 256, H, W)
        k = _levels(x).unsqueeze(-3).expand(*log_p.shape[:-3], 1, *log_p.shape[-2:])
        return log_p.gather(-3, k).squeeze(-3).flatten(-3).sum(-1)

    def mean(self, out: Tensor) -> Tensor:
        probs = _split_channels(out, out.shape[-3] // NUM_LEVELS, NUM_LEVELS).softmax(-3)
        levels = torch.arange(NUM_LEVELS, device=out.device, dtype=probs.dtype).view(NUM_LEVELS, 1, 1) / (NUM_LEVELS - 1)
        return (probs * levels).sum(-3)


class DiscretizedLogisticLikelihood(Likelihood):
    """A mixture of M logistics per channel and pixel, discretized to the 256 levels (PixelCNN++).

    With pixels rescaled to [-1, 1], level k covers [c_k - 1/255, c_k + 1/255], c_k = 2k/255 - 1, and
    P(k) = Σ_m π_m [σ((c_k + 1/255 - μ_m)/s_m) - σ((c_k - 1/255 - μ_m)/s_m)], the two end levels taking
    the tails (-∞ and +∞) so that the 256 probabilities sum to 1. All in log space:
    log(σ(a) - σ(b)) = -softplus(-b) - softplus(a) + log(expm1(a - b)) for a > b, stable for any a, b.
    """

    def __init__(self, num_mixtures: int = 5) -> None:
        super().__init__()
        if num_mixtures < 1:
            raise ValueError(f"num_mixtures must be >= 1, got {num_mixtures}")
        self.num_mixtures = num_mixtures
        self.params_per_channel = 3 * num_mixtures

    def _mixture(self, out: Tensor, num_channels: int) -> tuple[Tensor, Tensor, Tensor]:
        """(mixture log-weights, means in [-1, 1] space, log-scales), each (..., C, M, H, W)."""
        params = _split_channels(out, num_channels, self.params_per_channel)
        logits, means, log_scales = params.chunk(3, dim=-3)
        return logits.log_softmax(-3), means, log_scales.clamp(min=-7.0)  # PixelCNN++'s floor on the scale

    def log_prob(self, x: Tensor, out: Tensor) -> Tensor:
        log_weights, means, log_scales = self._mixture(full_precision(out), x.shape[-3])
        k = _levels(x).unsqueeze(-3).to(means.dtype)  # (..., C, 1, H, W)
        # Each edge computed once from the integer level, (2k ± 1)/255 - 1, not as c_k ± 1/255: the upper edge of
        # level k and the lower edge of level k + 1 are then the same float, so the 256 masses telescope to 1.
        edge_upper = (2 * k + 1) / (NUM_LEVELS - 1) - 1
        edge_lower = (2 * k - 1) / (NUM_LEVELS - 1) - 1
        inv_scale = torch.exp(-log_scales)
        upper = (edge_upper - means) * inv_scale  # a
        lower = (edge_lower - means) * inv_scale  # b
        log_cdf_upper = -F.softplus(-upper)  # log σ(a): level 0 takes everything below
        log_survival_lower = -F.softplus(lower)  # log (1 - σ(b)): level 255 takes everything above
        # a - b from the distance between those same float edges: the exact 2/255 misses it by up to ~1e-7 (1e-4 in
        # a - b at the scale floor), enough to break the telescoping; upper - lower would cancel at large scales.
        width = ((edge_upper - edge_lower) * inv_scale).clamp_min(torch.finfo(means.dtype).tiny)
        log_mass = -F.softplus(-lower) - F.softplus(upper) + width + torch.log(-torch.expm1(-width))  # log(σ(a) - σ(b))
        log_p = torch.where(k == 0, log_cdf_upper, torch.where(k == NUM_LEVELS - 1, log_survival_lower, log_mass))
        return torch.logsumexp(log_weights + log_p, dim=-3).flatten(-3).sum(-1)

    def mean(self, out: Tensor) -> Tensor:
        """The image the reconstructions and samples show: the mixture's average of the logistics' centres μ, clamped
        to [0, 1]. An approximation of E[x | h]: it ignores the mass the end levels collect from the tails (near 0
        and 1 the exact expectation is pulled inwards), and costs no pass over the 256 levels."""
        log_weights, means, _ = self._mixture(out, out.shape[-3] // self.params_per_channel)
        return ((log_weights.exp() * means.clamp(-1, 1)).sum(-3) + 1) / 2


def build_likelihood(name: LikelihoodName, sigma: float = 0.1, learn_sigma: bool = False, sigma_shape: SigmaShape = "image",
                     num_mixtures: int = 5, data_shape: tuple[int, ...] = (1, 28, 28)) -> Likelihood:
    """Likelihood by config name: `bernoulli`, `discretized_logistic`, `categorical` or `gaussian`."""
    if name == "bernoulli":
        return BernoulliLikelihood()
    if name == "discretized_logistic":
        return DiscretizedLogisticLikelihood(num_mixtures)
    if name == "categorical":
        return CategoricalLikelihood()
    if name == "gaussian":
        return GaussianLikelihood(sigma=sigma, learn_sigma=learn_sigma, sigma_shape=sigma_shape, data_shape=data_shape)
    raise ValueError(f"unknown likelihood {name!r}; choose 'bernoulli', 'discretized_logistic', 'categorical' or 'gaussian'")


def bits_per_dim(nll_nats: Tensor, num_dims: int) -> Tensor:
    """Convert a per-image NLL in nats (of 8-bit data) to bits per dimension."""
    return nll_nats / (num_dims * math.log(2.0))
