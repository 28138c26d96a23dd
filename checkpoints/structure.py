"""What a checkpoint must hold before anything uses it, checked once where it is read (checkpoints/loader.py).

Lightning, the front ends and the models call `.get` and `.items` on the sections that hold mappings, load each
optimizer's and scheduler's state from a list of mappings, and copy every tensor into the model or the optimizer: a
section of another kind, or a sparse, meta, complex or quantized tensor, would end in a traceback deep inside them (a
dispatcher listing, "Tensor.item() cannot be called on meta tensors") or be cast without a word. The model's weights
must be finite: resuming or testing from NaN only propagates it. Each failure is one line naming the checkpoint and the
key. What only the model knows (each tensor's shape, and whether it holds floats, integers or truth values) is checked
where the state is loaded into it (`check_fits`, from models/base.py and models/replicas.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import torch

from checkpoints.errors import CheckpointError

SECTIONS = {"hyper_parameters": Mapping, "datamodule_hyper_parameters": Mapping, "callbacks": Mapping, "loops": Mapping,
            "optimizer_states": list, "lr_schedulers": list}  # what Lightning reads each as
STATES = ("callbacks", "loops", "optimizer_states", "lr_schedulers")  # sections of one mapping per callback, loop, ...
DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}  # what a run's models and optimizers hold
MAX_DEPTH = 32  # deeper than anything a run writes: a crafted file


def check_structure(checkpoint: dict[str, Any], path: Any) -> None:
    """CheckpointError naming `path` and the first key of `checkpoint` that is not what Lightning and the models expect
    there (module docstring); `checkpoint` is a mapping with a `state_dict`."""
    def refuse(key: str, problem: str) -> None:
        raise CheckpointError(f"checkpoint {path}: {key} {problem}; the file was altered or is not a Lightning "
                              "checkpoint; use another checkpoint")

    state = checkpoint["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        refuse("state_dict", "is not a mapping of parameter names to tensors")
    for key, expected in SECTIONS.items():
        section = checkpoint.get(key, [] if expected is list else {})
        if not isinstance(section, expected):
            refuse(key, f"is a {type(section).__name__}, not a {'list' if expected is list else 'mapping'}")
        for name, value in (section.items() if expected is Mapping else enumerate(section)) if key in STATES else ():
            if not isinstance(value, Mapping):
                label = name if isinstance(name, int) else repr(str(name)[:80])
                refuse(f"{key}[{label}]", f"is a {type(value).__name__}, not a mapping (the state Lightning restores)")
    for index, optimizer in enumerate(checkpoint.get("optimizer_states", [])):
        if not _is_optimizer_state(optimizer):
            refuse(f"optimizer_states[{index}]", "is not an optimizer's state (torch's: 'state', a mapping of mappings of "
                                                 "tensors and numbers; 'param_groups', a list of mappings of 'params' ids)")
    for where, tensor in _tensors(checkpoint, ""):
        if tensor is None:
            refuse(where, f"is nested more than {MAX_DEPTH} levels deep")
        if tensor.layout != torch.strided or tensor.is_meta or tensor.dtype not in DTYPES:
            layout = "meta " if tensor.is_meta else "" if tensor.layout == torch.strided else f"{tensor.layout} "
            refuse(where, f"is a {layout.removeprefix('torch.')}tensor of {tensor.dtype}: a run writes dense tensors of "
                          "real or integer numbers")
    broken = [name for name, value in state.items() if value.is_floating_point() and not torch.isfinite(value).all()]
    if broken:  # resuming or testing from it would only propagate NaN
        raise CheckpointError(f"checkpoint {path} holds non-finite weights ({', '.join(broken[:3])}"
                              f"{', ...' if len(broken) > 3 else ''}): the run diverged before it was written; use an earlier one")


def _is_optimizer_state(value: dict) -> bool:
    state, groups = value.get("state"), value.get("param_groups")
    return (isinstance(state, dict) and isinstance(groups, list)
            and all(isinstance(buffers, dict) and all(isinstance(item, (torch.Tensor, int, float)) or item is None
                                                      for item in buffers.values()) for buffers in state.values())
            and all(isinstance(group, dict) and isinstance(group.get("params"), list)
                    and all(type(i) is int for i in group["params"]) for group in groups))


def _tensors(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor | None]]:
    """(key, tensor) for every tensor in `value`; (key, None) where it nests deeper than MAX_DEPTH."""
    if depth > MAX_DEPTH:
        yield where, None
    elif isinstance(value, torch.Tensor):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _tensors(item, f"{where}.{str(key)[:80]}" if where else str(key)[:80], depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{where}[{index}]", depth + 1)


def _kind_of(tensor: torch.Tensor) -> str:
    return "floats" if tensor.is_floating_point() else "truth values" if tensor.dtype == torch.bool else "integers"


def check_fits(state_dict: dict[str, Any], own: dict[str, torch.Tensor], path: Any) -> None:
    """CheckpointError naming the first tensor of `state_dict` that holds another kind of number (`_kind_of`) than the
    model's own tensor of that name (`own`): loaded, it would be cast without a word (an integer weight, float cache
    codes). Shapes: torch's load_state_dict reports them (checkpoints/trainer/resume_settings.py)."""
    for name, value in state_dict.items():
        if name in own and isinstance(value, torch.Tensor) and _kind_of(value) != _kind_of(own[name]):
            raise CheckpointError(f"{f'checkpoint {path}' if path else 'the checkpoint'}: state_dict.{name} holds "
                                  f"{_kind_of(value)} ({value.dtype}), the model's {_kind_of(own[name])} ({own[name].dtype}): "
                                  "the file was altered or written by another model; use another checkpoint")
