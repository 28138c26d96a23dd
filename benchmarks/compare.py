"""The comparison report: one table and a few plots from the TensorBoard runs of several models.

    python -m benchmarks.compare logs/tensorboard [--out reports/compare] [--runs GLOB ... | --all]

Every directory under the roots that holds TensorBoard event files is a run. The report compares the runs of the
latest multirun (by a run's hydra_job.yaml, Hydra's directories or the process that wrote it: `place_runs`), those
whose path matches `--runs GLOB` (`'jsa-*'`, `'*/version_0'`, a run name), or `--all`, and lists every run found with
why it was left out, if it was. Written to --out: `report.md` (`write_report`), `val_nll.png` (against step and wall
time) and `reconstructions.png` (runs of at least MIN_STEPS_FOR_RECONSTRUCTIONS steps)."""

from __future__ import annotations

import argparse
import fnmatch
import io
import math
import os
import re
import signal
import statistics
import textwrap
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader, RawEventFileLoader  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402

from benchmarks.lib import runner  # noqa: E402
from benchmarks.lib import markdown  # noqa: E402
from benchmarks.lib.records import read_events  # noqa: E402
from benchmarks.lib.plots import save_figure  # noqa: E402
from common.files import read_regular, write_file  # noqa: E402

BOUND_MODELS = {"VQVAE"}  # whose nll is an upper bound (under its prior), not an estimate
# A run's reconstructions are shown from this many training steps: after the quick comparison's 100, every model
# reconstructs every image as the same blurred average digit, a figure that tells a reader nothing.
MIN_STEPS_FOR_RECONSTRUCTIONS = 1000
TEST_TAGS = ("test/", "hp/test_")  # logged by a test, at the number of steps trained
STOP_TAG = "run/stopped_by_signal"  # the signal's number, at the steps trained (callbacks/guards/preemption.py)
VERSION_PREFIXES = ("version_", "slurm_job_")  # a run's version directory (TensorBoardLogger's, a SLURM job's)
JOB_FILE = "hydra_job.yaml"  # <run>/hydra_job.yaml: the Hydra job that made the run (sweep_dir: its multirun's directory)
STUDY_FILE = "optimization_results.yaml"  # <sweep dir>/...: Hydra's Optuna sweeper writes the best trial's settings there
CLI_CONFIG = "config.yaml"  # <run>/config.yaml: written by LightningCLI's fit (launch/cli_app.py), never by Hydra
OWNER_FILE = ".owner"  # launch/runs/run_directory.py: there while the run's process lives (or after it was killed)
# events.out.tfevents.<unix time>.<host>.<pid>.<n>[suffix], the name torch's (and TensorFlow's) writer gives the file
EVENT_FILE = re.compile(r"^events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)\.(\d+)(?:\..*)?$")
HYDRA_DIR = re.compile(r"^(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2})-(\d+)$")  # configs/train.yaml: ${now:...}-${pid:}
MAX_COLUMNS = 4  # reconstruction panels a row
LABEL_SETTINGS = 3  # differing settings a label names at most
NOT_IN_LABELS = {"data_dir", "eval_chunk_size"}  # settings that do not change what a run is
DERIVED = {"num_params", "effective_batch_size"}  # settings that follow from others: named only when alone


@dataclass
class Run:
    path: Path
    name: str
    hparams: dict
    scalars: dict[str, list[tuple[float, int, float]]]  # tag -> [(wall_time, step, value)]
    reconstructions: bytes | None = None
    reconstructions_stage: str = "test"  # the split the reconstructions are of: "test", or "val" for an untested run
    row: dict[str, str] = field(default_factory=dict)
    label: str = ""  # what the table, legends and panels call it (run_labels); its name until set
    start: float | None = None  # when its first event file was made (unix time)
    root: Path | None = None

    def __post_init__(self) -> None:
        self.label = self.label or self.name

    def last(self, tag: str) -> float | None:
        values = [v for _, _, v in self.scalars.get(tag, []) if math.isfinite(v)]
        return values[-1] if values else None

    @property
    def trained_steps(self) -> int:
        """The training steps it took, 0 if it logged none: Lightning logs a training or validation value at the 0-based
        index of the step just taken, a test's at the number of steps trained (train/loss only every
        trainer.log_every_n_steps: never in a run shorter than that)."""
        return max((step + (not tag.startswith(TEST_TAGS)) for tag, values in self.scalars.items() if tag not in ("epoch", STOP_TAG)
                    for _, step, _ in values), default=0)

    @property
    def stopped_by(self) -> tuple[str, int] | None:
        """(signal name, step) where a SIGTERM or Ctrl-C stopped its training (callbacks/guards/preemption.py logs
        `run/stopped_by_signal` at the steps taken) and no training or validation was logged after it (a resume)."""
        stops = self.scalars.get(STOP_TAG, [])
        fit_steps = [step for tag, values in self.scalars.items() if tag.startswith(("train/", "val/"))
                     for _, step, _ in values]  # logged at the 0-based index of the step just taken
        if not stops or max(fit_steps, default=-1) >= stops[-1][1]:
            return None
        _, step, number = stops[-1]
        return (signal.Signals(int(number)).name if int(number) in signal.valid_signals() else f"signal {number:g}"), step

    def ranked_nll(self) -> tuple[str, float] | None:
        """(split, NLL) where the run has an estimate to rank by (the test one, else the last validation), None for a
        bound (the VQ-VAE's) or no number."""
        if self.hparams.get("model_class") in BOUND_MODELS:
            return None
        for stage in ("test", "val"):
            if self.last(f"{stage}/nll") is not None:
                return stage, self.last(f"{stage}/nll")
        return None


