"""Code-usage statistics of a discrete latent (VQ-VAE codes, JSA classes) as a torchmetrics Metric,
so that counts accumulate over an epoch and are summed across devices under DDP."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class CodeUsage(Metric):
    """Histogram of the codes used; `compute()` gives (perplexity, fraction of codes used).

    perplexity = exp(-sum_k p_k log p_k) of the empirical code distribution p: K when all K codes
    are used equally, 1 when a single code takes everything (codebook collapse).
    """

    full_state_update = False

    def __init__(self, num_codes: int) -> None:
        super().__init__()
        self.num_codes = num_codes
        self.add_state("counts", default=torch.zeros(num_codes), dist_reduce_fx="sum")

    def update(self, codes: Tensor) -> None:
        self.counts += code_counts(codes, self.num_codes).to(self.counts.dtype)

    def compute(self) -> tuple[Tensor, Tensor]:
        return usage_perplexity(self.counts), (self.counts > 0).float().mean()


def code_counts(codes: Tensor, num_codes: int) -> Tensor:
    """How often each of the codes 0..num_codes-1 occurs in `codes`, (num_codes,) float32.

    A scatter-add into a fixed-size table, not torch.bincount: on a GPU bincount reads the codes' minimum and
    maximum back to the host, a sync on every training step."""
    codes = codes.flatten()
    ones = torch.ones_like(codes, dtype=torch.float32)
    return ones.new_zeros(num_codes).index_add(0, codes, ones)  # new_zeros: per replica under vmap


def usage_perplexity(counts: Tensor) -> Tensor:
    """exp(entropy) of the distribution proportional to `counts` (zero counts contribute 0)."""
    probs = counts / counts.sum().clamp_min(1)
    return torch.exp(-(probs * probs.clamp_min(1e-12).log()).sum())
