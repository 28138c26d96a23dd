"""The verdict at convergence: JSA (500 epochs, its cache read from epoch 300) against RWS, five seeds an arm, under the
JSA paper's protocol, the comparisons fixed here before any run (benchmarks/results/verdict-study/PLAN.md in words).

    python -m benchmarks.studies.verdict_study                     # every run (resumable), then the report
    python -m benchmarks.studies.verdict_study --only 'rws-*'      # the processes of these runs only
    python -m benchmarks.studies.verdict_study --is-resolution     # finished runs' NLL at 1000 and 20,000 samples
    python -m benchmarks.studies.verdict_study --refit-q           # a fresh q for each final decoder, NLL at 5000
    python -m benchmarks.studies.verdict_study --report-only       # the report from the records (none: it says so)
    python -m benchmarks.studies.verdict_study --trunks-only       # JSA's trunks only (a device call: LEASES.md)
    python -m benchmarks.studies.verdict_study --pack-trunks DIR   # the trunks' checkpoints, gzipped in parts, to DIR

Arms train as replicas, a process per group of seeds (JSA: a trunk, then its arms from the trunk's last.ckpt), each
resumable, each finished run moved to `--logs/<run>/` with its record (benchmarks/lib/packing.py)."""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.lib import markdown, packing, runner
from benchmarks.lib.plots import curve_grid
from benchmarks.lib.records import epoch_of, read_curves
from benchmarks.lib.stats import fmt, holm, paired_interval, paired_p, t_threshold, two_sample_p
from benchmarks.studies.cache.study import DIAGNOSTICS
from common.files import read_regular, replacing, write_file

EPOCHS = 500  # the paper's `--epoch 500`
BRANCH_EPOCH = 300  # the paper's `start = 300`: the cache is read from here on
SEEDS = 5
JSA = ["model=jsa", "model.cache_start_epoch=null"]  # the trunk's process and its arms': the cache written, not read

# arm -> (label, the process's train.py overrides after `experiment=jsa_paper`); {branch}: --branch-epoch
ARMS = {
    "jsa-never": ("JSA, no cache", JSA),
    "jsa-cache300": ("JSA, the paper's cache (from epoch {branch}, ρ = 0)", JSA),
    "jsa-cache300-rho0.2": ("JSA, cache from epoch {branch}, ρ = 0.2", JSA),
    "rws": ("RWS", ["model=rws"]),
    "vimco": ("VIMCO", ["model=vimco"]),  # with --vimco only; described, in no pre-registered comparison
}
BRANCHES = ("jsa-never", "jsa-cache300", "jsa-cache300-rho0.2")  # the arms of the process that starts from the trunk
PART_BYTES = 15 * 2**20  # a packed trunk checkpoint's parts: under the 16 MiB a file the device returns


def arm_settings(arm: str, branch_epoch: int) -> dict[str, float | int]:
    """A JSA arm's settings in `replicas.arms` (the model settings its replicas differ in)."""
    return {"jsa-never": {}, "jsa-cache300": {"cache_start_epoch": branch_epoch},
            "jsa-cache300-rho0.2": {"cache_start_epoch": branch_epoch, "cache_refresh": 0.2}}[arm]


def label(arm: str, branch_epoch: int = BRANCH_EPOCH) -> str:
    return ARMS[arm][0].format(branch=branch_epoch)


@dataclass(frozen=True)
class Comparison:
    """One pre-registered difference, a − b (negative: a has the lower NLL, the better model)."""

    a: str
    b: str
    paired: bool  # by seed: b's and a's runs share their first epochs (the trunk)


# Fixed before the runs (PLAN.md): each at both measures, Holm over all of them together.
COMPARISONS = (
    Comparison("rws", "jsa-never", paired=False),
    Comparison("rws", "jsa-cache300", paired=False),
    Comparison("rws", "jsa-cache300-rho0.2", paired=False),
    Comparison("jsa-cache300", "jsa-never", paired=True),
    Comparison("jsa-cache300-rho0.2", "jsa-never", paired=True),
)
MEASURES = ("test NLL, 1000 samples", "NLL, 20000 samples")  # the run's own test; the --is-resolution measurement
REFIT_MEASURE = "NLL, 5000 samples, q refitted"  # --refit-q (benchmarks/lib/refit_q.py): secondary, Holm of its own


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-s{seed}"


