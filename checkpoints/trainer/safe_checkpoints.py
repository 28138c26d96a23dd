"""The callback that keeps a trainer's checkpoints whole and its resume exact, whichever script builds the Trainer
(your own script: `Trainer(callbacks=[SafeCheckpoints()])`); its I/O goes through `AtomicCheckpointIO` (io_plugin.py)
unless the user gave a plugin.

* A checkpoint names its model, optimizer and scheduler classes and holds every rank's random state (applied when
  training starts); a run that does not resume seeds each DDP rank seed + rank.
* A resume restores optimizer states only into optimizers they fit (`check_optimizers`), then resets each optimizer
  hyperparameter to this run's value, logging each change."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins import TorchCheckpointIO

from checkpoints.errors import CheckpointError
from checkpoints.model_class import stamp_data_class, stamp_model_class
from checkpoints.registry import qualified_name
from checkpoints.trainer.io_plugin import AtomicCheckpointIO, same

log = logging.getLogger(__name__)

# Optimizer constructor flags that choose an implementation, not a hyperparameter of the update.
IMPLEMENTATION_FLAGS = {"foreach", "fused", "capturable", "differentiable", "maximize"}


class SafeCheckpoints(L.Callback):
    """Atomic checkpoints, checked restores and an exact resume (module docstring)."""

    guards_checkpoints = True  # what models/base.py looks for in a trainer's callbacks, without importing this module
    _restoring: dict[str, Any] | None = None  # the checkpoint being restored, until training starts

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # setup runs before Lightning restores a checkpoint, so resuming reads through the plugin too.
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO):
            trainer.strategy.checkpoint_io.trainer = trainer

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        stamp_model_class(checkpoint, getattr(pl_module, "model_class", type(pl_module)))  # a replicated process's too
        stamp_data_class(checkpoint, trainer.datamodule)
        checkpoint["optimizer_classes"] = class_names(trainer.optimizers)
        checkpoint["lr_scheduler_classes"] = class_names(config.scheduler for config in trainer.lr_scheduler_configs)
        state = {"cpu": torch.get_rng_state()}
        if pl_module.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(pl_module.device)
        # Called on every rank (rank 0 writes the file), so the gather is a collective all ranks join (one process:
        # the state itself). clone(): each rank's state its own tensor, not a view into the gathered stack
        # (torch.set_rng_state refuses a tensor with a storage offset).
        gathered = {key: trainer.strategy.all_gather(value.to(pl_module.device)).cpu().reshape(trainer.world_size, -1)
                    for key, value in state.items()}
        checkpoint["rng_states"] = [{key: value[rank].clone() for key, value in gathered.items()}
                                    for rank in range(trainer.world_size)]

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._restoring = checkpoint
        states = checkpoint.get("rng_states")  # (random-generator states: checkpoints/loader.py)
        # another number of processes: the streams start as seeded, and the user is told
        if states is not None and len(states) != trainer.world_size and trainer.is_global_zero:
            log.warning("the checkpoint holds the random state of %d process(es), this run has %d: the random streams "
                        "start afresh from the seed, so the resumed run is not the one an uninterrupted run would have "
                        "been", len(states), trainer.world_size)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The optimizers are built by now, and their states not yet restored.
        if self._restoring is not None and trainer.ckpt_path:
            check_optimizers(self._restoring, trainer)
        else:  # nothing restored, or restored for an earlier test or validation
            self._restoring = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        checkpoint, self._restoring = self._restoring, None
        states = (checkpoint or {}).get("rng_states")
        if states is not None and len(states) == trainer.world_size:
            state = states[trainer.global_rank]
            torch.set_rng_state(state["cpu"].contiguous())
            if "cuda" in state and pl_module.device.type == "cuda":
                torch.cuda.set_rng_state(state["cuda"].contiguous(), pl_module.device)
        elif trainer.world_size > 1:  # every rank was seeded alike (seed_everything): give each its own stream
            torch.manual_seed(torch.initial_seed() + trainer.global_rank)
        if checkpoint is None:
            return
        # Lightning restored the optimizers' hyperparameters: `defaults` still holds what this run's constructor got.
        scheduled = {"lr"} if trainer.lr_scheduler_configs else set()  # the restored scheduler's, as it left it
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                for key, value in optimizer.defaults.items():
                    if key not in IMPLEMENTATION_FLAGS | scheduled and key in group and not same(group[key], value):
                        if trainer.is_global_zero:
                            log.warning("resuming: optimizer %s %r (checkpoint) -> %r (this run)", key, group[key], value)
                        group[key] = value


def class_names(objects: Any) -> list[str]:
    return [qualified_name(type(o)) for o in objects]


def check_optimizers(checkpoint: dict[str, Any], trainer: L.Trainer) -> None:
    """Refuse to restore the checkpoint's optimizer states into `trainer`'s built optimizers of another class, other
    parameter groups, or a scheduler of another class (whose restored state would apply without a word); or a moment
    that is not finite or not of its parameter's shape (a traceback at the first step, or every weight spoiled)."""
    path = trainer.ckpt_path
    saved, current = checkpoint.get("optimizer_classes"), class_names(trainer.optimizers)
    if saved is not None and saved != current:
        raise CheckpointError(f"the checkpoint holds the state of optimizer {', '.join(saved)}, this run uses "
                              f"{', '.join(current)}: resume with the checkpoint's optimizer, or start a new run")
    saved, current = checkpoint.get("lr_scheduler_classes"), class_names(c.scheduler for c in trainer.lr_scheduler_configs)
    if saved is not None and saved != current:
        raise CheckpointError(f"the checkpoint's run scheduled its learning rate with {', '.join(saved) or 'no scheduler'}, "
                              f"this run with {', '.join(current) or 'no scheduler'}: resume with the checkpoint's scheduler "
                              "(scheduler=..., --model.scheduler=...), or start a new run")
    states = checkpoint.get("optimizer_states")
    if states is None:  # a checkpoint of the weights alone: Lightning restores no optimizer
        return
    saved = [[len(group["params"]) for group in state["param_groups"]] for state in states]
    built = [[len(group["params"]) for group in optimizer.param_groups] for optimizer in trainer.optimizers]
    if saved != built:
        raise CheckpointError(f"checkpoint {path}: its optimizer_states hold {saved} parameters group by group, "
                              f"this run's optimizers {built}: the file was altered, or written for other settings")
    names = {id(p): name for name, p in trainer.lightning_module.named_parameters()}
    for state, optimizer in zip(states, trainer.optimizers):
        params = [param for group in optimizer.param_groups for param in group["params"]]
        for index, buffers in state["state"].items():
            param = params[index] if 0 <= index < len(params) else None  # (ints: checkpoints/loader.py)
            for key, value in buffers.items():
                where = f"checkpoint {path}: the optimizer's {key} of {names.get(id(param), f'parameter {index}')}"
                if isinstance(value, torch.Tensor) and value.dim() > 0 and (param is None or value.shape != param.shape):
                    raise CheckpointError(f"{where} has shape {tuple(value.shape)}, the parameter "
                                          f"{tuple(param.shape) if param is not None else 'none'}: the file was altered, "
                                          "or written for other settings")
                if isinstance(value, torch.Tensor) and value.is_floating_point() and not torch.isfinite(value).all():
                    raise CheckpointError(f"{where} holds NaN or inf: resuming would spoil the weights at the first step; "
                                          "use an earlier checkpoint")
