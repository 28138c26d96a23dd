"""A callback for the frozen-peer test (test_interruptions.py): DDP rank 1 stops itself with SIGSTOP
after its second training step, as a hung process would; rank 0 then waits at the next collective.
With `late_start_s`, rank 1 also starts that much later than rank 0 (it is built in each rank's
process: Lightning starts rank 1 as `python train.py ...` again, with LOCAL_RANK=1), as a rank
that imports torch slowly on a busy machine does."""

from __future__ import annotations

import os
import signal
import time

import lightning as L


class FreezeRank1(L.Callback):
    def __init__(self, late_start_s: float = 0) -> None:
        if os.environ.get("LOCAL_RANK") == "1" and late_start_s:
            print(f"rank 1 starts {late_start_s} s late", flush=True)
            time.sleep(late_start_s)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_rank == 1 and trainer.global_step == 2:
            print("rank 1 stops itself (SIGSTOP)", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
