"""What the user can fix ends in one line on stderr and exit status 2, no traceback: wrong settings, missing or
corrupt data, an unusable checkpoint, a diverged loss, a stuck distributed peer. Both front ends run inside
`user_errors_as_one_line`; anything else is a bug and keeps its traceback. Every other message is one line too
(`quiet_console`)."""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import sys
import traceback
from typing import Iterator, NoReturn

from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf.errors import OmegaConfBaseException

from checkpoints.errors import CheckpointError
from common.files import LeadsOutside, NotARegularFile
from datamodules import DataError
from launch.checks.early import CTRL_C, USER_ERROR, exit_with
from launch.checks.settings import SettingsError


def quiet_console(hydra: bool) -> None:
    """One line per message: no advertising tips; under Hydra, Lightning's messages go through Hydra's
    logging handlers only (Lightning adds its own console handler when imported before Hydra's are set)."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda record: "💡 Tip" not in record.getMessage())
    if hydra:
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True


def collective_timeout_message(error: BaseException) -> str | None:
    """One line naming the collective that timed out (the innermost torch.distributed / DDP frame) and the fix; None
    when `error` is no collective timeout: gloo's "Timed out waiting ... for recv" / "Application timeout caused pair
    closure" and NCCL's watchdog "... collective operation timeout" are raised from inside torch.distributed or DDP
    (any other error that mentions a timeout, say a data loader's, is not one)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "/torch/distributed/" in f.filename or "/torch/nn/parallel/" in f.filename]
    text = str(error).strip()
    if not frames or ("timed out" not in text.lower() and "timeout" not in text.lower()):
        return None
    return (f"a distributed collective timed out in {frames[-1].name} ({frames[-1].filename.split('/torch/', 1)[-1]}): "
            f"{text.splitlines()[0][:200]}. Another process is stuck or died: check the other ranks' logs; raise "
            "ddp_timeout_s (Hydra) or --trainer.strategy=DDPStrategy --trainer.strategy.timeout=H:MM:SS (LightningCLI) "
            "if a rank legitimately works alone for longer")


class StoppedByCtrlC(SystemExit):
    """Ctrl-C outside training's own handling (callbacks/guards/preemption.py saves a checkpoint there): during validate or
    test, or before the first step. Lightning answers KeyboardInterrupt with exit status 1, as if the run had failed;
    this is the shell's 130 (128 + SIGINT), as after Ctrl-C in training."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGINT)


# What refuses a run before it trains: a setting, the data, a checkpoint, a run's file that is not a regular file or a
# run's folder that a link leads out of its root (the user's to fix).
REFUSALS = (DataError, CheckpointError, SettingsError, MisconfigurationException, NotARegularFile, LeadsOutside)


@contextlib.contextmanager
def lightning_exits_as_ours() -> Iterator[None]:
    """Lightning's `sys.exit(1)` after a KeyboardInterrupt (lightning/pytorch/trainer/call.py) as StoppedByCtrlC; a
    setting Lightning refuses only once it knows the data (`val_check_interval`, a ValueError naming it) as the
    SettingsError it is: one line, and the refused run leaves nothing behind (launch/run_builder.py `running`)."""
    try:
        yield
    except SystemExit as stop:
        if stop.code == 1 and isinstance(stop.__context__, KeyboardInterrupt):
            raise StoppedByCtrlC() from None
        raise
    except ValueError as error:
        if not str(error).strip().startswith("`val_check_interval`"):
            raise
        raise SettingsError(" ".join(str(error).split())) from None


def argument_named(message: str) -> str | None:
    """The constructor argument a Lightning refusal names in backticks ("`max_epochs` must be ...", "`mode` can be
    min, max ..."), or None."""
    found = re.search(r"`(\w+)`", message)
    return found[1] if found else None


def diverged(error: BaseException | None) -> bool:
    """Whether `error` stopped a run whose loss or weights became NaN or inf (callbacks/guards/nonfinite.py): a run that
    trained, not a refused setting."""
    return isinstance(error, FloatingPointError) or bool(getattr(error, "nonfinite_message", None))


def divergence_line(error: BaseException) -> str:
    """What a diverged run says: the guard's line, in place of what failed on NaN weights."""
    return getattr(error, "nonfinite_message", None) or str(error)


def refuse_on_rank_zero(message: str) -> NoReturn:
    """A setting refused: every rank of a distributed run meets it alike, and rank 0 alone says so (the others exit with
    the same status). Data, checkpoints and steps may differ between ranks: those refusals are each rank's own."""
    if rank_zero_only.rank != 0:
        raise SystemExit(USER_ERROR)
    exit_with(message)


@contextlib.contextmanager
def user_errors_as_one_line() -> Iterator[None]:
    """Each user error below as its one line and exit status 2; Ctrl-C where no one handles it (a second one, which
    aborts the save the first began: callbacks/guards/preemption.py) as one line and exit status 130."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"error: {CTRL_C}", file=sys.stderr)
        raise StoppedByCtrlC() from None
    except MisconfigurationException as error:  # Lightning refused a trainer or callback setting
        refuse_on_rank_zero(" ".join(str(error).split()))
    except OmegaConfBaseException as error:  # an interpolation that cannot resolve (model.lr='${nope}'), ...
        key = getattr(error, "full_key", None)
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        missing = re.match(r"Interpolation key '([\w.]+)' not found", reason)  # a config of one's own without model.lr
        hint = f"; set {missing[1]} in its config file or on the command line (+{missing[1]}=VALUE)" if missing else ""
        refuse_on_rank_zero(f"{key}: {reason}{hint}" if key else reason + hint)
    except SettingsError as error:
        refuse_on_rank_zero(str(error))
    except REFUSALS as error:
        exit_with(str(error))
    except Exception as error:
        if diverged(error):
            exit_with(divergence_line(error))
        if not isinstance(error, RuntimeError) or (timeout := collective_timeout_message(error)) is None:
            raise
        exit_with(timeout)
