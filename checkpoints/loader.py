"""The one way a checkpoint is read, and what it must hold before anything uses it.

Read: verified (checksum, declared sizes: file_format.py) under a shared lock on its directory; `weights_only=True`,
since unpickling can run code; the class paths its settings name held to the registered classes and trusted packages
(common/registry.py) unless the caller trusts the file. Held (`check_structure`): mappings and lists where Lightning
and the models read them, dense real or integer tensors, finite weights, valid random states; else one line naming the
checkpoint and the key, not a traceback. What only the model knows (names, shapes, dtypes) is `check_fits`'."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator

import torch

from checkpoints.errors import CheckpointError
from checkpoints.file_format import directory_lock, verify_checkpoint_file
from common.private_api import lightning_load
from common.registry import PATH_SETTINGS, is_allowed_import, is_registered, looks_like_import_path, trust_hint


SECTIONS = {"hyper_parameters": Mapping, "datamodule_hyper_parameters": Mapping, "callbacks": Mapping, "loops": Mapping,
            "optimizer_states": list, "lr_schedulers": list, "rng_states": list}  # what Lightning and torch read each as
STATES = ("callbacks", "loops", "optimizer_states", "lr_schedulers", "rng_states")  # of one mapping per callback, ...
DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}  # what a run's models and optimizers hold
MAX_DEPTH = 32  # deeper than anything a run writes: a crafted file


def walk(value: Any, where: str = "", depth: int = 0) -> Iterator[tuple[str, Any, Any, int]]:
    """(key path, key, item, depth) for every item nested in `value` (mappings, lists and tuples), parents first, so
    that a reader refusing a depth (`check_structure`) stops the walk before it recurses any deeper."""
    listed = isinstance(value, (list, tuple))
    for key, item in enumerate(value) if listed else value.items() if isinstance(value, Mapping) else ():
        path = f"{where}[{key}]" if listed else f"{where}.{str(key)[:80]}" if where else str(key)[:80]
        yield path, key, item, depth
        yield from walk(item, path, depth + 1)


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
            if key == "optimizer_states" and not _is_optimizer_state(value):
                refuse(f"{key}[{name}]", "is not an optimizer's state (torch's: 'state', parameter ids to mappings of "
                                         "tensors and numbers; 'param_groups', a list of mappings of 'params' ids)")
    for where, _, item, depth in walk(checkpoint):
        if depth >= MAX_DEPTH:
            refuse(where, f"is nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, torch.Tensor) and (item.layout != torch.strided or item.is_meta or item.dtype not in DTYPES):
            layout = "meta " if item.is_meta else "" if item.layout == torch.strided else f"{item.layout} "
            refuse(where, f"is a {layout.removeprefix('torch.')}tensor of {item.dtype}: a run writes dense tensors of "
                          "real or integer numbers")
    if checkpoint.get("rng_states") == [] or not all(_is_random_state(s) for s in checkpoint.get("rng_states", [])):
        refuse("rng_states", "are not random-generator states (a list of {'cpu': uint8 tensor} per process)")
    broken = [name for name, value in state.items() if value.is_floating_point() and not torch.isfinite(value).all()]
    if broken:  # resuming or testing from it would only propagate NaN
        raise CheckpointError(f"checkpoint {path} holds non-finite weights ({', '.join(broken[:3])}"
                              f"{', ...' if len(broken) > 3 else ''}): the run diverged before it was written; use an earlier one")


def _is_optimizer_state(value: dict) -> bool:
    state, groups = value.get("state"), value.get("param_groups")
    return (isinstance(state, dict) and isinstance(groups, list)
            and all(type(index) is int and isinstance(buffers, dict)
                    and all(isinstance(item, (torch.Tensor, int, float)) or item is None for item in buffers.values())
                    for index, buffers in state.items())
            and all(isinstance(group, dict) and isinstance(group.get("params"), list)
                    and all(type(i) is int for i in group["params"]) for group in groups))


def _is_random_state(value: Mapping) -> bool:
    """What torch.set_rng_state takes: a CPU generator state of the right size (and a CUDA one, where saved)."""
    states = [value.get("cpu"), *([value["cuda"]] if "cuda" in value else [])]
    return (all(isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and state.dim() == 1 for state in states)
            and value["cpu"].numel() == torch.get_rng_state().numel())


def _torch_format(path: str | os.PathLike) -> bool:
    """Whether the file begins as torch.save's files do: a zip archive, or (its legacy format) a pickle."""
    with open(path, "rb") as file:  # (a regular file: verify_checkpoint_file)
        start = file.read(2)
    return start == b"PK" or start[:1] == b"\x80"


def _kind_of(tensor: torch.Tensor) -> str:
    return "floats" if tensor.is_floating_point() else "truth values" if tensor.dtype == torch.bool else "integers"


