"""The persistent per-example MIS cache of JSA: the last state of every training example's chain.

JSA runs one Markov chain per training example across the whole of training: each MIS call
starts from the state the example's chain reached the last time the example was seen
(re-scored under the current networks), so the chain keeps mixing instead of restarting.
The states live in one integer tensor (num_examples, *latent_shape) of the smallest dtype that
holds the K classes plus an "empty" sentinel; it is a registered buffer, so every checkpoint
carries it and a resumed run continues the saved chains.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn


def cache_dtype(num_categories: int) -> torch.dtype:
    """Smallest integer dtype whose maximum (the sentinel) is above every class id 0..K-1."""
    for dtype in (torch.uint8, torch.int16, torch.int32):
        if num_categories <= torch.iinfo(dtype).max:
            return dtype
    return torch.int64


class LatentCache(nn.Module):
    """One cached latent per example, keyed by the example's index in the training split."""

    def __init__(self, num_examples: int, latent_shape: Sequence[int], num_categories: int) -> None:
        super().__init__()
        dtype = cache_dtype(num_categories)
        self.sentinel = torch.iinfo(dtype).max
        self.register_buffer("codes", torch.full((num_examples, *latent_shape), self.sentinel, dtype=dtype))

    @property
    def num_examples(self) -> int:
        return self.codes.shape[0]

    def read(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """Cached latents (B, *latent_shape) as long, and a (B,) mask of examples that have one."""
        codes = self.codes[index]
        has_entry = (codes != self.sentinel).flatten(1).all(dim=1)
        return codes.long(), has_entry

    def write(self, index: Tensor, latent: Tensor) -> None:
        """Store `latent[i]` for example `index[i]`.

        If an index occurs more than once (DDP pads shards by repeating examples), the last
        occurrence wins, decided without relying on the scatter order, so that every rank
        writing the same gathered pairs ends with the same cache.
        """
        unique, inverse = torch.unique(index, return_inverse=True)
        position = torch.arange(index.shape[0], device=index.device)
        last = torch.full_like(unique, -1).scatter_reduce_(0, inverse, position, reduce="amax")
        self.codes[unique] = latent[last].to(self.codes.dtype)

    def fill_rate(self) -> Tensor:
        return (self.codes != self.sentinel).flatten(1).all(dim=1).float().mean()
