"""Distributed runs that cannot hang in silence: a collective timeout for every DDP-family strategy, its
error turned into one line, and a check that several nodes were started by a launcher (docs/cluster.md)."""

from __future__ import annotations

import inspect
import os
import traceback
from datetime import timedelta
from typing import Any

from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.strategies import StrategyRegistry

from launch.checks.settings import SettingsError

# How long the ranks wait for each other to start (torch's rendezvous), whatever ddp_timeout_s says (this is its default
# in configs/train.yaml): each rank imports torch and builds the run on its own, and on a busy machine or a slow file
# system one may start a minute after another, which is not a hang. callbacks/guards/process_group.py's
# CollectiveTimeout sets ddp_timeout_s once all are there.
STARTUP_TIMEOUT_S = 600


def strategy_with_timeout(strategy: Any, seconds: float) -> Any:
    """A DDP-family strategy named by a string (ddp, ddp_spawn, ...) built with a timeout: a process that waits longer
    than `seconds` at a collective for a stuck or dead peer stops with an error naming the operation, instead of
    waiting torch's default 30 minutes in silence (the strategy's own timeout covers the start, at least
    STARTUP_TIMEOUT_S; the CollectiveTimeout callback shortens it to `seconds` after). Anything else unchanged."""
    entry = StrategyRegistry[strategy] if isinstance(strategy, str) and strategy in StrategyRegistry else None
    if entry is None or "timeout" not in inspect.signature(entry["strategy"]).parameters:
        return strategy
    return entry["strategy"](**{**entry["init_params"], "timeout": timedelta(seconds=max(seconds, STARTUP_TIMEOUT_S))})


def collective_timeout_message(error: BaseException) -> str | None:
    """One line naming the collective that timed out (the innermost torch.distributed / DDP frame) and the fix; None
    when `error` is no collective timeout: gloo's "Timed out waiting ... for recv" / "Application timeout caused pair
    closure" and NCCL's watchdog "... collective operation timeout" are raised from inside torch.distributed or DDP
    (any other error that mentions a timeout, say a data loader's, is not one)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "/torch/distributed/" in f.filename or "/torch/nn/parallel/" in f.filename]
    text = str(error).strip()
    if not frames or ("timed out" not in text.lower() and "timeout" not in text.lower()):
        return None
    return (f"a distributed collective timed out in {frames[-1].name} ({frames[-1].filename.split('/torch/', 1)[-1]}): "
            f"{text.splitlines()[0][:200]}. Another process is stuck or died: check the other ranks' logs; raise "
            "ddp_timeout_s (Hydra) or --trainer.strategy=DDPStrategy --trainer.strategy.timeout=H:MM:SS (LightningCLI) "
            "if a rank legitimately works alone for longer")


def check_launcher(trainer: Any) -> None:
    """Several nodes need a launcher that starts a process per device on each (torchrun, srun): without
    one, Lightning would wait forever for the other nodes. Lightning's manual layout (MASTER_ADDR,
    NODE_RANK, WORLD_SIZE set by hand on each node) counts as a launcher."""
    environment = getattr(trainer.strategy, "cluster_environment", None)
    if trainer.num_nodes > 1 and type(environment) is LightningEnvironment and "NODE_RANK" not in os.environ:
        raise SettingsError(
            f"trainer.num_nodes={trainer.num_nodes} needs a launcher that starts the processes on every node, and "
            "none was found (no torchrun or SLURM environment). On each node run: torchrun --nnodes="
            f"{trainer.num_nodes} --nproc-per-node=DEVICES --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 train.py "
            f"trainer=multinode trainer.num_nodes={trainer.num_nodes} trainer.devices=DEVICES; or, in a SLURM job, "
            "sbatch scripts/slurm/train.sbatch (srun python train.py trainer=multinode ...); see docs/cluster.md")
