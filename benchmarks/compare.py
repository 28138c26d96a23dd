"""The comparison report: one table and a few plots from the TensorBoard runs of several models.

    python -m benchmarks.compare logs/tensorboard [--out reports/compare]

Every directory under the given roots that holds TensorBoard event files is a run (e.g. the runs
of `python train.py -m experiment=compare data=mnist`). The event files are read with
TensorBoard's own `EventAccumulator`: scalars, images, and the hyperparameters of the HPARAMS tab
(model class, parameter count, every constructor argument). Written to --out:

* `report.md`: a row per run: model, data, key settings, test NLL (nats), bpd, reconstruction MSE,
  PSNR, ms per training step, epochs, parameters, seconds per epoch. Where a run was not tested the
  val numbers stand in, marked `(val)`. The VQ-VAE's NLL is an upper bound, marked `≤`: with its learned
  prior when it has one, and the uniform-prior bound beside it (`nll, uniform prior`).
* `val_nll.png`: val/nll against training step and against wall time, a line per run.
* `reconstructions.png`: each run's test reconstructions (the same test images for every run: the
  test stage is seeded), inputs and reconstructions side by side as in TensorBoard.
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402

BOUND_MODELS = {"VQVAE"}  # whose nll is an upper bound (under its prior), not an estimate


@dataclass
class Run:
    path: Path
    name: str
    hparams: dict
    scalars: dict[str, list[tuple[float, int, float]]]  # tag -> [(wall_time, step, value)]
    reconstructions: bytes | None = None
    reconstructions_stage: str = "test"  # the split the reconstructions are of: "test", or "val" for an untested run
    row: dict[str, str] = field(default_factory=dict)

    def last(self, tag: str) -> float | None:
        values = [v for _, _, v in self.scalars.get(tag, []) if math.isfinite(v)]
        return values[-1] if values else None


def find_runs(roots: list[Path]) -> list[Path]:
    dirs = {p.parent for root in roots for p in root.rglob("events.out.tfevents.*")}
    if not dirs:
        raise SystemExit(f"no TensorBoard event files under {', '.join(map(str, roots))}")
    return sorted(dirs)


def read_run(path: Path, root: Path) -> Run:
    events = EventAccumulator(str(path), size_guidance={"scalars": 0, "images": 1})
    events.Reload()
    tags = events.Tags()
    scalars = {tag: [(e.wall_time, e.step, e.value) for e in events.Scalars(tag)] for tag in tags["scalars"]}
    image, stage = None, "test"
    for stage in ("test", "val"):
        if f"{stage}/reconstructions" in tags["images"]:
            image = events.Images(f"{stage}/reconstructions")[-1].encoded_image_string
            break
    name = str(path.relative_to(root)) if path != root else path.name
    return Run(path, name, read_hparams(events), scalars, image, stage)


def read_hparams(events: EventAccumulator) -> dict[str, object]:
    """The hyperparameters a run wrote for TensorBoard's HPARAMS tab (the last session written)."""
    try:
        session = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    except KeyError:  # the run wrote no hyperparameters (e.g. not a run of this collection)
        return {}
    hparams = plugin_data_pb2.HParamsPluginData.FromString(session).session_start_info.hparams
    return {name: getattr(value, value.WhichOneof("kind")) for name, value in hparams.items() if value.WhichOneof("kind")}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def table_row(run: Run) -> dict[str, str]:
    model = run.hparams.get("model_class", "?")
    # Runs are named <model>-<data>-<key settings> (train.py: run_name, the model's run_tag).
    run_name = run.path.parent.name if run.path.name.startswith("version_") else run.path.name
    parts = run_name.split("-")
    data, settings = (parts[1] if len(parts) > 1 else "?"), "-".join(parts[2:])
    stage = "test" if run.last("test/nll") is not None else "val"
    mark = " (val)" if stage == "val" else ""
    nll = run.last(f"{stage}/nll")
    uniform_bound = run.last(f"{stage}/nll_uniform_prior")  # a VQ-VAE with a learned prior
    step_times = [v for _, _, v in run.scalars.get("train/step_time_ms", [])]
    epoch_times = [v for _, _, v in run.scalars.get("train/epoch_time_s", [])]
    epochs = len(epoch_times)  # one per completed training epoch
    return {
        "run": run.name,
        "model": model,
        "data": data,
        "settings": settings,
        "nll (nats)": ("≤ " if model in BOUND_MODELS and nll is not None else "") + _fmt(nll) + mark,
        "nll, uniform prior": "—" if uniform_bound is None else f"≤ {_fmt(uniform_bound)}{mark}",
        "bpd": _fmt(run.last(f"{stage}/bpd"), 4) + mark,
        "recon MSE": _fmt(run.last(f"{stage}/recon_mse"), 4) + mark,
        "PSNR (dB)": _fmt(run.last(f"{stage}/psnr")) + mark,
        "ms/step": _fmt(statistics.median(step_times) if step_times else None),
        "epochs": str(epochs),
        "params": f"{int(run.hparams['num_params']):,}" if "num_params" in run.hparams else "—",
        "s/epoch": _fmt(statistics.median(epoch_times) if epoch_times else None),
    }


