"""What a Trainer runs so that its checkpoints are written whole and restored checked, whichever script builds it
(train.py's runs get it from launch/run_builder.py; your own script: `Trainer(callbacks=[SafeCheckpoints()])`).
* `SafeCheckpoints`: a checkpoint names its model, data, optimizer, scheduler and callback classes and holds every
  rank's random state; a fresh run seeds each DDP rank seed + rank; a resume restores optimizer states only into
  optimizers they fit (`check_optimizers`), then sets each optimizer and scheduler setting to this run's value, logging
  each change (common/resumed_optimizers.py), and names the callbacks it runs without (`check_callbacks`).
* `AtomicCheckpointIO`, the I/O plugin it installs unless the user gave one: atomic checksummed writes, removals of
  checkpoint files only (never a directory or a link), the checked read (checkpoints/loader.py), and what it restores
  held to the trainer (`check_restored`) instead of a traceback deep in Lightning or training on a wrong state.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins import TorchCheckpointIO

from checkpoints.errors import CheckpointError
from checkpoints.file_format import CHECKSUM_SUFFIX, save_checkpoint_file
from checkpoints.loader import check_fits, load_checkpoint_file
from checkpoints.model_class import check_model_class, stamp_classes
from common.private_api import resume_inside_the_epoch
from common.registry import qualified_name
from common.resumed_optimizers import built_scheduler_settings, take_this_runs_settings
from common.settings import same
from common.signatures import constructor_defaults, settings_of

log = logging.getLogger(__name__)


class SafeCheckpoints(L.Callback):
    """Atomic checkpoints, checked restores and an exact resume (module docstring)."""

    guards_checkpoints = True  # what models/base.py looks for in a trainer's callbacks, without importing this module
    _restoring: dict[str, Any] | None = None  # the checkpoint being restored, until training starts
    _built_schedulers: list[dict[str, Any]] = []  # their settings as this run built them (on_fit_start)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # setup runs before Lightning restores a checkpoint, so resuming reads through the plugin too.
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO):
            trainer.strategy.checkpoint_io.trainer = trainer

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        stamp_classes(checkpoint, pl_module, trainer.datamodule)
        resume_inside_the_epoch(checkpoint)  # one written where trainer.max_steps stopped: the epoch's rest still to train
        checkpoint["optimizer_classes"] = class_names(trainer.optimizers)
        checkpoint["lr_scheduler_classes"] = class_names(config.scheduler for config in trainer.lr_scheduler_configs)
        checkpoint["callback_classes"] = class_names(trainer.callbacks)
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
            check_callbacks(self._restoring, trainer)
            self._built_schedulers = built_scheduler_settings(trainer)
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
        if checkpoint is not None:  # Lightning restored the optimizers and schedulers, their settings too
            take_this_runs_settings(trainer, self._built_schedulers)


def class_names(objects: Any) -> list[str]:
    return [qualified_name(type(o)) for o in objects]


# The callbacks whose checkpointed state is a result of the run, with how to give each: a resume without one would
# drop it (Lightning only warns), where the others' (ModelCheckpoint's best, a Timer) are bookkeeping.
RESULT_CALLBACKS = {"PosteriorSamples": "callbacks=sgmcmc; LightningCLI: --trainer.callbacks+=callbacks.PosteriorSamples"}


# Callbacks a Trainer adds of its own (a progress bar, the model summary): which one a run had says nothing of its
# training.
TRAINERS_OWN_CALLBACKS = ("lightning.pytorch.callbacks.progress.", "lightning.pytorch.callbacks.model_summary.",
                          "lightning.pytorch.callbacks.rich_model_summary.")


def check_callbacks(checkpoint: dict[str, Any], trainer: L.Trainer) -> None:
    """Refuse a resume without a callback whose state in the checkpoint is a result (`RESULT_CALLBACKS`); name, in one
    line, the other callbacks the checkpoint's run had that this one does not (a resume takes its callbacks from its own
    command, so one given only when the run started is left out)."""
    given = {callback.state_key for callback in trainer.callbacks}
    for key, how in RESULT_CALLBACKS.items():
        if (checkpoint.get("callbacks") or {}).get(key) and key not in given:
            raise CheckpointError(f"checkpoint {trainer.ckpt_path} holds what its run's {key} callback collected, and this "
                                  f"run has no {key}: resume with it ({how}), or it is lost")
    left_out = sorted({name for name in checkpoint.get("callback_classes") or []  # names, never imported
                       if isinstance(name, str) and not name.startswith(TRAINERS_OWN_CALLBACKS)} - set(class_names(trainer.callbacks)))
    if left_out and trainer.is_global_zero:
        log.warning("resuming without callbacks the checkpoint's run had: %s; give them again to keep them (Hydra: "
                    "+callbacks.NAME._target_=CLASS; LightningCLI: --trainer.callbacks+=CLASS, or the run's own "
                    "--config=<its version folder>/config.yaml)", ", ".join(left_out[:8]) + (", ..." if len(left_out) > 8 else ""))


def check_optimizers(checkpoint: dict[str, Any], trainer: L.Trainer) -> None:
    """Refuse to restore the checkpoint's optimizer states into `trainer`'s built optimizers of another class, other
    parameter groups, or a scheduler of another class (whose restored state would apply without a word); or a moment
    that is not finite or not of its parameter's shape (a traceback at the first step, or every weight spoiled)."""
    path = trainer.ckpt_path
    saved, current = checkpoint.get("optimizer_classes"), class_names(trainer.optimizers)
    if saved is not None and saved != current:
        lr = (checkpoint.get("hyper_parameters") or {}).get("lr")  # the rate it trained with, which SG-MCMC's requires
        rate = f" --model.optimizer.lr={lr}" if isinstance(lr, float) else ""
        raise CheckpointError(f"the checkpoint holds the state of optimizer {', '.join(saved)}, this run uses "
                              f"{', '.join(current)}: resume with the checkpoint's optimizer (optimizer=... of "
                              f"configs/optimizer/; in LightningCLI --model.optimizer={saved[0]}{rate}), or start a new run")
    saved, current = checkpoint.get("lr_scheduler_classes"), class_names(c.scheduler for c in trainer.lr_scheduler_configs)
    if saved is not None and saved != current:
        raise CheckpointError(f"the checkpoint's run scheduled its learning rate with {', '.join(saved) or 'no scheduler'}, this "
                              f"run with {', '.join(current) or 'no scheduler'}: resume with the checkpoint's scheduler (scheduler=...; "
                              "in LightningCLI --model.scheduler=..., or --lr_scheduler=... beside --optimizer), or start a new run")
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