# Likelihoods whose NLLs are one quantity: exact probabilities of the 256 levels of a pixel (docs/likelihoods.md).
SAME_QUANTITY = {"discretized_logistic": "discretized_logistic/categorical", "categorical": "discretized_logistic/categorical"}


def scored_on(run: Run) -> tuple[str, str, str]:
    """What a run's NLL measures: its data set as run names say it (its data class's `config_name`, mnist; the run
    name's <data> where the run predates `data_class`), pixels (binarized or grey) and likelihood. Nats of binary
    pixels, of 256 grey levels and the Gaussian's bound through dequantized pixels are not one quantity; the
    discretized logistic's and the categorical's are (`SAME_QUANTITY`)."""
    import datamodules  # (torch and Lightning: only once runs are compared)

    parts = name_and_version(run)[0].rsplit("/", 1)[-1].split("-")
    data_class = str(run.hparams.get("data_class") or "")
    # one's own class: its run names use its class name (datamodules/base.py `config_name`)
    data = getattr(getattr(datamodules, data_class, None), "config_name", data_class.lower()) if data_class else \
        (parts[1] if len(parts) > 1 else "?")
    likelihood = str(run.hparams.get("likelihood", "?"))
    return data, str(run.hparams.get("binarize", "?")), SAME_QUANTITY.get(likelihood, likelihood)


def ranked(runs: list[Run]) -> tuple[list[Run], dict[int, str]]:
    """The runs by NLL, lowest first (the tested ones before those scored on validation only, then the bounds and the
    runs without a number), and each one's rank: "1 (best)", "2", ...; "—" for a run that is not ranked. Only runs
    scored on one quantity are ranked together (`scored_on`): those of the most runs where the runs differ."""
    def key(run: Run) -> tuple[int, float]:
        scored = run.ranked_nll()
        if scored is not None:
            return (0 if scored[0] == "test" else 1), scored[1]
        bound = run.last("test/nll") if run.last("test/nll") is not None else run.last("val/nll")
        return (2, bound) if bound is not None else (3, 0.0)

    order = sorted(runs, key=key)
    # The tested runs are ranked among themselves (a run scored on validation only is not their peer), or, where none
    # was tested, the validated ones.
    ranked_split = next((run.ranked_nll()[0] for run in order if run.ranked_nll()), None)
    peers = [run for run in order if run.ranked_nll() and run.ranked_nll()[0] == ranked_split]
    most = Counter(scored_on(run) for run in peers).most_common(1)
    peers = [run for run in peers if scored_on(run) == most[0][0]] if most else []
    ranks = {id(run): "—" for run in order}
    ranks.update({id(run): "1 (best)" if place == 1 else str(place) for place, run in enumerate(peers, start=1)})
    return order, ranks


def find_runs(roots: list[Path]) -> list[Path]:
    dirs = {p.parent for root in roots for p in root.rglob("events.out.tfevents.*")}
    if not dirs:
        raise SystemExit(f"no TensorBoard event files under {', '.join(map(str, roots))}")
    return sorted(dirs)


# ---- which runs: the latest multirun, --runs GLOB, or --all ---------------------------------------------------


@dataclass
class Found:
    """A run directory, who made it, and the multirun it belongs to (`group`) or what single run it is (`single`)."""

    root: Path
    path: Path
    rel: str  # the run directory relative to its root
    start: float  # when its first event file was made
    process: str  # "process <pid> on <host>": the one that made it
    pid: int | None
    group: str | None = None  # its multirun: a Hydra sweep directory, or a process that made several runs
    single: str = ""  # for a run of no multirun: what it is
    busy: bool = False  # its .owner file remains: still running, or interrupted

    @property
    def name(self) -> str:
        """The run's name: the directory above its version directory (train.py: <model>-<data>-<settings>)."""
        return self.path.parent.name if self.path.name.startswith(VERSION_PREFIXES) else self.path.name


@dataclass
class HydraProcess:
    """A Hydra process's output directory: `<log_dir>/hydra/multirun/<stamp>-<pid>` or `<log_dir>/hydra/<name>/<stamp>-<pid>`."""

    path: Path
    start: float
    pid: int
    multirun: bool
    jobs: set[str]  # the run names of its jobs (a multirun's <n>-<run_name> subdirectories), each a prefix of its runs' names


def origin(path: Path) -> tuple[float, str, int | None]:
    """(start time, host, pid) of the process that made a run: the one named by its first event file."""
    made = []
    for file in path.glob("events.out.tfevents.*"):
        match = EVENT_FILE.match(file.name)
        made.append((int(match[1]), int(match[4]), match[2], int(match[3])) if match else (file.stat().st_mtime, 0, "?", None))
    start, _, host, pid = min(made, key=lambda m: m[:2])
    return float(start), host, pid


def hydra_start(name: str) -> tuple[float, int] | None:
    """(start time, pid) of the Hydra process whose output directory is named `name` (<date>_<time>-<pid>), else None."""
    match = HYDRA_DIR.match(name)
    if not match:
        return None
    try:
        return time.mktime(time.strptime(match[1], "%Y-%m-%d_%H-%M-%S")), int(match[2])  # Hydra's ${now:} is local time
    except (ValueError, OverflowError):
        return None


