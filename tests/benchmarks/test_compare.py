"""The comparison report: which runs it compares (the latest multirun's, --runs GLOB, --all) and says so, how it
labels them, how it lays out its figures (on fake TensorBoard runs, fast); and end to end, as a user runs it:
`train.py -m experiment=compare` on a tiny slice of MNIST, then `python -m benchmarks.compare` on its TensorBoard root."""

from __future__ import annotations

import io
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

import matplotlib.figure
from matplotlib.backends.backend_agg import FigureCanvasAgg
import pytest
import torch
from PIL import Image
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from benchmarks import compare
from tests.launch.test_entrypoints import FAST, REPO, train
from tests import preloaded

T0 = 1_767_261_600  # 2026-01-01: the earlier multirun starts here, the latest an hour later, the strays after it
VAE, JSA = "vae-mnist-mlp-z32", "jsa-mnist-mlp-K10-L20"


def stamp(start: float) -> str:
    return time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(start))  # Hydra's ${now:...} in configs/train.yaml


def fake_run(root: Path, rel: str, start: int, pid: int, settings: dict, tested: bool = True, steps: int = 0) -> Path:
    """A TensorBoard run as train.py writes it (HPARAMS session, val/test scalars, reconstructions; with `steps`, a
    training loss at its last step, logged as Lightning does at its 0-based index), its event file named as if process
    `pid` on host `box` had made it at `start`."""
    path = root / rel
    with SummaryWriter(path) as writer:
        if steps:
            writer.add_scalar("train/loss", 1.0, steps - 1)
        for summary in hparams({"model_class": settings["model_class"], "num_params": 1000, **settings}, {"hp/val_nll": 0.0}):
            writer._get_file_writer().add_summary(summary)
        for stage in ("val", "test") if tested else ("val",):
            writer.add_scalar(f"{stage}/nll", float(pid), 1)  # tells the processes apart
            writer.add_image(f"{stage}/reconstructions", torch.rand(3, 16, 16), 1)
    (event,) = path.glob("events.out.tfevents.*")
    event.rename(path / f"events.out.tfevents.{start}.box.{pid}.0")
    return path


def hydra_multirun(log_dir: Path, start: int, pid: int, jobs: list[str]) -> Path:
    sweep = log_dir / "hydra" / "multirun" / f"{stamp(start)}-{pid}"
    for num, job in enumerate(jobs):
        (sweep / f"{num}-{job}" / ".hydra").mkdir(parents=True)
    return sweep


@pytest.fixture(scope="module")
def made_logs(tmp_path_factory) -> Path:
    """logs/ after two `train.py -m model=vae,jsa` (JSA with lr 1e-3, then 1e-2), then a single Hydra run of JSA that
    was interrupted (its .owner remains; its pid that of the first multirun's process, used again) and a
    50-batch LightningCLI run of the VAE."""
    logs = tmp_path_factory.mktemp("made") / "logs"
    tb = logs / "tensorboard"
    vae, jsa = {"model_class": "VAE", "lr": 1e-3}, {"model_class": "JSA", "lr": 1e-3}
    hydra_multirun(logs, T0, 111, ["vae-mnist", "jsa-mnist"])
    fake_run(tb, f"{VAE}/version_0", T0 + 5, 111, vae)
    fake_run(tb, f"{JSA}/version_0", T0 + 10, 111, jsa)
    hydra_multirun(logs, T0 + 3600, 222, ["vae-mnist", "jsa-mnist"])
    fake_run(tb, f"{VAE}/version_1", T0 + 3605, 222, vae)
    fake_run(tb, f"{JSA}/version_1", T0 + 3610, 222, {**jsa, "lr": 1e-2})
    (logs / "hydra" / "jsa-mnist" / f"{stamp(T0 + 7200)}-111" / ".hydra").mkdir(parents=True)
    (fake_run(tb, f"{JSA}/version_2", T0 + 7203, 111, {**jsa, "lr": 1e-2}, tested=False) / ".owner").write_text("process 111 on box\n")
    fake_run(tb, f"{VAE}/version_2", T0 + 7300, 444, vae)  # LightningCLI: no Hydra directory
    return logs


@pytest.fixture
def logs(made_logs, tmp_path) -> Path:
    """A copy of made_logs for one test to read or change."""
    return Path(shutil.copytree(made_logs, tmp_path / "logs"))


def report_of(out: Path) -> tuple[list[dict[str, str]], dict[str, str], dict[str, str]]:
    """report.md's table rows, and the runs it lists: compared (directory -> label) and left out (directory -> why)."""
    lines = (out / "report.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| run"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in lines
            if line.startswith("| ") and line != header]
    compared = dict(m.groups() for line in lines if (m := re.match(r"- compared: `(.+?)` as \*\*(.+?)\*\*", line)))
    left_out = dict(m.groups() for line in lines if (m := re.match(r"- left out: `(.+?)`: (.+)", line)))
    return rows, compared, left_out