def trunk_name(seed: int, branch_epoch: int) -> str:
    return f"jsa-never-s{seed}-to{branch_epoch}"


@dataclass(frozen=True)
class Process:
    """One replicated train.py process: `runs` maps each of its run names to (arm, seed, replica settings)."""

    name: str  # its folder under --logs/processes
    stage: str  # "trunk" (JSA to the branch epoch), "branch" (JSA's arms from the trunk) or "scratch" (RWS, VIMCO)
    overrides: tuple[str, ...]  # train.py overrides, without log_dir and ckpt_path
    runs: tuple[tuple[str, str, int, tuple[tuple[str, float | int], ...]], ...]  # (run, arm, seed, arm settings)
    epochs: int
    trunk: str | None = None  # the process whose last.ckpt this one starts from (its arms branch from it)


def seed_groups(args: argparse.Namespace) -> list[list[int]]:
    size = args.replicas_per_process or args.seeds
    return [list(range(args.seeds))[i:i + size] for i in range(0, args.seeds, size)]


def common(seeds: list[int], epochs: int, args: argparse.Namespace) -> list[str]:
    return ["experiment=jsa_paper", f"replicas.seeds=[{','.join(map(str, seeds))}]", f"trainer.max_epochs={epochs}",
            f"trainer.check_val_every_n_epoch={args.val_every}", f"model.val_num_samples={args.val_samples}"]


def hydra_value(settings: dict) -> str:
    return "{" + ",".join(f"{key}:{value}" for key, value in settings.items()) + "}"


def plan(args: argparse.Namespace) -> list[list[Process]]:
    """The jobs, each a list of processes trained one after the other: per group of seeds, JSA's trunk then its arms;
    RWS (and VIMCO). A job's processes wait for nothing outside it."""
    jobs = []
    for seeds in seed_groups(args):
        group = f"s{seeds[0]}-{seeds[-1]}"
        arms = [arm for arm in BRANCHES if arm in args.arms]
        if arms:
            trunk = Process(f"jsa-trunk-{group}-to{args.branch_epoch}", "trunk",
                            (*common(seeds, args.branch_epoch, args), *JSA, "run_test=false", *args.extra),
                            tuple((trunk_name(s, args.branch_epoch), "jsa-never", s, ()) for s in seeds), args.branch_epoch)
            settings = [arm_settings(arm, args.branch_epoch) for arm in arms]
            branches = Process(f"jsa-arms-{group}-from{args.branch_epoch}", "branch",
                               (*common(seeds, args.epochs, args), *JSA, f"replicas.arms=[{','.join(map(hydra_value, settings))}]",
                                "run_test=true", *args.extra),
                               tuple((run_name(arm, s), arm, s, tuple(arm_settings(arm, args.branch_epoch).items()))
                                     for arm in arms for s in seeds), args.epochs, trunk=trunk.name)
            jobs.append([trunk, branches])
        for arm in ("rws", "vimco"):
            if arm in args.arms:
                jobs.append([Process(f"{arm}-{group}", "scratch", (*common(seeds, args.epochs, args), *ARMS[arm][1], "run_test=true",
                                                                  *args.extra),
                                     tuple((run_name(arm, s), arm, s, ()) for s in seeds), args.epochs)])
    return jobs


def run_names(args: argparse.Namespace) -> list[str]:
    return [run for job in plan(args) for process in job for run, *_ in process.runs]


def sha256(path: Path) -> str:
    """The trunk checkpoint's digest, as the checkpoint files' own checksum computes it (imported here: it brings torch)."""
    from checkpoints.file_format import file_digest

    return file_digest(path)


