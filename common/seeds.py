"""The range of every seed a run takes: numpy's, [0, 2**32 - 1], the one Lightning's `seed_everything` checks too.
A seed outside it is refused where the setting is declared (the constructor), in one line naming it, before anything
trains; numpy and torch would raise on it only when it is first used (a test seed: after training)."""

from __future__ import annotations

from lightning.fabric.utilities.seed import max_seed_value, min_seed_value


def check_seed(name: str, value: object) -> None:
    """ValueError naming `name` unless `value` is an integer (not a bool) in numpy's seed range."""
    if isinstance(value, bool) or not isinstance(value, int) or not min_seed_value <= value <= max_seed_value:
        raise ValueError(f"{name} must be an integer in [{min_seed_value}, {max_seed_value}] (numpy's seed range), got "
                         f"{value!r}" + ("" if type(value) is int else f" ({type(value).__name__})"))
