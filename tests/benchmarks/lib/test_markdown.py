"""benchmarks/lib/markdown.py: a value from outside (a run folder's name, a record's field) stays inside its table
cell, as GitHub's tables read a row, and every table row the benchmarks write is made by `table_row`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from benchmarks.lib import markdown

REPO = Path(__file__).resolve().parents[3]


def github_cells(row: str) -> list[str]:
    """A table row split as GitHub's tables split it (cmark-gfm): at each pipe that no backslash escapes, a backslash
    escaping the character after it; each cell with its `\\|` read as `|`, then its `\\\\` as `\\`, and trimmed."""
    cells, text, escaped = [], "", False
    for char in row.strip()[1:-1]:
        if char == "|" and not escaped:
            cells.append(text)
            text = ""
            continue
        text += char
        escaped = char == "\\" and not escaped
    cells.append(text)
    return [c.replace("\\|", "|").replace("\\\\", "\\").strip() for c in cells]


@pytest.mark.parametrize("name", ["jsa|K10", "jsa-mnist\n| forged | row |", "run\\|name", "run\\\\|x", "tab\there", "end\\"])
def test_a_name_stays_in_its_cell_as_itself(name):
    row = markdown.table_row([name, "83.20", "|"])
    assert "\n" not in row
    assert github_cells(row) == [markdown.one_line(name), "83.20", "|"]


def test_a_study_report_keeps_a_record_named_with_a_pipe_and_a_line_break_in_one_row(tmp_path):
    from benchmarks.studies import prior_study

    forged = "vqvae-mlp\\|s0\n| forged | row | 1 | 2 | 3 |"
    record = {"name": forged, "command": "python train.py model=vqvae\n| forged |", "seconds": 1.0,
              "curves": {"nll": [[10, 90.0]], "nll_uniform_prior": [[10, 95.0]]}, "epoch_time_s": [[10, 1.0]]}
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / f"{forged}.json").write_text(json.dumps(record))
    report = prior_study.write_report(type("Args", (), {"out": tmp_path, "epochs": 1})()).read_text()
    rows = [line for line in report.splitlines() if line.startswith("|")]
    assert len(rows) == 3 and github_cells(rows[2]) == [markdown.one_line(forged), "1", "95.00", "90.00", "5.00"]
    assert not any(line.startswith("| forged") for line in report.splitlines())
    assert [line for line in report.splitlines() if "forged" in line and not line.startswith("|")] == [
        "- `python train.py model=vqvae | forged |`"]  # the command, on its own line


def rows_not_made_by_table_row(path: Path) -> list[int]:
    """Lines of `path` that write a table row by hand: an f-string that starts a row ("| {name} | ..."), or cells
    joined with a pipe."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr) and isinstance(node.values[0], ast.Constant) and str(node.values[0].value).startswith("|"):
            lines.append(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
                and isinstance(node.func.value, ast.Constant) and "|" in str(node.func.value.value)):
            lines.append(node.lineno)
    return lines


def test_every_table_row_the_benchmarks_write_is_escaped_by_table_row():
    by_hand = {str(path.relative_to(REPO)): lines for path in sorted((REPO / "benchmarks").rglob("*.py"))
               if path.name != "markdown.py" and (lines := rows_not_made_by_table_row(path))}
    assert by_hand == {}
