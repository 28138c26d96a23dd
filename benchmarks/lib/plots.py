"""A study's curves over training, one figure: a row of panels per group of runs, a panel per logged quantity; and how
every figure of the benchmarks is saved."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable

from benchmarks.lib.records import epoch_of
from common.files import write_file


def save_figure(fig: Any, path: Path, **kwargs: Any) -> None:
    """`fig.savefig` into memory, then written as every file is (common/files.py: replaced whole, never through a
    link); the format from `path`'s suffix."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
    write_file(path, buffer.getbuffer())


def curve_grid(rows: list[tuple[str, list[dict]]], tags: tuple[str, ...], arm_style: Callable[[dict], tuple[str, str | None]],
               steps_per_epoch: int, path: Path, nll_span: float | None = None) -> None:
    """rows: (row title, records); tags: curve names of the records' "curves", "nll" being the val NLL (a point per
    validation) and the others training-step logs; arm_style(record) -> (colour, legend label or None); nll_span:
    show only the lowest this many nats of the val NLL, where late differences are seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), len(tags), figsize=(4 * len(tags), 3.2 * len(rows)), squeeze=False)
    for axes_row, (title, records) in zip(axes, rows):
        for record in records:
            color, label = arm_style(record)
            for ax, tag in zip(axes_row, tags):
                points = record["curves"].get(tag, [])
                xs = [epoch_of(s, steps_per_epoch) if tag == "nll" else (s + 1) / steps_per_epoch for s, _ in points]
                ax.plot(xs, [v for _, v in points], color=color, alpha=0.8, label=label, marker="o" if tag == "nll" else None, lw=1)
        for ax, tag in zip(axes_row, tags):
            ax.set_title(f"{title}: {'val NLL (nats)' if tag == 'nll' else tag}", fontsize=9)
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
            if tag == "nll" and nll_span is not None:
                low = min(v for record in records for _, v in record["curves"]["nll"])
                ax.set_ylim(low - 0.1 * nll_span, low + nll_span)
        axes_row[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