def run_compare(monkeypatch, root: Path, out: Path, *options: str) -> tuple[list[dict[str, str]], dict[str, str], dict[str, str]]:
    """`python -m benchmarks.compare ROOT --out OUT [OPTIONS]`, in this process (fast)."""
    monkeypatch.setattr(sys, "argv", ["compare", str(root), "--out", str(out), *options])
    compare.main()
    return report_of(out)


def test_the_latest_multirun_is_compared_and_every_other_run_is_listed_with_why(logs, tmp_path, monkeypatch):
    rows, compared, left_out = run_compare(monkeypatch, logs / "tensorboard", tmp_path / "report")
    assert sorted(row["run"] for row in rows) == [JSA, VAE]  # the second multirun's runs; their names tell them apart
    assert sorted(compared) == [f"{JSA}/version_1", f"{VAE}/version_1"]
    assert [row["nll (nats)"] for row in rows] == ["222.00", "222.00"]  # process 222's numbers, tested
    assert sorted(left_out) == [f"{JSA}/version_0", f"{JSA}/version_2", f"{VAE}/version_0", f"{VAE}/version_2"]
    for run in (f"{JSA}/version_0", f"{VAE}/version_0"):
        assert left_out[run].startswith("an earlier multirun") and f"{stamp(T0)}-111" in left_out[run], left_out[run]
    # the single Hydra run of process 111 again (a pid used twice): not the first multirun's; interrupted
    assert left_out[f"{JSA}/version_2"].startswith("a single Hydra run") and f"jsa-mnist/{stamp(T0 + 7200)}-111" in left_out[f"{JSA}/version_2"]
    assert "interrupted" in left_out[f"{JSA}/version_2"]
    assert left_out[f"{VAE}/version_2"].startswith("a single run (process 444 on box)")
    assert f"{stamp(T0 + 3600)}-222" in (tmp_path / "report" / "report.md").read_text()  # which multirun, said once