RESTORED_PATHS = ("last_model_path", "best_model_path", "kth_best_model_path")  # ModelCheckpoint's, besides best_k_models
READ_FOR = {"fit": "resuming", "validate": "validating", "test": "testing", "predict": "predicting"}  # by trainer.state.fn


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O with atomic, checksummed writes and verified, checked reads (local paths)."""

    def __init__(self, read: tuple[Any, dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.read = read  # (path, checkpoint): what the builder read and checked already (launch/run_builder.py)
        self.trainer: Any = None  # the trainer it serves (set by SafeCheckpoints); None: the plugin used on its own

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if self.trainer is not None and "model_class" not in checkpoint:  # a weights-only save: no on_save_checkpoint
            stamp_classes(checkpoint, self.trainer.lightning_module, self.trainer.datamodule)
        if "://" in str(path):  # object storage: its uploads are atomic already
            return super().save_checkpoint(checkpoint, path, storage_options)
        save_checkpoint_file(checkpoint, path)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        # Every read the trainer makes (resume, test/validate ckpt_path) is the safe one; only an explicit
        # `weights_only=False` given to the trainer in code trusts the file. The checkpoint the builder read is handed
        # over once, not read again; onto the CPU: the restore copies every tensor to where its module or optimizer lives.
        module = getattr(self.trainer, "lightning_module", None)
        if self.read is not None and weights_only is not False and Path(self.read[0]).resolve() == Path(path).resolve():
            checkpoint, self.read = self.read[1], None
        else:
            checkpoint = load_checkpoint_file(path, map_location or "cpu", trusted=weights_only is False)
            if module is not None:
                check_model_class(checkpoint, getattr(module, "model_class", type(module)), path, self.trainer.state.fn.value)
        if "pytorch-lightning_version" not in checkpoint:  # Lightning's migration would end in a KeyError
            raise CheckpointError(f"checkpoint {path} holds a model's weights only, not a Lightning checkpoint (no "
                                  "'pytorch-lightning_version'); the trainer cannot resume or test from it. In Python: "
                                  "model.load_state_dict(torch.load(path, weights_only=True)['state_dict'])")
        if module is not None:
            check_restored(checkpoint, self.trainer, path)
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        # Lightning removes only paths its ModelCheckpoint made or restored, and a restored one lies inside the run's
        # checkpoint directory (drop_paths_outside); what is removed is a regular file, not a link.
        if "://" in str(path):
            return super().remove_checkpoint(path)
        target = Path(path)
        if target.is_symlink() or not target.is_file():
            log.warning("not removing %s: it is not a checkpoint file (a link, a directory or nothing)", path)
            return
        target.unlink()  # safe: a regular file that is no link, inside the run's checkpoint directory (above)
        Path(f"{target}{CHECKSUM_SUFFIX}").unlink(missing_ok=True)  # safe: beside it (a link: the link only)


def check_restored(checkpoint: dict[str, Any], trainer: L.Trainer, path: Any) -> None:
    """Refuse a checkpoint whose model state or loop counts do not fit `trainer` (module docstring); log the settings
    that differ from the checkpoint's; drop the restored ModelCheckpoint paths outside its directory, with one line."""
    module = trainer.lightning_module
    changed = changed_settings(checkpoint, module, trainer.datamodule)
    check_fits(checkpoint["state_dict"], module.state_dict(), path, changed)
    if changed and trainer.is_global_zero:
        differences = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        log.warning("%s with changed settings (this run's values are used and recorded): %s",
                    READ_FOR.get(trainer.state.fn, "resuming"), differences)
    own = {"epoch": 0, "global_step": 0, "loops": {"fit_loop": trainer.fit_loop.state_dict()}}  # what a trainer writes
    if found := _misfit(checkpoint, own):
        raise CheckpointError(f"checkpoint {path}: its {found} is not what a training loop writes there (a count >= 0, "
                              "or a mapping): the file was altered; use another checkpoint")
    states = checkpoint.get("callbacks") or {}  # mappings (checkpoints/loader.py)
    for callback in trainer.checkpoint_callbacks:
        state = states.get(callback.state_key)
        if state is not None and getattr(callback, "dirpath", None):
            drop_paths_outside(state, callback.dirpath, path)