def replica_dir_name(seed: int, settings: tuple[tuple[str, float | int], ...]) -> str:
    """The glob of a replica's TensorBoard folder in its process (launch/runs/replicas.py: replica_names)."""
    from launch.runs.replicas import replica_names

    return replica_names("*", [seed], [dict(settings)])[0]


def single_command(process: Process, seed: int, settings: tuple[tuple[str, float | int], ...]) -> str:
    """The replica as the train.py command of its single run (what benchmarks/lib/at_checkpoints.py rebuilds it from)."""
    overrides = [o for o in process.overrides if not o.startswith(("replicas.", "run_test="))]
    return " ".join(["python", "train.py", *overrides[:1], f"seed={seed}", *overrides[1:],
                     *(f"model.{key}={value}" for key, value in settings)])


def train_process(process: Process, args: argparse.Namespace, made_on: str) -> None:
    """Train one process (resuming it), then move its replicas' runs to --logs/<run>/ and write each run's record; a
    process whose records all exist is skipped. A branch process starts from its trunk's last.ckpt, the file whose
    sha256 the trunk's records keep."""
    pending = [run for run in process.runs if not (args.out / "runs" / f"{run[0]}.json").exists()]
    if not pending:
        return
    process_dir = packing.study_folder(args.logs, "processes", process.name)
    finished = process_dir / "finished.json"
    start_from, shared = None, None
    if process.trunk is not None:
        trunk_dir = args.logs / "processes" / process.trunk
        start_from = packing.process_checkpoint(trunk_dir) or unpacked_trunk(process.trunk, args)
        shared = {runner.read_json(args.out / "runs" / f"{trunk_name(seed, args.branch_epoch)}.json")["branch_sha256"]
                  for _, _, seed, _ in process.runs}
        if start_from is None or {sha256(start_from)} != shared:
            raise SystemExit(f"{process.name}: its trunk's checkpoint {start_from or trunk_dir} is missing or is not the one "
                             "the trunk's records name; the arms start only from their trunk's: train the trunk again "
                             f"(delete its records and its folder) or restore the file (or its parts in {args.trunk_parts})")
    if not finished.exists():
        print(f"{process.name}: {len(process.runs)} runs as the replicas of one process ...", flush=True)
        seconds, command = packing.train_process(process.name, process.overrides, process_dir, runner.run_lock, start_from)
        write_file(finished, json.dumps({"seconds": seconds, "command": command}) + "\n")
    done = runner.read_json(finished)
    if process.stage == "trunk":
        shared = {sha256(packing.process_checkpoint(process_dir))}
    for name, arm, seed, settings in pending:
        run_dir = packing.hand_over(process_dir, replica_dir_name(seed, settings), args.logs / name)
        record = {"name": name, "arm": arm, "seed": seed, "stage": process.stage, "epochs": process.epochs,
                  "command": single_command(process, seed, settings), "process_command": done["command"],
                  "seconds": done["seconds"] / len(process.runs), "process_seconds": done["seconds"],
                  "replicas": len(process.runs), "machine": made_on, "protocol": protocol(run_dir, args),
                  **read_curves(run_dir, extra_tags=[f"train/{tag}" for tag in DIAGNOSTICS])}
        if shared:
            record["branch_sha256"] = next(iter(shared))  # the trunk checkpoint this run shares with its seed's others
        write_file(args.out / "runs" / f"{name}.json", json.dumps(record) + "\n")
        print(f"{name}: {record['seconds'] / 60:.1f} min" + runner.test_nll(record), flush=True)


def pack_trunks(args: argparse.Namespace, folder: Path) -> list[Path]:
    """Each finished trunk's checkpoint (of the processes --only selects) gzipped into parts of at most PART_BYTES,
    `folder`/<process>.ckpt.gz.00, .01, ...: what a device call returns, so that the arms may train in a later call,
    on another machine (`unpacked_trunk`)."""
    written = []
    for process in (p for job in plan(args) for p in job if p.stage == "trunk"):
        checkpoint = packing.process_checkpoint(args.logs / "processes" / process.name)
        finished = all((args.out / "runs" / f"{run}.json").exists() for run, *_ in process.runs)
        if checkpoint is None or not finished or not runner.selected([run for run, *_ in process.runs], args.only):
            continue  # (a trunk cut by the call's limit resumes on the warm machine: LEASES.md)
        packed = gzip.compress(read_regular(checkpoint), compresslevel=6, mtime=0)
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(0, len(packed), PART_BYTES):
            written.append(folder / f"{process.name}.ckpt.gz.{index // PART_BYTES:02d}")
            write_file(written[-1], packed[index:index + PART_BYTES])
    return written


