"""One-line checks of a constructor's settings, each naming the option, what it takes and what it got (the front ends
show the line as the run's error)."""

from __future__ import annotations

from typing import Any, get_args


def spoken(options: tuple) -> str:
    """'a', 'b' or 'c'."""
    quoted = [repr(option) for option in options]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def check_choice(name: str, value: Any, choices: Any) -> None:
    """`value` one of the Literal type `choices`."""
    if value not in get_args(choices):
        raise ValueError(f"{name} must be {spoken(get_args(choices))}, got {value!r}")


def check_at_least(name: str, value: Any, least: int, whole: bool = False, none: str | None = None,
                   most: int | None = None) -> None:
    """`value` >= `least` (and <= `most` if given), a whole number if `whole`; None is taken unless `none` is None (its
    text, if any, says what None means)."""
    if value is None and none is not None:
        return
    also = f" (or null: {none})" if none else ""
    if whole and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{name} must be a whole number >= {least}{also}, got {value!r}")
    if not value >= least:
        raise ValueError(f"{name} must be >= {least}{also}, got {value}")
    if most is not None and not value <= most:
        raise ValueError(f"{name} must be at most {most:,}{also}, got {value:,}")


def check_share(name: str, value: float) -> None:
    """`value` in [0, 1] (a NaN is not)."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a share between 0 and 1, got {value}")


def check_seed(name: str, value: Any) -> None:
    """`value` an integer (not a bool) in numpy's seed range [0, 2**32 - 1], the one Lightning's `seed_everything`
    checks too: numpy and torch would refuse it only where it is first used (a test seed: after training)."""
    from lightning.fabric.utilities.seed import max_seed_value, min_seed_value

    if isinstance(value, bool) or not isinstance(value, int) or not min_seed_value <= value <= max_seed_value:
        raise ValueError(f"{name} must be an integer in [{min_seed_value}, {max_seed_value}] (numpy's seed range), got "
                         f"{value!r}" + ("" if type(value) is int else f" ({type(value).__name__})"))
