"""The persistent per-example MIS cache of JSA: the last state of every training example's chain, from which its next
MIS call starts, re-scored under the current networks (docs/mis.md#the-per-example-cache).

States are one integer tensor (num_examples, *latent_shape) of the smallest dtype holding K classes and an "empty"
sentinel, beside the epoch in which each state last changed (a write's age says nothing: every example is written once
an epoch). Both are buffers, so checkpoints carry them and a resumed run continues the chains.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from checkpoints.errors import CheckpointError
from samplers.mis import MISSample

CACHE_DIAGNOSTICS = ("cache_stuck_rate", "cache_age_epochs", "cache_log_weight_gap")  # `cache_diagnostics`


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
        self.register_buffer("changed_epoch", torch.zeros(num_examples, dtype=torch.int32))
        self.num_categories = num_categories
        self.register_load_state_dict_pre_hook(check_loaded_state)

    @property
    def num_examples(self) -> int:
        return self.codes.shape[0]

    def read(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """Cached latents (B, *latent_shape) as long, and a (B,) mask of examples that have one."""
        codes = self.codes[index]
        has_entry = (codes != self.sentinel).flatten(1).all(dim=1)
        return codes.long(), has_entry

    def age(self, index: Tensor, epoch: int) -> Tensor:
        """Epochs since each example's cached state last changed, (B,) float."""
        return (epoch - self.changed_epoch[index]).float()

    def write(self, index: Tensor, latent: Tensor, epoch: int = 0) -> None:
        """Store `latent[i]` for example `index[i]`, in `epoch` (the changed epoch of the entries whose state changes).

        If an index occurs more than once (DDP pads shards by repeating examples), the last
        occurrence wins, decided without relying on the scatter order, so that every rank
        writing the same gathered pairs ends with the same cache.
        """
        # position of each example's last occurrence in the batch, scattered into a table over all examples:
        # sync-free (torch.unique would read its output size back to the host every step)
        position = torch.arange(index.shape[0], device=index.device)
        last = torch.full_like(self.changed_epoch, -1, dtype=torch.long)
        last.scatter_reduce_(0, index, position, reduce="amax")
        new = latent[last[index]].to(self.codes.dtype)  # every occurrence of an index carries its last row
        changed = (self.codes[index] != new).flatten(1).any(1)
        self.codes[index] = new
        self.changed_epoch[index] = torch.where(changed, epoch, self.changed_epoch[index])

    def fill_rate(self) -> Tensor:
        return (self.codes != self.sentinel).flatten(1).all(dim=1).float().mean()


def refresh_starts(has_start: Tensor, rate: float | Tensor, generator: torch.Generator | None = None) -> Tensor:
    """`has_start` with each cached start dropped with probability `rate`: those chains restart from a fresh proposal.

    A restart replaces a state of the chain by a draw from q, so the persistent chain's stationary law π_ρ solves
    π_ρ = (1 − ρ) π_ρ P^L + ρ q P^L: it is p(h | x) at ρ = 0 and never further from it in total variation than the
    no-cache chain's law q P^L (docs/mis.md#restarting-a-share-of-the-chains).
    """
    if not isinstance(rate, Tensor) and rate <= 0.0:  # (a tensor rate, one per replica, always draws: no host sync)
        return has_start
    keep = torch.rand(has_start.shape, device=has_start.device, generator=generator) >= rate
    return has_start & keep


def cache_diagnostics(sample: MISSample, age: Tensor, has_start: Tensor) -> dict[str, Tensor]:
    """Over the chains that start from a cached state (docs/mis.md#when-does-the-cache-help); tensors, 0 where no chain
    does (no host sync decides it, and a NaN would stop training at the non-finite guard):

    cache_stuck_rate: the fraction whose chain never leaves it in this step (each proposal rejected or equal to it);
    cache_age_epochs: their mean number of epochs since the state last changed (`age`, read before this step's write);
    cache_log_weight_gap: mean of w(cached) - max_j w(proposal j), w = log p(x, h) - log q(h | x); > 0 where the cached
        state outweighs every proposal (a stale state the chain rarely leaves, or a mode q misses).
    """
    log_weight = (sample.log_target - sample.log_proposal).detach()
    started = has_start.float()
    num_started = started.sum().clamp(min=1.0)

    def mean_over_started(value: Tensor) -> Tensor:
        return (value * started).sum() / num_started

    return {
        "cache_stuck_rate": mean_over_started((sample.path == sample.candidates[:, :1]).all(2).all(1).float()),
        "cache_age_epochs": mean_over_started(age),
        "cache_log_weight_gap": mean_over_started(log_weight[:, 0] - log_weight[:, 1:].max(1).values),
    }


def check_cache_size(cache: LatentCache, num_examples: int, val_size: object) -> None:
    """A cache sized by a checkpoint (`cache_size`) must hold one chain per example of the training split."""
    if cache.num_examples != num_examples:
        raise CheckpointError(
            f"the checkpoint's JSA cache holds {cache.num_examples} chains but the training split has {num_examples} "
            f"examples (data.val_size={val_size}: another validation split or data set?); use the "
            "data settings it was trained with, or start a new run"
        )


MAX_EPOCH = 10**7  # far beyond any run; a changed epoch outside [0, MAX_EPOCH) was not written by training


def check_loaded_state(module: LatentCache, state_dict: dict, prefix: str, *args) -> None:
    """A checkpoint's cache is read as indices (an out-of-range code is an index error on the CPU and a device-side
    assert on a GPU) and logged as ages: it must hold codes in 0..K-1 or the sentinel, and changed epochs in
    [0, MAX_EPOCH). A file that does not is refused in one line before anything uses it. (That they are integers,
    dense and on a device: checkpoints/loader.py. A replicated process's stacked cache: models/replicas.py.)"""
    codes, epochs = state_dict.get(prefix + "codes"), state_dict.get(prefix + "changed_epoch")
    if isinstance(codes, Tensor) and codes.numel():
        valid = ((codes >= 0) & (codes < module.num_categories)) | (codes.long() == module.sentinel)
        if not valid.all():
            bad = codes[~valid]
            raise CheckpointError(f"the checkpoint's {prefix}codes (JSA's cache) hold {bad.numel()} value(s) outside the "
                                  f"classes 0..{module.num_categories - 1} (e.g. {bad.flatten()[0].item()}): the file was "  # sync: on load, the refusal's message only
                                  "altered or written for another num_categories; use another checkpoint")
    if isinstance(epochs, Tensor) and epochs.numel():
        if not ((epochs >= 0) & (epochs < MAX_EPOCH)).all():
            raise CheckpointError(f"the checkpoint's {prefix}changed_epoch (JSA's cache) holds values that are not epochs "
                                  f"(integers in [0, {MAX_EPOCH})): the file was altered; use another checkpoint")
