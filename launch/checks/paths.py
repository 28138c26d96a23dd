"""The places a command names on disk, checked before anything is imported or written: the checkpoint to start from,
the directories a run writes in (log_dir, the CLI's --trainer.default_root_dir, Hydra's own run and sweep directories,
the run's name under them) and DATA_DIR. A directory given in a LightningCLI config file is known only once the file is
parsed; it goes through the same `write_root_refusal` then (launch/run_builder.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from launch.checks.arguments import option_values, overrides_of, values_of
from launch.checks.defaults import log_dir as default_log_dir

CKPT_NAMES = ("last", "best", "hpc", "registry")  # Lightning's names for a checkpoint of the run (test --ckpt_path=best)
# Hydra writes under these before any of our code runs, and its traceback is all a user would see.
HYDRA_OUTPUT_DIRS = ("hydra.run.dir", "hydra.sweep.dir")


class PathRefusal(ValueError):
    """A path on the command line that the run could not use: the message is the one line the user sees."""


def unwritable(directory: Path) -> str | None:
    """Why nothing can be written under `directory` (read-only, immutable, not permitted), or None. Tried for real
    with a probe directory in its nearest existing ancestor, removed at once: access() cannot see every reason."""
    existing = next((p for p in (directory, *directory.parents) if p.is_dir()), Path.cwd()).resolve()
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=existing))
    except OSError as error:
        return f"{existing} cannot be written to ({error.strerror})"
    return None


def write_root_refusal(option: str, value: str, by_default: bool = False) -> str | None:
    """The one line refusing `option=value` as a directory to write a run under (it, or a parent, is a file; it cannot
    be written to), or None. `by_default`: the user gave nothing and `value` is configs/train.yaml's."""
    if "${" in value or "://" in value:  # an interpolation (Hydra resolves it), a remote filesystem: not judged here
        return None
    path = Path(value)
    blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    refusal = unwritable(path) if blocking is None else None
    if by_default and blocking == path:
        return (f"{value} is a file, not a directory: runs are written under {value}/ in the working directory ({option}, "
                f"the default); move the file, give {option}=DIR, or run elsewhere")
    if blocking is not None:
        return f"{option}={value}: {blocking} is a file, not a directory; expected a directory to write the run in"
    if refusal and by_default:
        return f"{option}={value} (the default): {refusal}; run from a directory you can write to, or give {option}=DIR"
    if refusal:
        return f"{option}={value}: {refusal}; give a directory the run can write to"
    return None


def check_paths(argv: list[str], cli: bool, data_class: str | None) -> None:
    """What a run would find on disk only after the imports, seen now: a checkpoint that does not exist, a directory
    to write in that is a file or read-only, a run name that is a path, and a DATA_DIR that holds nothing (README:
    DATA_DIR points at a copy; a download goes to data.data_dir or ./data). Raises PathRefusal."""
    given = dict(option_values(argv[1:])) if cli else dict(overrides_of(argv))
    ckpt_option = "--ckpt_path" if cli else "ckpt_path"
    for value in (values_of(given.get(ckpt_option) or "", cli) or []) if given.get(ckpt_option) else []:
        path = Path(str(value))
        if value is None or "://" in str(value) or (str(value) in CKPT_NAMES and not path.exists()):
            continue
        if not path.is_file():
            what = ("a directory, not a checkpoint file" if path.is_dir() else
                    "not a regular file (a pipe, socket or device), not a checkpoint file" if path.exists() else "no such file")
            raise PathRefusal(f"{ckpt_option}={value}: {what} (ckpt_path expects a .ckpt file written by a run, e.g. "
                              "logs/tensorboard/<run>/version_0/checkpoints/last.ckpt)")

    run_name = given.get("run_name")
    if not cli and run_name is not None and (not run_name or run_name in (".", "..") or any(sep in run_name for sep in "/\\")):
        # It names directories under log_dir (TensorBoard's run, Hydra's): a path would write outside it.
        raise PathRefusal(f"run_name={run_name}: expected a name (no '/', not '.' or '..'): runs are written under log_dir")
    config_file_given = cli and any(arg in ("-c", "--config") or arg.startswith(("-c=", "--config=")) for arg in argv)
    log_dir_option = "--log_dir" if cli else "log_dir"
    roots = [(option, given.get(option)) for option in (("--trainer.default_root_dir",) if cli else HYDRA_OUTPUT_DIRS)]
    # a config file may set log_dir: then it is checked once parsed (launch/run_builder.py)
    if log_dir_option in given or not config_file_given:
        roots += [(log_dir_option, value) for value in values_of(given.get(log_dir_option) or default_log_dir(), cli) or []]
    for option, value in roots:
        refusal = value is not None and write_root_refusal(option, str(value), option == log_dir_option and option not in given)
        if refusal:
            raise PathRefusal(refusal)

    data_dir_given = any(key.removeprefix("--").replace("init_args.", "") == "data.data_dir" for key in given)
    if "DATA_DIR" not in os.environ or data_dir_given or config_file_given:  # a config file may give data_dir
        return
    data_dir, data = os.environ["DATA_DIR"], data_class or "the data"
    fix = (f"point DATA_DIR at the folder that holds the files of {data} (README: Data), or unset it to download into "
           f"./data ({'--data.data_dir' if cli else 'data.data_dir'}=PATH downloads into PATH)")
    if not data_dir.strip():
        raise PathRefusal(f"DATA_DIR is set but empty; {fix}")
    folder = Path(data_dir).expanduser()
    if not folder.exists():
        raise PathRefusal(f"DATA_DIR={data_dir} does not exist; {fix}")
    try:
        empty = folder.is_dir() and not any(folder.iterdir())
    except PermissionError:
        raise PathRefusal(f"DATA_DIR={data_dir} cannot be read by this user (its permissions); give it read and search "
                          f"permission (chmod u+rx), or {fix}") from None
    if empty:
        raise PathRefusal(f"DATA_DIR={data_dir} is an empty folder; {fix}")
