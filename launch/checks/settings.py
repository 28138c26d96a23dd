"""Settings checked against the constructors' type hints before anything is built (the Hydra front end).

LightningCLI (jsonargparse) refuses a value that does not match a constructor's annotation; Hydra
passes whatever the command line says (`model.lr=abc` arrives as the string 'abc', an unknown
`model.prior=gaussian` as a string the model may never look at). `check_settings` applies the same
annotations to a Hydra config: a Literal lists the choices, int/float/bool/str the type, `X | None`
allows null. One error names every wrong setting, with what was expected.
"""

from __future__ import annotations

import inspect
from typing import Any

from common.settings import expected
from common.signatures import constructor_defaults, constructor_hints


class SettingsError(ValueError):
    """A setting has a value its constructor does not take (the user's to fix)."""


def check_trainer_values(settings: dict[str, Any], prefix: str) -> None:
    """What lightning.Trainer accepts but cannot run: an accelerator this machine lacks (Lightning's own message
    does not name the option), and accumulate_grad_batches < 1, check_val_every_n_epoch < 1 and val_check_interval <= 0
    (each a ZeroDivisionError once training starts)."""
    import torch

    accelerator, accumulate = settings.get("accelerator"), settings.get("accumulate_grad_batches")
    available = {"gpu": torch.cuda.is_available(), "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if isinstance(accelerator, str) and not available.get(accelerator, True):
        raise SettingsError(f"{prefix}.accelerator={accelerator}: no such device is visible here; use {prefix}.accelerator=cpu "
                            "(or auto)")
    if isinstance(accumulate, int) and accumulate < 1:
        raise SettingsError(f"{prefix}.accumulate_grad_batches={accumulate}: expected an integer >= 1")
    every_epochs, interval = settings.get("check_val_every_n_epoch"), settings.get("val_check_interval")
    if isinstance(every_epochs, int) and not isinstance(every_epochs, bool) and every_epochs < 1:
        raise SettingsError(f"{prefix}.check_val_every_n_epoch={every_epochs}: expected an integer >= 1, or null "
                            "(validation by val_check_interval's batches alone)")
    clip = settings.get("gradient_clip_val")
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and not 0 <= clip < float("inf"):
        # Lightning skips clipping at a negative value without a word
        raise SettingsError(f"{prefix}.gradient_clip_val={clip}: expected a finite number >= 0 (0 or null: no clipping)")
    if str(settings.get("precision")) in ("64", "64-true", "double", "transformer-engine-float64"):
        raise SettingsError(f"{prefix}.precision={settings['precision']}: 64-bit is not supported (the samplers and JSA's "
                            "cache hold 32-bit tensors); expected 32-true, 16-mixed or bf16-mixed")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval <= 0:
        raise SettingsError(f"{prefix}.val_check_interval={interval}: expected > 0, a fraction of the epoch (at most "
                            "1.0) or a number of batches")


def check_settings(cls: type, settings: dict[str, Any], prefix: str) -> None:
    """Raise SettingsError naming every `prefix.key` whose value does not fit `cls`'s constructor."""
    hints = constructor_hints(cls)
    known = set(hints) | set(constructor_defaults(cls))
    # a factory function with **kwargs takes any key (a class's **kwargs are followed up its hierarchy instead)
    takes_any = not inspect.isclass(cls) and any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values())
    problems = []
    for key, value in settings.items():
        if key.startswith("_"):
            continue
        if key not in known and not takes_any:
            problems.append(f"{prefix}.{key} is not a setting of {cls.__name__}")
            continue
        want = expected(hints[key], value) if key in hints else None
        if want is not None:
            problems.append(f"{prefix}.{key}={value!r}: expected {want}")
    if problems:
        raise SettingsError("; ".join(problems))
