"""The prose count (benchmarks/tools/docstring_lines.py) on a module written for it, where every figure is known."""

from __future__ import annotations

from benchmarks.tools.docstring_lines import Tally, main

SOURCE = '''"""A module docstring of
eleven lines.
3
4
5
6
7
8
9
10
"""

import math  # a comment beside code is code's line


def f():
    """One line."""
    # {history}
    return math.pi


class C:
    """Eleven
    lines
    3
    4
    5
    6
    7
    8
    9
    10
    11"""
'''.replace("{history}", "this step used to take 0.25 s (issue" + " 12)")  # history, as a file would hold it


def test_a_known_module_gives_its_counts(tmp_path):
    path = tmp_path / "module.py"
    path.write_text(SOURCE)
    tally = Tally()
    tally.add_file(path, "module.py")
    summary = tally.summary()
    assert summary["docstrings"] == 3 and summary["docstring lines"] == 11 + 1 + 11
    assert summary["docstrings >= 8 lines"] == 2 and summary["module docstrings > 10 lines"] == 1
    # 11 + 1 + 11 docstring lines, 5 blank, 1 comment-only line, of 33
    assert tally.lines == 33 and summary["not code (blank, comment, docstring)"] == "29 (87.9 %)"
    assert sorted(name for name, _, _ in tally.history) == ["issue N", "timing", "used to"]
    assert {where for _, where, _ in tally.history} == {"module.py:18"}


def test_the_command_prints_every_group(capsys):
    main([])
    printed = capsys.readouterr().out
    for group in ("product", "product-except-checks", "tests", "benchmarks"):
        assert f"## {group}\n" in printed
