"""R independent runs of one model configuration trained as one batched computation (docs/replicas.md).

Parameters, buffers (JSA's cache among them) and optimizer states are stacked along a leading dimension R; the model's
own `training_loss` runs under `torch.func.vmap` (randomness="different") on each replica's slice (`functional_call`).
The loss is the sum of the replicas', so each one's gradient is its own and one Adam over the stacked tensors is R
Adams. Gating settings (`replica_settings`) may differ: the step reads them as a compiled step does (compiled_step.py).
The process's checkpoint, cut along that dimension, is each replica's (`replica_checkpoint`), or, repeated, the start
of more replicas (`branch_checkpoint`).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import lightning as L
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torchmetrics import MeanMetric

from models.base import LatentVariableModel
from models.compiled_step import INPUT_BUFFER, compile_step, graph_mode, numbers, register_input_buffers, run_compiled
from models.components.likelihoods import bits_per_dim
from samplers.cache import LatentCache, check_loaded_state

# Settings every replica may differ in: its seed, and the seed of the test stage's samples (${seed} in the configs).
ALWAYS_PER_REPLICA = ("test_seed",)
EVAL_TERMS = ("nll", "bpd", "elbo", "recon_mse")
ELEMENTWISE_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)


class _Method(nn.Module):
    """One method of a model as a module's forward, for `functional_call`; `outputs`: only its first outputs."""

    def __init__(self, model: nn.Module, method: str, outputs: int | None = None) -> None:
        super().__init__()
        self.model, self.method, self.outputs = model, method, outputs

    def forward(self, *args: Any) -> Any:
        result = getattr(self.model, self.method)(*args)
        return result if self.outputs is None else result[: self.outputs]


def check_replicas(models: Sequence[LatentVariableModel]) -> None:
    """Replicas must be one configuration: the same class and settings but for the class's `replica_settings`."""
    if not models:
        raise ValueError("replicas: at least one replica is needed")
    first = models[0]
    if not type(first).replicable:
        raise ValueError(f"replicas: {type(first).__name__} does not train as a batched step (its `replicable` is False); "
                         "run its seeds as processes of their own")
    free = (*getattr(type(first), "replica_settings", ()), *ALWAYS_PER_REPLICA)
    for r, model in enumerate(models[1:], start=1):
        if type(model) is not type(first):
            raise ValueError(f"replicas: replica {r} is a {type(model).__name__}, replica 0 a {type(first).__name__}; one process trains one model")
        differ = sorted(k for k in set(first.hparams) | set(model.hparams)
                        if k not in free and first.hparams.get(k) != model.hparams.get(k))
        if differ:
            allowed = ", ".join(getattr(type(first), "replica_settings", ())) or "none"
            raise ValueError(f"replicas: replica {r} differs from replica 0 in {', '.join(differ)}; replicas of one process may "
                             f"differ only in their seed and the settings that gate behaviour ({type(first).__name__}: {allowed})")
    if first.optimizer_class not in ELEMENTWISE_OPTIMIZERS:
        raise ValueError("replicas train with Adam or AdamW (optimizer=adam): one of them over the stacked weights is R "
                         "independent ones because it is elementwise; another optimizer is not known to be")
    if hasattr(first, "check_replicable"):
        first.check_replicable()
    if first.compile_networks:
        raise ValueError("replicas: model.compile=networks compiles each network alone; use model.compile=step (the batched "
                         "step compiled whole) or false")


def _key(name: str) -> str:
    return name.replace(".", "/")  # a ParameterDict key may not contain "."