def test_a_multirun_alone_is_said_to_leave_out_nothing(tmp_path, monkeypatch):
    """The summary names the other runs found, and where there are none it says so (not a list below that is empty)."""
    logs = tmp_path / "logs"
    hydra_multirun(logs, T0, 111, ["vae-mnist", "jsa-mnist"])
    fake_run(logs / "tensorboard", f"{VAE}/version_0", T0 + 5, 111, {"model_class": "VAE"})
    fake_run(logs / "tensorboard", f"{JSA}/version_0", T0 + 10, 111, {"model_class": "JSA"})
    run_compare(monkeypatch, logs / "tensorboard", tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "no other run was found" in text and "listed below with why" not in text


def test_without_hydra_directories_the_runs_one_process_made_are_a_multirun(logs, tmp_path, monkeypatch):
    shutil.rmtree(logs / "hydra")  # e.g. logs/tensorboard copied on its own
    _, compared, left_out = run_compare(monkeypatch, logs / "tensorboard", tmp_path / "report")
    assert sorted(compared) == [f"{JSA}/version_1", f"{VAE}/version_1"]
    assert left_out[f"{VAE}/version_0"].startswith("an earlier multirun") and "process 111 on box" in left_out[f"{VAE}/version_0"]
    assert left_out[f"{VAE}/version_2"].startswith("a single run (process 444 on box)")


def test_the_multirun_named_in_the_run_directory_wins(logs, tmp_path, monkeypatch):
    """<run>/hydra_job.yaml, where the training code writes one, names the run's multirun: it holds where process
    ids are no guide (every run made by process 1, as in a container) and no Hydra directory is at hand."""
    shutil.rmtree(logs / "hydra")
    tb = logs / "tensorboard"
    for event in tb.rglob("events.out.tfevents.*"):
        event.rename(event.with_name(re.sub(r"\.box\.\d+\.", ".box.1.", event.name)))
    for version, job in ((0, "sweep_dir: /x/logs/hydra/multirun/a\n"), (1, "sweep_dir: /x/logs/hydra/multirun/b\n"),
                         (2, "output_dir: /x/logs/hydra/single\n")):
        for name in (VAE, JSA):
            (tb / name / f"version_{version}" / "hydra_job.yaml").write_text(job)
    _, compared, left_out = run_compare(monkeypatch, tb, tmp_path / "report")
    assert sorted(compared) == [f"{JSA}/version_1", f"{VAE}/version_1"]
    assert "/x/logs/hydra/multirun/a" in left_out[f"{JSA}/version_0"] and "single Hydra run" in left_out[f"{VAE}/version_2"]


def test_a_run_is_named_for_the_front_end_that_trained_it(logs, tmp_path, monkeypatch):
    """A LightningCLI run (its fit wrote config.yaml) that a Hydra job later resumed or tested holds that job's
    hydra_job.yaml: it is still LightningCLI's run, made by its own process; a run the Hydra job made stays Hydra's."""
    tb = logs / "tensorboard"
    later = logs / "hydra" / "vae-mnist" / f"{stamp(T0 + 8000)}-555"
    (tb / VAE / "version_2" / "config.yaml").write_text("model: {class_path: models.VAE}\n")
    (tb / VAE / "version_2" / "hydra_job.yaml").write_text(f"output_dir: {later}\n")
    made = logs / "hydra" / "jsa-mnist" / f"{stamp(T0 + 7200)}-111"
    (tb / JSA / "version_2" / "hydra_job.yaml").write_text(f"output_dir: {made}\n")
    _, _, left_out = run_compare(monkeypatch, tb, tmp_path / "report")
    assert left_out[f"{VAE}/version_2"].startswith(
        f"a single LightningCLI run (process 444 on box), resumed or tested later through Hydra ({compare.shown(later)})")
    assert left_out[f"{JSA}/version_2"].startswith(f"a single Hydra run ({compare.shown(made)})")


def test_a_run_that_logged_no_scalar_yet_is_told_apart_from_a_damaged_one(tmp_path, monkeypatch, capsys):
    """A run shorter than trainer.log_every_n_steps that reached no validation wrote its hyperparameters and no scalar:
    its event files are whole, and the line says how to have it logged; a damaged event file is named as such."""
    root = tmp_path / "tensorboard"
    fake_run(root, f"{VAE}/version_0", T0, 111, {"model_class": "VAE"})
    short = root / JSA / "version_0"
    with SummaryWriter(short) as writer:  # what HparamsWithMetrics writes as training starts, and nothing after
        for summary in hparams({"model_class": "JSA", "num_params": 1000}, {"hp/val_nll": 0.0}):
            writer._get_file_writer().add_summary(summary)
    damaged = fake_run(root, f"{JSA}/version_1", T0 + 5, 222, {"model_class": "JSA"})
    (event,) = damaged.glob("events.out.tfevents.*")
    data = bytearray(event.read_bytes())
    data[200] ^= 0xFF  # in a record after the file's first
    event.write_bytes(bytes(data))
    _, compared, left_out = run_compare(monkeypatch, root, tmp_path / "report", "--all")
    assert list(compared) == [f"{VAE}/version_0"]
    assert left_out[f"{JSA}/version_0"].startswith("its event files are whole but hold no scalar yet")
    assert "train it longer than trainer.log_every_n_steps" in left_out[f"{JSA}/version_0"]
    assert re.fullmatch(rf"its event file {re.escape(event.name)} cannot be read past byte \d+ of {len(data)} \(damaged, "
                        r"or not an event file\)", left_out[f"{JSA}/version_1"])
    printed = capsys.readouterr().out
    assert f"skipped {short}: its event files are whole but hold no scalar yet" in printed
    assert f"skipped {damaged}: its event file {event.name} cannot be read past byte" in printed


def test_runs_glob_and_all_choose_the_runs(logs, tmp_path, monkeypatch, capsys):
    root = logs / "tensorboard"
    _, compared, left_out = run_compare(monkeypatch, root, tmp_path / "jsa", "--runs", "jsa-*")
    assert sorted(compared) == [f"{JSA}/version_{v}" for v in range(3)]
    assert sorted(left_out) == [f"{VAE}/version_{v}" for v in range(3)] and "does not match --runs 'jsa-*'" in left_out[f"{VAE}/version_0"]
    _, compared, _ = run_compare(monkeypatch, root, tmp_path / "v0", "--runs", "*/version_0")
    assert sorted(compared) == [f"{JSA}/version_0", f"{VAE}/version_0"]
    _, compared, _ = run_compare(monkeypatch, root, tmp_path / "two", "--runs", f"{VAE}", "--runs", f"{JSA}/version_2")
    assert sorted(compared) == [f"{JSA}/version_2", *(f"{VAE}/version_{v}" for v in range(3))]  # a run name: all its versions
    _, compared, left_out = run_compare(monkeypatch, root, tmp_path / "all", "--all")
    assert len(compared) == 6 and not left_out
    with pytest.raises(SystemExit) as refused:
        run_compare(monkeypatch, root, tmp_path / "none", "--runs", "nothing-*")
    assert refused.value.code == 2
    assert re.search(r"error: --runs nothing-\*: no run matches; the runs: .*jsa-mnist-mlp-K10-L20/version_0", capsys.readouterr().err)


def test_a_root_that_is_no_directory_of_runs_is_one_error_line(tmp_path, monkeypatch, capsys):
    """A misspelt root, a file given as the root, a folder without runs: argparse's one error line naming it, exit 2."""
    (tmp_path / "last.ckpt").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    for root, said in (("logs/tensorbord", "no such directory"), ("last.ckpt", "a file; expected a directory of TensorBoard runs"),
                       ("empty", "no TensorBoard event files under")):
        with pytest.raises(SystemExit) as refused:
            run_compare(monkeypatch, tmp_path / root, tmp_path / "out")
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert refused.value.code == 2 and error.startswith("compare: error: ") and str(tmp_path / root) in error and said in error


def test_runs_of_one_name_are_labelled_apart(logs, tmp_path, monkeypatch):
    rows, compared, _ = run_compare(monkeypatch, logs / "tensorboard", tmp_path / "all", "--all")
    labels = [row["run"] for row in rows]
    assert len(set(labels)) == len(labels) == 6 and sorted(labels) == sorted(compared.values())
    # the version, and the setting the JSA runs differ in; the VAE runs differ in none: when each started
    assert compared[f"{JSA}/version_0"] == f"{JSA} (version_0, lr=0.001)"
    assert compared[f"{JSA}/version_1"] == f"{JSA} (version_1, lr=0.01)"
    assert compared[f"{VAE}/version_2"] == f"{VAE} (version_2, started {time.strftime('%Y-%m-%d %H:%M', time.localtime(T0 + 7300))})"
    # one run directory under two roots: the root tells them apart
    a, b = (compare.Run(Path(root) / JSA / "version_0", f"{JSA}/version_0", {}, {}, root=Path(root)) for root in ("x", "y"))
    assert compare.run_labels([a, b]) == [f"{JSA} (version_0) [x]", f"{JSA} (version_0) [y]"]


def test_reconstruction_panels_wrap_into_a_grid_under_the_title(tmp_path, monkeypatch):
    """Seven runs: two rows of at most four panels, not one 2800-pixel row; the figure title above the panel titles."""
    png = io.BytesIO()
    Image.new("RGB", (242, 242), (90, 90, 90)).save(png, format="PNG")
    names = [f"{name}-mnist-mlp-K10-some-long-settings-{i}/version_0" for i, name in enumerate(["vae", "vqvae", "jsa", "dvae", "dvae_gumbel", "rws", "vimco"])]
    runs = [compare.Run(tmp_path / name, name, {}, {}, png.getvalue(), "test" if i else "val") for i, name in enumerate(names)]
    saved = []
    original = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), original(fig, *a, **k))[1])
    compare.plot_reconstructions(runs, tmp_path / "reconstructions.png")
    (fig,) = saved
    renderer = FigureCanvasAgg(fig).get_renderer()  # closed: drawn again, as saved
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.images]
    rows = sorted({round(ax.get_position().y0, 3) for ax in panels}, reverse=True)
    per_row = [sum(round(ax.get_position().y0, 3) == y for ax in panels) for y in rows]
    assert len(panels) == 7 and per_row == [4, 3], per_row
    title = fig._suptitle.get_window_extent(renderer)
    panel_titles = [ax.title.get_window_extent(renderer) for ax in panels]
    for ax, panel_title in zip(panels, panel_titles):
        assert title.y0 >= panel_title.y1, ("the figure title overlaps a panel title", ax.title.get_text())
    assert not any(a.overlaps(b) for i, a in enumerate(panel_titles) for b in panel_titles[i + 1:])  # long names wrap
    with Image.open(tmp_path / "reconstructions.png") as image:
        assert 1000 <= image.size[0] <= 1600 and image.size[1] >= 600, image.size  # readable at 100 dpi, not a strip
    assert [compare.grid_shape(n) for n in (1, 3, 4, 5, 7, 9)] == [(1, 1), (1, 3), (1, 4), (2, 3), (2, 4), (3, 3)]


