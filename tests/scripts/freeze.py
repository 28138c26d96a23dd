"""A callback for the frozen-peer test (test_interruptions.py): DDP rank 1 stops itself with SIGSTOP
after its second training step, as a hung process would; rank 0 then waits at the next collective."""

from __future__ import annotations

import os
import signal

import lightning as L


class FreezeRank1(L.Callback):
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_rank == 1 and trainer.global_step == 2:
            print("rank 1 stops itself (SIGSTOP)", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
