"""A DDP run's process group: its collectives' timeout set once every rank has started, and the group released before
the interpreter shuts down, in every rank.

The ranks' rendezvous waits for the slowest to start (launch/runs/distributed.py: STARTUP_TIMEOUT_S, at least ten
minutes: a rank may import torch a minute after another on a busy machine); `CollectiveTimeout` then gives every later
collective the run's own ddp_timeout_s, after which a stuck peer stops the run with a message.


Left to interpreter exit, gloo's worker threads can outlive Python and abort a process whose run succeeded
("terminate called without an active exception", exit status -6; pytorch/pytorch#190489). The fix is to call
`destroy_process_group` while Python is still alive. Lightning registers it with `atexit` for NCCL only
(`lightning.fabric.utilities.distributed._init_dist_connection`); this callback registers the same for any backend
when the trainer is set up. It runs in every rank, also in ddp_spawn's spawned processes, which run none of the
launch code. It acts at exit, not when the run ends, because a multirun's next job in the same processes reuses the
group: Lightning's Hydra support runs the whole sweep in each rank.
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
