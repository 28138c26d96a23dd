"""argparse types the benchmarks' command lines share: a value out of range, an unknown name or a device this machine
lacks is argparse's one `error: argument --option: ...` line, before anything is built, timed or written."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Callable, Sequence

MODEL_CONFIGS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "configs" / "model").glob("*.yaml"))  # model=NAME


def integer(at_least: int) -> Callable[[str], int]:
    """An integer >= at_least."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= {at_least}") from None
        if value < at_least:
            raise argparse.ArgumentTypeError(f"{value}: expected an integer >= {at_least}")
        return value
    return parse


def number(above: float) -> Callable[[str], float]:
    """A finite number > above."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number > {above:g}") from None
        if not (math.isfinite(value) and value > above):
            raise argparse.ArgumentTypeError(f"{text}: expected a finite number > {above:g}")
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
