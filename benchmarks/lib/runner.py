"""Resumable benchmark runs: each run is a `python train.py ...` subprocess whose finished record is a JSON file.

A study (benchmarks/studies/jsa_study.py, benchmarks/studies/prior_study.py) names its runs and their train.py overrides; `run_pending`
skips the runs whose record exists, and `train` resumes an unfinished run from its last.ckpt (or starts it afresh
when it stopped before its first checkpoint), so an interrupted study continues where it stopped.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import platform
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.lib import markdown
from benchmarks.lib.packing import packed_run, remove_unfinished, run_lock, run_train_py, study_folder
from common.files import open_regular, write_file

REPO = Path(__file__).resolve().parents[2]


def last_checkpoint(log_dir: Path) -> Path | None:
    found = sorted(log_dir.glob("tensorboard/*/version_0/checkpoints/last.ckpt"))
    return found[0] if found else None


def train(name: str, overrides: Sequence[str], log_dir: Path) -> tuple[Path, float, str]:
    """Train (or resume) one run with `log_dir=log_dir`: (its TensorBoard run directory, seconds, the command as shown).

    The study process holds `log_dir` locked while its run trains, and removes an unfinished run only when no process
    holds it or its TensorBoard run: two study processes given the same --logs and run (--only) never remove each
    other's live run; the second says so in one line."""
    log_dir = study_folder(log_dir.parent, log_dir.name)  # no link out of --logs: nothing removed or written there
    packed = packed_run(log_dir)
    if packed is not None:  # trained as a replica of a pack (benchmarks/lib/packing.py)
        return packed
    log_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(name, log_dir):
        ckpt = last_checkpoint(log_dir)
        if ckpt is None:  # stopped before its first checkpoint (or never started): start it afresh, in version_0
            remove_unfinished(name, log_dir)
        seconds, shown = run_train_py(f"run {name}", overrides, log_dir, ckpt)
    (run_dir,) = log_dir.glob("tensorboard/*/version_0")
    return run_dir, seconds, shown


class NotYet(Exception):
    """Raised by a study's run(name) when the run needs records that are not written yet: tried again later."""


def machine() -> str:
    """What a run trained on, kept in its record: the GPU where torch sees one (train.py's accelerator=auto takes it),
    else the processor and its cores (a study may be spread over machines: --only)."""
    import os

    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def made_on(record: dict) -> str:
    """The machine a record was made on (`machine()`, written by `run_pending`), or "machine not recorded"."""
    return record.get("machine", "machine not recorded")


def machine_label(record: dict) -> str:
    """A short name of the machine a record was made on: 'AMD EPYC', 'H200'."""
    return made_on(record).split(",")[0].replace("NVIDIA ", "")


def minutes_by_machine(records: Sequence[dict]) -> str:
    """Mean minutes per run on each machine the records were made on, e.g. '44 (AMD EPYC); 3.1 (H200)'."""
    by: dict[str, list[float]] = {}
    for r in records:
        by.setdefault(machine_label(r), []).append(r["seconds"] / 60)
    means = {label: sum(m) / len(m) for label, m in sorted(by.items())}
    return "; ".join(f"{mean:.{0 if mean >= 10 else 1}f} ({label})" for label, mean in means.items())


def machines_line(records: Sequence[dict]) -> str:
    """Which runs were made on which machine, for a report: a run's numbers do not depend on the machine beyond
    floating-point noise (the same seed gives a different stream on a GPU, as another seed would), its minutes do."""
    by: dict[str, list[str]] = {}
    for r in records:
        by.setdefault(made_on(r), []).append(r["name"])
    return markdown.one_line("Made on: " + "; ".join(f"{machine}: {len(names)} ({', '.join(sorted(names))})" if len(by) > 1 else
                                                    f"{machine}: all {len(names)}" for machine, names in sorted(by.items())) + ".")


def selected(names: Sequence[str], only: Sequence[str] | None) -> list[str]:
    """The names matching any of the shell-style patterns `only` (all of them when it is None)."""
    return list(names) if only is None else [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in only)]


