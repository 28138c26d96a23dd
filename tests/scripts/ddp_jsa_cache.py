"""Train JSA for a few steps under a real 2-process DDP run on CPU (gloo) and save, per rank,
the MIS cache and the training indices that rank processed. Run by tests/test_jsa_ddp.py as
`python tests/scripts/ddp_jsa_cache.py OUT_DIR`; Lightning re-launches this script for rank 1."""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch

from datamodules import MNISTDataModule
from models import JSA


class RecordIndices(L.Callback):
    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append(batch[1].clone())


def main(out_dir: Path) -> None:
    L.seed_everything(0)
    record = RecordIndices()
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=3, limit_train_batches=3, limit_val_batches=1,
        num_sanity_val_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[record],
    )
    model = JSA(mis_steps=3, val_num_samples=2)
    trainer.fit(model, datamodule=MNISTDataModule(binarize="dynamic", batch_size=16))
    torch.save(
        {"codes": model.cache.codes, "seen": torch.cat(record.seen), "val_nll": trainer.callback_metrics["val/nll"]},
        out_dir / f"rank{trainer.global_rank}.pt",
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
