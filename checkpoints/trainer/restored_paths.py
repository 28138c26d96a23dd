"""Nothing outside the run is removed or loaded because a checkpoint names it.

A checkpoint restores ModelCheckpoint's state: the paths of the last, best and k-th best checkpoints, of which
Lightning removes "the previous one" at its next save, recursively. A received checkpoint may name any path there
(`<dirpath>/../../notes`), and Lightning's own check compares paths without resolving `..` or links. Here a restored
path that does not resolve to a file inside the run's checkpoint directory is dropped with one line, and the removal
itself (checkpoints/trainer/io_plugin.py) takes only a regular file inside that directory.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RESTORED_PATHS = ("last_model_path", "best_model_path", "kth_best_model_path")


def lies_inside(path: str | os.PathLike, directory: str | os.PathLike) -> bool:
    """Whether `path`, with `..` and links resolved, lies strictly below `directory` (also resolved)."""
    return Path(directory).resolve() in Path(path).resolve().parents


def drop_paths_outside(state: dict[str, Any], directory: str, source: Any) -> None:
    """Remove from a ModelCheckpoint state (as a checkpoint restores it) every path that is not a file name inside
    `directory`: Lightning would remove it at the next save, or load it as "the best" (module docstring)."""
    def outside(path: Any) -> bool:
        return not isinstance(path, str) or (path != "" and not lies_inside(path, directory))

    dropped = [state[key] for key in RESTORED_PATHS if key in state and outside(state[key])]
    for key in RESTORED_PATHS:
        if key in state and outside(state[key]):
            state[key] = ""
    best = state.get("best_k_models")
    if best is not None:
        kept = {path: score for path, score in best.items() if not outside(path)} if isinstance(best, dict) else {}
        dropped += [path for path in best if path not in kept] if isinstance(best, dict) else [best]
        state["best_k_models"] = kept
    if dropped:
        log.warning("checkpoint %s: its ModelCheckpoint state names %s outside this run's checkpoint directory %s; "
                    "ignored (nothing there is removed or loaded)", source, repr(dropped[0])[:200], directory)