def test_a_report_of_runs_without_images_neither_links_nor_keeps_a_reconstructions_figure(tmp_path):
    """No run logged reconstructions: the figure is not written, the report does not link it, and one an earlier
    report left behind is removed rather than shown as this report's."""
    stale = tmp_path / "out" / "reconstructions.png"
    stale.parent.mkdir()
    stale.write_bytes(b"an earlier report's figure")
    names = ["vae-mnist-mlp-z32/version_0", "jsa-mnist-mlp-K10-L20/version_0"]
    runs = [compare.Run(tmp_path / name, name, {}, {}, None, "test") for name in names]
    assert compare.plot_reconstructions(runs, stale) is False and not stale.exists()


@pytest.mark.parametrize("longest", [100, 1500])
def test_the_report_ranks_by_nll_says_what_is_noise_and_shows_only_readable_reconstructions(longest, tmp_path, monkeypatch):
    """Rows sorted by NLL with the best ranked first (the VQ-VAE's bound and a run scored on validation only are not
    ranked with the tested estimates); the report says when a gap is noise; reconstructions only of runs trained long
    enough to tell them apart (the quick comparison's 100 steps are not: no figure then)."""
    tb = tmp_path / "tb"
    runs = [("vae-mnist-mlp-z32", "VAE", 300, True), ("jsa-mnist-mlp-K10-L20", "JSA", 100, True),
            ("rws-mnist-mlp-K10-S10", "RWS", 200, True), ("vqvae-mnist-mlp-K10", "VQVAE", 50, True),
            ("vimco-mnist-mlp-K10-S10", "VIMCO", 70, False)]
    for i, (name, model, nll, tested) in enumerate(runs):  # the NLL is the fake process id (fake_run)
        fake_run(tb, f"{name}/version_0", T0 + i, nll, {"model_class": model}, tested=tested, steps=longest if model == "JSA" else 100)
    rows, _, _ = run_compare(monkeypatch, tb, tmp_path / "out", "--all")
    assert [(row["model"], row["rank"], row["nll (nats)"]) for row in rows] == [
        ("JSA", "1 (best)", "100.00"), ("RWS", "2", "200.00"), ("VAE", "3", "300.00"), ("VIMCO", "—", "70.00 (val)"),
        ("VQVAE", "—", "≤ 50.00")]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Sorted by NLL, lowest (best) first" in report and "a gap between two rows smaller than the spread between seeds" in report
    assert ("trained for at most 100 steps: the ranking is of barely trained models" in report) == (longest == 100)
    assert (tmp_path / "out" / "reconstructions.png").exists() == (longest >= compare.MIN_STEPS_FOR_RECONSTRUCTIONS)
    assert "Reconstructions are shown for runs of at least" in report


