"""Which GPU a job of a parallel multirun trains on (hydra/launcher=parallel, configs/hydra/launcher/parallel.yaml).

joblib starts the next job as soon as any running one ends, so picking the GPU by job number (job k -> cuda:k mod
GPUs) can put two jobs on one GPU while another sits idle: with 2 GPUs, a short job 1 ends, job 2 starts on cuda:0
beside a long job 0. Instead each worker process holds one of n_jobs slots for as long as it lives (an exclusive
`flock` on `<sweep dir>/.worker-slots/slot<k>.lock`, released by the kernel when the process ends, however it ends),
and trains on cuda:(slot mod GPUs). The jobs running at one moment hold different slots, so they spread over the
GPUs evenly.
"""

from __future__ import annotations

import os
from pathlib import Path

_held: tuple[int, int] | None = None  # (open lock file, slot) of this process, kept for its lifetime


def claim_slot(directory: Path, slots: int) -> int | None:
    """This process's slot in 0..slots-1: the one it holds already, else the lowest free one; None where every slot
    is held by another live process or the platform has no `flock`."""
    global _held
    if _held is not None:
        return _held[1]
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    directory.mkdir(parents=True, exist_ok=True)
    for slot in range(slots):
        handle = os.open(directory / f"slot{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            continue
        _held = (handle, slot)
        return slot
    return None