class Replicas(L.LightningModule):
    """R replicas of `models` (built each from its own seed) trained as one batched step.

    Args:
        models: the replicas, one configuration (`check_replicas`); their weights become the stacked weights.
        seeds: each replica's seed (its weights were drawn from it; its data order and binarization follow it).
    """

    def __init__(self, models: Sequence[LatentVariableModel], seeds: Sequence[int]) -> None:
        super().__init__()
        check_replicas(models)
        if len(seeds) != len(models):
            raise ValueError(f"replicas: {len(models)} models but {len(seeds)} seeds")
        self.seeds = [int(s) for s in seeds]
        for model in models:  # the buffers of the numbers of `step_inputs`, stacked with the rest (`set_gates`)
            register_input_buffers(model, model.step_inputs(0, 0), numbers(model.step_inputs(0, 0)))
        params, buffers = stack_module_state(list(models))
        self.stacked_params = nn.ParameterDict()
        for name, param in params.items():  # one by one: a dict given at once is sorted, and the optimizer's state must
            self.stacked_params[_key(name)] = nn.Parameter(param)  # list them in the model's order (replica_checkpoint)
        for name, buffer in buffers.items():
            self.register_buffer("stacked/" + _key(name), buffer, persistent=name in models[0].state_dict())
        # The replicas as settings only (their tensors are the stacked ones): each answers for its own configuration.
        self.settings = [copy.deepcopy(m).to("meta") for m in models]
        self.template = self.settings[0]
        self.template.batched_replicas = True
        self.replica_metrics = nn.ModuleList(
            nn.ModuleDict({name: MeanMetric() for name in EVAL_TERMS}) for _ in models)
        self._batched: dict[tuple, Callable] = {}
        self._compiled_step: Callable | None = None
        self._held: list[dict[str, Any]] | None = None  # the replicas' `step_inputs` the template holds (`set_gates`)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("template", "settings"):  # not submodules: their tensors are the stacked ones
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    @property
    def num_replicas(self) -> int:
        return len(self.seeds)

    @property
    def model_class(self) -> type:
        """The replicas' class: the one the process's checkpoints name (launch/run_builder.py checks it on resume)."""
        return type(self.template)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["replica_seeds"] = list(self.seeds)  # a single run never resumes from it (launch/runs/replicas.py)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The stacked state held to what each model checks of its own on load: JSA's cache codes inside the codebook
        (samplers/cache.py). (Names, shapes and kinds of number: checkpoints/trainer.py.)"""
        state = checkpoint["state_dict"]
        for name, module in self.template.named_modules():
            if isinstance(module, LatentCache):
                check_loaded_state(module, state, f"stacked/{_key(name)}/")

    # ---- the stacked state, by the model's own names ------------------------------
    def stacked_state(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        params = {name.replace("/", "."): p for name, p in self.stacked_params.items()}
        buffers = {name[len("stacked/"):].replace("/", "."): b for name, b in self.named_buffers() if name.startswith("stacked/")}
        return params, buffers

    def replica_state_dict(self, r: int) -> dict[str, Tensor]:
        """Replica r's state_dict, as the model alone has it (what its own checkpoint holds)."""
        params, buffers = self.stacked_state()
        stacked = {**params, **buffers}
        return {name: stacked[name][r].detach().clone() for name in self.template.state_dict(keep_vars=True)}

    def over_replicas(self, method: str, per_replica_inputs: Sequence[bool], outputs: int | None = None) -> Callable:
        """(params, buffers, *inputs) -> `method` of every replica at once, each on its slice of the stacked weights and
        buffers (and of the inputs marked per replica; the others are shared), with its own random draws."""
        key = (method, tuple(per_replica_inputs), outputs)
        if key not in self._batched:
            module = _Method(self.template, method, outputs)

            def call(params: dict, buffers: dict, *args: Any) -> Any:
                tensors = {f"model.{name}": value for name, value in {**params, **buffers}.items()}
                return functional_call(module, tensors, args, strict=True)

            # randomness="different": each replica draws its own numbers (one (R, ...) draw from the global generator).
            # Arms of one seed cannot share draws this way ("same" refuses random ops on batched inputs, e.g.
            # exponential_ on empty_like(probs), torch 2.14): twins share a trunk instead (launch/runs/replicas.py).
            dims = (0, 0, *(0 if each else None for each in per_replica_inputs))
            self._batched[key] = vmap(call, in_dims=dims, randomness="different")
        return self._batched[key]

    # ---- training ----------------------------------------------------------------
    def set_gates(self) -> None:
        """Hold the replicas' `step_inputs` for this step: each flag as one Python value, true if any replica's is (a
        new graph when it flips, as when compiled), the numbers in each replica's buffers. Written when they change
        (JSA's: once an epoch, a run resumed mid-epoch included)."""
        values = [m.step_inputs(self.current_epoch, self.global_step) for m in self.settings]
        if values == self._held:
            return
        self._held = values
        _, buffers = self.stacked_state()
        for name in numbers(values[0]):
            buffer = buffers[INPUT_BUFFER + name]
            buffer.copy_(torch.tensor([v[name] for v in values], dtype=buffer.dtype))
        self.template.held_step_inputs = {name: any(v[name] for v in values) for name in values[0] if name not in numbers(values[0])}

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Any]:
        x, index = batch  # (R, B, C, H, W), (R, B): each replica's own batch
        self.set_gates()
        x = self.template.likelihood.prepare(x)
        terms = self.batched_training_loss(x, index)
        # The sum: replica r's parameters reach only its own loss, so each gets its own gradient.
        return {"loss": terms["loss"].sum(), "terms": {name: value.detach() for name, value in terms.items()}}

    def batched_training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """Every replica's `training_loss` terms, (R,) each; with model.compile=step the batched step compiled whole, as a
        single run's (models/compiled_step.py)."""
        params, buffers = self.stacked_state()
        step = self.over_replicas("training_loss", (True, True))
        if not self.template.compile_step:
            return step(params, buffers, x, index)
        if self._compiled_step is None:
            self._compiled_step = compile_step(step, mode=graph_mode(x.device))
        return run_compiled(self._compiled_step, params, buffers, x, index)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.template.optimizer_builder(self.parameters())

    # ---- evaluation: the shared protocol of models/base.py, per replica ------------------
    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, _ = batch  # every replica is evaluated on the same images
        x_eval = self.template.likelihood.prepare(x)
        params, buffers = self.stacked_state()
        nll, elbo, recon = self.over_replicas("evaluation_terms", (False, False), outputs=3)(
            params, buffers, x_eval, self.template.eval_num_samples["val"])
        values = {"nll": nll, "bpd": bits_per_dim(nll, self.template.num_dims), "elbo": elbo,
                  "recon_mse": (recon - x).square().flatten(2).mean(2)}
        for r, metrics in enumerate(self.replica_metrics):
            for name, metric in metrics.items():
                metric.update(values[name][r])

    def on_validation_epoch_end(self) -> None:
        """Each replica's val metrics, for callbacks/replica_runs.py to log to its own run. The progress bar shows the
        replicas' val/nll by name as what it is: `val/nll_mean`, `val/nll_min`, `val/nll_max` over the replicas; the
        mean is also `val/nll` (off the bar), what a sweep minimizes (launch/hydra_app.py)."""
        self.replica_val = []
        for metrics in self.replica_metrics:
            values = {f"val/{name}": metric.compute() for name, metric in metrics.items()}
            # PSNR of the whole split, 10 log10(1 / MSE) for pixels in [0, 1] (what models/base.py's metric computes)
            values["val/psnr"] = -10 * torch.log10(values["val/recon_mse"])
            self.replica_val.append(values)
        for metrics in self.replica_metrics:
            for metric in metrics.values():
                metric.reset()
        nll = torch.stack([m["val/nll"] for m in self.replica_val])
        self.log("val/nll", nll.mean())
        for name, value in (("mean", nll.mean()), ("min", nll.min()), ("max", nll.max())):
            self.log(f"val/nll_{name}", value, prog_bar=True)


def replica_terms(model: LatentVariableModel, terms: dict[str, Any], epoch: int, step: int) -> dict[str, Any]:
    """Of the batched step's terms, those the replica's single run logs at `epoch` and `step`: not those its class's
    `flag_terms` ties to a flag of `step_inputs` that is false for it (the batched step computes them for every replica
    when one replica's flag is true)."""
    flags = model.step_inputs(epoch, step)
    hidden = {term for flag, names in model.flag_terms.items() if not flags[flag] for term in names}
    return {tag: value for tag, value in terms.items() if tag.rsplit("/", 1)[-1] not in hidden}


# ---- the process's checkpoint as other runs' -----------------------------------
# The epoch and step counts and the random state are shared; the callbacks' states are left out (they describe the
# process's own files, e.g. its best checkpoint). Adam is elementwise, so its state for the stacked weights is the R
# replicas' states side by side.
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
