"""What the test stage will cost, said before it computes anything: the importance-sampled NLL scores every test image
with `model.test_num_samples` samples (1000 by default), far more than a validation does.

The estimate is measured here: the first test batch's first images are scored once with the test's number of samples,
enough for about `probe_work` image-samples in one batch (timing a handful of images alone would time the per-call
overhead); the time per image times the images to test is the estimate. Its draws come from a forked random state.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import torch


def _clock(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class TestCost(L.Callback):
    """Prints `test: N images x S importance samples each (model.test_num_samples): about T here` before the test.

    One of the default callbacks of both front ends (configs/callbacks/default.yaml).
    """

    __test__ = False  # a callback, not a pytest test class

    def __init__(self, probe_work: int = 8000) -> None:
        self.probe_work = probe_work

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        if batch_idx != 0 or dataloader_idx != 0 or not trainer.is_global_zero or not hasattr(pl_module, "importance_estimate"):
            return
        x = batch[0]
        point_mass = getattr(pl_module, "point_mass_posterior", False)  # the VQ-VAE: one sample says it all
        samples = 1 if point_mass else pl_module.eval_num_samples["test"]
        images = self._images(trainer, len(x))
        line = f"test: {images} images x " + ("1 code each (a point-mass posterior)" if point_mass else
                                               f"{samples} importance samples each (model.test_num_samples; fewer are proportionally faster)")
        if not getattr(pl_module, "compile_networks", False):  # a compiled network would compile again for the probe
            probe = x[: max(1, math.ceil(self.probe_work / samples))]
            devices = [pl_module.device.index or 0] if pl_module.device.type == "cuda" else []
            start = time.perf_counter()
            with torch.random.fork_rng(devices=devices):
                pl_module.importance_estimate(pl_module.likelihood.prepare(probe), None, samples)
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize(pl_module.device)
            seconds = (time.perf_counter() - start) * images / len(probe)
            line += f": about {_clock(seconds)} here (timed on {len(probe)} images)"
        print(line, flush=True)

    @staticmethod
    def _images(trainer: L.Trainer, batch_size: int) -> int:
        """The images the test will score: its batches (after trainer.limit_test_batches) of `batch_size`, at most the
        test set."""
        loaders = trainer.test_dataloaders
        loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
        total = len(loader.dataset) if hasattr(loader, "dataset") and hasattr(loader.dataset, "__len__") else math.inf
        batches = trainer.num_test_batches[0] if trainer.num_test_batches else math.inf
        images = min(total, batches * batch_size)
        return int(images) if math.isfinite(images) else batch_size
