"""How much of the code is prose, and whether the prose tells history: docstrings (count, lines, those of 8 lines or
more, module docstrings over 10 lines), the share of lines that are not code (blank, comment or docstring), and the
comments and docstrings that cite issues, passes, past behaviour or timings (CONTRIBUTING.md: they say what the code
does and why; history goes in commit messages, measurements in benchmarks/results/).

    python -m benchmarks.tools.docstring_lines              # the product, launch/checks/ apart, and the tests
    python -m benchmarks.tools.docstring_lines --list tests  # every history hit and long docstring under tests/
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("models", "samplers", "datamodules", "callbacks", "checkpoints", "common", "launch", "train.py")
GROUPS = {
    "product": PRODUCT,
    "product-except-checks": PRODUCT,
    "tests": ("tests",),
    "benchmarks": ("benchmarks",),
}
LONG_DOCSTRING, LONG_MODULE_DOCSTRING = 8, 10

# Prose that tells history or a measurement rather than what the code does; searched in comments and docstrings only.
HISTORY = {
    "issue N": r"\bissue \d+",
    "#NN": r"#\d\d\b",
    "pass (issue": r"pass \(issue",
    "ordinal pass": r"\b(third|fourth)\s+pass\b",
    "was": r" was ",
    "used to": r"\bused to\b",
    "no longer": r"\bno longer\b",
    "now": r"\bnow\b",
    "(measured)": r"\(measured\)",
    "timing": r"\b\d+(\.\d+)? ?(s|ms)\b",
}


@dataclass
class Tally:
    files: int = 0
    lines: int = 0
    not_code: int = 0
    docstrings: list[tuple[str, int, int, bool]] = field(default_factory=list)  # (where, first line, lines, module's)
    history: list[tuple[str, str, str]] = field(default_factory=list)  # (pattern, where, text)

    def add_file(self, path: Path, where: str) -> None:
        text = path.read_text()
        lines = text.splitlines()
        prose = {number for number, line in enumerate(lines, 1) if not line.strip()}
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                        and isinstance(first.value.value, str)):
                    span = range(first.lineno, first.end_lineno + 1)
                    prose.update(span)
                    self.docstrings.append((where, first.lineno, len(span), isinstance(node, ast.Module)))
                    self._search(where, first.lineno, first.value.value)
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                self._search(where, token.start[0], token.string)
                if token.line.strip().startswith("#"):
                    prose.add(token.start[0])
        self.files += 1
        self.lines += len(lines)
        self.not_code += len(prose)

    def _search(self, where: str, line: int, text: str) -> None:
        for offset, part in enumerate(text.splitlines()):
            for name, pattern in HISTORY.items():
                if re.search(pattern, part):
                    self.history.append((name, f"{where}:{line + offset}", part.strip()))

    def summary(self) -> dict[str, object]:
        return {
            "files": self.files,
            "lines": self.lines,
            "docstrings": len(self.docstrings),
            "docstring lines": sum(n for _, _, n, _ in self.docstrings),
            f"docstrings >= {LONG_DOCSTRING} lines": sum(n >= LONG_DOCSTRING for _, _, n, _ in self.docstrings),
            f"module docstrings > {LONG_MODULE_DOCSTRING} lines":
                sum(n > LONG_MODULE_DOCSTRING and module for _, _, n, module in self.docstrings),
            "not code (blank, comment, docstring)": f"{self.not_code} ({100 * self.not_code / max(self.lines, 1):.1f} %)",
            "history hits": len(self.history),
        }


def python_files(roots: tuple[str, ...], without_checks: bool) -> list[Path]:
    found = []
    for root in roots:
        path = REPO / root
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            parts = file.relative_to(REPO).parts
            if "results" in parts or (without_checks and parts[:2] == ("launch", "checks")):
                continue
            found.append(file)
    return found


def tally(group: str) -> Tally:
    result = Tally()
    for path in python_files(GROUPS[group], without_checks=group == "product-except-checks"):
        result.add_file(path, str(path.relative_to(REPO)))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", choices=sorted(GROUPS), metavar="GROUP",
                        help=f"also list the long docstrings and history hits of one group ({', '.join(GROUPS)})")
    args = parser.parse_args(argv)
    for group in GROUPS:
        counts = tally(group)
        history = {name: sum(hit[0] == name for hit in counts.history) for name in HISTORY}
        print(f"## {group}")
        for name, value in counts.summary().items():
            print(f"  {name}: {value}")
        print("  history by pattern: " + ", ".join(f"{name} {n}" for name, n in history.items() if n))
        if args.list == group:
            for where, line, n, module in sorted(counts.docstrings):
                if n >= LONG_DOCSTRING:
                    print(f"    {where}:{line}: {n} lines{' (module)' if module else ''}")
            for name, where, text in counts.history:
                print(f"    {where}: [{name}] {text}")


if __name__ == "__main__":
    main()
