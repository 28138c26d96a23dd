"""Importance-sampled estimate of log p(x) with the encoder as proposal (docs/vae.md#importance-sampled-log-likelihood).

    log p(x) = log E_q[p(x, z) / q(z | x)] ≈ logsumexp_s(log w_s) - log S,   log w_s = log p(x, z_s) - log q(z_s | x)

Its expectation is <= log p(x) (Jensen) and rises monotonically to log p(x) with S (Burda et al., 2016, IWAE bound);
the mean of the log weights, from the same samples, is the ELBO estimate. All arithmetic stays in log space.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
from torch import Tensor


class ImportanceEstimate(NamedTuple):
    log_likelihood: Tensor  # (B,) logsumexp(log w) - log S
    elbo: Tensor  # (B,) mean of log w


def log_mean_exp(log_w: Tensor, dim: int = 0) -> Tensor:
    """log(mean(exp(log_w))) along `dim`, without leaving log space."""
    return torch.logsumexp(log_w, dim=dim) - math.log(log_w.shape[dim])


def importance_log_likelihood(
    log_weights: Callable[[int], Tensor], num_samples: int, chunk_size: int | None = None
) -> ImportanceEstimate:
    """Combine `num_samples` log importance weights drawn in chunks of `chunk_size`.

    `log_weights(n)` must return a (n, B) tensor of independent log weights
    log p(x, z) - log q(z | x), z ~ q(z | x). Chunking bounds the memory of the
    decoder pass (n * B decoder outputs at a time) without changing the estimate.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    chunk_size = chunk_size or num_samples
    lse_chunks, sum_chunks = [], []
    for start in range(0, num_samples, chunk_size):
        log_w = log_weights(min(chunk_size, num_samples - start))
        lse_chunks.append(torch.logsumexp(log_w, dim=0))
        sum_chunks.append(log_w.sum(dim=0))
    log_likelihood = torch.logsumexp(torch.stack(lse_chunks), dim=0) - math.log(num_samples)
    elbo = torch.stack(sum_chunks).sum(dim=0) / num_samples
    return ImportanceEstimate(log_likelihood, elbo)
