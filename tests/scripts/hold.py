"""A callback for the Ctrl-C-during-test tests (test_interruptions.py): the test stage stops at the start of its
second batch, once the first has logged its image grids, and waits there for Ctrl-C; the file `holding-test` in the
working directory says it is waiting. The test sends SIGINT (or SIGTERM) when that file appears: inside the test loop, however
slowly the run got there. Without the signal it goes on after `timeout_s` and the test ends as usual."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L

# The longest a Ctrl-C waits for its KeyboardInterrupt here (`HoldInTest.on_test_batch_start`).
POLL_S = 0.05


class HoldInTest(L.Callback):
    def __init__(self, timeout_s: float = 120) -> None:
        self.timeout_s = timeout_s

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        if batch_idx == 1:
            Path("holding-test").touch()
            # Short sleeps, not one of timeout_s: Python runs a signal's handler between bytecodes, and a SIGINT that
            # lands after the last check but before a sleep's system call starts (the test sends it the moment the
            # file appears) interrupts nothing, so its KeyboardInterrupt would come only when that sleep ends.
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline and not getattr(trainer, "received_sigterm", False):  # SIGTERM: go on
                time.sleep(POLL_S)
