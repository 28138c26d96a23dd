"""Where a run writes and what it is called, for both front ends, and how its directory is kept:

    <log_dir>/{tensorboard,csv}/<name>/version_<N>/   a logged run: events or metrics.csv, hparams.yaml, checkpoints/
    <log_dir>/{hydra,cli,replicas}/<name>/<time>-<pid>/   Hydra's own files, or an unlogged run's or replicated process's

<name> is <base>-<run_tag>: <base> Hydra's run_name or the CLI's <model>-<data>; the tag the model's key settings, then
its estimator's settings off their defaults, then the pixels and likelihood where not the data's own, then in a
multirun each swept setting it does not show otherwise. A run directory is found again from a checkpoint or a SLURM job
id, reserved atomically for a new run, owned by one process at a time, and removed again when the run is refused
before it saved anything (docs/cluster.md, README "Reliability")."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import shlex
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from callbacks.guards.preemption import checkpoint_directory
from checkpoints.errors import CheckpointError
from checkpoints.file_format import held_directories
from common.files import read_regular, resolved_inside, write_file
from common.lightning_files import CSVRunLogger, RunLogger
from common.signatures import constructor_defaults
from launch.checks.configs import CSV, LOGGER_FOLDERS, TENSORBOARD

log = logging.getLogger(__name__)

SLURM_VERSION = "slurm_job_"  # a SLURM job's run: <name>/slurm_job_<id>, found again when the job is requeued
OWNER_FILE = ".owner"  # <run>/.owner names the process that writes the run, while it runs
OWNER_NOTE_WAIT_S = 2.0  # how long a refused writer waits for the owner's note, which follows the owner's lock
# The files a run writes in place in its directory (Lightning's hparams.yaml, LightningCLI's config files, ours), and
# its checkpoint directory: a received run may hold any of them as a link to elsewhere, which a write (or a save and a
# removal there) would follow. Checkpoints themselves are replaced by rename, which replaces a link and follows none.
WRITTEN_IN_PLACE = (OWNER_FILE, "hparams.yaml", "hydra_job.yaml", "config.yaml", "config_*.yaml", "checkpoints")
ELSEWHERE = "resume from a copy of the checkpoint in another directory"  # what a refused resume may do instead


def run_name(base: str, model: Any, datamodule: Any, swept: dict[str, Any] | None = None) -> str:
    """<base>-<the model's run_tag><scoring_tag>[-<key><value>...]: runs of other settings get other directories."""
    tag = model.run_tag + scoring_tag(model, datamodule)
    name = f"{base}-{tag}" if tag else base
    return name + "".join(f"-{key.rsplit('.', 1)[-1]}{value}" for key, value in (swept or {}).items())


PIXELS = {"none": "grey", "static": "static", "dynamic": "dynamic"}  # data.binarize, by its label in a run's name
SCORING_SETTINGS = ("data.binarize", "model.likelihood")  # what scoring_tag shows


def scoring_tag(model: Any, datamodule: Any) -> str:
    """-<pixels> where the data's binarization is not its class's default, then -<likelihood> where the model's is not
    the one the data suits (e.g. vae-mnist-mlp-z32-grey, vae-mnist-mlp-z32-grey-gaussian): runs whose NLLs measure
    different things (nats of binary pixels, of 256 grey levels, a density) never share a name or a comparison."""
    binarize = getattr(datamodule, "binarize", None)
    default = constructor_defaults(type(datamodule)).get("binarize", binarize)
    likelihood = getattr(model, "hparams", {}).get("likelihood")
    suited = getattr(datamodule, "likelihood", likelihood)
    pixels = f"-{PIXELS.get(binarize, binarize)}" if binarize != default else ""
    return pixels + (f"-{likelihood}" if likelihood != suited else "")


