"""One replica's checkpoint cut from the checkpoint of a replicated process (models/replicas.py): the file a single run
with the replica's seed and settings would have written at the same step, so that it loads, tests and resumes alone.

What is cut: the replica's slice of every stacked weight and buffer (under the model's own names), of Adam's moments
(Adam is elementwise: its state for the stacked weights is the R replicas' states side by side), its own data loader
position and its own hyperparameters. What is shared: the epoch and step counts and the random state. What is left
out: the callbacks' states (they describe the replicated process's files, e.g. its best checkpoint)."""

from __future__ import annotations

import copy
from typing import Any

from torch import Tensor


def replica_checkpoint(checkpoint: dict[str, Any], replica: int, state_dict: dict[str, Tensor],
                       hyper_parameters: dict[str, Any], data_hyper_parameters: dict[str, Any]) -> dict[str, Any]:
    """Replica `replica`'s checkpoint from the replicated process's `checkpoint`, given its `state_dict` (its slice, under
    the model's names) and the hyperparameters of its model and its data module."""
    single = {key: value for key, value in checkpoint.items()
              if key not in ("state_dict", "optimizer_states", "loops", "callbacks", "hyper_parameters")}
    single["state_dict"] = state_dict
    single["hparams_name"], single["hyper_parameters"] = "kwargs", copy.deepcopy(hyper_parameters)
    single["datamodule_hparams_name"], single["datamodule_hyper_parameters"] = "kwargs", copy.deepcopy(data_hyper_parameters)
    single["callbacks"] = {}
    single["optimizer_states"] = [_optimizer_slice(state, replica) for state in checkpoint.get("optimizer_states", [])]
    single["loops"] = _loops_slice(checkpoint.get("loops"), replica)
    return single


def _optimizer_slice(state: dict[str, Any], replica: int) -> dict[str, Any]:
    """Replica r's part of an elementwise optimizer's state: each per-parameter tensor with a leading replica dimension
    sliced; a 0-d entry (Adam's step count) is shared."""
    def cut(value: Any) -> Any:
        return value[replica].clone() if isinstance(value, Tensor) and value.dim() > 0 else copy.deepcopy(value)

    return {"state": {index: {name: cut(value) for name, value in entry.items()} for index, entry in state["state"].items()},
            "param_groups": copy.deepcopy(state["param_groups"])}


def _loops_slice(loops: Any, replica: int) -> Any:
    """The loops' state with the training loader's position that of the replica's own loader
    (datamodules/replicas.py: ReplicaLoader.state_dict)."""
    loops = copy.deepcopy(loops)
    fit = loops.get("fit_loop", {}).get("state_dict", {}) if isinstance(loops, dict) else {}
    states = fit.get("combined_loader")
    if isinstance(states, list):
        fit["combined_loader"] = [state["replicas"][replica] if isinstance(state, dict) and "replicas" in state else state
                                  for state in states]
    return loops


def branch_checkpoint(checkpoint: dict[str, Any], num_arms: int) -> dict[str, Any]:
    """A replicated process's checkpoint of S replicas (a trunk) as the start of `num_arms` × S replicas: every arm of a
    seed starts as that seed's trunk replica (weights, buffers such as JSA's cache, Adam's moments, data position), the
    arms one after another (launch/runs/replicas.py builds the replicas arm by arm). The branch is a new process with runs of
    its own: the callbacks' states (the trunk's runs and files) are left out."""
    def tile(value: Any) -> Any:
        return value.repeat(num_arms, *([1] * (value.dim() - 1))) if isinstance(value, Tensor) and value.dim() > 0 else copy.deepcopy(value)

    branch = {key: value for key, value in checkpoint.items() if key not in ("state_dict", "optimizer_states", "loops", "callbacks")}
    branch["state_dict"] = {name: tile(value) for name, value in checkpoint["state_dict"].items()}
    branch["optimizer_states"] = [{"state": {index: {name: tile(value) for name, value in entry.items()}
                                             for index, entry in state["state"].items()},
                                   "param_groups": copy.deepcopy(state["param_groups"])} for state in checkpoint["optimizer_states"]]
    branch["callbacks"] = {}
    branch["replica_seeds"] = list(checkpoint["replica_seeds"]) * num_arms
    loops = copy.deepcopy(checkpoint.get("loops"))
    fit = loops.get("fit_loop", {}).get("state_dict", {}) if isinstance(loops, dict) else {}
    for state in fit.get("combined_loader") or []:
        if isinstance(state, dict) and "replicas" in state:
            state["replicas"] = state["replicas"] * num_arms
    branch["loops"] = loops
    return branch