def unpacked_trunk(trunk: str, args: argparse.Namespace) -> Path | None:
    """The trunk checkpoint `trunk` restored from its parts in --trunk-parts (`pack_trunks`) to --logs/trunks/, if
    they are there; `train_process` then checks it against the digest the trunk's records keep."""
    parts = sorted(args.trunk_parts.glob(f"{trunk}.ckpt.gz.*"))
    if not parts:
        return None
    restored = args.logs / "trunks" / f"{trunk}.ckpt"
    restored.parent.mkdir(parents=True, exist_ok=True)
    try:
        checkpoint = gzip.decompress(b"".join(read_regular(part) for part in parts))
    except (OSError, EOFError, zlib.error) as error:
        raise SystemExit(f"{args.trunk_parts / trunk}.ckpt.gz.*: {len(parts)} parts that are not one whole gzip file "
                         f"({error}); the arms start only from their trunk's checkpoint: fetch its parts again") from None
    with replacing(restored) as file:
        file.write(checkpoint)
    return restored


def protocol(run_dir: Path, args: argparse.Namespace) -> dict:
    """The settings a run trained with, for the report's Protocol line: the study's options and the run's own
    hyperparameters (its hparams.yaml) that the line names."""
    import yaml

    hparams = yaml.safe_load(read_regular(run_dir / "hparams.yaml")) if (run_dir / "hparams.yaml").exists() else {}
    return {"epochs": args.epochs, "branch_epoch": args.branch_epoch, "val_every": args.val_every,
            "val_samples": hparams.get("val_num_samples", args.val_samples), "test_samples": hparams.get("test_num_samples"),
            "batch_size": hparams.get("batch_size"), "overrides": list(args.extra)}


def train_all(args: argparse.Namespace) -> None:
    """Every job (`plan`) with a run matching --only, --lanes at a time (each job's processes in order); a failed job
    lets the others finish, then is raised."""
    import os

    jobs = [[p for p in job if p.stage == "trunk" or not args.trunks_only] for job in plan(args)]
    jobs = [job for job in jobs if job and runner.selected([run for p in job for run, *_ in p.runs], args.only)]
    if args.only and not jobs:
        raise SystemExit(f"--only {','.join(args.only)}: no planned run matches; the plan's runs: {', '.join(run_names(args))}")
    if args.lanes > 1:  # read by the train.py subprocesses' torch
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // args.lanes))
    made_on = runner.machine()

    def run_job(job: list[Process]) -> None:
        for process in job:
            train_process(process, args, made_on)

    with ThreadPoolExecutor(max_workers=args.lanes) as lanes:
        results = [lanes.submit(run_job, job) for job in jobs]
    failures = [result.exception() for result in results if result.exception() is not None]
    if failures:
        raise failures[0]


# ---- the report ---------------------------------------------------------------------------------


def difference(values: dict[str, dict[int, float]], comparison: Comparison) -> tuple[float, float, float, float, int] | None:
    """(mean a − b, 95 % interval low, high, two-sided p, seeds) of one comparison over the seeds measured on both
    sides (paired: the seeds with both runs only); None below two seeds a side."""
    a, b = values.get(comparison.a, {}), values.get(comparison.b, {})
    if comparison.paired:
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            return None
        xs, ys = [a[s] for s in seeds], [b[s] for s in seeds]
        low, high = paired_interval(xs, ys)
        return statistics.mean(xs) - statistics.mean(ys), low, high, paired_p(xs, ys), len(seeds)
    xs, ys = list(a.values()), list(b.values())
    if len(xs) < 2 or len(ys) < 2:
        return None
    mean = statistics.mean(xs) - statistics.mean(ys)
    half = t_threshold(statistics.stdev(xs), len(xs), statistics.stdev(ys), len(ys))
    return mean, mean - half, mean + half, two_sample_p(xs, ys), min(len(xs), len(ys))