def run_pending(names: Sequence[str], runs_dir: Path, run: Callable[[str], dict], summary: Callable[[dict], str],
                lanes: int = 1, only: Sequence[str] | None = None) -> list[str]:
    """run(name) -> record for every name (matching `only`, see `selected`) without a record in runs_dir/<name>.json,
    in order, `lanes` at a time (each run's torch then gets cores / lanes threads); each record gets the machine it
    was made on. A run that raises NotYet is tried again once another has finished; a failed run lets the running
    ones finish, starts no other, and is raised. Returns the names that still wait for records no run will write
    (the caller reports what exists)."""
    import os
    import threading

    if only is not None and not selected(names, only):
        raise SystemExit(f"--only {','.join(only)}: no planned run matches; the plan's runs: {', '.join(names)}")
    for pattern in only or []:
        if not selected(names, [pattern]):
            print(f"--only: {pattern!r} matches no planned run (yet: the plan may grow as records arrive)", flush=True)
    names = selected(names, only)
    made_on = machine()

    if lanes > 1:  # read by the train.py subprocesses' torch (OMP_NUM_THREADS)
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // lanes))
    number = {name: i for i, name in enumerate(names, 1)}
    pending = []
    for name in names:
        if (runs_dir / f"{name}.json").exists():
            print(f"[{number[name]}/{len(names)}] {name}: done before, skipped", flush=True)
        else:
            pending.append(name)
    state = threading.Condition()
    running: set[str] = set()
    waiting: set[str] = set()  # told NotYet since the last run finished
    failures: list[BaseException] = []

    def next_name() -> str | None:
        """The first pending run that is neither running nor waiting; None when there is nothing left to start."""
        with state:
            while True:
                if failures:
                    return None
                ready = [n for n in pending if n not in running and n not in waiting]
                for name in [n for n in ready if (runs_dir / f"{n}.json").exists()]:  # written meanwhile elsewhere (--only)
                    print(f"[{number[name]}/{len(names)}] {name}: done elsewhere meanwhile, skipped", flush=True)
                    pending.remove(name)
                    ready.remove(name)
                if ready:
                    running.add(ready[0])
                    return ready[0]
                if not running:
                    return None
                state.wait()

    def lane() -> None:
        while (name := next_name()) is not None:
            print(f"[{number[name]}/{len(names)}] {name} ...", flush=True)
            try:
                record = run(name)
            except NotYet as wait:
                print(f"[{number[name]}/{len(names)}] {name}: waits ({wait})", flush=True)
                with state:
                    running.discard(name)
                    waiting.add(name)
                    state.notify_all()
                continue
            except BaseException as failure:  # noqa: BLE001 (a SystemExit from a failed train.py run included)
                with state:
                    failures.append(failure)
                    running.discard(name)
                    state.notify_all()
                return
            record.setdefault("machine", made_on)
            write_file(runs_dir / f"{name}.json", json.dumps(record) + "\n")
            print(f"[{number[name]}/{len(names)}] {name}: {record.get('seconds', 0) / 60:.1f} min" + summary(record), flush=True)
            with state:
                running.discard(name)
                pending.remove(name)
                waiting.clear()  # a new record: the waiting runs may be ready now
                state.notify_all()

    threads = [threading.Thread(target=lane) for _ in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    if pending:
        print(f"{len(pending)} run(s) wait for records no run will write: {', '.join(pending)}", flush=True)
    return pending


def add_is_resolution_arguments(parser: argparse.ArgumentParser, measured: str) -> None:
    """--is-resolution, --is-images, --is-samples and --is-device: the importance-sampled NLL of a study's finished runs
    at several sample counts from their best checkpoints (benchmarks/lib/at_checkpoints.py, measure_finished_runs)."""
    parser.add_argument("--is-resolution", action="store_true", help=f"only measure the IS-NLL of {measured} (no training), then the report")
    parser.add_argument("--is-images", type=int, default=500, help="test images of the IS-NLL measurement (default 500)")
    parser.add_argument("--is-samples", type=counts, default=[100, 1000, 5000],
                        help="importance sample counts of the IS-NLL measurement (default 100,1000,5000)")
    parser.add_argument("--is-device", choices=["cpu", "cuda"], default="cpu",
                        help="where the IS-NLL is measured (default cpu); the draws differ between devices, so a study's "
                             "runs are measured on one: changing it measures them all again")


PACKED_DEFAULT = "1: each run a process of its own"


def add_study_arguments(parser: argparse.ArgumentParser, out: str, logs: str, packed: str = PACKED_DEFAULT) -> None:
    """The options every study of runs under the JSA paper's protocol shares (benchmarks/studies/jsa_study.py, cache/study.py);
    `packed`: what --replicas-per-process does by default (add_run_selection_arguments)."""
    parser.add_argument("--val-every", type=int, default=5, help="validate every this many epochs (the paper: 5)")
    parser.add_argument("--val-samples", type=int, default=100, help="importance samples of val NLL (the paper: 1000)")
    parser.add_argument("--steps-per-epoch", type=int, default=275, help="training steps per epoch (55,000 / 200)")
    parser.add_argument("--out", type=Path, default=Path(out), help="report and run records")
    parser.add_argument("--logs", type=Path, default=Path(logs), help="the runs' TensorBoard logs and checkpoints")
    parser.add_argument("--report-only", action="store_true", help="write the report from the finished runs only")
    add_run_selection_arguments(parser, packed)
    parser.add_argument("extra", nargs="*", help="more train.py overrides for every run (e.g. trainer.limit_train_batches=2)")


def patterns(text: str) -> list[str]:
    """--only's comma-separated patterns, spaces around each dropped; an empty one is refused (argparse's `type`)."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty pattern; give comma-separated names or shell patterns")
    return items


def add_run_selection_arguments(parser: argparse.ArgumentParser, packed: str = PACKED_DEFAULT) -> None:
    """--lanes, --replicas-per-process (`packed`: what it does by default, for its help) and --only, read by run_pending:
    every study of runs takes them (through add_study_arguments, and benchmarks/studies/prior_study.py, whose options
    differ)."""
    parser.add_argument("--lanes", type=int, default=1, help="runs at once, each on cores/lanes threads (default 1)")
    parser.add_argument("--replicas-per-process", type=int, default=1, metavar="N",
                        help="train up to N runs that differ in their seed alone as the replicas of one process "
                             f"(docs/replicas.md; for a GPU; default {packed})")
    parser.add_argument("--only", type=patterns, metavar="PATTERNS",
                        help="run only the planned runs whose names match one of these comma-separated shell patterns "
                             "(e.g. 'mnist-*-s1'), to spread a study over machines; the report covers every record")


def check_study_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, positive: Sequence[str],
                          choices: dict[str, tuple[list[str], list[str]]] | None = None, empty_report: bool = False) -> None:
    """parser.error for a count below 1 (`positive`, by attribute name) or a name outside its choices ({option:
    (given, known)}) or an --out or --logs that is a file; then --out and --logs made absolute, --report-only's records
    checked (none is an error unless `empty_report`: a study whose report says that no run has finished), and
    --out/runs created (no link leading it out of --out)."""
    for name in (*positive, "replicas_per_process"):
        if getattr(args, name, 1) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    for name, (given, known) in (choices or {}).items():
        if set(given) - set(known):
            parser.error(f"--{name}: unknown {', '.join(sorted(set(given) - set(known)))}; choose from {', '.join(known)}")
    check_directory_options(parser, args, ("out", "logs"))
    runs = study_folder(args.out, "runs")
    if args.report_only and not empty_report:
        read_records(args.out, report_only=True)
    runs.mkdir(parents=True, exist_ok=True)


def check_directory_options(parser: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str]) -> None:
    """parser.error for an output option that names a file (or lies under one), before anything is run or written;
    then each option resolved, once (the folders below it are placed with `study_folder`)."""
    for name in names:
        path = getattr(args, name)
        blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            parser.error(f"--{name} {path}: {blocking} is a file; expected a directory to write in")
        setattr(args, name, path.resolve())


MAX_RECORD_BYTES = 64 << 20  # a record with its curves is a few hundred KB


def read_json(path: Path) -> dict:
    """A record (or other JSON object) the studies wrote, or one line naming the file that is not one: checked for kind
    and size before it is read, and parsed without unbounded recursion."""
    try:
        with open_regular(path) as file:
            size = os.fstat(file.fileno()).st_size
            if size > MAX_RECORD_BYTES:
                raise OSError(f"{size} bytes, more than a record's {MAX_RECORD_BYTES}")
            value = json.loads(file.read(MAX_RECORD_BYTES + 1))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise SystemExit(f"{path}: not a readable record ({type(error).__name__}: {error}); delete it to run it again") from None
    if not isinstance(value, dict):
        raise SystemExit(f"{path}: not a record (a JSON object expected, found {type(value).__name__}); delete it to run "
                         "it again")
    return value


def record_problem(record: dict, name: str) -> str | None:
    """Why the record of run `name` (its file's stem) cannot go into a report (None when it can): empty, of another
    kind (a run's record names its run), a field of the wrong type, or a non-finite number where every run of a study
    writes a finite one (a diverged run's NaN test NLL)."""
    if not record:
        return "it is empty"
    if record.get("name") != name:
        return f"its 'name' is {str(record.get('name'))[:60]!r}, not {name!r}: not a run's record (a JSON file of another kind)"
    for key, kind in (("name", str), ("model", str), ("arm", str), ("command", str), ("machine", str), ("seed", int),
                      ("epochs", int), ("seconds", (int, float)), ("test", dict), ("val", dict)):
        if key in record and (not isinstance(record[key], kind) or isinstance(record[key], bool)):
            return f"its {key!r} is a {type(record[key]).__name__}, not a {getattr(kind, '__name__', 'number')}"
    for section in ("test", "val"):
        for key, value in (record.get(section) or {}).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                return f"its {section} {key} is {str(value)[:40]} (a finite number expected: the run diverged, or the file was altered)"
    if isinstance(record.get("seconds"), float) and not math.isfinite(record["seconds"]):
        return "its seconds is not finite"
    return None


def read_records(out: Path, report_only: bool = False, folder: str = "runs") -> dict[str, dict]:
    """Every record under out/<folder> (out/runs: the study's), by run name (the file's stem); one that is not a
    record, or cannot go into a report (`record_problem`), is left out with one line naming it, as if the run had not
    finished. With `report_only`, none is an error (a mistyped --out would otherwise give an empty report)."""
    records = {}
    for path in sorted((out / folder).glob("*.json")):
        try:
            record = read_json(path)
        except SystemExit as refusal:
            print(f"skipped {refusal}", flush=True)
            continue
        problem = record_problem(record, path.stem)
        if problem:
            print(f"skipped {path}: {problem}; delete it to run it again", flush=True)
            continue
        records[path.stem] = record
    if report_only and not records:
        raise SystemExit(f"--report-only: no records under {out / 'runs'}; give the --out the study wrote, or run it first")
    return records


def counts(text: str) -> list[int]:
    """An option's comma-separated positive counts ("1000,5000"), as argparse's `type`: its ValueError reads
    "invalid counts value: '...'"."""
    values = [int(n) for n in text.split(",")]
    if not values or min(values) < 1:
        raise ValueError(text)
    return values


def test_nll(record: dict) -> str:
    """The progress line's summary of a finished run: its test NLL, where it has one."""
    nll = record.get("test", {}).get("nll")
    return f", test NLL {nll:.2f}" if nll is not None else ""



def run_plan(plan: Sequence[tuple], run_job: Callable[..., dict], args: argparse.Namespace,
             train_request: Callable[..., tuple[list[str], Path] | None] | None = None) -> None:
    """Every planned (name, *job) without a record, by `run_pending` under the study's --lanes and --only:
    run_job(name, *job, args) -> record. With --replicas-per-process N > 1, the runs `train_request(name, *job, args)`
    -> (train.py overrides, log_dir) says share a configuration but the seed are first trained N to a process
    (benchmarks/lib/packing.py), the packs `lanes` at a time; run_job then finds their runs trained (None: a run that
    trains alone)."""
    jobs = {name: job for name, *job in plan}
    if getattr(args, "replicas_per_process", 1) > 1 and train_request is not None:
        from concurrent.futures import ThreadPoolExecutor

        from benchmarks.lib.packing import plan_packs, train_pack

        todo = [n for n in selected(list(jobs), args.only) if not (args.out / "runs" / f"{n}.json").exists()]
        requests = {name: train_request(name, *jobs[name], args) for name in todo}
        packs = plan_packs(requests, args.replicas_per_process)
        for pack in packs:
            print(f"pack: {', '.join(pack)} as the replicas of one process", flush=True)
        with ThreadPoolExecutor(max_workers=args.lanes) as lanes:
            for result in [lanes.submit(train_pack, pack, requests, args.logs / "packs", run_lock) for pack in packs]:
                result.result()
    run_pending(list(jobs), args.out / "runs", lambda name: run_job(name, *jobs[name], args), test_nll,
                lanes=args.lanes, only=args.only)