def check_fits(state_dict: dict[str, torch.Tensor], own: dict[str, torch.Tensor], path: Any,
               changed: dict[str, tuple[Any, Any]] | None = None) -> None:
    """CheckpointError, in one line, unless `state_dict` fits the model whose own state is `own`: the first tensor
    that holds another kind of number (`_kind_of`: loaded, it would be cast without a word), else every tensor missing,
    unexpected or of another shape, with the settings that differ from the checkpoint's (`changed`, where known)."""
    name = f"checkpoint {path}" if path else "the checkpoint"
    for key, value in state_dict.items():
        if key in own and _kind_of(value) != _kind_of(own[key]):
            raise CheckpointError(f"{name}: state_dict.{key} holds {_kind_of(value)} ({value.dtype}), the model's "
                                  f"{_kind_of(own[key])} ({own[key].dtype}): the file was altered or written by another "
                                  "model; use another checkpoint")
    differences = ([f"{key} {tuple(value.shape)} in the checkpoint, {tuple(own[key].shape)} here"
                    for key, value in state_dict.items() if key in own and value.shape != own[key].shape]
                   + [f"{key} missing" for key in own if key not in state_dict]
                   + [f"{key} not in this model" for key in state_dict if key not in own])
    if differences:
        summary = "; ".join(differences)
        settings = ", ".join(f"{key}={old!r} -> {new!r}" for key, (old, new) in (changed or {}).items())
        raise CheckpointError(f"{name} does not fit this model ({summary[:300]}{' ...' if len(summary) > 300 else ''}): "
                              + (f"the settings differ from the checkpoint's ({settings}); " if settings else "")
                              + "use the settings it was trained with, or train a new run without ckpt_path")


def load_checkpoint_file(path: str | os.PathLike, map_location: Any = "cpu", trusted: bool = False) -> dict[str, Any]:
    """The checkpoint at `path`, verified and read weights only (module docstring); a file torch cannot read is a
    CheckpointError naming it. `trusted`: the caller trusts the file in code (`load_from_checkpoint(path,
    weights_only=False)`). A URL is refused, so nothing is fetched and unpickled that nobody has looked at; a stream
    (which Lightning's load_from_checkpoint takes) has no checksum beside it, and is read and put back where it was."""
    if "://" in str(path):
        raise CheckpointError(f"checkpoint {path} is a URL: checkpoints are read from local files only; download it, make "
                              "sure you trust where it came from, and give the local path")
    stream = hasattr(path, "read")
    name = "given as a stream" if stream else path
    start = path.tell() if stream else None
    with contextlib.nullcontext() if stream else directory_lock(Path(path).parent, exclusive=False):  # no save in between
        if not stream:
            verify_checkpoint_file(path)
        try:
            checkpoint = lightning_load(path, map_location=map_location, weights_only=not trusted)
        except Exception as error:  # truncated zip, pickled garbage, code planted in the pickle, not a checkpoint at all
            # torch's weights_only refusal wraps the real reason in advice about weights_only that does not apply here
            # (and torch's reader follows its reason with advice in more sentences): the first sentence, whole
            reason = " ".join(str(error).rsplit("WeightsUnpickler error:", 1)[-1].split()).split(". ")[0].rstrip(".")
            reason = reason.split(" Check the documentation of torch.load")[0]
            reason = (reason if len(reason) <= 200 else reason[:200].rsplit(" ", 1)[0] + " ...") or type(error).__name__
            why = ("it is truncated, was not written by torch.save, or holds objects other than tensors and plain values "
                   "(which are never unpickled: they could run code)") if stream or _torch_format(path) else \
                "it is not a file torch.save wrote (a checkpoint is a run's checkpoints/*.ckpt)"
            raise CheckpointError(f"checkpoint {name} is not a readable checkpoint ({type(error).__name__}: {reason}); {why}") from None
    if stream:
        path.seek(start)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {name} holds no model state (no 'state_dict'): it is not a Lightning checkpoint")
    check_structure(checkpoint, name)
    if not trusted:
        refuse_unregistered_classes(checkpoint, name)
    return checkpoint


# Keys under which a checkpoint's hyperparameters name something to import: jsonargparse's `class_path` (LightningCLI
# rebuilds the model from them, nested settings included), Hydra's `_target_`, Lightning's `_class_path` and
# `_instantiator` (load_from_checkpoint imports the latter by name).
IMPORTED_KEYS = ("class_path", "_class_path", "_target_", "_instantiator")


def refuse_unregistered_classes(checkpoint: dict[str, Any], path: Any) -> None:
    """CheckpointError naming the first class path in the checkpoint's hyperparameters (at any depth: under
    `optimizer`, `prior`, ...) that is not a registered component, or the first other dotted string that is not the
    collection's, Lightning's or torch.optim's: jsonargparse imports one wherever the setting's type takes a function
    or a class (`optimizer: strangers_module.make`), when LightningCLI or load_from_checkpoint builds the model from
    these settings (common/registry.py). Nothing is imported to find out."""
    for where, key, name, _ in walk({section: checkpoint.get(section) for section in ("hyper_parameters", "datamodule_hyper_parameters")}):
        if key in IMPORTED_KEYS and not is_registered(name):
            raise CheckpointError(f"checkpoint {path}: {where} names {str(name)[:120]!r}, which is not one of the "
                                  f"collection's models or data modules; it is not imported (importing runs code); {trust_hint()}")
        if key not in IMPORTED_KEYS and key not in PATH_SETTINGS and isinstance(name, str) \
                and looks_like_import_path(name) and not is_allowed_import(name):
            raise CheckpointError(f"checkpoint {path}: {where} is {name[:120]!r}, a dotted name that is not one of the "
                                  f"collection's, Lightning's or torch.optim's; it is not imported (importing runs code); {trust_hint()}")
