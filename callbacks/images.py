"""Image grids in TensorBoard: each input next to its reconstruction, and decoded prior samples.

Drawn at the first batch of every validation and test run and written at its end, with its metrics (rank 0; not the
sanity check, whose metrics Lightning discards too: a resumed run would show its last grid twice; nor a run stopped
before its end, which would look like a result), under `{val,test}/reconstructions` and `{val,test}/prior_samples`. The
reconstructions are the evaluation step's (`outputs["reconstructions"]`), so only the prior samples cost a decoder pass.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torchvision.utils import make_grid

from common.private_api import metrics_step


class ImageGrids(L.Callback):
    def __init__(self, num_images: int = 32) -> None:
        if num_images < 1:
            raise ValueError(f"num_images must be >= 1, got {num_images}")
        self.num_images = num_images
        self.drawn: dict[str, dict[str, torch.Tensor]] = {}  # a stage's grids, until its end writes them

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.drawn.pop("val", None)  # (those of a validation that did not end)

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.drawn.pop("test", None)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0 and not trainer.sanity_checking and isinstance(outputs, dict) and "reconstructions" in outputs:
            self.draw_grids(trainer, pl_module, "val", batch[0], outputs["reconstructions"])

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0 and isinstance(outputs, dict) and "reconstructions" in outputs:
            self.draw_grids(trainer, pl_module, "test", batch[0], outputs["reconstructions"])

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write_grids(trainer, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.write_grids(trainer, "test")

    def draw_grids(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str, x: torch.Tensor, recon: torch.Tensor) -> None:
        if not trainer.is_global_zero or not any(isinstance(logger, TensorBoardLogger) for logger in trainer.loggers):
            return
        x, recon = x[: self.num_images], recon[: self.num_images]
        nrow = int(math.ceil(math.sqrt(2 * x.shape[0])))
        nrow += nrow % 2  # keep each input next to its reconstruction
        pairs = torch.stack([x, recon], dim=1).flatten(0, 1).clamp(0, 1)
        samples = pl_module.sample(self.num_images).clamp(0, 1)
        self.drawn[stage] = {"reconstructions": make_grid(pairs, nrow=nrow), "prior_samples": make_grid(samples, nrow=nrow // 2 or 1)}

    def write_grids(self, trainer: L.Trainer, stage: str) -> None:
        for name, grid in self.drawn.pop(stage, {}).items():
            for logger in trainer.loggers:
                if isinstance(logger, TensorBoardLogger):
                    logger.experiment.add_image(f"{stage}/{name}", grid, metrics_step(trainer))  # at its metrics' step
