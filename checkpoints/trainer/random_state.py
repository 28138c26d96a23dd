"""Every rank's random state in the checkpoint, so that a resumed run draws what an uninterrupted run would have drawn.

Saved: torch's CPU generator (and the CUDA generator where used) of every rank, applied when training starts (after
any sanity check, which draws numbers too); the data order is the loader's own state (datamodules/resumable.py), an
SG-MCMC sampler's noise generator the optimizer's. A run that does not resume seeds each DDP rank seed + rank, so the
ranks' samples are independent and still determined by the seed.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from checkpoints.errors import CheckpointError


class RandomStateCheckpoint(L.Callback):
    """Saves each rank's random state under `checkpoint["rng_states"]` and restores it at train start."""

    def __init__(self) -> None:
        self._to_restore: dict[str, Tensor] | None = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Called on every rank (rank 0 writes the file), so the gather is a collective all ranks join.
        state = {"cpu": torch.get_rng_state()}
        if pl_module.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(pl_module.device)
        if trainer.world_size > 1:
            gathered = {k: trainer.strategy.all_gather(v.to(pl_module.device)).cpu() for k, v in state.items()}
            # clone(): each rank's state its own tensor, not a view into the gathered stack
            # (torch.set_rng_state refuses a tensor with a storage offset).
            checkpoint["rng_states"] = [{k: v[rank].clone() for k, v in gathered.items()} for rank in range(trainer.world_size)]
        else:
            checkpoint["rng_states"] = [state]

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        states = checkpoint.get("rng_states")
        if states is not None and not valid_random_states(states):
            raise CheckpointError(f"checkpoint {trainer.ckpt_path}: its rng_states are not random-generator states (a list "
                                  "of {'cpu': uint8 tensor} per process): the file was altered; use another checkpoint")
        if states is not None and len(states) == trainer.world_size:
            self._to_restore = states[trainer.global_rank]
        elif states is not None:  # another number of processes: the streams start as seeded, and the user is told
            rank_zero_warn(f"the checkpoint holds the random state of {len(states)} process(es), this run has "
                           f"{trainer.world_size}: the random streams start afresh from the seed, so the resumed run "
                           "is not the one an uninterrupted run would have been")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._to_restore is not None:
            torch.set_rng_state(self._to_restore["cpu"].contiguous())
            if "cuda" in self._to_restore and pl_module.device.type == "cuda":
                torch.cuda.set_rng_state(self._to_restore["cuda"].contiguous(), pl_module.device)
            self._to_restore = None
        elif trainer.world_size > 1:
            # Every rank was seeded alike (seed_everything): give each its own stream.
            torch.manual_seed(torch.initial_seed() + trainer.global_rank)


def valid_random_states(states: Any) -> bool:
    """Whether `states` is what on_save_checkpoint writes: per process, a CPU generator state of the right size (and
    a CUDA one, where saved, as a uint8 tensor); torch.set_rng_state fails on anything else, with a traceback."""
    size = torch.get_rng_state().numel()

    def state_tensor(value: Any, exact: bool) -> bool:
        return isinstance(value, Tensor) and value.dtype == torch.uint8 and value.dim() == 1 and (value.numel() == size or not exact)

    return isinstance(states, list) and bool(states) and all(
        isinstance(s, dict) and state_tensor(s.get("cpu"), True) and ("cuda" not in s or state_tensor(s["cuda"], False))
        for s in states)
