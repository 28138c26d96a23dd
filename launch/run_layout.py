"""Where a run writes and what it is called, for both front ends:

    <log_dir>/{tensorboard,csv}/<name>/version_<N>/   a logged run: events or metrics.csv, hparams.yaml, checkpoints/
    <log_dir>/{hydra,cli,replicas}/<name>/<time>-<pid>/   Hydra's own files, or an unlogged run's or replicated process's

<name> is <base>-<run_tag>: <base> Hydra's run_name or the CLI's <model>-<data>; the tag the model's key settings, then
its estimator's settings off their defaults, then in a multirun each swept setting it does not show otherwise."""

from __future__ import annotations

import os
import pkgutil
import time
from typing import Any

from common.files import resolved_inside

TENSORBOARD = "tensorboard"  # <log_dir>/tensorboard: every TensorBoard run, one `tensorboard --logdir` for all
# The loggers a run's layout places, by class path: each one's folder under <log_dir>.
LOGGER_FOLDERS = {"lightning.pytorch.loggers.TensorBoardLogger": TENSORBOARD, "lightning.pytorch.loggers.CSVLogger": "csv"}


def run_name(base: str, run_tag: str, swept: dict[str, Any] | None = None) -> str:
    """<base>-<run_tag>[-<key><value>...]: runs of other settings get other directories."""
    name = f"{base}-{run_tag}" if run_tag else base
    return name + "".join(f"-{key.rsplit('.', 1)[-1]}{value}" for key, value in (swept or {}).items())


def logger_root(log_dir: str, logger_class: str) -> str:
    """<log_dir>/<the logger's folder>: where the runs of a logger of LOGGER_FOLDERS go."""
    return f"{log_dir}/{LOGGER_FOLDERS[logger_class]}"


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
    (False, its settings) for TensorBoard, whose run launch/run_builder.py makes; (a CSVLogger of run `name`, None) for
    logger=csv; (False, None) for logger=none (launch/checks/settings.py refuses a class the layout cannot place)."""
    settings = dict(run.logger or {})
    if not settings:
        return False, None
    target = settings.pop("_target_")
    if LOGGER_FOLDERS[target] == TENSORBOARD:
        return False, settings
    root = logger_root(run.log_dir, target)
    placed(run.log_dir, LOGGER_FOLDERS[target], f"{root}/{name}")  # no link out of <log_dir>
    return pkgutil.resolve_name(target)(save_dir=root, name=name, **settings), None
