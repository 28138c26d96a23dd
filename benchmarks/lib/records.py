"""What a finished run's record holds, read from its TensorBoard events: the validation and diagnostic curves,
the epoch times and the test scalars; and the epoch a logged step belongs to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.files import check_regular


def read_events(run_dir: Path, size_guidance: dict[str, int]) -> Any:
    """TensorBoard's EventAccumulator of `run_dir`, loaded, once each event file is known to be a regular file
    (NotARegularFile naming the first that is not: TensorBoard's reader would wait on a FIFO for ever)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for file in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        check_regular(file)
    events = EventAccumulator(str(run_dir), size_guidance=size_guidance)
    events.Reload()
    return events


def read_curves(run_dir: Path, extra_tags: list[str] = ()) -> dict:
    events = read_events(run_dir, {"scalars": 0})
    tags = set(events.Tags()["scalars"])

    def series(tag: str) -> list[list[float]]:
        return [[e.step, e.value] for e in events.Scalars(tag)] if tag in tags else []

    epoch_time = series("train/epoch_time_s")
    curves = {tag.split("/", 1)[1]: series(tag) for tag in (
        "val/nll", "val/nll_uniform_prior", "train/encoder_grad_variance", "train/decoder_grad_variance", "train/acceptance_rate",
        "train/cache_hit_rate", "train/step_time_ms", "train/grad_variance_time_s", *extra_tags)}
    test = {tag.split("/", 1)[1]: events.Scalars(tag)[-1].value for tag in tags if tag.startswith("test/")}
    return {"curves": curves, "epoch_time_s": epoch_time, "test": test}


# ---- the report ---------------------------------------------------------------------------------


def epoch_of(step: float, steps_per_epoch: int) -> int:
    """The epoch at whose end a value was logged (epoch-end logs carry the step of the epoch's last batch)."""
    return round((step + 1) / steps_per_epoch)
