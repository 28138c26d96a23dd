"""A training loader that a run resumed from a mid-epoch checkpoint continues exactly: what decides the batches is
saved state. The order: each epoch a permutation seeded by (seed, epoch), sharded across ranks by
`DistributedSampler`'s rule, with one replica too, so single- and multi-device runs shuffle alike. The position:
`state_dict()` records the epoch and the examples consumed (counted in `on_before_batch_transfer`, since the loader
fetches one batch ahead), and `load_state_dict()` resumes after them, whatever the batch size. The dynamic
binarization: a generator seeded by (seed, epoch, the batch's first index), not the global RNG.
"""

from __future__ import annotations

from typing import Any, Iterator

from torch.utils.data import DataLoader, Dataset, DistributedSampler

from checkpoints.errors import CheckpointError


class ResumableSampler(DistributedSampler):
    """`DistributedSampler` (shuffled by seed + epoch, one shard per rank) that can start mid-epoch."""

    def __init__(self, dataset: Dataset, batch_size: int, num_replicas: int = 1, rank: int = 0, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self.batch_size = batch_size
        self.batches_done = 0  # batches of the current epoch that training has consumed (this pass)
        self.examples_skipped = 0  # examples a resumed pass skipped (consumed before the checkpoint)
        self._resume: tuple[int, int] | None = None  # (epoch, examples to skip in it)
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if hasattr(self.dataset, "epoch"):
            self.dataset.epoch = epoch  # the binarization noise depends on it

    @property
    def examples_done(self) -> int:
        """The position in the epoch, in examples of this rank's shard: it holds across a change of batch size."""
        return self.examples_skipped + self.batches_done * self.batch_size

    def resume(self, epoch: int, examples_done: int) -> None:
        self._resume = (epoch, examples_done)
        self.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        # The count restarts with every pass over the data; a resumed pass starts after the batches done.
        # (Set here, not in set_epoch: a loader with workers asks for the indices before Lightning calls it.)
        self.batches_done, self.examples_skipped = 0, 0
        if self._resume is not None and self._resume[0] == self.epoch:
            self.examples_skipped = self._resume[1]
            indices = indices[self.examples_skipped :]
        self._resume = None
        return iter(indices)


class ResumableDataLoader(DataLoader):
    """A DataLoader over a `ResumableSampler` with Lightning's `state_dict` / `load_state_dict` interface."""

    def __init__(self, dataset: Dataset, sampler: ResumableSampler, **kwargs: Any) -> None:
        super().__init__(dataset, batch_size=sampler.batch_size, sampler=sampler, **kwargs)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.sampler.epoch, "examples_done": self.sampler.examples_done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        state = state if isinstance(state, dict) else {}
        epoch, examples_done, total = state.get("epoch"), state.get("examples_done"), len(self.sampler)

        def count(value: Any, most: float) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most

        # Out of range, it would silently skip most of an epoch (or none of it); not an integer, fail at iteration.
        if not count(epoch, 10**7) or not count(examples_done, total):
            raise CheckpointError(f"the checkpoint's data-loader position (epoch {str(epoch)[:40]}, {str(examples_done)[:40]} "
                                  f"examples done) does not fit this training split of {total} examples: the file was "
                                  "altered; use another checkpoint")
        self.sampler.resume(epoch, examples_done)