def hydra_processes(root: Path) -> list[HydraProcess]:
    """Hydra's output directories of the log_dir that holds `root` (logs/tensorboard -> logs/hydra)."""
    resolved = root.resolve()
    hydra = next((d / "hydra" for d in (resolved, *resolved.parents[:2]) if (d / "hydra").is_dir()), None)
    if hydra is None:
        return []
    processes = []
    for group in (g for g in hydra.iterdir() if g.is_dir()):
        for directory in (d for d in group.iterdir() if d.is_dir()):
            started = hydra_start(directory.name)
            if started is None:
                continue
            multirun = group.name == "multirun"
            jobs = {j.name.split("-", 1)[1] for j in directory.iterdir() if j.is_dir() and re.match(r"\d+-.", j.name)} if multirun else {group.name}
            processes.append(HydraProcess(directory, *started, multirun, jobs))
    return processes


def hydra_process_of(run: Found, processes: list[HydraProcess]) -> HydraProcess | None:
    """The Hydra process that made `run`: its pid, started before it (the latest such: a pid is used again in
    time), with a job whose run name begins the run's name (where the directory names its jobs)."""
    fits = [p for p in processes if p.pid == run.pid and p.start <= run.start + 1
            and (not p.jobs or any(run.name == job or run.name.startswith(job + "-") for job in p.jobs))]
    return max(fits, key=lambda p: p.start) if fits else None


def shown(path: str | os.PathLike) -> str:
    """A path as the report shows it: relative to the working directory where it lies under it."""
    path = Path(path).resolve()
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()


def read_job_file(path: Path) -> dict | None:
    """<run>/hydra_job.yaml as written by the training code (paths as strings, the job's number), else None: a file
    that is not one (a pipe, too large, aliases that expand without bound, nested too deep, values of other types) is
    left out with one line naming it."""
    from launch.checks.received_config import ConfigRefusal, composed

    file = path / JOB_FILE
    if not file.exists():
        return None
    try:
        composed(file, f"job file {file}")  # kind, size and alias expansion, before anything is built
        job = yaml.safe_load(read_regular(file).decode(errors="replace"))
    except (ConfigRefusal, OSError, yaml.YAMLError, RecursionError) as error:
        print(f"skipped {file}: {' '.join(str(error).split())[:200] or type(error).__name__}", flush=True)
        return None
    kinds = {"output_dir": str, "sweep_dir": str, "job_num": int}
    if not isinstance(job, dict) or any(key in job and not isinstance(job[key], kind) for key, kind in kinds.items()):
        print(f"skipped {file}: not a job file (a mapping of output_dir, sweep_dir: paths, job_num: a number)", flush=True)
        return None
    return job


def made_by(output_dir: str | None, run: Found) -> bool:
    """Whether the Hydra job of `output_dir` (<run>/hydra_job.yaml's) made the run rather than continued it: the job
    writes that file into a run it resumes or tests if the run has none, as into one trained by LightningCLI. A single
    job's directory is named <date>_<time>-<pid> (configs/train.yaml): a job of another pid, or one that started after
    the run's first event file, did not make it. A name that says neither (a multirun's job) is taken at its word."""
    started = hydra_start(Path(output_dir).name) if output_dir else None
    return started is None or (started[1] == run.pid and started[0] <= run.start + 1)


def place_runs(roots: list[Path]) -> list[Found]:
    """Every run under the roots, each with its multirun (or what single run it is), by, in this order:

    1. `<run>/hydra_job.yaml`, where the training code wrote one: its `sweep_dir`, or the single Hydra job that made
       the run (or only resumed or tested it: `made_by`);
    2. Hydra's own directories beside the root (`<log_dir>/hydra/multirun/<date>_<time>-<pid>/<n>-<run_name>`, and
       `<log_dir>/hydra/<run_name>/<date>_<time>-<pid>` for a single run): the process id in the run's first event
       file's name and the run's name tie it to the latest such directory that started before it;
    3. else the process that wrote the run's first event file: the runs one process made are one multirun (Hydra's basic
       launcher runs the jobs one after another in its own process), a process that made one run is a single run.
    A multirun's start is its first run's."""
    found = []
    for root in roots:
        processes = hydra_processes(root)
        for path in find_runs([root]):
            start, host, pid = origin(path)
            rel = path.relative_to(root).as_posix() if path != root else path.name
            process = f"process {pid} on {host}" if pid is not None else "an unknown process"
            run = Found(root, path, rel, start, process, pid, busy=(path / OWNER_FILE).exists())
            job = read_job_file(path)
            hydra = hydra_process_of(run, processes) if job is None else None
            if job is not None and job.get("sweep_dir"):
                run.group = shown(job["sweep_dir"])
            elif job is not None and not made_by(job.get("output_dir"), run):
                run.single = f"{single_run(run)}, resumed or tested later through Hydra ({shown(job['output_dir'])})"
            elif job is not None:
                run.single = f"a single Hydra run ({shown(job['output_dir']) if job.get('output_dir') else run.process})"
            elif hydra is not None and hydra.multirun:
                run.group = shown(hydra.path)
            elif hydra is not None:
                run.single = f"a single Hydra run ({shown(hydra.path)})"
            found.append(run)
    # The rest (no Hydra directory found for them): the runs one process made are one multirun.
    made = Counter(run.process for run in found if run.group is None and not run.single and run.pid is not None)
    for run in found:
        if run.group is None and not run.single:
            if run.pid is not None and made[run.process] > 1:
                run.group = f"the runs of {run.process} (no Hydra directory of it found)"
            else:
                run.single = single_run(run)
    return found


