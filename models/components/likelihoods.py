"""Observation models p(x | decoder output), shared by every model in the collection.

A likelihood turns the decoder's output tensor (same shape as the image) into
log p(x | h), summed over pixels, one number per example. All models use these
classes, so a `val/nll` of the VAE, the VQ-VAE and JSA means the same thing.

* `bernoulli`: for binarized images; the decoder outputs logits.
* `gaussian`: for continuous images with fixed or learned sigma; the decoder
  outputs the mean. Pixels are uniformly dequantized first
  (x~ = (255 x + u) / 256, u ~ U[0, 1)), so the density of x~ is a proper
  density of 8-bit data and `bits_per_dim` follows
  bpd = (-log p(x~) + D log 256) / (D log 2).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn


LikelihoodName = Literal["bernoulli", "gaussian"]


class Likelihood(nn.Module):
    """Base class: `log_prob(x, out) -> (..., )` summed over the last three dims."""

    #: True when the data must be binary (the density is a probability mass function).
    requires_binary_data: bool = False
    #: True when log_prob is a density over [0, 1]^D (then bits/dim is reported).
    continuous: bool = False

    def log_prob(self, x: Tensor, out: Tensor) -> Tensor:
        raise NotImplementedError

    def mean(self, out: Tensor) -> Tensor:
        """The expected image E[x | h], used for reconstructions and samples."""
        raise NotImplementedError

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
        # -BCE-with-logits is log Bernoulli in a numerically stable form.
        x = x.expand_as(out)
        return -F.binary_cross_entropy_with_logits(out, x, reduction="none").flatten(-3).sum(-1)

    def mean(self, out: Tensor) -> Tensor:
        return torch.sigmoid(out)


class GaussianLikelihood(Likelihood):
    """p(x~ | h) = N(x~; mu(h), sigma^2 I), sigma fixed or a learned scalar.

    Evaluated on uniformly dequantized pixels so that -log p(x~) + D log 256 is an
    upper bound on the negative log-probability of the 8-bit image (Theis et al., 2016).
    """

    continuous = True

    def __init__(self, sigma: float = 0.1, learn_sigma: bool = False) -> None:
        super().__init__()
        if sigma <= 0:
            raise ValueError(f"gaussian likelihood needs sigma > 0, got {sigma}")
        log_sigma = torch.tensor(math.log(sigma))
        if learn_sigma:
            self.log_sigma = nn.Parameter(log_sigma)
        else:
            self.register_buffer("log_sigma", log_sigma)

    def log_prob(self, x: Tensor, out: Tensor) -> Tensor:
        # Written as -0.5 ||(x - mu) / sigma||^2 - D log sigma - D/2 log 2 pi, never expanded.
        z = (x - out) * torch.exp(-self.log_sigma)
        log_density = -0.5 * z.square() - self.log_sigma - 0.5 * math.log(2 * math.pi)
        return log_density.flatten(-3).sum(-1)

    def mean(self, out: Tensor) -> Tensor:
        return out.clamp(0.0, 1.0)

    def prepare(self, x: Tensor) -> Tensor:
        # Uniform dequantization of 8-bit pixels: x in {0, 1/255, ..., 1} -> [0, 1).
        return (x * 255.0 + torch.rand_like(x)) / 256.0

    def nll_offset(self, num_dims: int) -> float:
        return num_dims * math.log(256.0)


def build_likelihood(name: LikelihoodName, sigma: float = 0.1, learn_sigma: bool = False) -> Likelihood:
    """Likelihood by config name: `bernoulli` or `gaussian`."""
    if name == "bernoulli":
        return BernoulliLikelihood()
    if name == "gaussian":
        return GaussianLikelihood(sigma=sigma, learn_sigma=learn_sigma)
    raise ValueError(f"unknown likelihood {name!r}; choose 'bernoulli' or 'gaussian'")


def bits_per_dim(nll_nats: Tensor, num_dims: int) -> Tensor:
    """Convert a per-image NLL in nats (of 8-bit data) to bits per dimension."""
    return nll_nats / (num_dims * math.log(2.0))
