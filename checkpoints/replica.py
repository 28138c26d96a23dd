"""A replicated process's checkpoint (models/replicas.py: every weight, buffer and Adam moment stacked along a leading
replica dimension; Adam is elementwise, so its state for the stacked weights is the R replicas' states side by side)
turned into another: one replica's, or the start of more replicas. The epoch and step counts and the random state are
shared; the callbacks' states are left out (they describe the process's own files, e.g. its best checkpoint)."""

from __future__ import annotations

import copy
from typing import Any, Callable

from torch import Tensor


def _mapped(checkpoint: dict[str, Any], tensor: Callable[[Tensor], Tensor], loader: Callable[[list], Any]) -> dict[str, Any]:
    """`checkpoint` with `tensor` applied to every stacked weight and optimizer buffer (not to a 0-d entry: Adam's step
    count is shared) and `loader` to the list of per-replica data loader positions (datamodules/replicas.py), its
    result in place of the loader's state."""
    def each(value: Any) -> Any:
        return tensor(value) if isinstance(value, Tensor) and value.dim() > 0 else copy.deepcopy(value)

    loops = copy.deepcopy(checkpoint.get("loops"))
    result = {**checkpoint, "state_dict": {name: each(value) for name, value in checkpoint["state_dict"].items()},
              "optimizer_states": [{"state": {index: {name: each(value) for name, value in entry.items()}
                                              for index, entry in state["state"].items()},
                                    "param_groups": copy.deepcopy(state["param_groups"])} for state in checkpoint.get("optimizer_states", [])],
              "callbacks": {}, "loops": loops}
    fit = loops.get("fit_loop", {}).get("state_dict", {}) if isinstance(loops, dict) else {}
    if isinstance(fit.get("combined_loader"), list):
        fit["combined_loader"] = [loader(state["replicas"]) if isinstance(state, dict) and "replicas" in state else state
                                  for state in fit["combined_loader"]]
    return result


def replica_checkpoint(checkpoint: dict[str, Any], replica: int, state_dict: dict[str, Tensor],
                       hyper_parameters: dict[str, Any], data_hyper_parameters: dict[str, Any]) -> dict[str, Any]:
    """Replica `replica`'s checkpoint from the replicated process's: the file a single run with its seed and settings
    would have written at the same step, so that it loads, tests and resumes alone. `state_dict`: its slice, under the
    model's names; the hyperparameters of its model and its data module."""
    single = _mapped({**checkpoint, "state_dict": {}}, lambda value: value[replica].clone(), lambda states: states[replica])
    return {**single, "state_dict": state_dict, "hparams_name": "kwargs", "hyper_parameters": copy.deepcopy(hyper_parameters),
            "datamodule_hparams_name": "kwargs", "datamodule_hyper_parameters": copy.deepcopy(data_hyper_parameters)}


def branch_checkpoint(checkpoint: dict[str, Any], num_arms: int) -> dict[str, Any]:
    """A replicated process's checkpoint of S replicas (a trunk) as the start of `num_arms` × S replicas: every arm of a
    seed starts as that seed's trunk replica (weights, buffers such as JSA's cache, Adam's moments, data position), the
    arms one after another (launch/runs/replicas.py builds the replicas arm by arm), in a new process with runs of its
    own."""
    branch = _mapped(checkpoint, lambda value: value.repeat(num_arms, *([1] * (value.dim() - 1))), lambda states: {"replicas": states * num_arms})
    return {**branch, "replica_seeds": list(checkpoint["replica_seeds"]) * num_arms}