def test_runs_whose_nll_measures_another_thing_are_not_ranked_with_the_others(tmp_path, monkeypatch):
    """Grey pixels' NLL (256 levels) is not binarized pixels' nor a density: only the runs of the most common kind are
    ranked, and the report names the kinds; a run written before data_class was recorded is placed by its name, and
    ranked with the newer runs on its data."""
    tb = tmp_path / "tb"
    runs = [("vae-mnist-mlp-z32", {"binarize": "dynamic", "likelihood": "bernoulli", "data_class": "MNISTDataModule"}, 300),
            ("jsa-mnist-mlp-K10-L20", {"binarize": "dynamic", "likelihood": "bernoulli"}, 200),
            ("vae-mnist-mlp-z32-grey", {"binarize": "none", "likelihood": "discretized_logistic", "data_class": "MNISTDataModule"}, 100),
            ("vae-fashion_mnist-mlp-z32", {"binarize": "dynamic", "likelihood": "bernoulli"}, 150)]
    for i, (name, settings, nll) in enumerate(runs):
        fake_run(tb, f"{name}/version_0", T0 + i, nll, {"model_class": "VAE", **settings})
    rows, _, _ = run_compare(monkeypatch, tb, tmp_path / "out", "--all")
    assert [(row["run"], row["rank"]) for row in rows] == [
        ("vae-mnist-mlp-z32-grey", "—"), ("vae-fashion_mnist-mlp-z32", "—"), ("jsa-mnist-mlp-K10-L20", "1 (best)"),
        ("vae-mnist-mlp-z32", "2")]
    report = " ".join((tmp_path / "out" / "report.md").read_text().split())
    assert "These NLLs measure different things" in report and "mnist, none, discretized_logistic/categorical" in report
    assert "fashion_mnist, dynamic, bernoulli" in report
    assert "only the runs of mnist, dynamic, bernoulli are ranked" in report
    # the discretized logistic's and the categorical's NLLs are exact probabilities of 256 levels: one quantity
    grey = [compare.Run(Path(f"vae-mnist-mlp-z32-grey{tag}"), f"vae-mnist-mlp-z32-grey{tag}",
                        {"binarize": "none", "likelihood": likelihood, "data_class": "MNISTDataModule"}, {})
            for tag, likelihood in [("", "discretized_logistic"), ("-categorical", "categorical"), ("-gaussian", "gaussian")]]
    assert compare.scored_on(grey[0]) == compare.scored_on(grey[1]) != compare.scored_on(grey[2])


def test_a_run_shorter_than_its_logging_interval_counts_the_steps_it_reached():
    """train/loss is logged every trainer.log_every_n_steps (50): a 3-step smoke run logs none, but its validation and
    epoch end log at the 0-based index of its last step (as Lightning logs them), so the report counts 3 steps, not 0
    or 2; a test after it logs at the number of steps trained."""
    scalars = {"val/nll": [(0.0, 2, 500.0)], "train/epoch_time_s": [(0.0, 2, 0.4)], "epoch": [(0.0, 2, 0.0)]}
    assert compare.Run(Path("run"), "run", {}, scalars).trained_steps == 3
    tested = {**scalars, "test/nll": [(0.0, 3, 510.0)], "hp/test_nll": [(0.0, 3, 510.0)], "epoch": [(0.0, 2, 0.0), (0.0, 3, 0.0)]}
    assert compare.Run(Path("run"), "run", {}, tested).trained_steps == 3


def test_a_resumed_runs_settings_are_those_of_its_last_session(tmp_path):
    """A run resumed with another learning rate wrote a second HPARAMS session in a second event file: its settings
    (the report's labels, what it ranks on) are the last session's, not the first's."""
    run = tmp_path / "vae-mnist-mlp-z32" / "version_0"
    for start, lr in ((1, 0.001), (2, 0.0005)):
        with SummaryWriter(run) as writer:
            for summary in hparams({"model_class": "VAE", "lr": lr}, {"hp/val_nll": 0.0}):
                writer._get_file_writer().add_summary(summary)
        (newest,) = [p for p in run.glob("events.out.tfevents.*") if not p.name.endswith(".box.9.0")]
        newest.rename(run / f"events.out.tfevents.{start}.box.9.0")  # named by its start, as TensorBoard names them
    assert compare.read_hparams(run) == {"model_class": "VAE", "lr": 0.0005}


