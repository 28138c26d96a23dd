"""Which GPU a job of a parallel multirun trains on (hydra/launcher=parallel, configs/hydra/launcher/parallel.yaml).

joblib starts the next job as soon as any running one ends, so picking the GPU by job number (job k -> cuda:k mod
GPUs) can put two jobs on one GPU while another sits idle: with 2 GPUs, a short job 1 ends, job 2 starts on cuda:0
beside a long job 0. Instead each worker process holds one of n_jobs slots for as long as it lives (an exclusive
`flock` on `<sweep dir>/.worker-slots/slot<k>.lock`, released by the kernel when the process ends, however it ends),
and trains on cuda:(slot mod GPUs). The jobs running at one moment hold different slots: with n_jobs <= GPUs (the
default, one job per GPU) they never share a GPU. With more jobs than GPUs a worker keeps its GPU from job to job, so
while some workers sit idle the busy ones can share a GPU that another leaves idle. Where no slot can be taken, the
job number picks the GPU, as before.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

_held: dict[Path, tuple[int, int]] = {}  # directory -> (open lock file, slot) of this process, kept for its lifetime


def claim_slot(directory: Path, slots: int) -> int | None:
    """This process's slot in 0..slots-1 under `directory`: the one it holds already, else the lowest free one; None
    where every slot is held by another live process or locks cannot be taken there (no `flock` on this platform or
    file system, or the directory cannot be written)."""
    if directory in _held:
        return _held[directory][1]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for slot in range(slots):
            handle = os.open(directory / f"slot{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # held by another live worker
                os.close(handle)
                continue
            except OSError:  # a file system without flock (ENOSYS, ENOLCK)
                os.close(handle)
                raise
            _held[directory] = (handle, slot)
            return slot
    except OSError:
        return None
    return None
