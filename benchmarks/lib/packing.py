"""A study's runs trained as the replicas of one process (docs/replicas.md): one `train.py ... replicas.seeds=[...]`
process fills a GPU that one small run leaves mostly idle.

- `train_process` trains (or resumes) one replicated process in a log folder of its own: from its own last.ckpt when
  it has one (written at every validation), else from `start_from` (a trunk process's checkpoint: its arms branch
  from it, launch/runs/replicas.py: trunk_to_branch), else from scratch.
- `hand_over` moves a finished replica's TensorBoard run to where its run would have trained alone
  (`<logs>/<name>/tensorboard/`): the study records, reports and measures it as it does any run.
- `--replicas-per-process N` of a study whose runs differ in their seed alone (`plan_packs`, `train_pack`) packs them N
  to a process, beside a `packed.json` in each run's log_dir, and `runner.train` hands that run over without training it
  again.
- `run_lock` and `remove_unfinished`: a study holds the folder it trains in locked, and removes the leftovers of a
  process cut before its first checkpoint only inside that folder (single runs too: benchmarks/lib/runner.py).
- `study_folder`: each folder a study trains in (a run's, a pack's) or writes its records to, resolved where it is
  placed, and refused in one line when a link leads it out of --logs or --out.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Sequence

from common.files import LeadsOutside, appending, read_regular, resolved_inside, write_file

SEED = re.compile(r"^seed=(\d+)$")
PACKED = "packed.json"  # in a run's log_dir: its run was trained in a pack
REPO = Path(__file__).resolve().parents[2]


def study_folder(root: Path, *parts: str) -> Path:
    """`root`/`parts` (--logs or --out, resolved, and a folder below it), resolved; one line when a symbolic link leads
    it out of `root`: a study writes, moves and removes only inside its own folders."""
    try:
        return resolved_inside(root, root.joinpath(*parts))
    except LeadsOutside as error:
        raise SystemExit(str(error)) from None


@contextlib.contextmanager
def run_lock(name: str, log_dir: Path) -> Iterator[None]:
    """An exclusive flock on the run's `log_dir` for as long as this process trains it; one line if another holds it."""
    descriptor = os.open(log_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"run {name}: {log_dir} is being trained by another study process (the same --logs and "
                             "run); wait for it to end, or give this one another --logs") from None
        yield
    finally:
        os.close(descriptor)  # releases the lock


def remove_unfinished(name: str, log_dir: Path) -> None:
    """Remove `log_dir/tensorboard` (a run that stopped before its first checkpoint), unless a process still writes one
    of its runs (train.py holds its run directory locked: launch/runs/run_directory.py) or it leads outside `log_dir`."""
    from launch.runs.run_directory import read_owner

    tensorboard = log_dir / "tensorboard"
    if not tensorboard.exists() and not tensorboard.is_symlink():
        return
    if tensorboard.is_symlink() or tensorboard.resolve().parent != log_dir.resolve():
        raise SystemExit(f"run {name}: {tensorboard} is a link; a study removes an unfinished run only inside --logs: "
                         "remove the link")
    for run_dir in [p for p in tensorboard.glob("*/*") if p.is_dir() and not p.is_symlink()]:
        descriptor = os.open(run_dir, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"run {name}: {run_dir} is being written by {read_owner(run_dir / '.owner')}; it is not "
                             "removed: wait for that process to end") from None
        finally:
            os.close(descriptor)
    shutil.rmtree(tensorboard.resolve())  # safe: resolved, inside --logs (checked above), written by no live process


def configuration(overrides: Sequence[str]) -> tuple[tuple[str, ...], int] | None:
    """(the overrides but the seed, the seed), or None when they do not name exactly one seed."""
    seeds = [o for o in overrides if SEED.match(o)]
    if len(seeds) != 1:
        return None
    return tuple(o for o in overrides if not SEED.match(o)), int(SEED.match(seeds[0]).group(1))


def process_checkpoint(process_dir: Path) -> Path | None:
    """The last.ckpt of the replicated process trained with `log_dir=process_dir` (every replica's resume point), if any."""
    found = sorted(process_dir.glob("replicas/*/*/checkpoints/last.ckpt"))
    return found[-1] if found else None