def comparison_lines(values_by_measure: dict[str, dict[str, dict[int, float]]], measures: tuple[str, ...] = MEASURES,
                     which: str = "The pre-registered comparisons", branch_epoch: int = BRANCH_EPOCH) -> list[str]:
    """The pre-registered comparisons at every measure of `measures`, Holm-adjusted over all of them (those not yet
    measurable count as not made: the family is the registered one, and the report says how many were made)."""
    rows, p_values = [], []
    for measure in measures:
        for comparison in COMPARISONS:
            result = difference(values_by_measure.get(measure, {}), comparison)
            rows.append((measure, comparison, result))
            p_values.append(result[3] if result else float("nan"))
    adjusted = holm(p_values)
    made = sum(result is not None for *_, result in rows)
    lines = ["", f"{which} ({len(rows)}: {len(COMPARISONS)} differences at {len(measures)} measure{'s' if len(measures) > 1 else ''}; "
             f"{made} made so far), a − b, with the 95 % interval, the two-sided p and the p adjusted by Holm's method over "
             "the comparisons made:", "",
             "| measure | a − b | test | seeds | mean | 95 % interval | p | Holm-adjusted p |", "|---|---|---|---|---|---|---|---|"]
    for (measure, comparison, result), q in zip(rows, adjusted):
        name = f"{label(comparison.a, branch_epoch)} − {label(comparison.b, branch_epoch)}"
        test = "paired by seed" if comparison.paired else "two-sample"
        if result is None:
            lines.append(markdown.table_row([measure, name, test, "–", "not yet measured", "–", "–", "–"]))
            continue
        mean, low, high, p, seeds = result
        lines.append(markdown.table_row([measure, name, test, seeds, f"{mean:+.2f}", f"{low:+.2f} to {high:+.2f}", fmt(p, 3), fmt(q, 3)]))
    return lines


def measured_values(args: argparse.Namespace, records: dict[str, dict]) -> dict[str, dict[str, dict[int, float]]]:
    """measure -> arm -> seed -> NLL: the runs' own test NLL, and the most-sample NLL of is-resolution.json."""
    finished = {name: r for name, r in records.items() if r.get("stage") != "trunk"}
    values: dict[str, dict[str, dict[int, float]]] = {MEASURES[0]: {}}
    for r in finished.values():
        if "nll" in r["test"]:
            values[MEASURES[0]].setdefault(r["arm"], {})[r["seed"]] = r["test"]["nll"]
    path = args.out / "is-resolution.json"
    if path.exists():
        kept = runner.read_json(path)
        most = str(max(kept["settings"]["samples"]))
        values[MEASURES[1]] = {}
        for name, measured in kept["runs"].items():
            if name in finished and most in measured:
                r = finished[name]
                values[MEASURES[1]].setdefault(r["arm"], {})[r["seed"]] = statistics.mean(measured[most]["nll"])
    path = args.out / "refit-q.json"
    if path.exists():
        values[REFIT_MEASURE] = {}
        for name, measured in runner.read_json(path)["runs"].items():
            if name in finished:
                r = finished[name]
                values[REFIT_MEASURE].setdefault(r["arm"], {})[r["seed"]] = statistics.mean(measured["nll"])
    return values


