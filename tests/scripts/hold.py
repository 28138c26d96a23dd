"""Callbacks that hold a run where a test sends it a signal. HoldInTest (the Ctrl-C-during-test tests,
test_interruptions.py): the test stage stops at the start of its second batch, once the first has drawn its image
grids, and waits there for Ctrl-C; the file `holding-test` in the working directory says it is waiting. The test sends
SIGINT (or SIGTERM) when that file appears: inside the test loop, however slowly the run got there. Without the signal
it goes on after `timeout_s` and the test ends as usual. HoldInSetup holds fit's setup alike (`holding-setup`)."""

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


class HoldInSetup(L.Callback):
    """Holds the fit stage's setup, before Lightning takes SIGTERM over, until a signal ends the process (or
    `timeout_s`); the file `holding-setup` in the working directory says it is waiting."""

    def __init__(self, timeout_s: float = 120) -> None:
        self.timeout_s = timeout_s

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        Path("holding-setup").touch()
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:  # short sleeps: the signal's handler runs between them
            time.sleep(POLL_S)
