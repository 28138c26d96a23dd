"""Image grids in TensorBoard: each input next to its reconstruction, and decoded prior samples.

Written for the first batch of every validation and test run (rank 0; not the sanity check, whose metrics Lightning
discards too: a resumed run would show its last grid twice), under `{val,test}/reconstructions` and
`{val,test}/prior_samples`. The reconstructions are the evaluation step's (`outputs["reconstructions"]`), so only the
prior samples cost a decoder pass.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torchvision.utils import make_grid


class ImageGrids(L.Callback):
    def __init__(self, num_images: int = 32) -> None:
        if num_images < 1:
            raise ValueError(f"num_images must be >= 1, got {num_images}")
        self.num_images = num_images

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0 and not trainer.sanity_checking and isinstance(outputs, dict) and "reconstructions" in outputs:
            self.log_grids(trainer, pl_module, "val", batch[0], outputs["reconstructions"])

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0 and isinstance(outputs, dict) and "reconstructions" in outputs:
            self.log_grids(trainer, pl_module, "test", batch[0], outputs["reconstructions"])

    def log_grids(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str, x: torch.Tensor, recon: torch.Tensor) -> None:
        loggers = [logger for logger in trainer.loggers if isinstance(logger, TensorBoardLogger)]
        if not trainer.is_global_zero or not loggers:
            return
        x, recon = x[: self.num_images], recon[: self.num_images]
        nrow = int(math.ceil(math.sqrt(2 * x.shape[0])))
        nrow += nrow % 2  # keep each input next to its reconstruction
        pairs = torch.stack([x, recon], dim=1).flatten(0, 1).clamp(0, 1)
        samples = pl_module.sample(self.num_images).clamp(0, 1)
        for logger in loggers:
            logger.experiment.add_image(f"{stage}/reconstructions", make_grid(pairs, nrow=nrow), trainer.global_step)
            logger.experiment.add_image(f"{stage}/prior_samples", make_grid(samples, nrow=nrow // 2 or 1), trainer.global_step)
