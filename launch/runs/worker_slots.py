"""Which GPU a job of a parallel multirun trains on (hydra/launcher=parallel; docs/cluster.md).

joblib starts the next job as soon as any one ends, so job k -> cuda:(k mod GPUs) could put two jobs on one GPU while
another idles. Instead each worker holds one of n_jobs slots while it lives (an exclusive `flock` under
`<sweep dir>/.worker-slots/`, released however the process ends) and trains on cuda:(slot mod GPUs), so with
n_jobs <= GPUs no two running jobs share a GPU. Where no slot can be taken, the job number picks the GPU.
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
            except OSError as error:  # held by another live worker (BlockingIOError: the next slot), or no flock here
                os.close(handle)
                if not isinstance(error, BlockingIOError):  # a file system without flock (ENOSYS, ENOLCK)
                    raise
            else:
                _held[directory] = (handle, slot)
                return slot
    except OSError:
        return None
    return None