def write_report(args: argparse.Namespace) -> Path:
    """report.md (and commands.txt) from the records under --out/runs, whatever their number (none: it says so)."""
    records = runner.read_records(args.out)
    finished = {name: r for name, r in records.items() if r.get("stage") != "trunk"}
    planned = run_names(args)
    lines = [f"# The verdict at {args.epochs} epochs: JSA with and without the paper's cache against RWS", "",
             *protocol_lines(records, args), "",
             f"Written by `python -m benchmarks.studies.verdict_study` ({len(records)} of {len(planned)} planned runs finished"
             + ("; no run has finished yet" if not records else "") + "). The plan: PLAN.md.", ""]
    if records:
        lines += [runner.machines_line(list(records.values())), ""]
    lines += ["| arm | seeds | test NLL | best val NLL | epoch of best val | min per run (machine) |", "|---|---|---|---|---|---|"]
    for arm in ARMS:
        runs = [r for r in finished.values() if r["arm"] == arm]
        if not runs:
            continue
        test = [r["test"]["nll"] for r in runs if "nll" in r["test"]]
        best = [min(r["curves"]["nll"], key=lambda point: point[1]) for r in runs if r["curves"]["nll"]]
        lines.append(markdown.table_row([label(arm, args.branch_epoch), len(runs), mean_sd(test), mean_sd([b[1] for b in best]),
                                         ", ".join(str(epoch_of(b[0], args.steps_per_epoch)) for b in best),
                                         runner.minutes_by_machine(runs)]))
    trunks = [r for r in records.values() if r.get("stage") == "trunk"]
    if trunks:
        lines += ["", f"The trunks (epochs 1-{args.branch_epoch}, shared by each seed's JSA arms; their minutes are not in the "
                      f"arms' above): {len(trunks)} seeds, {runner.minutes_by_machine(trunks)} min per seed."]
    lines += shared_start_lines(records, args.branch_epoch)
    if finished:
        lines += ["", f"![val NLL and JSA's sampler over the {args.epochs} epochs]({plot(records, args).name})"]
    lines += sample_count_lines(args, records)
    values = measured_values(args, records)
    lines += comparison_lines(values, branch_epoch=args.branch_epoch)
    lines += comparison_lines(values, (REFIT_MEASURE,), "The refit-q check, secondary", args.branch_epoch)
    findings = args.out / "FINDINGS.md"
    if findings.exists():
        lines += ["", read_regular(findings).decode()]
    commands = dict.fromkeys(r["command"] for r in records.values())  # each run's train.py command, once
    write_file(args.out / "commands.txt", "".join(f"{command}\n" for command in commands))
    report = args.out / "report.md"
    write_file(report, "\n".join(lines) + "\n")
    return report


def protocol_lines(records: dict[str, dict], args: argparse.Namespace) -> list[str]:
    """The Protocol line from the settings the records say their runs trained with (`protocol`); before any record,
    the settings asked for; records that differ are listed apart."""
    asked = {"epochs": args.epochs, "branch_epoch": args.branch_epoch, "val_every": args.val_every,
             "val_samples": args.val_samples, "test_samples": None, "batch_size": None, "overrides": list(args.extra)}
    kinds: dict[str, list[str]] = {}
    for name, record in records.items():
        kinds.setdefault(json.dumps(record.get("protocol", asked), sort_keys=True), []).append(name)

    def line(settings: dict) -> str:
        test = f"{settings['test_samples']} samples" if settings["test_samples"] else "the experiment's samples"
        batch = f", batch {settings['batch_size']}" if settings["batch_size"] else ""
        extra = f" {' '.join(settings['overrides'])}" if settings["overrides"] else ""
        return (f"`experiment=jsa_paper{extra}`{batch}, {settings['epochs']} epochs, val NLL from {settings['val_samples']} "
                f"importance samples every {settings['val_every']} epochs, the test NLL from {test} at each run's best "
                f"validation; the JSA arms branch from their seed's trunk at epoch {settings['branch_epoch']}")

    if len(kinds) <= 1:
        settings = json.loads(next(iter(kinds))) if kinds else asked
        return [f"Protocol{'' if kinds else ' (asked for: no run has finished)'}: {line(settings)}."]
    return ["Protocol: the records' settings differ:", "",
            *(f"- {len(names)} runs ({', '.join(sorted(names)[:3])}{', …' if len(names) > 3 else ''}): {line(json.loads(kind))}"
              for kind, names in kinds.items())]