def train_process(label: str, overrides: Sequence[str], process_dir: Path, run_lock: Callable[[str, Path], ContextManager],
                  start_from: Path | None = None) -> tuple[float, str]:
    """Train `python train.py *overrides log_dir=process_dir` (a replicated process), resuming it from its own last.ckpt,
    else starting it from `start_from`: (seconds, the command as shown, without log_dir). Started afresh, the folder's
    leftovers of a process cut before its first checkpoint are removed first, so each replica's run is version_0.
    `run_lock` keeps a second study process out of the folder; a failed process is one line naming its log."""
    process_dir = study_folder(process_dir.parent, process_dir.name)
    process_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(label, process_dir):
        resume = process_checkpoint(process_dir)
        if resume is None:
            remove_unfinished(label, process_dir)
            shutil.rmtree(process_dir / "replicas", ignore_errors=True)  # safe: inside the study's --logs, locked above
        return run_train_py(label, overrides, process_dir, resume or start_from)


def run_train_py(label: str, overrides: Sequence[str], log_dir: Path, ckpt: Path | None) -> tuple[float, str]:
    """`python train.py *overrides log_dir=log_dir [ckpt_path=ckpt]`, its output appended to `log_dir/train.log` after
    the earlier attempts': (seconds, the command as shown, without log_dir); a failure is one line naming the log."""
    cmd = [sys.executable, str(REPO / "train.py"), *overrides, f"log_dir={log_dir}"] + ([f"ckpt_path={ckpt}"] if ckpt else [])
    begun = time.perf_counter()
    with appending(log_dir / "train.log") as log:
        log.write(f"\n$ {shlex.join(cmd)}\n".encode())
        log.flush()
        done = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{label} failed (exit {done.returncode}); its output: {log_dir / 'train.log'}")
    return time.perf_counter() - begun, shlex.join(["python", "train.py", *(o.replace(f"{REPO}/", "") for o in overrides)])


def hand_over(process_dir: Path, replica: str, log_dir: Path) -> Path:
    """Move the replica run whose TensorBoard folder under `process_dir`/tensorboard/ matches the glob `replica` to
    `log_dir/tensorboard/`, where its run would have trained alone; its run directory there. Idempotent: a run moved
    before is found where it lies."""
    moved = sorted(log_dir.glob(f"tensorboard/{replica}/version_0"))
    if moved:
        return moved[0]
    found = sorted(process_dir.glob(f"tensorboard/{replica}/version_0"))
    if len(found) != 1:
        raise SystemExit(f"{process_dir}: expected one replica run tensorboard/{replica}/version_0 from its process, found "
                         f"{len(found)}; see its train.log")
    (run,) = found
    target = study_folder(log_dir.parent, log_dir.name, "tensorboard", run.parent.name) / "version_0"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(run), str(target))
    return target


def plan_packs(requests: dict[str, tuple[list[str], Path] | None], size: int) -> list[list[str]]:
    """Packs of at most `size` runs of one configuration (in the given order), of runs not yet trained (no last.ckpt of
    their own, no packed.json); a configuration of one run stays a single run, and so does a run whose request is None
    (the study trains it alone)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, request in requests.items():
        if request is None:
            continue
        overrides, log_dir = request
        found = configuration(overrides)
        started = (log_dir / PACKED).exists() or any(log_dir.glob("tensorboard/*/version_0/checkpoints/last.ckpt"))
        if found is not None and not started:
            groups.setdefault(found[0], []).append(name)
    packs = [names[i:i + size] for names in groups.values() for i in range(0, len(names), size)]
    return [pack for pack in packs if len(pack) > 1]


def train_pack(names: Sequence[str], requests: dict[str, tuple[list[str], Path]], packs_dir: Path,
               run_lock: Callable[[str, Path], ContextManager]) -> None:
    """Train `names` as one replicated process (`train_process`), then put each replica's run in its run's log_dir with
    a packed.json (the process's seconds shared among its replicas, and its command)."""
    common = configuration(requests[names[0]][0])[0]
    seeds = [configuration(requests[name][0])[1] for name in names]
    pack_dir = study_folder(packs_dir.parent, packs_dir.name, f"{names[0]}-x{len(names)}")
    seconds, shown = train_process(f"pack {names[0]} (x{len(names)})", [*common, f"replicas.seeds=[{','.join(map(str, seeds))}]"],
                                   pack_dir, run_lock)
    for name, seed in zip(names, seeds):
        log_dir = requests[name][1]
        hand_over(pack_dir, f"*-seed{seed}", log_dir)
        record = {"seconds": seconds / len(names), "process_seconds": seconds, "replicas": len(names), "command": shown}
        write_file(log_dir / PACKED, json.dumps(record) + "\n")


def packed_run(log_dir: Path) -> tuple[Path, float, str] | None:
    """(run directory, seconds, command) of a run a pack trained, else None (runner.train trains it)."""
    path = log_dir / PACKED
    if not path.exists():
        return None
    record = json.loads(read_regular(path))
    (run_dir,) = log_dir.glob("tensorboard/*/version_0")
    return run_dir, float(record["seconds"]), str(record["command"])