def process_dir(log_dir: str, kind: str, name: str) -> str:
    """<log_dir>/<kind>/<name>/<date>_<time>-<pid>, placed: the layout of Hydra's own run directories."""
    return placed(log_dir, kind, f"{log_dir}/{kind}/{name}/{time.strftime('%Y-%m-%d_%H-%M-%S')}-{os.getpid()}")


def placed(log_dir: str, kind: str, path: str) -> str:
    """`path`, a run's folder below <log_dir>/<kind>, resolved; LeadsOutside when a link leads it out of <log_dir>. A
    folder the user put elsewhere (hydra.run.dir=...) is theirs, and is returned as given."""
    folder = os.path.abspath(f"{log_dir}/{kind}")
    if os.path.commonpath([folder, os.path.abspath(path)]) != folder:
        return path
    return str(resolved_inside(log_dir, path))


def chosen_logger(run: Any, name: str) -> tuple[Any, dict[str, Any] | None]:
    """The logger a run of Hydra's logger group (`run.logger`, `run.log_dir`) is logged by, placed by this layout:
    (False, its settings) for TensorBoard, whose run launch/run_builder.py makes; (a CSV logger of run `name` or of
    the run the checkpoint continues, `run_logger`, None) for logger=csv; (False, None) for logger=none
    (launch/checks/settings.py refuses a class the layout cannot place)."""
    settings = dict(run.logger or {})
    if not settings:
        return False, None
    kind = LOGGER_FOLDERS[settings.pop("_target_")]
    if kind == TENSORBOARD:
        return False, settings
    root = f"{run.log_dir}/{kind}"
    placed(run.log_dir, kind, f"{root}/{name}")  # no link out of <log_dir>
    return run_logger(root, name, run.ckpt_path, **settings), None


def own_run_directory(run_dir: str | os.PathLike, root: str | os.PathLike, new: bool = False) -> None:
    """Make this process the one writer of `run_dir`, or refuse in one line naming the process that is, or a link on
    the way from `root` (its logger's save_dir) that leads outside it (common/files.py: resolved_inside). `new`: make
    `run_dir` here, or FileExistsError (`os.mkdir` succeeds for one process only).

    Two processes resuming one run would replace each other's checkpoints. The owner holds an exclusive `flock` on the
    run directory while it lives; the kernel releases it however the process ends, so a dead owner's lock is simply
    taken over. `<run>/.owner` names the owner for the message. Rank 0 owns a distributed run."""
    if rank_zero_only.rank != 0:
        return
    run_dir = resolved_inside(root, run_dir)
    run_dir.mkdir(parents=True, exist_ok=not new)
    if run_dir in held_directories:
        return
    descriptor = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # first: a live owner's run is in use, whatever it holds
        for entry in os.scandir(run_dir):  # a file the run writes in place as a link (dangling too), or as a folder (a
            # traceback at the first save: the file is never written)
            kind = (f"a link to {os.readlink(entry.path)}" if entry.is_symlink()
                    else "a folder" if entry.is_dir() and entry.name != "checkpoints" else None)
            if kind and any(Path(entry.name).match(pattern) for pattern in WRITTEN_IN_PLACE):
                raise CheckpointError(f"the run {run_dir} holds {entry.name} as {kind}: the run writes a file there, in "
                                      f"place and never through a link; remove it, or {ELSEWHERE}")
    except BaseException as error:
        os.close(descriptor)
        if not isinstance(error, BlockingIOError):
            raise
        raise CheckpointError(f"the run {run_dir} is being written by {read_owner(run_dir / OWNER_FILE)}; a second writer "
                              f"would replace its checkpoints: wait until that process ends, or {ELSEWHERE}") from None
    held_directories.add(run_dir)  # its checkpoint saves (hpc_ckpt_N.ckpt lies here) need no second lock
    write_file(run_dir / OWNER_FILE, f"process {os.getpid()} on {os.uname().nodename}\n")
    atexit.register(lambda: (run_dir / OWNER_FILE).unlink(missing_ok=True))  # safe: this process's own note, no link