def test_the_wall_time_axis_counts_minutes_from_the_runs_start():
    """The plot's wall time is minutes since the run's first event file: the setup before the first step counts, as a
    user waits for it, and the first train/loss (logged only every log_every_n_steps) does not move the origin."""
    scalars = {"train/loss": [(100.0, 49, 1.0)], "val/nll": [(130.0, 10, 90.0), (190.0, 60, 89.0)]}
    assert compare.minutes_since_start(compare.Run(Path("run"), "run", {}, scalars, start=10.0), [130.0, 190.0]) == [2.0, 3.0]
    assert compare.minutes_since_start(compare.Run(Path("run"), "run", {}, scalars), [130.0, 190.0]) == [0.0, 1.0]


@pytest.mark.slow  # end to end: run by the full suite (README), not the quick loop
def test_compare_experiment_and_report(tmp_path, mnist_dir):
    tiny = [*FAST, "trainer.limit_test_batches=1", "model.test_num_samples=2", "data.batch_size=32"]
    train(["-m", "experiment=compare", "data=mnist", *tiny], tmp_path, mnist_dir)
    root = tmp_path / "logs" / "tensorboard"
    from launch.checks.configs import config_targets
    from tests.launch.test_configs import STANDALONE

    runs = sorted(p.name for p in root.iterdir())
    assert [run.split("-mnist-")[0] for run in runs] == STANDALONE  # one run per model, named by its key settings:
    assert {"dvae-mnist-mlp-K10-reinforce-optimal", "dvae_gumbel-mnist-mlp-K10-tau0.5", "jsa-mnist-mlp-K10-L20",
            "rws-mnist-mlp-K10-S10", "vae-mnist-mlp-z32", "vimco-mnist-mlp-K10-S10", "vqvae-mnist-mlp-K10-autoregressive"} <= set(runs)
    import yaml  # each run names its multirun (launch.hydra_app.note_hydra_job): one sweep directory for all

    jobs = [yaml.safe_load(p.read_text()) for p in sorted(root.glob("*/version_0/hydra_job.yaml"))]
    assert len(jobs) == len(STANDALONE) and len({job["sweep_dir"] for job in jobs}) == 1
    assert sorted(j["job_num"] for j in jobs) == list(range(len(STANDALONE)))

    out = tmp_path / "report"
    result = preloaded.run_module("benchmarks.compare", [str(root), "--out", str(out)], REPO, dict(os.environ), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (out / "report.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| run"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in lines if line.startswith("| ") and line != header]
    assert sorted(row["model"] for row in rows) == sorted(config_targets("model")[name].rsplit(".", 1)[-1] for name in STANDALONE)
    for row in rows:
        assert row["data"] == "mnist" and row["epochs"] == "1", row
        for column in ("nll (nats)", "bpd", "recon MSE", "PSNR (dB)", "ms/step", "params", "s/epoch"):
            number = float(row[column].removeprefix("≤ ").replace(",", ""))  # tested numbers, no "(val)"
            assert math.isfinite(number) and number > 0, (column, row)
        assert row["nll (nats)"].startswith("≤ ") == (row["model"] == "VQVAE")  # the bound is labelled
        # the VQ-VAE has a learned prior (MADE, fit alongside): its uniform-prior bound stands beside the learned one
        if row["model"] == "VQVAE":
            uniform_bound = float(row["nll, uniform prior"].removeprefix("≤ ").replace(",", ""))
            assert math.isfinite(uniform_bound) and uniform_bound > 0
        else:
            assert row["nll, uniform prior"] == "—"

    assert not (out / "reconstructions.png").exists()  # 3 training steps: every reconstruction is the same blur
    for name, min_size in (("val_nll.png", (600, 300)),):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.size >= min_size, (name, image.size)
            assert len(set(image.convert("L").getdata())) > 10, name  # drawn on, not a blank canvas


# ---- the quick comparison (README: A quick comparison of every model) -----------------------------------------


def test_the_quick_comparison_has_every_model_and_logs_on_the_way():
    """experiment=compare_quick: every model of the collection (all but the VQ-VAE's second stage, which needs a
    trained VQ-VAE), several validations and the training scalars within its short run, and a test of seconds."""
    from tests.launch.test_configs import STANDALONE, composed

    cfg = composed(["experiment=compare_quick"])
    assert sorted(cfg.hydra.sweeper.params.model.split(",")) == sorted(STANDALONE)
    trainer, steps = cfg.trainer, cfg.trainer.limit_train_batches
    assert 1 / trainer.val_check_interval >= 4, "validations on the way (a fraction of the epoch), not one dot per model"
    assert steps // trainer.log_every_n_steps >= 10, "train/* and the step time logged (the default 50 logs none in 20 steps)"
    assert cfg.model.test_num_samples <= 100 and trainer.limit_test_batches <= 2
    readme = (REPO / "README.md").read_text()
    assert "python train.py -m experiment=compare_quick log_dir=logs/quick-compare\n" in readme


def val_run(name: str, model: str, values: list[float], start: float = T0) -> compare.Run:
    scalars = {"val/nll": [(start + 60 * (i + 1), 20 * (i + 1), v) for i, v in enumerate(values)],
               "train/loss": [(start + 1, 0, 500.0)]}
    return compare.Run(Path(name), name, {"model_class": model}, scalars, start=start)


def test_the_plot_keeps_the_vqvae_bound_apart_and_names_it_only_when_plotted(tmp_path):
    jsa, vae, vqvae = val_run(JSA, "JSA", [210, 200, 190]), val_run(VAE, "VAE", [205, 195, 185]), val_run("vqvae-mnist", "VQVAE", [450, 440, 435])
    assert [(what, [run.name for run in runs]) for what, runs in compare.val_nll_rows([jsa, vqvae, vae])] == [
        ("val/nll", [JSA, VAE]), ("VQ-VAE: upper bound on val/nll", ["vqvae-mnist"])]
    titles = compare.plot_val_nll([jsa, vae, vqvae], tmp_path / "with.png")
    assert titles == ["val/nll by step", "val/nll by wall time", "VQ-VAE: upper bound on val/nll by step",
                      "VQ-VAE: upper bound on val/nll by wall time"]
    titles = compare.plot_val_nll([jsa, vae], tmp_path / "without.png")
    assert titles == ["val/nll by step", "val/nll by wall time"]  # no VQ-VAE, no word of its bound
    with Image.open(tmp_path / "with.png") as image:
        assert image.size[1] > 700  # two rows


def test_a_run_a_signal_stopped_is_marked_stopped_until_a_resume_trains_on(tmp_path, monkeypatch):
    """SaveOnPreemption logs run/stopped_by_signal = 15 at the steps trained (71): the row says `(stopped)` and the run
    line names the signal, the step and its last.ckpt; training logged after it (a resume, at 0-based index 71) clears it."""
    root = tmp_path / "tensorboard"
    path = fake_run(root, f"{JSA}/version_0", T0, 111, {"model_class": "JSA"}, tested=False, steps=71)
    (path / "checkpoints").mkdir()
    (path / "checkpoints" / "last.ckpt").write_bytes(b"")
    with SummaryWriter(path) as writer:
        writer.add_scalar("run/stopped_by_signal", 15.0, 71)
    rows, compared, _ = run_compare(monkeypatch, root, tmp_path / "report", "--all")
    assert rows[0]["epochs"].endswith("(stopped)")
    line = next(line for line in (tmp_path / "report" / "report.md").read_text().splitlines() if line.startswith("- compared"))
    assert "stopped by SIGTERM at step 71" in line and "version_0/checkpoints/last.ckpt" in line
    with SummaryWriter(path) as writer:  # resumed: it trained on
        writer.add_scalar("train/loss", 1.0, 99)
    rows, _, _ = run_compare(monkeypatch, root, tmp_path / "resumed", "--all")
    assert "stopped" not in rows[0]["epochs"] and "stopped" not in (tmp_path / "resumed" / "report.md").read_text().split("## Runs")[1]


def test_each_rows_test_images_are_shown_and_rows_of_other_images_are_said_apart(tmp_path, monkeypatch):
    """test/num_images, logged with the test NLL (models/base.py), is the row's `images`; tested runs scored on other
    numbers of images (trainer.limit_test_batches) get a note naming the counts."""
    root = tmp_path / "tensorboard"
    for rel, pid, images in ((f"{JSA}/version_0", 111, 640.0), (f"{VAE}/version_0", 112, 10000.0)):
        path = fake_run(root, rel, T0, pid, {"model_class": rel.split("-")[0].upper()})
        with SummaryWriter(path) as writer:
            writer.add_scalar("test/num_images", images, 1)
    rows, _, _ = run_compare(monkeypatch, root, tmp_path / "report", "--all")
    assert sorted(row["images"] for row in rows) == ["10000", "640"]
    assert "different numbers of test images (640, 10000" in (tmp_path / "report" / "report.md").read_text()


def test_the_vqvae_bound_is_marked_in_every_column_derived_from_it():
    scalars = {"val/nll": [(T0, 9, 100.0)], "val/bpd": [(T0, 9, 0.18)]}
    row = compare.table_row(compare.Run(Path("vqvae-mnist/version_0"), "vqvae-mnist", {"model_class": "VQVAE"}, scalars))
    assert row["nll (nats)"].startswith("≤ ") and row["bpd"].startswith("≤ ")


def test_a_resumed_run_counts_the_epoch_it_finished_after_the_resume():
    """10 epochs, interrupted in the 5th and resumed: 9 epoch times (the interrupted epoch timed no whole epoch) but
    Lightning's `epoch` scalar reaches 9 at a training step (and 10 in the test stage after fit, which is no epoch)."""
    scalars = {"epoch": [(T0 + e, 100 * e + 1, float(e)) for e in range(10)] + [(T0 + 11, 1000, 10.0)],
               "train/loss": [(T0 + e, 100 * e + 1, 100.0) for e in range(10)],
               "train/epoch_time_s": [(T0 + e, 100 * e, 30.0) for e in range(10) if e != 4],
               "train/step_time_ms": [(T0, 5, 70.0)]}
    row = compare.table_row(compare.Run(Path(f"{JSA}/version_0"), f"{JSA}/version_0", {"model_class": "JSA"}, scalars))
    assert row["epochs"] == "10" and row["ms/step"] == "70.00" and row["s/epoch"] == "30.00"
    # a last epoch too short to log train/loss (every log_every_n_steps) still validated: its epoch counts
    scalars["epoch"].insert(-1, (T0 + 10, 1055, 10.0))
    scalars["val/nll"] = [(T0 + 10, 1055, 99.0)]
    row = compare.table_row(compare.Run(Path(f"{JSA}/version_0"), f"{JSA}/version_0", {"model_class": "JSA"}, scalars))
    assert row["epochs"] == "11"


def test_each_rows_importance_samples_are_shown_and_rows_of_other_samples_are_said_apart(tmp_path, monkeypatch):
    """The NLL of a row is estimated with S importance samples per image (model.test_num_samples): S is its column, and
    when the rows differ in it the report says so, since a larger S alone lowers the estimate."""
    root = tmp_path / "tensorboard"
    fake_run(root, f"{JSA}/version_0", T0, 111, {"model_class": "JSA", "test_num_samples": 1000})
    fake_run(root, f"{VAE}/version_0", T0 + 5, 222, {"model_class": "VAE", "test_num_samples": 1000})
    rows, _, _ = run_compare(monkeypatch, root, tmp_path / "same", "--all")
    assert [row["S"] for row in rows] == ["1000", "1000"]
    assert "different numbers of importance samples" not in (tmp_path / "same" / "report.md").read_text()
    fake_run(root, f"{JSA}/version_1", T0 + 9, 333, {"model_class": "JSA", "test_num_samples": 2})
    rows, _, _ = run_compare(monkeypatch, root, tmp_path / "other", "--all")
    assert sorted(row["S"] for row in rows) == ["1000", "1000", "2"]
    assert "different numbers of importance samples per image (S = 2, 1000)" in (tmp_path / "other" / "report.md").read_text()
    # a later test of a run with other samples (train.py test --ckpt_path=... --model.test_num_samples=3): the S logged
    # with its NLL (callbacks/hparams.py), not the training's setting; an S logged with an earlier NLL is not taken
    with SummaryWriter(root / f"{VAE}/version_0") as writer:
        writer.add_scalar("test/nll", 128.0, 7)
        writer.add_scalar("test/num_samples", 3.0, 7)
    row = next(row for row in run_compare(monkeypatch, root, tmp_path / "later", "--all")[0] if row["run"].startswith(VAE))
    assert (row["nll (nats)"], row["S"]) == ("128.00", "3")
    with SummaryWriter(root / f"{VAE}/version_0") as writer:
        writer.add_scalar("test/nll", 127.0, 9)  # a test that logged no S (an older run): the training's setting
    row = next(row for row in run_compare(monkeypatch, root, tmp_path / "older", "--all")[0] if row["run"].startswith(VAE))
    assert (row["nll (nats)"], row["S"]) == ("127.00", "1000")


def test_a_run_folder_named_with_a_pipe_and_a_line_break_forges_no_row(tmp_path, monkeypatch):
    """A received run whose folder name holds `|` and a line break shows as one escaped cell of one row."""
    root = tmp_path / "tensorboard"
    forged = "jsa-mnist|K10\n| forged | row |"
    fake_run(root, f"{forged}/version_0", T0, 111, {"model_class": "JSA", "lr": 1e-3})
    fake_run(root, f"{VAE}/version_0", T0 + 5, 111, {"model_class": "VAE", "lr": 1e-3})
    rows, compared, _ = run_compare(monkeypatch, root, tmp_path / "report", "--all")
    lines = (tmp_path / "report" / "report.md").read_text().splitlines()
    assert len([line for line in lines if line.startswith("|")]) == 2 + 2  # the header, its rule and the two runs
    assert not any(line.startswith("| forged") for line in lines)
    assert [line for line in lines if line.startswith(r"| jsa-mnist\|K10 \| forged \| row \| | ")]
    assert len(compared) == 2


@pytest.mark.slow  # a real process: a FIFO would hold it for ever
def test_an_event_file_that_is_a_fifo_is_skipped_in_one_line_never_waited_on(tmp_path):
    root = tmp_path / "tensorboard"
    fake_run(root, f"{VAE}/version_0", T0, 111, {"model_class": "VAE", "lr": 1e-3})
    jsa = fake_run(root, f"{JSA}/version_0", T0 + 5, 111, {"model_class": "JSA", "lr": 1e-3})
    (event,) = jsa.glob("events.out.tfevents.*")
    event.unlink()
    os.mkfifo(event)
    result = preloaded.run_module("benchmarks.compare", [str(root), "--out", str(tmp_path / "report"), "--all"], REPO,
                                  {**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0] == (f"skipped {jsa}: its event files cannot be read (NotARegularFile: {event} is a "
                                             "FIFO (named pipe), not a regular file: it is not read)")
    assert "Traceback" not in result.stderr
