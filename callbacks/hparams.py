"""TensorBoard's HPARAMS tab: every run's hyperparameters next to its final metrics.

Lightning writes the model's and the data module's hyperparameters without metrics; this
callback writes them again at the start of training with the metric tags the tab should show
(`hp/val_nll`, `hp/test_nll`, ...), the pattern Lightning documents for TensorBoard, and adds
what the constructors do not say: the model class, its parameter count, the optimizer and the
effective batch size. At the end of every validation and test run it logs the value of each
metric under its `hp/` tag.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger

# Shown as `hp/<stage>_<name>`: the value of `<stage>/<name>` at the end of each run of that stage.
HPARAM_METRICS = {"val": ("nll", "bpd"), "test": ("nll", "bpd", "recon_mse", "psnr")}


class HparamsWithMetrics(L.Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = trainer.logger
        if not isinstance(logger, TensorBoardLogger) or not trainer.is_global_zero:
            return
        metrics = {f"hp/{stage}_{name}": float("nan") for stage, names in HPARAM_METRICS.items() for name in names}
        optimizer = trainer.optimizers[0]
        batch_size = getattr(trainer.datamodule, "batch_size", None)
        params = {
            **logger.hparams,
            "model_class": type(pl_module).__name__,
            "num_params": sum(p.numel() for p in pl_module.parameters()),
            "optimizer": type(optimizer).__name__,
            "optimizer_lr": optimizer.defaults.get("lr"),
            # data.batch_size is per device; one optimizer step sees this many examples:
            "effective_batch_size": batch_size and batch_size * trainer.world_size * trainer.accumulate_grad_batches,
        }
        logger.log_hyperparams(params, metrics=metrics)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._log(trainer, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, "test")

    def _log(self, trainer: L.Trainer, stage: str) -> None:
        values = {f"hp/{stage}_{name}": trainer.callback_metrics.get(f"{stage}/{name}") for name in HPARAM_METRICS[stage]}
        values = {tag: float(value) for tag, value in values.items() if value is not None}
        if trainer.is_global_zero and values:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=trainer.global_step)
