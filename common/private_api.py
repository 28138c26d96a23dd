"""Every private Lightning, torch, jsonargparse and Hydra attribute the collection relies on, each behind one small
adapter that says why it is needed. Checked against lightning 2.6.6, torch 2.14.1, jsonargparse 4.53.0 and hydra 1.3.8;
tests/common/test_private_api.py fails, naming the attribute, when an upgrade removes one of them (instead of an
override that is silently never called or an AttributeError in the middle of a run).
"""

from __future__ import annotations

from typing import Any

# Private methods the collection overrides in subclasses: (class, method). An override of a method the base class
# no longer has is never called, so the test checks that each one is still there.
OVERRIDDEN = {
    "lightning.pytorch.loggers.TensorBoardLogger": ("_get_next_version",),  # launch/runs/run_directory.py: reserve a version
    "lightning.pytorch.loggers.CSVLogger": ("_get_next_version",),  # the same, for logger=csv
    # common/lightning_files.py: Lightning's removes a continued CSV run's metrics.csv
    "lightning.pytorch.loggers.csv_logs.ExperimentWriter": ("_check_log_dir_exists",),
    # callbacks/validation_checkpoint.py: _save_checkpoint counts the files written; the others are called
    # to write last.ckpt where Lightning saves after a validation
    "lightning.pytorch.callbacks.ModelCheckpoint": ("_save_checkpoint", "_should_save_on_train_epoch_end",
                                                    "_save_last_checkpoint", "_monitor_candidates"),
}


def attached_trainer(module: Any) -> Any:
    """The trainer running a LightningModule, or None: `module.trainer` raises when none is attached
    (load_from_checkpoint, a model used on its own)."""
    return module._trainer


def record_hyperparameter(module: Any, name: str, value: Any) -> None:
    """Set one of the hyperparameters a LightningModule or LightningDataModule saved, both where the checkpoint reads
    them (`hparams`) and where the logger does (hparams.yaml, the HPARAMS tab: the private copy `hparams_initial`
    returns, which save_hyperparameters made)."""
    module.hparams[name] = value
    module._hparams_initial[name] = value


def own_hyperparameters(module: Any, hparams: dict[str, Any]) -> None:
    """Give a shallow copy of a module that saved hyperparameters its own, `hparams`: the copy shares the dict they live
    in (`_hparams`, which save_hyperparameters updates in place) and the logger's copy (`_hparams_initial`) with the
    original, so that setting the copy's would set every copy's (datamodules/replicas.py: one data module per seed)."""
    import copy

    from lightning.fabric.utilities.data import AttributeDict

    module._hparams = AttributeDict(hparams)
    module._hparams_initial = copy.deepcopy(module._hparams)


def ignore_in_ddp(module: Any, names: list[str]) -> None:
    """Parameters and buffers DDP must neither broadcast nor check, by name: torch's DistributedDataParallel reads
    this attribute (a per-rank cache, EMA statistics that each rank updates itself)."""
    module._ddp_params_and_buffers_to_ignore = names


def finds_unused_parameters(strategy: Any) -> bool:
    """Whether a DDP strategy was built with find_unused_parameters=True (Lightning keeps the DDP kwargs privately)."""
    return bool(getattr(strategy, "_ddp_kwargs", {}).get("find_unused_parameters"))