def sample_count_lines(args: argparse.Namespace, records: dict[str, dict]) -> list[str]:
    """Per arm, mean ± sd over seeds of each run's mean NLL at every count of is-resolution.json: whether the
    estimate still falls from the fewest samples to the most."""
    path = args.out / "is-resolution.json"
    if not path.exists():
        return []
    kept = runner.read_json(path)
    counts = [str(k) for k in kept["settings"]["samples"]]
    lines = ["", f"Importance-sampled NLL of the best checkpoints on {kept['settings']['images']} test images, the same "
             "images and seed for every run (`--is-resolution`), mean ± sd over seeds:", "",
             markdown.table_row(["arm", "seeds", *(f"NLL, {k} samples" for k in counts), f"fall from {counts[0]} to {counts[-1]}"]),
             "|---|---|" + "---|" * (len(counts) + 1)]
    for arm in ARMS:
        runs = [kept["runs"][name] for name, r in records.items() if r["arm"] == arm and r.get("stage") != "trunk" and name in kept["runs"]]
        if runs:
            means = {k: [statistics.mean(run[k]["nll"]) for run in runs] for k in counts}
            fall = [a - b for a, b in zip(means[counts[0]], means[counts[-1]])]
            lines.append(markdown.table_row([label(arm, args.branch_epoch), len(runs), *(mean_sd(means[k]) for k in counts),
                                             mean_sd(fall)]))
    return lines


def plot(records: dict[str, dict], args: argparse.Namespace) -> Path:
    """Every run's val NLL and JSA's sampler diagnostics over training (verdict_curves.png): a trunk's curve covers
    epochs 1 to the branch epoch (in the no-cache arm's colour, unlabelled), each arm's own run the epochs after it."""
    path = args.out / "verdict_curves.png"
    arms = list(ARMS)
    finished = [r for r in records.values() if r.get("stage") != "trunk"]
    first_seed = {arm: min(r["seed"] for r in finished if r["arm"] == arm) for arm in {r["arm"] for r in finished}}

    def style(record: dict) -> tuple[str, str | None]:
        shown = record.get("stage") != "trunk" and record["seed"] == first_seed[record["arm"]]
        return f"C{arms.index(record['arm'])}", label(record["arm"], args.branch_epoch) if shown else None

    curve_grid([("MNIST", list(records.values()))], ("nll", *DIAGNOSTICS), style, args.steps_per_epoch, path, nll_span=6.0)
    return path


