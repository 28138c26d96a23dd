"""A DDP run's process group, in every rank (ddp_spawn's processes included): its collectives' timeout set once every
rank has started, and the group released before the interpreter shuts down.

The rendezvous waits for the slowest rank (launch/run_builder.py: STARTUP_TIMEOUT_S); `CollectiveTimeout` then
gives later collectives the run's ddp_timeout_s. Left to interpreter exit, gloo's threads can abort a successful run
(exit -6; pytorch/pytorch#190489), so `destroy_process_group` runs at `atexit` for any backend (Lightning: NCCL only),
not at the run's end, because a multirun's next job reuses the group.
"""

from __future__ import annotations

import atexit
from typing import Any

import lightning as L
import torch

_registered = False


def destroy_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class ReleaseProcessGroupAtExit(L.Callback):
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        global _registered
        if not _registered and torch.distributed.is_available() and torch.distributed.is_initialized():
            atexit.register(destroy_process_group)
            _registered = True


class CollectiveTimeout(L.Callback):
    """Every collective after the start (the first is Lightning's barrier before this hook) waits at most `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from datetime import timedelta

        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.set_timeout(timedelta(seconds=self.seconds))