def raise_recompile_limit(at_least: int) -> None:
    """Dynamo's cap on the graphs one frame may compile (8 by default) raised to `at_least`: nn.Module.compile sends
    every compiled module through one frame (models/base.py)."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, at_least)


def file_writer(experiment: Any) -> Any:
    """The FileWriter behind TensorBoard's SummaryWriter, to write a raw hparams summary (callbacks/hparams.py):
    `add_hparams` would open a second event file per call."""
    return experiment._get_file_writer()


def metrics_step(trainer: Any) -> int:
    """The step Lightning logs `self.log` metrics at (its logger connector: the batches that stepped the optimizer,
    `_batches_that_stepped`), which trails trainer.global_step by one at a validation inside an epoch."""
    return trainer.fit_loop.epoch_loop._batches_that_stepped


def resume_inside_the_epoch(checkpoint: dict[str, Any]) -> None:
    """A checkpoint written where training stopped inside an epoch (trainer.max_steps): Lightning's fit loop counts that
    epoch as processed once its epoch loop ends, so a resume would go on with the next epoch, skipping the rest of this
    one and its validation. Marked not processed, as a checkpoint written inside the epoch is, it resumes at the next
    batch."""
    fit = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    epochs, batches = fit.get("epoch_progress"), fit.get("epoch_loop.batch_progress")
    if epochs and batches and batches.get("is_last_batch") is False:
        for counts in (epochs["total"], epochs["current"]):
            counts["processed"] = counts["completed"]


def read_as_lightningcli(text: str) -> Any:
    """A command-line value as LightningCLI's parser reads it (jsonargparse's YAML loader, which reads 1e-3 in a list as
    a float, where PyYAML's safe loader reads a string): launch/checks/cli_check.py judges what the parser will get."""
    from jsonargparse._loaders_dumpers import yaml_load

    return yaml_load(text)


def lightning_load(path: Any, map_location: Any, weights_only: bool) -> Any:
    """Lightning's torch.load for a local path, fsspec URL or stream (what Trainer.fit(ckpt_path=...) reads with)."""
    from lightning.fabric.utilities.cloud_io import _load

    return _load(path, map_location=map_location, weights_only=weights_only)


def checkpoint_every_n_train_steps(callback: Any) -> int | None:
    """A ModelCheckpoint's every_n_train_steps (its `_every_n_train_steps`: no public reader), which a replicated process
    keeps for its own last.ckpt (launch/runs/replicas.py)."""
    return callback._every_n_train_steps or None


def sigterm_without_broadcast(trainer: Any) -> None:
    """In the SIGTERM handler Lightning registered for this fit, its notifier replaced by one that does what it does (the
    signal connector's flag, which the loops read at the next step boundary; the signal passed on to the ranks its
    launcher started) without the `broadcast` it makes inside the handler: a collective begun at whatever point the
    signal lands meets another rank's collective of another size under DDP (JSA's cache gather: gloo's "Received data
    size doesn't match expected size"), and the run dies without its checkpoint. Rank 0's flag reaches every rank at
    the next step boundary anyway (the training epoch loop's `_broadcast_sigterm_tensor`)."""
    import signal

    connector, handler = trainer._signal_connector, signal.getsignal(signal.SIGTERM)

    def note_sigterm(signum: int, frame: Any) -> None:
        if not connector.received_sigterm and trainer.strategy.launcher is not None:
            trainer.strategy.launcher.kill(signum)
        connector.received_sigterm = True

    handlers = getattr(handler, "signal_handlers", None)  # lightning's _HandlersCompose
    if isinstance(handlers, list):
        handler.signal_handlers = [note_sigterm if h == connector._sigterm_notifier_fn else h for h in handlers]


def basic_sweeper_jobs(overrides: list[str]) -> list[list[str]]:
    """The jobs of a multirun of Hydra's basic sweeper, in the order it launches them, each as its overrides: the
    sweeper's own split of a command line's sweeps (no public reader), for naming the jobs a stopped multirun left."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return [job for batch in BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None) for job in batch]


def closed_form_rates(scheduler: Any) -> list[float] | None:
    """The learning rates a torch scheduler with a closed form (CosineAnnealingLR, StepLR, ...) gives at the epoch it has
    reached, from its settings alone; None for one without (its rate follows from the last one): a resumed run's
    scheduler with this run's settings (common/resumed_optimizers.py)."""
    closed_form = getattr(scheduler, "_get_closed_form_lr", None)
    return list(closed_form()) if closed_form is not None else None


def set_scheduler_rates(scheduler: Any, rates: list[float]) -> None:
    """The rates a scheduler has set (its optimizer's groups) and says it has (`get_last_lr`, read by the loggers)."""
    for group, rate in zip(scheduler.optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler._last_lr = list(rates)
