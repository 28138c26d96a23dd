"""TensorBoard's HPARAMS tab: every run's hyperparameters next to its final metrics.

At the start of training (a resumed one too) it writes every constructor setting of the model and the data module
(defaults included), plus the model class, its parameter count, the optimizer and the effective batch size. It declares
the metric tags (`hp/val_nll`, `hp/test_nll`, ...) without a value, so no placeholder appears at step 0, and logs each
at the end of every validation and test run, with the importance samples per image behind its NLL (`val/num_samples`,
`test/num_samples`). Each checkpoint the run writes rewrites its hparams.yaml with the settings it holds (a resume's
changed ones).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.tensorboard.summary import hparams

from common.lightning_files import RUN_LOGGERS
from common.private_api import file_writer, metrics_step
from common.signatures import settings_of

# Shown as `hp/<stage>_<name>`: the value of `<stage>/<name>` at the end of each run of that stage.
HPARAM_METRICS = {"val": ("nll", "bpd"), "test": ("nll", "bpd", "recon_mse", "psnr")}


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as `outer/inner` keys, the form TensorBoard's HPARAMS tab lists."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _factory_name(factory: Any) -> str:
    """The class a factory builds (`functools.partial(CosineAnnealingLR, ...)`, or LightningCLI's partial of a function
    that takes the class as an argument: CosineAnnealingLR), or "none"."""
    if factory is None:
        return "none"
    built = getattr(factory, "func", factory)
    classes = [part for part in (built, *getattr(factory, "args", ())) if isinstance(part, type)]
    return classes[0].__name__ if classes else getattr(built, "__name__", type(factory).__name__)


class HparamsWithMetrics(L.Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = trainer.logger
        if not isinstance(logger, TensorBoardLogger) or not trainer.is_global_zero:
            return
        write_hparams(logger, pl_module, trainer.datamodule, trainer.optimizers[0],
                      trainer.world_size * trainer.accumulate_grad_batches, trainer.global_step)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if isinstance(trainer.logger, RUN_LOGGERS):  # hparams.yaml: the settings of the checkpoints the run writes
            trainer.logger.record_hparams()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._log(trainer, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, "test")

    def _log(self, trainer: L.Trainer, stage: str) -> None:
        values = {f"hp/{stage}_{name}": trainer.callback_metrics.get(f"{stage}/{name}") for name in HPARAM_METRICS[stage]}
        values = {tag: float(value) for tag, value in values.items() if value is not None}
        # the importance samples per image behind this run's NLL (a later test may take other than the training's)
        samples = getattr(trainer.lightning_module, "eval_num_samples", {}).get(stage)
        values.update({f"{stage}/num_samples": float(samples)} if values and samples is not None else {})
        if trainer.is_global_zero and values:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=metrics_step(trainer))  # at the step of the NLL it goes with


def write_hparams(logger: TensorBoardLogger, model: L.LightningModule, datamodule: Any, optimizer: Any, batches_per_step: int,
                  step: int) -> None:
    """The HPARAMS tab's settings of a run (module docstring); also each replica's of a replicated process
    (callbacks/replica_runs.py). `batches_per_step`: data.batch_size batches in one optimizer step."""
    batch_size = getattr(datamodule, "batch_size", None)
    params = {
        **(settings_of(datamodule) if datamodule is not None else {}),
        **settings_of(model),
        "model_class": type(model).__name__,
        **({"data_class": type(datamodule).__name__} if datamodule is not None else {}),
        "num_params": sum(p.numel() for p in model.parameters()),
        "optimizer": type(optimizer).__name__,
        "scheduler": _factory_name(getattr(model, "scheduler_factory", None)),  # (its setting is a factory, not a value)
        # data.batch_size is per device; one optimizer step sees this many examples:
        "effective_batch_size": batch_size and batch_size * batches_per_step,
    }
    params = {k: v for k, v in _flatten(params).items() if k != "optimizer" or isinstance(v, str)}
    # TensorBoard's hparams plugin takes numbers, strings and booleans; anything else as its repr.
    params = {k: v if isinstance(v, (bool, int, float, str)) else repr(v) for k, v in params.items()}
    metrics = {f"hp/{stage}_{name}": 0.0 for stage, names in HPARAM_METRICS.items() for name in names}
    writer = file_writer(logger.experiment)
    for summary in hparams(params, metrics):  # the tags only: no value is written for them here
        writer.add_summary(summary, step)
