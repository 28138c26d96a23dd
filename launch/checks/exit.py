"""How a refused command ends: one `error:` line on stderr naming the option or file and what was expected, and exit
status 2 (argparse's and Hydra's for a usage error), never a traceback. The early checks end here before anything is
imported; so does every user error after the imports (launch/errors.py: `user_errors_as_one_line`)."""

from __future__ import annotations

import sys
from typing import NoReturn

USER_ERROR = 2  # the exit status of a refused run (argparse's, Hydra's)


def exit_with(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(USER_ERROR) from None