def shared_start_lines(records: dict[str, dict], branch_epoch: int) -> list[str]:
    """Whether each seed's paired runs share their first epochs: the trunk checkpoint every one of them names."""
    lines = []
    for seed in sorted({r["seed"] for r in records.values() if r.get("branch_sha256")}):
        names = {r["name"]: r["branch_sha256"] for r in records.values() if r["seed"] == seed and r.get("branch_sha256")}
        same = len(set(names.values())) == 1
        lines.append(f"- seed {seed}: {', '.join(sorted(names))} " + (f"share one epoch-{branch_epoch} checkpoint (sha256 "
                     f"{next(iter(names.values()))[:12]}…)" if same else f"name different epoch-{branch_epoch} checkpoints: NOT PAIRED"))
    return ["", "The paired runs' shared start:", "", *lines] if lines else []


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{values[0]:.2f} (1 seed)" if len(values) == 1 else f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"epochs per run (default {EPOCHS}, the paper's)")
    parser.add_argument("--branch-epoch", type=int, default=BRANCH_EPOCH,
                        help=f"the JSA trunk's last epoch, where its arms branch (default {BRANCH_EPOCH}, the paper's); a "
                             "multiple of --val-every (the trunk's last checkpoint is written at a validation)")
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per arm (default {SEEDS})")
    parser.add_argument("--arms", type=lambda text: text.split(","), default=[arm for arm in ARMS if arm != "vimco"],
                        help=f"subset of {','.join(ARMS)} (default all but vimco); the JSA arms are trained together, "
                             "jsa-never and at least one cache arm")
    parser.add_argument("--vimco", action="store_true", help="add the VIMCO arm (described, in no registered comparison)")
    runner.add_is_resolution_arguments(parser, "the finished runs")
    parser.add_argument("--refit-q", action="store_true", help="only refit a fresh q to each finished run's decoder and "
                        "measure its NLL (benchmarks/lib/refit_q.py; --is-device, --is-images), then the report")
    parser.add_argument("--refit-steps", type=int, help="the refit's Adam steps (default: as many as a run trained, "
                        "--epochs × --steps-per-epoch)")
    parser.add_argument("--refit-samples", type=int, default=5000, help="importance samples after the refit (default 5000)")
    parser.add_argument("--trunks-only", action="store_true", help="train JSA's trunks only (their arms in a later "
                        "call: --pack-trunks)")
    parser.add_argument("--pack-trunks", type=Path, metavar="DIR", help="only write each finished trunk's checkpoint to "
                        "DIR, gzipped in parts of 15 MiB (<process>.ckpt.gz.NN), for --trunk-parts of another machine")
    parser.add_argument("--trunk-parts", type=Path, metavar="DIR", help="where an arms process finds its trunk's packed "
                        "checkpoint when the trunk's folder has none (default: --out/trunks)")
    runner.add_study_arguments(parser, out="benchmarks/results/verdict-study", logs="logs/verdict-study",
                               packed="every seed of an arm in one process")
    # The paper's validation (1000 samples), the full test set at 1000 and 20,000 samples, every seed in one process.
    parser.set_defaults(val_samples=1000, is_images=10000, is_samples=[1000, 20000], replicas_per_process=None)
    args = parser.parse_args(argv)
    if args.vimco and "vimco" not in args.arms:
        args.arms.append("vimco")
    args.vimco = "vimco" in args.arms  # --arms naming it asks for it as --vimco does
    args.refit_steps = args.refit_steps if args.refit_steps is not None else args.epochs * args.steps_per_epoch
    args.replicas_per_process = args.replicas_per_process or args.seeds
    args.trunk_parts = args.trunk_parts or args.out / "trunks"
    runner.check_study_arguments(parser, args, ("epochs", "branch_epoch", "seeds", "lanes", "val_every", "val_samples",
                                                "steps_per_epoch", "is_images", "refit_steps", "refit_samples"),
                                 {"arms": (args.arms, list(ARMS))}, empty_report=True)
    if args.epochs <= args.branch_epoch:
        parser.error(f"--epochs must be above --branch-epoch {args.branch_epoch}, got {args.epochs}")
    if args.branch_epoch % args.val_every:
        parser.error(f"--branch-epoch {args.branch_epoch}: expected a multiple of --val-every {args.val_every} (the trunk's "
                     "last checkpoint, where the arms start, is written at a validation)")
    jsa_arms = [arm for arm in BRANCHES if arm in args.arms]
    if jsa_arms and (jsa_arms[0] != "jsa-never" or len(jsa_arms) < 2):
        parser.error(f"--arms {','.join(args.arms)}: the JSA arms branch together from their trunk, jsa-never (the "
                     "comparisons' reference) and at least one cache arm; give jsa-never,jsa-cache300[,jsa-cache300-rho0.2]")
    if args.pack_trunks:
        written = pack_trunks(args, args.pack_trunks)
        print(f"packed trunks: {', '.join(path.name for path in written) or 'none finished'}")
        return
    if args.is_resolution:
        from benchmarks.lib import at_checkpoints  # torch: only for the measurement

        at_checkpoints.measure_finished_runs(args.out, args.logs, lambda record: record.get("stage") != "trunk",
                                             args.is_images, args.is_samples, args.is_device)
    elif args.refit_q:
        from benchmarks.lib import refit_q  # torch: only for the measurement

        refit_q.refit_finished_runs(args.out, args.logs, lambda record: record.get("stage") != "trunk", args.refit_steps,
                                    args.is_images, args.refit_samples, args.is_device)
    elif not args.report_only:
        try:
            train_all(args)
        finally:  # what finished, also when a process failed
            print(f"report: {write_report(args)}")
        return
    print(f"report: {write_report(args)}")


if __name__ == "__main__":
    main()
