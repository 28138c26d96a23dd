"""A command line checked before the heavy imports (launch/checks/hydra_check.py, cli_check.py, paths.py), and how a
refused command ends: one `error:` line on stderr naming the option or file and what was expected, and exit status 2
(argparse's and Hydra's for a usage error), never a traceback. Every user error after the imports ends the same way
(launch/errors.py: `user_errors_as_one_line`). What the early checks cannot judge (an interpolation, a list, a quoted
value in a file) passes: the constructors still check everything."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any, NoReturn

from launch.checks.arguments import HYDRA_PRINTS_ONLY, OTHER_TREE, PRINTS_ONLY, hydra_option, option_values, overrides_of
from launch.checks.configs import config_targets, default_choices
from launch.checks.paths import check_paths
from launch.checks.precheck import SettingsError

USER_ERROR = 2  # the exit status of a refused run (argparse's, Hydra's)


# What a stop by signal leaves (checkpoints/file_format.py writes atomically), in the line that says it stopped.
INTACT = "a checkpoint file is replaced only once written whole: the last one saved, if any, is intact"
CTRL_C = f"stopped by Ctrl-C ({INTACT})"  # where no run's handler took it (before training, a second Ctrl-C): exit 130


def exit_with(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    for handler in logging.getLogger().handlers:  # a Hydra job's train.log: the run's own record says how it ended
        if isinstance(handler, logging.FileHandler):
            handler.handle(logging.makeLogRecord({"name": "train", "levelno": logging.ERROR, "levelname": "ERROR",
                                                  "msg": f"error: {message}"}))
    raise SystemExit(USER_ERROR) from None


def exit_on_sigterm() -> None:
    """SIGTERM (how a scheduler stops a job) where Lightning does not take it: while the command starts and builds its
    run, and between fit and test. One line and exit status 143 (128 + SIGTERM), as Ctrl-C gives 130, with the process's
    exit handlers run; the default action ends the process without a word. Inside fit, validate and test Lightning calls
    this handler after its own, and it leaves the signal to them (callbacks/guards/preemption.py saves and stops)."""
    def stop(signum: int, frame: Any) -> None:
        if signal.getsignal(signal.SIGTERM) is stop:
            print(f"error: stopped by SIGTERM ({INTACT})", file=sys.stderr)
            raise SystemExit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)


def data_class_of(argv: list[str], cli: bool) -> str | None:
    """The data module class the command uses (MNISTDataModule), for a message; None where unknown."""
    if cli:
        return (dict(option_values(argv[1:])).get("--data") or "MNISTDataModule").rsplit(".", 1)[-1]
    choice = dict(overrides_of(argv)).get("data") or default_choices().get("data")
    target = config_targets("data").get(choice or "")
    return target.rsplit(".", 1)[-1] if target else None


def refuse_early(argv: list[str], cli: bool) -> str | None:
    """The `error:` line for a mistake seen before the imports, or None (then the full checks decide)."""
    prints_only = any(arg.split("=", 1)[0] in PRINTS_ONLY if cli else hydra_option(arg)[0] in HYDRA_PRINTS_ONLY for arg in argv)
    try:
        if cli:
            from launch.checks.cli_check import check_cli_command as check
        else:
            from launch.checks.hydra_check import check_hydra_command as check
        check(argv, prints_only)
        if not prints_only and (cli or not any(hydra_option(arg)[0] in OTHER_TREE for arg in argv)):
            check_paths(argv, cli, data_class_of(argv, cli))
    except SettingsError as refusal:  # each kind: EarlyRefusal, PathRefusal, ConfigRefusal
        return str(refusal)
    return None
