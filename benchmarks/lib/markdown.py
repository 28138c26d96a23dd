"""How a value goes into the markdown the benchmarks write (report.md, a study's report, the robustness tables): on
one line, and inside a table cell with its pipes escaped, so that a name from outside (a run folder named with `|`
and a line break, a record's fields) shows as itself and never ends a cell or a row, nor starts one."""

from __future__ import annotations

import re
from typing import Iterable

LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")  # control characters, the line breaks among them


def one_line(value: object) -> str:
    """`value` as text on one line: every control character (a line break, a tab) shown as a space."""
    return LINE_BREAKS.sub(" ", str(value))


def cell(value: object) -> str:
    """`value` as the text of a table cell: on one line, each pipe escaped (GitHub's tables split a row at every pipe
    without a backslash before it, code spans included, and show `\\|` as `|`) with the backslashes before it doubled
    (GitHub reads `\\\\` as one escaped backslash: the pipe of a value's `\\|` would end the cell)."""
    return re.sub(r"(\\*)\|", lambda pipe: 2 * pipe[1] + "\\|", one_line(value))


def table_row(cells: Iterable[object]) -> str:
    """One row of a markdown table, each cell escaped (`cell`)."""
    return "| " + " | ".join(cell(value) for value in cells) + " |"
