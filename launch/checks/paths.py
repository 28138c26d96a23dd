"""The places a command names on disk, checked before anything is imported or written: the checkpoint to start from,
the directories a run writes in (log_dir, the CLI's --trainer.default_root_dir, Hydra's own run and sweep directories,
the run's name under them) and DATA_DIR. A directory given in a LightningCLI config file is known only once the file is
parsed; it goes through the same `write_root_refusal` then (launch/run_builder.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from launch.checks.arguments import option_values, overrides_of, values_of
from launch.checks.configs import log_dir as default_log_dir
from launch.checks.precheck import SettingsError
from launch.checks.received_config import cli_sources

# Lightning's names for a checkpoint of the trainer's own run: each command starts a run of its own, so they name none
CKPT_NAMES = ("last", "best", "hpc", "registry")
# Hydra writes under these before any of our code runs, and its traceback is all a user would see.
HYDRA_OUTPUT_DIRS = ("hydra.run.dir", "hydra.sweep.dir")


class PathRefusal(SettingsError):
    """A path on the command line that the run could not use: the message is the one line the user sees."""


def write_root_refusal(option: str, value: str, by_default: bool = False) -> str | None:
    """The one line refusing `option=value` as a directory to write a run under (it, or a parent, is a file; it cannot
    be written to), or None. `by_default`: the user gave nothing and `value` is configs/train.yaml's. Writing is tried
    for real, with a probe directory in the nearest existing ancestor removed at once: access() cannot see every reason
    (an immutable directory)."""
    if "${" in value or "://" in value:  # an interpolation (Hydra resolves it), a remote filesystem: not judged here
        return None
    path = Path(value)
    blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    why = f"{blocking} is a file, not a directory" if blocking is not None else None
    existing = next((p for p in (path, *path.parents) if p.is_dir()), Path.cwd()).resolve()
    try:
        if why is None:
            os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=existing))
    except OSError as error:
        why = f"{existing} cannot be written to ({error.strerror})"
    fix = f"give {option}=DIR, or run from another directory" if by_default else "give a directory the run can write to"
    return why and f"{option}={value}{' (the default)' if by_default else ''}: {why}; {fix}"


def check_paths(argv: list[str], cli: bool, data_class: str | None) -> None:
    """What a run would find on disk only after the imports, seen now: a checkpoint that does not exist, a directory
    to write in that is a file or read-only, a run name that is a path, and a DATA_DIR that holds nothing (README:
    DATA_DIR points at a copy; a download goes to data.data_dir or ./data). Raises PathRefusal."""
    given, prefix = dict(option_values(argv[1:]) if cli else overrides_of(argv)), "--" if cli else ""

    def values(option: str, default: str | None = None) -> list[str]:  # each value given (a sweep's too), or the default
        text = given.get(option) or default
        return [str(value) for value in (values_of(text, cli) or []) if value is not None] if text else []

    checkpoints = {"ckpt_path": "ckpt_path expects a .ckpt file written by a run, e.g. logs/tensorboard/<run>/version_0/"
                                "checkpoints/last.ckpt",
                   "model.autoencoder_checkpoint": "expected the last.ckpt or best checkpoint of a VQ-VAE run"}
    for option, expected in checkpoints.items():
        for value in values(f"{prefix}{option}"):
            path = Path(value)
            if option == "ckpt_path" and value in CKPT_NAMES and not path.exists():
                raise PathRefusal(f"{prefix}ckpt_path={value}: Lightning's name for a checkpoint of the trainer's own run, "
                                  "and this command starts a new one; give the checkpoint file: logs/tensorboard/<run>/"
                                  "version_N/checkpoints/last.ckpt, or the best one beside it (epoch<E>-step<S>.ckpt)")
            if not ("://" in value or path.is_file()):
                what = ("a directory, not a checkpoint file" if path.is_dir() else
                        "not a regular file (a pipe, socket or device), not a checkpoint file" if path.exists() else "no such file")
                raise PathRefusal(f"{prefix}{option}={value}: {what} ({expected})")
    run_name = None if cli else given.get("run_name")
    if run_name is not None and (run_name in ("", ".", "..") or any(sep in run_name for sep in "/\\")):
        # It names directories under log_dir (TensorBoard's run, Hydra's): a path would write outside it.
        raise PathRefusal(f"run_name={run_name}: expected a name (no '/', not '.' or '..'): runs are written under log_dir")
    config_file_given = cli and any(option == "--config" for option, _ in cli_sources(argv))  # it may give these
    log_dir = f"{prefix}log_dir"
    if given.get(log_dir) is not None and "" in [str(v).strip() for v in values_of(given[log_dir], cli) or []]:
        # Hydra's own directory, ${log_dir}/hydra, would be /hydra; LightningCLI would write under the default instead
        raise PathRefusal(f"{log_dir}={given[log_dir]}: an empty path; give a directory the run can write to")
    for option in [*(["--trainer.default_root_dir"] if cli else HYDRA_OUTPUT_DIRS), log_dir]:
        by_default = option == log_dir and option not in given
        for value in [] if by_default and config_file_given else values(option, default_log_dir() if by_default else None):
            if refusal := write_root_refusal(option, value, by_default):
                raise PathRefusal(refusal)

    if "DATA_DIR" not in os.environ or config_file_given or any(
            key.removeprefix("--").replace("init_args.", "") == "data.data_dir" for key in given):
        return
    data_dir = os.environ["DATA_DIR"]
    folder = Path(data_dir).expanduser()
    try:
        why = (" is set but empty" if not data_dir.strip() else f"={data_dir} does not exist" if not folder.exists() else
               f"={data_dir} is an empty folder" if folder.is_dir() and not any(folder.iterdir()) else None)
    except PermissionError:
        why = f"={data_dir} cannot be read by this user (its permissions): give it read and search permission (chmod u+rx)"
    if why:
        raise PathRefusal(f"DATA_DIR{why}; point DATA_DIR at the folder that holds the files of {data_class or 'the data'} "
                          f"(README: Data), or unset it to download into ./data ({prefix}data.data_dir=PATH downloads into PATH)")