def single_run(run: Found) -> str:
    """What a run that no Hydra job made is: LightningCLI's where its fit wrote <run>/config.yaml, and its process."""
    return f"a single {'LightningCLI ' if (run.path / CLI_CONFIG).exists() else ''}run ({run.process})"


def when(start: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(start))


def matches(run: Found, globs: list[str]) -> bool:
    """Whether a glob matches the run's directory relative to its root, a directory above it (a run name: all
    its versions), or its path as given with the root."""
    parts = run.rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))] + [(run.root / run.rel).as_posix()]
    return any(fnmatch.fnmatchcase(candidate, glob) for glob in globs for candidate in candidates)


@dataclass
class Selection:
    compared: list[tuple[Found, str]]  # (run, why it is compared)
    left_out: list[tuple[Found, str]]  # (run, why it is not)
    summary: str  # one sentence: which runs, chosen how


def select_runs(found: list[Found], globs: list[str] | None = None, everything: bool = False) -> Selection:
    """The runs to compare: those matching one of `globs`; else all (`everything`); else the latest multirun's
    (all runs where there is no multirun). Every other run is kept with the reason it was left out."""
    if everything:
        return Selection([(run, "--all") for run in found], [], "Every run found (--all).")
    if globs:
        chosen = [run for run in found if matches(run, globs)]
        if not chosen:
            raise SystemExit(f"--runs {' '.join(globs)}: no run matches; the runs: {', '.join(run.rel for run in found)}")
        given = " ".join(f"'{glob}'" for glob in globs)
        return Selection([(run, f"matches --runs {given}") for run in chosen],
                         [(run, f"does not match --runs {given}") for run in found if run not in chosen],
                         f"The runs matching --runs {given}.")
    groups: dict[str, list[Found]] = {}
    for run in found:
        if run.group is not None:
            groups.setdefault(run.group, []).append(run)
    if not groups:
        return Selection([(run, run.single) for run in found], [], "No multirun found: every run (--runs GLOB chooses).")
    started = {group: min(run.start for run in runs) for group, runs in groups.items()}
    latest = max(groups, key=started.get)
    left_out = []
    for run in found:
        if run.group is not None and run.group != latest:
            left_out.append((run, f"an earlier multirun, {run.group}, started {when(started[run.group])}"))
        elif run.group is None:
            left_out.append((run, f"{run.single}, started {when(run.start)}: not part of a multirun"))
    others = ("; the other runs found are listed below with why they were left out (--runs GLOB or --all to compare "
              "them)" if left_out else "; no other run was found")
    return Selection([(run, "the latest multirun") for run in groups[latest]], left_out,
                     f"The runs of the latest multirun, {latest} (started {when(started[latest])}){others}.")


# ---- reading a run, labelling it -----------------------------------------------------------------------------


def read_run(path: Path, root: Path) -> Run:
    events = read_events(path, {"scalars": 0, "images": 1})
    tags = events.Tags()
    scalars = {tag: [(e.wall_time, e.step, e.value) for e in events.Scalars(tag)] for tag in tags["scalars"]}
    image, stage = None, "test"
    for stage in ("test", "val"):
        if f"{stage}/reconstructions" in tags["images"]:
            image = events.Images(f"{stage}/reconstructions")[-1].encoded_image_string
            if not reasonable_png(image):
                print(f"skipped the reconstructions of {path}: not a PNG of at most {MAX_PIXELS} pixels", flush=True)
                image = None
            break
    name = str(path.relative_to(root)) if path != root else path.name
    return Run(path, name, read_hparams(path), scalars, image, stage, root=root)


def why_no_scalars(run: Run) -> str:
    """Why a run's events hold no scalar: an event file that does not read to its end (TensorBoard's reader stops
    quietly at the first damaged record), or none logged yet: a run of this collection logs train/* every
    trainer.log_every_n_steps steps (Lightning's default 50) and val/* at a validation, so a shorter run has none."""
    for file in sorted(run.path.glob("events.out.tfevents.*")):
        size = file.stat().st_size
        # A record is its length (8 bytes) and the length's checksum (4), its data, and the data's checksum (4).
        read = sum(len(record) + 16 for record in RawEventFileLoader(str(file)).Load())
        if read < size:
            return f"its event file {file.name} cannot be read past byte {read} of {size} (damaged, or not an event file)"
    if "model_class" not in run.hparams:
        return "its event files hold no scalars and no hyperparameters (not a run of train.py, or one stopped before training)"
    return ("its event files are whole but hold no scalar yet: it has not reached its first log or validation; train it "
            "longer than trainer.log_every_n_steps (50 unless set), or lower that (trainer.log_every_n_steps=5; "
            "LightningCLI: --trainer.log_every_n_steps=5)")


MAX_PIXELS = 1 << 24  # a grid of reconstructions is a few hundred thousand pixels


def reasonable_png(data: bytes) -> bool:
    """Whether `data` is a PNG whose header declares at most MAX_PIXELS (read from the header: a decompression bomb
    declares billions and is never decoded)."""
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return False
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return 0 < width * height <= MAX_PIXELS


HPARAMS_SESSION = "_hparams_/session_start_info"


def read_hparams(run_dir: Path) -> dict[str, object]:
    """The hyperparameters a run wrote for TensorBoard's HPARAMS tab, those of its last session (a resumed run's, with
    the settings it resumed with; TensorBoard's EventAccumulator keeps the first)."""
    sessions = [value.metadata.plugin_data.content for file in sorted(run_dir.glob("events.out.tfevents.*"))
                for event in EventFileLoader(str(file)).Load() for value in event.summary.value if value.tag == HPARAMS_SESSION]
    if not sessions:  # the run wrote no hyperparameters (e.g. not a run of this collection)
        return {}
    hparams = plugin_data_pb2.HParamsPluginData.FromString(sessions[-1]).session_start_info.hparams
    return {name: getattr(value, value.WhichOneof("kind")) for name, value in hparams.items() if value.WhichOneof("kind")}


