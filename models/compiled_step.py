"""A training step compiled whole (model.compile=step, docs/mis.md#compiling-the-whole-step), a single run's or the
batched step of replicas (models/replicas.py), and the values it reads that change as training goes on.

A model names them in `step_inputs(epoch, step)`; its step reads them with `step_input(name)`: an eager step as Python
values, a compiled or batched one as `hold_step_inputs` held them outside its graph: a flag as a Python value the graph
is specialized on (for replicas, true if any replica's is), a number from a 0-d buffer `compiled_<name>` (a graph
input: no new graph). `graph_constants` change only with a flag: a single run's graph takes them as constants, the
batched step reads each replica's from its buffer.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import Tensor, nn

from common.private_api import raise_recompile_limit

COMPILED_GRAPHS_LIMIT = 64  # Dynamo's recompile_limit with model.compile: about ten models
INPUT_BUFFER = "compiled_"  # the 0-d buffer of a number of `step_inputs`: compiled_<name>


def compile_step(step: Callable, **options: Any) -> Callable:
    """torch.compile(step, fullgraph=True, dynamic=False, **options) (mode, backend), under the collection's recompile
    limit. fullgraph=True: a graph break is an error, not a silent fallback to eager code. dynamic=False: a new batch
    shape (an epoch's short last batch) gets a graph of its own with static shapes, as CUDA graphs need, instead of one
    over a symbolic batch size (which inductor failed to compile for the conv backbone, torch 2.14)."""
    raise_recompile_limit(COMPILED_GRAPHS_LIMIT)
    return torch.compile(step, fullgraph=True, dynamic=False, **options)


def graph_mode(device: torch.device) -> str | None:
    """CUDA graphs (mode="reduce-overhead") on a CUDA device, so that a step is a few launches; else the default."""
    return "reduce-overhead" if device.type == "cuda" else None


def run_compiled(compiled: Callable, *args: Any) -> dict[str, Tensor]:
    """One step of a compiled step. A CUDA graph replays into the same output memory each step, so each step is marked
    as a new one and its outputs are copied before anything (the logger, the callbacks) can hold them into the next."""
    if not any(isinstance(arg, Tensor) and arg.is_cuda for arg in args):
        return compiled(*args)
    torch.compiler.cudagraph_mark_step_begin()
    return {name: value.clone() for name, value in compiled(*args).items()}


def numbers(values: dict[str, Any]) -> list[str]:
    """The names of the numbers (not the flags) among `step_inputs` values."""
    return [name for name, value in values.items() if not isinstance(value, bool)]


def register_input_buffers(model: nn.Module, values: dict[str, Any], names: Iterable[str]) -> None:
    """A non-persistent 0-d buffer compiled_<name> for each of `names` the model lacks: int32 for a whole number, the
    dtype of the model's parameters for a real one (so that float64 training reads it in float64)."""
    parameter = next(model.parameters())
    for name in names:
        if not hasattr(model, INPUT_BUFFER + name):
            dtype = torch.int32 if isinstance(values[name], int) else parameter.dtype
            model.register_buffer(INPUT_BUFFER + name, torch.zeros((), dtype=dtype, device=parameter.device), persistent=False)


def hold_step_inputs(model: nn.Module, epoch: int, step: int) -> None:
    """Before a single run's compiled step: its `step_inputs` at `epoch` and `step`, the flags and `graph_constants` as
    Python values, the other numbers written into their buffers."""
    values = model.step_inputs(epoch, step)
    tensors = [name for name in numbers(values) if name not in model.graph_constants]
    register_input_buffers(model, values, tensors)
    model.held_step_inputs = {name: value for name, value in values.items() if name not in tensors}
    for name in tensors:
        getattr(model, INPUT_BUFFER + name).fill_(values[name])


def held_step_input(model: nn.Module, name: str) -> Any:
    """The value a compiled or batched step reads: a held Python value, or the number's buffer (under
    torch.func.functional_call, the replica's slice of the stacked buffer)."""
    held = model.held_step_inputs
    return held[name] if name in held else getattr(model, INPUT_BUFFER + name)
