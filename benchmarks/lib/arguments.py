"""argparse types the benchmarks' command lines share: a value out of range, an unknown name or a device this machine
lacks is argparse's one `error: argument --option: ...` line, before anything is built, timed or written."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable, Sequence

MODEL_CONFIGS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "model").glob("*.yaml"))  # model=NAME


def integer(at_least: int) -> Callable[[str], int]:
    """An integer >= at_least."""
    return _bounded(int, lambda value: value >= at_least, f"an integer >= {at_least}")


def number(above: float) -> Callable[[str], float]:
    """A finite number > above."""
    return _bounded(float, lambda value: math.isfinite(value) and value > above, f"a finite number > {above:g}")


def _bounded(convert: Callable[[str], Any], accepts: Callable[[Any], bool], expectation: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expectation}") from None
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"{text}: expected {expectation}")
        return value
    return parse


def names(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """A comma-separated subset of `choices` (spaces around each name dropped)."""
    def parse(text: str) -> list[str]:
        given = [name.strip() for name in text.split(",")]
        unknown = [repr(name) for name in given if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
        return given
    return parse


def device(text: str) -> str:
    """A torch device this machine has (`cuda` only where a GPU is visible)."""
    import torch

    try:
        chosen = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a torch device, e.g. cpu or cuda") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text}: no GPU is visible here; use cpu")
    return text