def read_owner(path: Path) -> str:
    """The owner's note, as the message shows it: at most a line of a regular file (a received run's `.owner` may be
    a link to a device that never ends, or a pipe that never opens). The owner writes it just after taking the lock,
    so a note not there yet is waited for, up to OWNER_NOTE_WAIT_S."""
    deadline = time.monotonic() + OWNER_NOTE_WAIT_S
    while True:
        try:
            note = "" if path.is_symlink() else " ".join(read_regular(path, 200).decode(errors="replace").split())
        except OSError:  # missing (between the owner's lock and its note), or not a regular file
            note = ""
        if note or time.monotonic() > deadline:
            return note or "another process"
        time.sleep(0.05)


def slurm_job_id() -> str | None:
    """The SLURM job's id (<array job>_<task> in an array) when running as a batch job, else None."""
    if not SLURMEnvironment.detect():
        return None
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array_job else os.environ["SLURM_JOB_ID"]


def run_logger(save_dir: str, name: str, ckpt_path: str | None, **kwargs: Any) -> Any:
    """The run that wrote `ckpt_path` (<log_dir>/<kind>/<name>/<version>/checkpoints/<file>.ckpt) with its own kind
    of logger (CSV's under <log_dir>/csv, else TensorBoard's; `kwargs` then only where the kind is `save_dir`'s), so
    that resuming, validating or testing from it continues that run: one unbroken curve, no new version directory;
    else, in a SLURM job, the job's run (a requeued job continues it); else a new version of run `name` under
    `save_dir` (<log_dir>/<kind>), reserved atomically (`ReservedVersion`)."""
    if "://" not in save_dir:  # one canonical path: a resumed run's checkpoint directory (found from the checkpoint's
        # absolute path) then equals the first's, and best-model tracking goes on; no link leads it out of <log_dir>
        save_dir = str(resolved_inside(Path(save_dir).parent, save_dir))
    kind = Path(save_dir).name
    path = Path(ckpt_path).resolve() if ckpt_path else None
    version = f"{SLURM_VERSION}{slurm_job_id()}" if slurm_job_id() is not None else None  # the job's run; None: a new one
    if path is not None and path.parent.name == "checkpoints" and path.parents[1].name.startswith(("version_", SLURM_VERSION)):
        save_dir, name, version = str(path.parents[3]), path.parents[2].name, path.parents[1].name
        # its kind by its folder (<log_dir>/csv), or, where a logger of one's own put it elsewhere, by what it holds
        found = path.parents[3].name if path.parents[3].name in LOGGERS else \
            TENSORBOARD if any(path.parents[1].glob("events.out.tfevents.*")) else CSV
        if found != kind and rank_zero_only.rank == 0:  # a run keeps its one logger
            log.warning("continuing the %s run that wrote %s in its own logger: this command's %s logger%s to new runs",
                        found, ckpt_path, kind, " and its settings apply" if kwargs else " applies")
        kwargs = kwargs if found == kind else {}  # the settings of another kind of logger
        kind = found
    continued, new = LOGGERS.get(kind, LOGGERS[TENSORBOARD])
    kwargs = {"default_hp_metric": False, **kwargs} if continued is RunLogger else kwargs
    if version is None:
        return new(save_dir, name=name, **kwargs)
    own_run_directory(Path(save_dir) / name / version, save_dir)  # before anything is written there
    # Continuing in its own checkpoint directory is intended: Lightning's warning about it is not news.
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    return continued(save_dir, name=name, version=version, **kwargs)


class ReservedVersion:
    """A logger whose new version directory is reserved with `os.mkdir`, which succeeds for one process only: two runs
    started in the same second get two versions."""
    def _get_next_version(self) -> int:
        version = super()._get_next_version()
        if rank_zero_only.rank != 0:  # other ranks never write here; rank 0's directory is broadcast
            return version
        root_dir = resolved_inside(self.save_dir, self.root_dir)  # the run's name folder: no link out of save_dir
        while True:
            try:  # owned at once, so that no resume writes into it meanwhile
                own_run_directory(root_dir / f"version_{version}", self.save_dir, new=True)
                return version
            except FileExistsError:  # taken since the listing: by a run started at the same time
                version += 1


