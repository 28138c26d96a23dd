"""One-line checks of settings, each naming the setting, what it takes and what it got, and the "did you mean" of a
name mistyped (the front ends show the line as the run's error). Torch-free: the front ends run them before the heavy
imports (configs/settings.py)."""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

MEANT = "; did you mean "
SEED_RANGE = (0, 2**32 - 1)  # numpy's, which Lightning's seed_everything checks too


def did_you_mean(word: str, candidates: list[str]) -> str:
    """'; did you mean X?' for the candidate whose last part is closest to `word`'s, in any case (the same last part
    first: model=VAE means vae), then one it begins, one of the same letters in another order, one a few letters away."""
    def leaf(name: str) -> str:
        return name.rsplit(".", 1)[-1].lower()

    typed = leaf(word)
    same = [c for c in candidates if leaf(c) == typed and c != word]
    by_leaf: dict[str, str] = {}
    for candidate in candidates:  # the first of those with one last part (a top-level seed before data.seed)
        by_leaf.setdefault(leaf(candidate), candidate)
    # A name cut short (max_ep) means the one it begins (max_epochs), not one a few letters away (max_steps).
    begun = [name for name in by_leaf if name.startswith(typed) and name != typed] if typed else []
    swapped = [by_leaf[name] for name in by_leaf if sorted(name) == sorted(typed) and name != typed]  # vea: vae
    close = same or [by_leaf[m] for m in difflib.get_close_matches(typed, begun, n=1, cutoff=0)] or swapped or \
        [by_leaf[m] for m in difflib.get_close_matches(typed, list(by_leaf), n=1, cutoff=0.75)]
    return f"; did you mean {close[0]}?" if close else ""


def expected(hint: Any, value: Any) -> str | None:
    """None if `value` fits the type hint (a Literal, int, float, bool, str, another class, a union of them, None), else
    what was expected; a hint of another kind (a callable, a generic) takes anything (the constructor decides)."""
    origin = get_origin(hint)
    if origin is Literal:
        choices = get_args(hint)
        if value in choices:
            return None
        close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1) if isinstance(value, str) else []
        return "one of " + ", ".join(map(repr, choices)) + (f"{MEANT}{close[0]!r}?" if close else "")
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        failures = [expected(option, value) for option in options if option is not type(None)]
        if all(failures):  # (a did-you-mean last)
            meant = next((f"{MEANT}{failure.split(MEANT)[1]}" for failure in failures if MEANT in failure), "")
            return " or ".join(f.split(MEANT)[0] for f in failures) + (" or null" if type(None) in options else "") + meant
        return None
    if origin is tuple and get_args(hint):  # (Adam's betas): a list of so many values, each of its type
        items = get_args(hint)
        each = [items[0]] * len(value) if items[-1] is Ellipsis and isinstance(value, (list, tuple)) else list(items)
        if isinstance(value, (list, tuple)) and len(value) == len(each) and all(expected(h, v) is None for h, v in zip(each, value)):
            return None
        return f"a list, each {expected(items[0], object())}" if items[-1] is Ellipsis else \
            f"a list of {len(items)}: [{', '.join(str(expected(h, object())) for h in items)}]"
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if hint is float:  # NaN passes every `x < 0` check, inf fails only at the first step; 10**400 is no float
        finite = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= sys.float_info.max
        return None if finite else "a finite number"
    if hint is str:
        return None if isinstance(value, str) else "a string"
    if hint is type(None):
        return None if value is None else "null"
    if get_origin(hint) is None and isinstance(hint, type):  # another class (torch's Tensor): a value of it, not text
        return None if isinstance(value, hint) else f"a {hint.__name__}"
    return None


def check_types(settings: Any) -> None:
    """Every field of the settings dataclass `settings` of its declared type (a ValueError naming the first that is not)."""
    hints = typing.get_type_hints(type(settings))
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        want = expected(hints[field.name], value)
        if want is not None:
            raise ValueError(f"{field.name}={value!r}: expected {want}")


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


def check_applies(settings: Any, choice: str, chosen: str, applies_to: dict[str, str], where: str = "") -> None:
    """Each setting of `applies_to` away from its default only where `choice` (likelihood, estimator) is the one it
    applies to: a setting the run would ignore is refused, not dropped in silence. `where`: what the owner needs."""
    defaults = {field.name: field.default for field in dataclasses.fields(settings)}
    for name, owner in applies_to.items():
        if chosen != owner and getattr(settings, name) != defaults[name]:
            raise ValueError(f"{name}={getattr(settings, name)} applies to {choice}={owner} only, and this model's {choice} "
                             f"is {chosen}: leave it out, or set this model's {choice} to {owner} as well{where}")


def check_share(name: str, value: float) -> None:
    """`value` in [0, 1] (a NaN is not)."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a share between 0 and 1, got {value}")


def check_seed(name: str, value: Any) -> None:
    """`value` an integer (not a bool) in numpy's seed range [0, 2**32 - 1], the one Lightning's `seed_everything`
    checks too: numpy and torch would refuse it only where it is first used (a test seed: after training)."""
    min_seed_value, max_seed_value = SEED_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not min_seed_value <= value <= max_seed_value:
        raise ValueError(f"{name} must be an integer in [{min_seed_value}, {max_seed_value}] (numpy's seed range), got "
                         f"{value!r}" + ("" if type(value) is int else f" ({type(value).__name__})"))


def same(a: Any, b: Any) -> bool:
    """Whether a setting (or an optimizer hyperparameter, a number or a 0-d tensor) holds the same value in both."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):  # saved lists may come back as tuples
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if callable(a) or callable(b):  # an optimizer factory: rebuilt each run, compared by what it says
        return repr(a) == repr(b)
    try:
        return bool(a == b)
    except Exception:  # values that cannot be compared: not reported
        return True
