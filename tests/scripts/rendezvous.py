"""A callback for the parallel-launcher test (test_cluster.py): each job announces itself in `directory` when its fit
starts, then waits until `jobs` jobs have. The jobs can only all pass if the launcher runs them at the same time:
started one after the other, the first waits in vain and fails. Comparing the jobs' logged times instead would depend
on how loaded the machine is."""

from __future__ import annotations

import os
import time
from pathlib import Path

import lightning as L


class WaitForEveryJob(L.Callback):
    def __init__(self, directory: str, jobs: int = 2, timeout_s: float = 120.0) -> None:
        self.directory, self.jobs, self.timeout_s = Path(directory), jobs, timeout_s

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / str(os.getpid())).touch()
        deadline = time.monotonic() + self.timeout_s
        while (started := len(list(self.directory.iterdir()))) < self.jobs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{started} of {self.jobs} jobs started within {self.timeout_s:.0f} s: the launcher "
                                   "ran them one after the other")
            time.sleep(0.1)