def markdown_table(rows: list[dict[str, str]]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def plot_val_nll(runs: list[Run], out: Path) -> None:
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in runs:
        points = [p for p in run.scalars.get("val/nll", []) if math.isfinite(p[2])]
        if not points:
            continue
        start = min(t for t, _, _ in run.scalars.get("train/loss", points))
        wall, step, value = zip(*points)
        by_step.plot(step, value, marker="o", markersize=3, label=run.name)
        by_time.plot([(t - start) / 60 for t in wall], value, marker="o", markersize=3, label=run.name)
    for ax, xlabel in ((by_step, "training step"), (by_time, "wall time (minutes)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("val/nll (nats per image)")
        ax.grid(alpha=0.3)
    by_step.set_title("val/nll by step (VQ-VAE: an upper bound)")
    by_time.set_title("val/nll by wall time")
    by_time.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def panel_title(run: Run) -> str:
    """A run without a test stage shows its last validation images, and says so."""
    return run.name + ("" if run.reconstructions_stage == "test" else "\n(validation images: not tested)")


def figure_title(runs: list[Run]) -> str:
    stages = {run.reconstructions_stage for run in runs}
    split = "test" if stages == {"test"} else "validation" if stages == {"val"} else "test (validation where marked)"
    return f"{split} images (left of each pair) and reconstructions (right)"


def plot_reconstructions(runs: list[Run], out: Path) -> None:
    shown = [run for run in runs if run.reconstructions is not None]
    if not shown:
        return
    fig, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 4.4), squeeze=False)
    for ax, run in zip(axes[0], shown):
        ax.imshow(mpimg.imread(io.BytesIO(run.reconstructions), format="png"))
        ax.set_title(panel_title(run), fontsize=9)
        ax.axis("off")
    fig.suptitle(figure_title(shown))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def write_report(roots: list[Path], out: Path) -> Path:
    runs = [read_run(path, root) for root in roots for path in find_runs([root])]
    rows = [table_row(run) for run in runs]
    out.mkdir(parents=True, exist_ok=True)
    plot_val_nll(runs, out / "val_nll.png")
    plot_reconstructions(runs, out / "reconstructions.png")
    report = out / "report.md"
    report.write_text(
        "# Comparison\n\n"
        f"Runs under {', '.join(f'`{r}`' for r in roots)}. Test-split numbers of the best checkpoint on val/nll "
        "(`(val)`: the run was not tested, its last validation numbers). NLL in nats per image, importance-sampled "
        "with the encoder as proposal; `≤`: the VQ-VAE's upper bound under its prior over the codes (uniform, or learned: "
        "then the uniform-prior bound stands beside it). "
        "ms/step and s/epoch: medians over training.\n\n"
        + markdown_table(rows)
        + "\n\n![val/nll](val_nll.png)\n\n![reconstructions](reconstructions.png)\n"
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", type=Path, help="TensorBoard log directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=Path("reports/compare"), help="where report.md and the PNGs go")
    args = parser.parse_args()
    report = write_report(args.roots, args.out)
    print(report.read_text().split("\n\n")[2])
    print(f"\nwritten: {report}, {args.out / 'val_nll.png'}, {args.out / 'reconstructions.png'}")


if __name__ == "__main__":
    main()
