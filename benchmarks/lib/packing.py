"""A study's runs that share a configuration, trained as the replicas of one process (`--replicas-per-process N`,
docs/replicas.md): runs whose train.py overrides differ in `seed=S` alone are packed N at a time into one
`train.py ... replicas.seeds=[...]` process, which fills a GPU that one small run leaves mostly idle.

Each replica's TensorBoard run is then moved to where its run would have trained alone (`<logs>/<name>/tensorboard/`),
beside a `packed.json` saying so, and `runner.train` hands that run over without training it again: the study records,
reports and resumes it as it does any run. An interrupted pack resumes from its process's last.ckpt.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, ContextManager, Sequence

SEED = re.compile(r"^seed=(\d+)$")
PACKED = "packed.json"
REPO = Path(__file__).resolve().parents[2]  # in a run's log_dir: its run was trained in a pack


def configuration(overrides: Sequence[str]) -> tuple[tuple[str, ...], int] | None:
    """(the overrides but the seed, the seed), or None when they do not name exactly one seed."""
    seeds = [o for o in overrides if SEED.match(o)]
    if len(seeds) != 1:
        return None
    return tuple(o for o in overrides if not SEED.match(o)), int(SEED.match(seeds[0]).group(1))


def plan_packs(requests: dict[str, tuple[list[str], Path] | None], size: int) -> list[list[str]]:
    """Packs of at most `size` runs of one configuration (in the given order), of runs not yet trained (no last.ckpt of
    their own, no packed.json); a configuration of one run stays a single run, and so does a run whose request is None
    (the study trains it alone: it starts from another run's checkpoint, or tests after training, which replicas do not)."""
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
    """Train `names` as one replicated process (resuming it if it was interrupted; `run_lock` keeps a second study
    process out of it), then put each replica's run in its run's log_dir with a packed.json (the process's seconds
    shared among its replicas, and its command)."""
    common = configuration(requests[names[0]][0])[0]
    seeds = [configuration(requests[name][0])[1] for name in names]
    pack_dir = packs_dir / f"{names[0]}-x{len(names)}"
    pack_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(f"pack {names[0]} (x{len(names)})", pack_dir):
        resume = sorted(pack_dir.glob("replicas/*/*/checkpoints/last.ckpt"))
        cmd = [sys.executable, str(REPO / "train.py"), *common, f"replicas.seeds=[{','.join(map(str, seeds))}]",
               f"log_dir={pack_dir}"] + ([f"ckpt_path={resume[-1]}"] if resume else [])
        start = time.perf_counter()
        with open(pack_dir / "train.log", "a") as log:
            log.write(f"\n$ {shlex.join(cmd)}\n")
            log.flush()
            done = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"pack of {', '.join(names)} failed (exit {done.returncode}); its output: {pack_dir / 'train.log'}")
    shown = shlex.join(["python", "train.py", *(o.replace(f"{REPO}/", "") for o in cmd[2:-1 if resume else None]
                                               if not o.startswith("log_dir="))])
    for name, seed in zip(names, seeds):
        (run,) = pack_dir.glob(f"tensorboard/*-seed{seed}/version_0")
        log_dir = requests[name][1]
        target = log_dir / "tensorboard" / run.parent.name / "version_0"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(run), str(target))
        record = {"seconds": seconds / len(names), "process_seconds": seconds, "replicas": len(names), "command": shown}
        (log_dir / PACKED).write_text(json.dumps(record) + "\n")


def packed_run(log_dir: Path) -> tuple[Path, float, str] | None:
    """(run directory, seconds, command) of a run a pack trained, else None (runner.train trains it)."""
    path = log_dir / PACKED
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    (run_dir,) = log_dir.glob("tensorboard/*/version_0")
    return run_dir, float(record["seconds"]), str(record["command"])
