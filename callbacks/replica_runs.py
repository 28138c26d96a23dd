"""Each replica of a replicated process (models/replicas.py) as a run of its own, read by `benchmarks.compare`, the
studies and `train.py test --ckpt_path` as they read a run: its TensorBoard run `<save_dir>/<name>/version_N` (the
`train/` and `val/` tags, `hparams.yaml`, the HPARAMS tab) and its `checkpoints/`, a single run's `last.ckpt` and best
on `val/nll` (models/replicas.py). The replicas' versions and best values are this callback's state, so a resumed
process goes on writing into the same runs."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info

from callbacks.hparams import HPARAM_METRICS, write_hparams
from checkpoints.errors import CheckpointError
from checkpoints.file_format import CHECKSUM_SUFFIX, save_checkpoint_file
from checkpoints.model_class import stamp_classes
from checkpoints.trainer import lies_inside
from common.files import resolved_inside
from common.lightning_files import RUN_LOGGERS, RunLogger
from common.log_steps import is_logging_step
from common.private_api import metrics_step, resume_inside_the_epoch
from models.replicas import replica_checkpoint, replica_terms

VERSION = re.compile(r"version_\d+")  # a TensorBoard run's version directory, as the replicas' loggers name them


class ReplicaRuns(L.Callback):
    """Args:
        save_dir: the TensorBoard root (the single runs' `<log_dir>/tensorboard`).
        names: each replica's run name.
        new_logger: makes a new run's logger (the launch side's reserves its version directory atomically).
    """

    def __init__(self, save_dir: str, names: Sequence[str], new_logger: Callable[..., TensorBoardLogger] = RunLogger) -> None:
        self.save_dir, self.names, self.new_logger = str(Path(save_dir).resolve()), list(names), new_logger
        self.versions: list[str] | None = None
        self.best = [math.inf] * len(self.names)
        self.best_files: list[str | None] = [None] * len(self.names)
        self.loggers: list[TensorBoardLogger] = []
        self.validated: list[float] = []  # each replica's val/nll at the last validation (not the sanity check's)

    @classmethod
    def saved_names(cls, checkpoint: dict[str, Any]) -> list[str] | None:
        """The run names a replicated process's checkpoint holds in this callback's state; None when it holds none."""
        callbacks = checkpoint.get("callbacks")
        state = callbacks.get(cls.__qualname__) if isinstance(callbacks, dict) else None
        return state.get("names") if isinstance(state, dict) else None

    def state_dict(self) -> dict[str, Any]:
        return {"names": self.names, "versions": self.versions, "best": self.best, "best_files": self.best_files}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("names") != self.names:  # other runs (a trunk's, for a branch): this process starts its own
            return
        versions, best, files = state.get("versions"), state.get("best"), state.get("best_files")
        # From a checkpoint, a file someone may have altered: a version is a directory name under its run, nothing else.
        if not (isinstance(versions, list) and len(versions) == len(self.names)
                and all(isinstance(v, str) and VERSION.fullmatch(v) for v in versions)
                and isinstance(best, list) and len(best) == len(self.names) and all(isinstance(b, (int, float)) for b in best)
                and isinstance(files, list) and len(files) == len(self.names) and all(f is None or isinstance(f, str) for f in files)):
            raise CheckpointError("the checkpoint's replica runs (callbacks state ReplicaRuns) are not run versions, best values "
                                  "and files, one per replica: the file was altered; use another checkpoint")
        self.versions, self.best, self.best_files = versions, best, files

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if self.versions is None:  # new runs; a resumed process has their versions from its checkpoint
            self.loggers = [self.new_logger(self.save_dir, name=name, default_hp_metric=False) for name in self.names]
            self.versions = [logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
                             for logger in self.loggers]
        else:  # each resumed run where it lies, no link leading it out of save_dir
            runs = [resolved_inside(self.save_dir, Path(self.save_dir, name, version)) for name, version in zip(self.names, self.versions)]
            self.loggers = [RunLogger(str(run.parents[1]), name=run.parent.name, version=run.name, default_hp_metric=False)
                            for run in runs]
        for r, logger in enumerate(self.loggers):
            model, data = pl_module.settings[r], trainer.datamodule.replicas[r]
            logger.log_hyperparams({**data.hparams, **model.hparams})  # hparams.yaml
            write_hparams(logger, model, data, trainer.optimizers[0], trainer.accumulate_grad_batches, trainer.global_step)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not is_logging_step(trainer):
            return
        values = {name: value.tolist() for name, value in outputs["terms"].items()}  # one host sync per term
        for r, logger in enumerate(self.loggers):
            terms = {f"train/{name}": value[r] for name, value in values.items()} | {"epoch": trainer.current_epoch}
            terms = replica_terms(pl_module.settings[r], terms, trainer.current_epoch, trainer.global_step)
            logger.log_metrics(terms, step=metrics_step(trainer))  # at the step a single run's Lightning logs them

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        self.validated = [float(values["val/nll"]) for values in pl_module.replica_val]
        for logger, values in zip(self.loggers, pl_module.replica_val):
            metrics = {tag: float(value) for tag, value in values.items()}
            hp = {f"hp/val_{name}": metrics[f"val/{name}"] for name in HPARAM_METRICS["val"]}
            logger.log_metrics({**metrics, **hp, "epoch": trainer.current_epoch}, step=metrics_step(trainer))
            logger.save()

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """The process saves (last.ckpt after each validation, on Ctrl-C or preemption): each replica's own last.ckpt, and
        its best on val/nll when this validation improved it."""
        if not self.loggers:
            return
        resume_inside_the_epoch(checkpoint)  # as SafeCheckpoints marks a single run's (it runs after this callback)
        epoch, step = trainer.current_epoch, trainer.global_step  # as ModelCheckpoint names its files
        for r, logger in enumerate(self.loggers):
            model = pl_module.settings[r]
            single = replica_checkpoint(checkpoint, r, pl_module.replica_state_dict(r), dict(model.hparams),
                                        dict(trainer.datamodule.replicas[r].hparams))
            stamp_classes(single, model, trainer.datamodule.replicas[r])
            directory = Path(logger.log_dir) / "checkpoints"
            save_checkpoint_file(single, directory / "last.ckpt")
            if isinstance(logger, RUN_LOGGERS):
                logger.record_hparams()  # hparams.yaml: the settings of the checkpoints it writes
            nll = self.validated[r] if self.validated else math.inf
            if nll < self.best[r]:
                best = directory / f"epoch{epoch:03d}-step{step:06d}.ckpt"
                save_checkpoint_file(single, best)
                previous = self.best_files[r]
                # safe: the previous best comes from this callback's state, which a checkpoint (a stranger's file) may
                # carry: removed only when it lies inside this replica's own checkpoints/ and is not the new file
                if previous and previous != str(best) and lies_inside(previous, directory):
                    for stale in (Path(previous), Path(previous + CHECKSUM_SUFFIX)):
                        stale.unlink(missing_ok=True)  # safe: inside the replica's checkpoints/ (checked above)
                self.best[r], self.best_files[r] = nll, str(best)

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        for logger in self.loggers:
            logger.finalize("success")
        if self.loggers:
            rank_zero_info(f"replica runs: {', '.join(f'{n}/{v}' for n, v in zip(self.names, self.versions))} in {self.save_dir} "
                           f"(tensorboard --logdir {self.save_dir}); each one's checkpoints in its checkpoints/")
