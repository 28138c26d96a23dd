"""What a checkpoint restores into the trainer's loops and optimizers, checked before it is used: an altered count or
buffer would otherwise end in a traceback deep in Lightning or torch, or train on silently (a negative step, NaN
moments that spoil every weight at the first step). Each check names the first entry that is wrong, in one line."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from checkpoints.errors import CheckpointError


def check_loop_state(checkpoint: dict[str, Any], trainer: L.Trainer) -> None:
    """CheckpointError naming the first entry of the checkpoint's epoch, step or fit-loop state that is not what the
    trainer's own state holds there (a dict, or a count >= 0): Lightning would fail on it with a traceback, or count
    from a negative step."""
    def mismatch(saved: Any, expected: Any, where: str) -> str | None:
        if isinstance(expected, dict):
            if not isinstance(saved, dict):
                return where
            return next((found for key, value in expected.items() if key in saved
                         for found in [mismatch(saved[key], value, f"{where}.{key}")] if found), None)
        if isinstance(expected, int) and not isinstance(expected, bool):
            return None if isinstance(saved, int) and not isinstance(saved, bool) and saved >= 0 else where
        return None

    loops = checkpoint.get("loops") or {}  # a mapping of mappings (checkpoints/structure.py)
    found = (mismatch(checkpoint.get("epoch", 0), 0, "epoch") or mismatch(checkpoint.get("global_step", 0), 0, "global_step")
             or (mismatch(loops["fit_loop"], trainer.fit_loop.state_dict(), "loops.fit_loop") if "fit_loop" in loops else None))
    if found:
        raise CheckpointError(f"checkpoint {trainer.ckpt_path}: its {found} is not what a training loop writes there (a "
                              "count >= 0, or a mapping): the file was altered; use another checkpoint")


def check_optimizer_groups(saved: list[list[int]], trainer: L.Trainer) -> None:
    """CheckpointError unless the checkpoint holds a state for each of the trainer's optimizers with as many parameter
    groups, and parameters in each, as the optimizer has (`saved`: the numbers of parameters, group by group)."""
    built = [[len(group["params"]) for group in optimizer.param_groups] for optimizer in trainer.optimizers]
    if saved != built:
        raise CheckpointError(f"checkpoint {trainer.ckpt_path}: its optimizer_states hold {saved} parameters group by group, "
                              f"this run's optimizers {built}: the file was altered, or written for other settings")


def check_optimizer_states(trainer: L.Trainer, pl_module: L.LightningModule) -> None:
    """CheckpointError naming the first restored optimizer buffer that is not finite, or whose shape differs from its
    parameter's: resumed, either fails at the first step with a traceback, or spoils every weight."""
    names = {id(p): name for name, p in pl_module.named_parameters()}
    for optimizer in trainer.optimizers:
        for param, buffers in optimizer.state.items():
            for key, value in buffers.items() if isinstance(buffers, dict) else []:
                if not isinstance(value, torch.Tensor):
                    continue
                where = f"checkpoint {trainer.ckpt_path}: the optimizer's {key} of {names.get(id(param), 'a parameter')}"
                if value.dim() > 0 and value.shape != param.shape:
                    raise CheckpointError(f"{where} has shape {tuple(value.shape)}, the parameter {tuple(param.shape)}: "
                                          "the file was altered, or written for other settings")
                if value.is_floating_point() and not torch.isfinite(value).all():
                    raise CheckpointError(f"{where} holds NaN or inf: resuming would spoil the weights at the first step; "
                                          "use an earlier checkpoint")