def name_and_version(run: Run) -> tuple[str, str | None]:
    """("jsa-mnist-mlp-K10-L20", "version_1") of the run jsa-mnist-mlp-K10-L20/version_1."""
    rel = Path(run.name)
    if rel.name.startswith(VERSION_PREFIXES) and len(rel.parts) > 1:
        return rel.parent.as_posix(), rel.name
    return rel.as_posix(), None


def _value(value: object) -> str:
    return "—" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def differing_settings(hparams: list[dict]) -> list[str]:
    """The settings whose values are not the same in all of `hparams` (the derived ones only when nothing else differs)."""
    keys = dict.fromkeys(key for h in hparams for key in h if key not in NOT_IN_LABELS)
    differing = [key for key in keys if len({repr(h.get(key)) for h in hparams}) > 1]
    return [key for key in differing if key not in DERIVED] or differing


def run_labels(runs: list[Run]) -> list[str]:
    """A label per run, no two alike: its name; where runs share a name, each with its version and the settings
    that differ between them (or, where none does, when it started); under several roots, the root where still alike."""
    names = [name_and_version(run) for run in runs]
    labels = [name for name, _ in names]
    counts = Counter(labels)
    for name in (name for name, count in counts.items() if count > 1):
        group = [i for i, label in enumerate(labels) if label == name]
        settings = differing_settings([runs[i].hparams for i in group])
        for i in group:
            extra = [names[i][1]] if names[i][1] else []
            extra += [f"{key}={_value(runs[i].hparams.get(key))}" for key in settings[:LABEL_SETTINGS]]
            extra += ["…"] if len(settings) > LABEL_SETTINGS else []
            if not settings and runs[i].start is not None:
                extra.append(f"started {when(runs[i].start)}")
            labels[i] = f"{name} ({', '.join(extra)})" if extra else name
    counts = Counter(labels)
    return [f"{label} [{run.root}]" if counts[label] > 1 and run.root is not None else label for label, run in zip(labels, runs)]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def eval_samples(run: Run, stage: str) -> str:
    """The importance samples per image behind the run's last NLL of `stage` (test, or val for an untested run): the
    `stage/num_samples` logged with it (callbacks/hparams.py), which a later test of the run may have changed; the
    training's setting for a run that logged none. The estimate tightens as they grow. "—" for the VQ-VAE's bound (a
    point mass: one suffices)."""
    value = logged_with_nll(run, stage, "num_samples")
    value = run.hparams.get(f"{stage}_num_samples") if value is None else value
    return "—" if run.hparams.get("model_class") in BOUND_MODELS or value is None else str(int(value))


def logged_with_nll(run: Run, stage: str, tag: str) -> float | None:
    """The last `stage/tag` value where it was logged at the step of the run's last `stage/nll` (the NLL it goes with),
    else None."""
    nll, logged = run.scalars.get(f"{stage}/nll"), run.scalars.get(f"{stage}/{tag}")
    return logged[-1][2] if nll and logged and logged[-1][1] == nll[-1][1] else None


def eval_images(run: Run, stage: str) -> str:
    """The images the run's last NLL of `stage` is averaged over (`stage/num_images`, models/base.py), "—" where the run
    logged none."""
    value = logged_with_nll(run, stage, "num_images")
    return "—" if value is None else str(int(value))


def table_row(run: Run) -> dict[str, str]:
    model = run.hparams.get("model_class", "?")
    # Runs are named <model>-<data>-<key settings> (train.py: run_name, the model's run_tag).
    run_name = run.path.parent.name if run.path.name.startswith("version_") else run.path.name
    parts = run_name.split("-")
    data, settings = (parts[1] if len(parts) > 1 else "?"), "-".join(parts[2:])
    stage = "test" if run.last("test/nll") is not None else "val"
    mark = " (val)" if stage == "val" else ""
    nll = run.last(f"{stage}/nll")
    uniform_bound = run.last(f"{stage}/nll_uniform_prior")  # a VQ-VAE with a learned prior
    step_times = [v for _, _, v in run.scalars.get("train/step_time_ms", [])]
    epoch_times = [v for _, _, v in run.scalars.get("train/epoch_time_s", [])]
    # Lightning logs the epoch beside every training and validation scalar: the last one seen at such a step is the
    # last epoch trained (the test stage after fit logs the epoch count, one more; train/loss is logged only every
    # log_every_n_steps). An epoch interrupted and finished after a resume has no epoch time (callbacks/speed.py), so
    # counting those would miss it.
    fit_steps = {step for tag in ("train/loss", "val/nll") for _, step, _ in run.scalars.get(tag, [])}
    seen = [v for _, step, v in run.scalars.get("epoch", []) if step in fit_steps]
    epochs = int(max(seen)) + 1 if seen else len(epoch_times)
    return {
        "run": run.label,
        "model": model,
        "data": data,
        "settings": settings,
        "nll (nats)": ("≤ " if model in BOUND_MODELS and nll is not None else "") + _fmt(nll) + mark,
        "S": eval_samples(run, stage),
        "images": eval_images(run, stage),
        "nll, uniform prior": "—" if uniform_bound is None else f"≤ {_fmt(uniform_bound)}{mark}",
        "bpd": ("≤ " if model in BOUND_MODELS and run.last(f"{stage}/bpd") is not None else "") + _fmt(run.last(f"{stage}/bpd"), 4) + mark,
        "recon MSE": _fmt(run.last(f"{stage}/recon_mse"), 4) + mark,
        "PSNR (dB)": _fmt(run.last(f"{stage}/psnr")) + mark,
        "ms/step": _fmt(statistics.median(step_times) if step_times else None),
        "epochs": f"{epochs} (stopped)" if run.stopped_by else str(epochs),
        "params": f"{int(run.hparams['num_params']):,}" if "num_params" in run.hparams else "—",
        "s/epoch": _fmt(statistics.median(epoch_times) if epoch_times else None),
    }