# Module level, so that ddp_spawn can pickle them.
class ReservedVersionLogger(ReservedVersion, RunLogger):
    pass


class ReservedCSVLogger(ReservedVersion, CSVRunLogger):
    pass


LOGGERS = {TENSORBOARD: (RunLogger, ReservedVersionLogger), CSV: (CSVRunLogger, ReservedCSVLogger)}  # (continued, new)


def run_places(run: Any) -> tuple[Any, str, str | None]:
    """Where a described run (launch/run_builder.py) writes, and what it continues: its logger (a TensorBoard run
    of its own, `run_logger`, unless the front end gives another, or none), the directory of its files when
    it has no logger, and the checkpoint fit starts from (the given one, else, in a requeued SLURM job, the newest
    one its earlier attempt saved)."""
    unlogged_dir = run.output_dir or process_dir(run.log_dir, run.front_end, run.name)
    logger = (run.trainer.get("logger", False) if run.tensorboard is None
              else run_logger(f"{run.log_dir}/{TENSORBOARD}", run.name, run.ckpt_path, **run.tensorboard))
    return logger, unlogged_dir, run.ckpt_path or requeued_job_checkpoint(logger)


def requeued_job_checkpoint(logger: Any) -> str | None:
    """In a SLURM job that was requeued, the newest checkpoint its earlier attempt left in the job's run
    (Lightning's hpc_ckpt_N.ckpt from SIGUSR1, or last.ckpt from SIGTERM or the last save), else None."""
    logger = logger[0] if isinstance(logger, (list, tuple)) and logger else logger  # (several: the first, as Lightning's)
    if slurm_job_id() is None or not getattr(logger, "log_dir", None):
        return None
    run_dir = Path(logger.log_dir)
    found = [*run_dir.glob("hpc_ckpt_*.ckpt"), *run_dir.glob("checkpoints/last.ckpt")]
    return str(max(found, key=lambda p: p.stat().st_mtime)) if found else None


@contextlib.contextmanager
def no_traces_if_refused(logger: Any, refusals: tuple[type[BaseException], ...]) -> Iterator[None]:
    """A run refused before it saved a checkpoint (bad data, an unusable checkpoint, a setting Lightning
    refuses) leaves nothing behind: the TensorBoard run it had just made is removed; when it resumed an
    existing run, the event file this process added goes and the run's config files are put back as they
    were (LightningCLI rewrites config.yaml at setup). A run that saved a checkpoint keeps everything."""
    # fast_dev_run swaps the logger for Lightning's DummyLogger, which has no directory: nothing to clean up then.
    log_dir = getattr(logger, "log_dir", None) if logger and rank_zero_only.rank == 0 else None
    run_dir = Path(log_dir) if log_dir else None
    before = files_of(run_dir)
    kept = {p: p.read_bytes() for p in before if p.suffix == ".yaml"}
    try:
        yield
    except refusals:
        changed = [p for p, mtime in files_of(run_dir).items() if before.get(p) != mtime]
        if run_dir is None or not run_dir.is_dir() or any(p.suffix == ".ckpt" for p in changed):
            raise  # it saved a checkpoint: a run, kept whole
        if not before:  # the run's own new directory: all of it
            remove_with_empty_parents(run_dir)
        for path in changed if before else []:  # a resumed run: what this process added goes, what it rewrote is put back
            if run_dir.resolve() not in path.resolve().parents:
                continue  # reached through a link (files_of lists none)
            if path in kept:
                write_file(path, kept[path])
            elif path not in before:
                path.unlink(missing_ok=True)  # safe: a file (not a link) this process added, inside the run (checked above)
        raise