def changed_settings(checkpoint: dict[str, Any], module: L.LightningModule, datamodule: Any = None) -> dict[str, tuple[Any, Any]]:
    """"model.NAME" / "data.NAME" -> (the checkpoint's value, this run's value) for every setting that differs: a model
    setting left out of either is its default; data settings are compared where both have a record."""
    records = {"model": ({**constructor_defaults(type(module)), **(checkpoint.get("hyper_parameters") or {})},
                         settings_of(module)),  # (its `_`-keys left out: LightningCLI's class path)
               "data": (checkpoint.get("datamodule_hyper_parameters") or {},
                        getattr(datamodule, "hparams", None) or {})}
    return {f"{kind}.{key}": (saved[key], value) for kind, (saved, own) in records.items()
            for key, value in own.items() if key in saved and not same(saved[key], value)}


def _misfit(saved: Any, own: Any, where: str = "") -> str | None:
    """The first key path at which `saved` is not what the trainer's `own` state holds there (a mapping, or a count
    >= 0): Lightning would fail on it with a traceback, or count from a negative step."""
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not isinstance(own, dict):
        return where if count(own) and not (count(saved) and saved >= 0) else None
    if not isinstance(saved, dict):
        return where
    return next(filter(None, (_misfit(saved[key], value, f"{where}.{key}" if where else key)
                              for key, value in own.items() if key in saved)), None)


def lies_inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether `path`, with `..` and links resolved, lies strictly below `directory` (also resolved)."""
    return Path(directory).resolve() in Path(path).resolve().parents


def drop_paths_outside(state: dict[str, Any], directory: str, source: Any) -> None:
    """Empty the paths of a restored ModelCheckpoint state, `best_k_models` included, when one is not a file name
    inside `directory`: Lightning would remove it at the next save, or load it as "the best"."""
    best = state.get("best_k_models", {})
    named = [state.get(key, "") for key in RESTORED_PATHS] + (list(best) if isinstance(best, dict) else [best])
    outside = [path for path in named if not isinstance(path, str) or (path != "" and not lies_inside(path, directory))]
    if outside:
        state.update({key: "" for key in RESTORED_PATHS}, best_k_models={})
        log.warning("checkpoint %s: its ModelCheckpoint state names %s outside this run's checkpoint directory %s; "
                    "ignored (nothing there is removed or loaded)", source, repr(outside[0])[:200], directory)