def markdown_table(rows: list[dict[str, str]]) -> str:
    columns = list(rows[0])
    lines = [markdown.table_row(columns), "|" + "---|" * len(columns)]
    lines += [markdown.table_row(row[c] for c in columns) for row in rows]
    return "\n".join(lines)


# ---- the figures ----------------------------------------------------------------------------------------------


def val_nll_rows(runs: list[Run]) -> list[tuple[str, list[Run]]]:
    """The rows of val_nll.png, (what its y axis shows, its runs): the estimates of -log p(x), then, where a bound
    was logged (the VQ-VAE's), the bounds in a row of their own: a bound hundreds of nats above the estimates would
    squeeze them into one line on a shared axis, and it is not the same quantity."""
    plotted = [run for run in runs if any(math.isfinite(p[2]) for p in run.scalars.get("val/nll", []))]
    bounds = [run for run in plotted if run.hparams.get("model_class") in BOUND_MODELS]
    estimates = [run for run in plotted if run not in bounds]
    rows = [("val/nll", estimates)] if estimates or not bounds else []
    return rows + ([("VQ-VAE: upper bound on val/nll", bounds)] if bounds else [])


def minutes_since_start(run: Run, times: Sequence[float]) -> list[float]:
    """`times` (unix seconds) as minutes since the run started: its first event file, made with its logger, so that the
    data's setup, the sanity validation and any compilation count, as a user waits for them (train/loss comes only every
    log_every_n_steps, so its first value would leave out a model's first steps); without one, the first of `times`."""
    start = run.start if run.start is not None else min(times)
    return [(t - start) / 60 for t in times]


def plot_val_nll(runs: list[Run], out: Path) -> list[str]:
    """val/nll against training step and against wall time, a line per run; the bounds apart (val_nll_rows).
    Returns the panels' titles."""
    rows = val_nll_rows(runs)
    fig = plt.figure(figsize=(12, sum(4.2 + 0.25 * math.ceil(len(shown) / 2) for _, shown in rows)), layout="constrained")
    subfigures = fig.subfigures(len(rows), 1, squeeze=False).flat
    titles = []
    for subfigure, (quantity, shown) in zip(subfigures, rows):
        by_step, by_time = subfigure.subplots(1, 2)
        for run in shown:
            points = [p for p in run.scalars["val/nll"] if math.isfinite(p[2])]
            wall, step, value = zip(*points)
            by_step.plot(step, value, marker="o", markersize=3, label=run.label)
            by_time.plot(minutes_since_start(run, wall), value, marker="o", markersize=3, label=run.label)
        for ax, xlabel, by in ((by_step, "training step", "step"), (by_time, "minutes since the run started", "wall time")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"{quantity} (nats per image)" if quantity == "val/nll" else "upper bound (nats per image)")
            ax.set_title(f"{quantity} by {by}")
            ax.grid(alpha=0.3)
            titles.append(ax.get_title())
        if shown:  # below the row's panels, where it hides no curve
            subfigure.legend(*by_step.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8)
    save_figure(fig, out, dpi=100)
    plt.close(fig)
    return titles


def panel_title(run: Run) -> str:
    """The run's label, wrapped to its panel; a run without a test stage shows its last validation images, and says so."""
    return textwrap.fill(run.label, 40) + ("" if run.reconstructions_stage == "test" else "\n(validation images: not tested)")


def figure_title(runs: list[Run]) -> str:
    stages = {run.reconstructions_stage for run in runs}
    split = "test" if stages == {"test"} else "validation" if stages == {"val"} else "test (validation where marked)"
    return f"{split} images (left of each pair) and reconstructions (right)"