def files_of(directory: Path | None) -> dict[Path, int]:
    """Every file below `directory`, with its modification time (ns); the owner's note (which goes with its process)
    and links aside: a refused run puts back or removes only the files themselves, never what a link points at."""
    if directory is None or not directory.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file() and not p.is_symlink() and p.name != OWNER_FILE}


def remove_if_only_hydra_files(directory: str, multirun: bool = False) -> None:
    """Remove Hydra's run directory of a refused run: it holds only Hydra's own record (.hydra/, the job's log); in a
    multirun, the sweep's directory too where no other job has left anything (its multirun.yaml alone)."""
    path = Path(directory).resolve()
    if path.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in path.iterdir()):
        remove_with_empty_parents(path)
    if multirun and path.parent.is_dir() and all(p.name == "multirun.yaml" for p in path.parent.iterdir()):
        remove_with_empty_parents(path.parent)


_existing_before: set[Path] = set()  # directories that were there when the process started (`note_existing_directories`)


def note_existing_directories(log_dir: str | os.PathLike) -> None:
    """Remember the directories under `log_dir` (two levels: logs/tensorboard/<name>) and above it that exist when the
    process starts, so that a refused run removes only the directories it made, never an empty one the user made."""
    root = Path(log_dir).resolve()
    _existing_before.update(p for p in (root, *root.parents) if p.is_dir())
    if root.is_dir():  # resolved: a folder a link there leads to is the user's too
        _existing_before.update(p.resolve() for p in (*root.glob("*"), *root.glob("*/*")) if p.is_dir())


def remove_with_empty_parents(path: Path) -> None:
    """Remove `path` and the directories above it that this leaves empty, but none that existed when the process
    started, and never the working directory or above it (a run's own directory lies below them)."""
    path, cwd = path.resolve(), Path.cwd().resolve()
    if path == cwd or path in cwd.parents:
        return
    shutil.rmtree(path, ignore_errors=True)  # safe: resolved; the run directory (or Hydra's) this process made itself
    for parent in path.parents:
        if parent == cwd or parent in _existing_before:
            break
        try:
            parent.rmdir()  # an empty directory only
        except OSError:  # not empty (filled meanwhile by another run), or gone
            break


def run_summary(trainer: Any, stopped: bool = False) -> str | None:
    """One line naming where a run is: its TensorBoard or CSV run directory, its last checkpoint and the command that shows
    it, e.g. `run: logs/tensorboard/jsa-mnist-mlp-K10-L20/version_0 · checkpoint: logs/.../checkpoints/last.ckpt ·
    tensorboard --logdir logs/tensorboard`, and the checkpoint a validate or test scored where it is another (`tested:
    ...`, unless it was `stopped` before its end; paths below the working directory relative to it); None when there is
    nothing to name (no logger directory, no checkpoint), or on another rank than 0."""
    if not trainer.is_global_zero:
        return None
    logger, last = trainer.logger, checkpoint_directory(trainer) / "last.ckpt"
    local = isinstance(logger, (TensorBoardLogger, CSVLogger)) and "://" not in str(logger.save_dir)
    tensorboard = local and isinstance(logger, TensorBoardLogger)
    scored = {"validate": "validated", "test": "tested"}.get(str(trainer.state.fn.value) if trainer.state.fn else "")
    evaluated = trainer.ckpt_path if scored and not stopped else None  # the weights a validate or test scored last
    parts = [local and f"run: {_shown(logger.log_dir)}", last.is_file() and f"checkpoint: {_shown(last)}",
             evaluated and Path(evaluated).is_file() and Path(evaluated).resolve() != last.resolve() and f"{scored}: {_shown(evaluated)}",
             tensorboard and f"tensorboard --logdir {_shown(logger.save_dir)}"]
    return " · ".join(part for part in parts if part) or None


def _shown(path: str | os.PathLike) -> str:
    """`path` relative to the working directory when below it (as a user would type it there), else absolute."""
    path = Path(path).resolve()
    return shlex.quote(str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path))