def grid_shape(panels: int, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """(rows, columns) for `panels` panels: as few rows as `max_columns` allows, the panels spread evenly over them
    (7 -> 2 x 4, 5 -> 2 x 3, 9 -> 3 x 3)."""
    rows = max(1, math.ceil(panels / max_columns))
    return rows, max(1, math.ceil(panels / rows))


def plot_reconstructions(runs: list[Run], out: Path) -> bool:
    """Writes `out` when a run has reconstructions (returns whether it did; a stale figure of an earlier report is
    removed rather than linked)."""
    shown_runs = [run for run in runs if run.reconstructions is not None]
    if not shown_runs:
        out.unlink(missing_ok=True)  # safe: the report's own figure under the user's --out, never a read run's file
        return False
    rows, columns = grid_shape(len(shown_runs))
    # Constrained layout keeps the figure title above the panel titles, however many lines those take.
    fig = plt.figure(figsize=(3.6 * columns, 3.9 * rows + 0.4), layout="constrained")
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    for ax, run in zip(axes, shown_runs):
        ax.imshow(mpimg.imread(io.BytesIO(run.reconstructions), format="png"))
        ax.set_title(panel_title(run), fontsize=9)
    for ax in axes:
        ax.axis("off")  # the images' pixel axes, and the empty cells of the last row
    fig.suptitle(figure_title(shown_runs))
    save_figure(fig, out, dpi=100)
    plt.close(fig)
    return True


# ---- the report -----------------------------------------------------------------------------------------------


def runs_section(selection: Selection, labels: dict[Path, str], skipped: dict[Path, str],
                 stops: dict[Path, tuple[str, int]]) -> str:
    """A line per run found: compared (as which label) or left out, and why (`skipped`: a chosen run that could not
    be read, or that holds no scalar); a run a signal stopped (`stops`) or one still owned says so."""
    def note(run: Found) -> str:
        if run.path in stops:
            name, step = stops[run.path]
            last = run.path / "checkpoints" / "last.ckpt"
            return (f"; stopped by {name} at step {step}, before its end: resume it from "
                    + (f"`{shown(last)}`" if last.is_file() else "the last.ckpt its log names"))
        return "; still running, or interrupted (its .owner file remains)" if run.busy else ""

    lines = [f"- compared: `{run.rel}` as **{labels[run.path]}**: {why}{note(run)}" if run.path in labels else
             f"- left out: `{run.rel}`: {skipped[run.path]}{note(run)}" for run, why in selection.compared]
    lines += [f"- left out: `{run.rel}`: {why}{note(run)}" for run, why in selection.left_out]
    return "## Runs\n\n" + markdown.one_line(selection.summary) + "\n\n" + "\n".join(map(markdown.one_line, lines))


def tuning_section(found: list[Found]) -> str:
    """A line per Optuna study among the multiruns found (hydra/sweeper=tune): the model it tuned, how many trials,
    the best trial's settings and val NLL (`<sweep dir>/optimization_results.yaml`); '' where there is none."""
    studies: dict[Path, list[Found]] = {}
    for run in found:
        job = read_job_file(run.path) or {}
        if job.get("sweep_dir") and (Path(job["sweep_dir"]) / STUDY_FILE).is_file():
            studies.setdefault(Path(job["sweep_dir"]), []).append(run)
    lines = []
    for sweep_dir, trials in sorted(studies.items(), key=lambda item: min(run.start for run in item[1])):
        try:
            result = yaml.safe_load(read_regular(sweep_dir / STUDY_FILE)) or {}
        except (OSError, yaml.YAMLError):
            continue
        models = ", ".join(sorted({run.name.split("-", 1)[0] for run in trials}))
        settings = ", ".join(f"{key}={_value(value)}" for key, value in (result.get("best_params") or {}).items())
        best = result.get("best_value")
        lines.append(f"- {models}: best val/nll {_fmt(best) if isinstance(best, (int, float)) else best} with {settings or 'its defaults'} "
                     f"({len(trials)} trials; `{shown(sweep_dir / STUDY_FILE)}`)")
    if not lines:
        return ""
    return ("## Tuned settings (Optuna)\n\nThe best trial of each study found, on val/nll (every trial with the same "
            "budget):\n\n" + "\n".join(lines))


def write_report(roots: list[Path], out: Path, runs: list[str] | None = None, everything: bool = False) -> Path:
    """The report of the runs under `roots`: the latest multirun's; those matching a glob of `runs`; or all (`everything`).

    A row per run, sorted by NLL with the best ranked first: model, data, key settings, test NLL (nats) and its
    importance samples per image (S) and the images it averages, bpd, reconstruction MSE, PSNR, ms per training step, epochs trained, parameters,
    seconds per epoch, then what makes a gap noise (one seed per run; rows of other S; barely trained runs). An untested
    run shows its val numbers, marked `(val)`; the VQ-VAE's NLL is an upper bound, marked `≤` (with its learned prior if
    it has one, the uniform-prior bound beside it). Each run is labelled by its name, with its version and differing
    settings (or its start) where two share a name. Then a line per run found, and per Optuna study
    (`hydra/sweeper=tune`) its best trial's settings and val NLL."""
    every_run = place_runs(roots)
    selection = select_runs(every_run, runs, everything)
    tuned = tuning_section(every_run)  # every study found, whichever runs are compared
    compared, skipped = [], {}
    for found, _ in selection.compared:
        try:
            run = read_run(found.path, found.root)
            why = None if run.scalars else why_no_scalars(run)  # a row of dashes otherwise
        except Exception as error:  # noqa: BLE001 (a damaged or crafted event file: TensorBoard's reader fails many ways)
            why = f"its event files cannot be read ({type(error).__name__}: {' '.join(str(error).split())[:400]})"
        if why is not None:
            skipped[found.path] = why
            print(f"skipped {found.path}: {why}", flush=True)
            continue
        run.start = found.start
        compared.append(run)
    stops = {run.path: run.stopped_by for run in compared if run.stopped_by}
    if not compared and selection.compared:
        raise SystemExit("no run could be compared (each is named above); nothing to compare")
    for run, label in zip(compared, run_labels(compared)):
        run.label = label
    compared, ranks = ranked(compared)
    rows = [{"run": row.pop("run"), "rank": ranks[id(run)], **row} for run, row in ((run, table_row(run)) for run in compared)]
    out.mkdir(parents=True, exist_ok=True)
    plot_val_nll(compared, out / "val_nll.png")
    trained = [run for run in compared if run.trained_steps >= MIN_STEPS_FOR_RECONSTRUCTIONS]
    has_reconstructions = plot_reconstructions(trained, out / "reconstructions.png")
    steps = max((run.trained_steps for run in compared), default=0)
    noise = ("Each row is one run of one seed, its NLL an estimate on the test images it was scored on: a gap between "
             "two rows smaller than the spread between seeds of one model is noise; repeat with `seed=0,1,2` before "
             "reading a ranking into a gap of a few nats.")
    images = sorted({int(row["images"]) for row in rows if row["images"] != "—" and not row["nll (nats)"].endswith("(val)")})
    if len(images) > 1:
        noise += (f" The tested NLLs are averages over different numbers of test images ({', '.join(map(str, images))}: "
                  "trainer.limit_test_batches): a gap between such rows is partly which images were scored; compare "
                  "runs tested on the same images.")
    samples = sorted({int(row["S"]) for row in rows if row["S"] != "—"})
    if len(samples) > 1:
        noise += (f" The NLLs are estimated with different numbers of importance samples per image (S = "
                  f"{', '.join(map(str, samples))}): a larger S gives a tighter, lower estimate of the same model, so a "
                  "gap between rows of other S is partly the estimator's; compare runs of one S (model.test_num_samples).")
    first = next((run for run in compared if ranks[id(run)] == "1 (best)"), None)  # its split's runs are the peers
    kinds = {scored_on(run) for run in compared if first and run.ranked_nll() and run.ranked_nll()[0] == first.ranked_nll()[0]}
    if len(kinds) > 1:
        noise += (" These NLLs measure different things (" + markdown.one_line("; ".join(", ".join(kind) for kind in sorted(kinds))) +
                  ": data, pixels, likelihood): only the runs of " + markdown.one_line(", ".join(scored_on(first))) +
                  " are ranked (the kind of the most runs; of the lowest NLL where kinds tie); compare the others in "
                  "a report of their own (--runs GLOB).")
    if steps < MIN_STEPS_FOR_RECONSTRUCTIONS:
        noise += (f" These runs trained for at most {steps} steps: the ranking is of barely trained models (a quick "
                  "check that every model runs), not of the methods.")
    if len(trained) < len(compared):
        noise += (f" Reconstructions are shown for runs of at least {MIN_STEPS_FOR_RECONSTRUCTIONS} training steps "
                  f"({len(compared) - len(trained)} of these are shorter): before that every model reconstructs every "
                  "image as the same blurred average.")
    report = out / "report.md"
    write_file(report,
        "# Comparison\n\n"
        f"Runs under {', '.join(f'`{r}`' for r in roots)}. {selection.summary} Test-split numbers of each run's last test: "
        "run_test's, of the best checkpoint on val/nll, or a later `test --ckpt_path`'s, of the checkpoint it names "
        "(`(val)`: the run was not tested, its last validation numbers). NLL in nats per image, importance-sampled "
        "with the encoder as proposal, S samples per image, averaged over the `images` scored; `≤`: the VQ-VAE's upper bound under its prior over the codes (uniform, or learned: "
        "then the uniform-prior bound stands beside it). "
        "ms/step and s/epoch: medians over training. Sorted by NLL, lowest (best) first; ranked (rank 1 the best) are "
        "the tested runs, or where none was tested the validated ones: a `(val)` number beside tested ones, and the "
        "VQ-VAE's bound, are shown unranked (—). `(stopped)`: a SIGTERM or Ctrl-C stopped its training before its "
        "end (the runs below say where; resume it from its checkpoints/last.ckpt).\n\n"
        + markdown_table(rows)
        + f"\n\n{noise}"
        + (f"\n\n{tuned}" if tuned else "")
        + "\n\n" + runs_section(selection, {run.path: run.label for run in compared}, skipped, stops)
        + "\n\n![val/nll](val_nll.png)\n" + ("\n![reconstructions](reconstructions.png)\n" if has_reconstructions else "")
    )
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", type=Path, help="TensorBoard log directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=Path("reports/compare"), help="where report.md and the PNGs go")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--runs", action="append", metavar="GLOB",
                       help="compare the runs whose directory relative to the root matches GLOB ('jsa-*', '*/version_0'); "
                            "repeatable (default: the runs of the latest multirun)")
    which.add_argument("--all", action="store_true", help="compare every run under the roots")
    args = parser.parse_args(argv)
    runner.check_directory_options(parser, args, ("out",))  # before every event file is read, not after
    for root in args.roots:
        if not root.is_dir():
            parser.error(f"{root}: " + ("a file; expected a directory of TensorBoard runs (e.g. logs/tensorboard)"
                                        if root.exists() else "no such directory"))
    try:
        report = write_report(args.roots, args.out, args.runs, args.all)
    except SystemExit as refusal:  # (what was found, or not: one line, as argparse's)
        if isinstance(refusal.code, str):
            parser.error(refusal.code)
        raise
    text = report.read_text()
    table = next(paragraph for paragraph in text.split("\n\n") if paragraph.startswith("| "))
    studies = text.split("\n\n## Tuned settings", 1)[1].split("\n\n## Runs", 1)[0] if "## Tuned settings" in text else None
    tuned = f"## Tuned settings{studies}\n\n" if studies is not None else ""
    print(table + "\n\n" + tuned + text.split("## Runs\n\n", 1)[1].split("\n\n![", 1)[0])  # the table, studies, the runs found
    written = [report, args.out / "val_nll.png", *[p for p in [args.out / "reconstructions.png"] if p.exists()]]
    print(f"\nwritten: {', '.join(map(str, written))}")


if __name__ == "__main__":
    main()
