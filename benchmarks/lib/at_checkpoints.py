"""Measurements at trained parameters, for the studies (field/study.py, cache/study.py, long_study.py):

* `step_cost`: ms per training step of every run's model, timed side by side in one process;
* `is_resolution`: the importance-sampled NLL, -log (1/K) Σ_k p(x, h_k) / q(h_k | x), at K = 1000, 5000, 20000 on the
  same test images, with the ELBO, per image for paired differences (docs/vae.md#importance-sampled-log-likelihood);
* `gradient_quality`: every estimator's gradient at one reference run's parameters: tr Cov g of repeated estimates on
  a fixed batch and the SNR ||E g||² / tr Cov g, with ||E g||² estimated without bias as ||ḡ||² - tr Ĉov / n.
"""

from __future__ import annotations

import shlex
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch


def overrides_of(command: str) -> list[str]:
    """The Hydra overrides of a recorded `python train.py ...` command."""
    return [a for a in shlex.split(command)[2:] if not a.startswith(("log_dir=", "ckpt_path=", "+callbacks."))]


def build(overrides: list[str]) -> tuple[Any, Any]:
    """(data module, model) as `python train.py OVERRIDES` builds them."""
    import launch.hydra_app
    from launch.checks.hydra_config import compose

    return launch.hydra_app.data_and_model(compose(overrides))


def best_checkpoint(log_dir: Path) -> Path:
    """The checkpoint a study run's test used: the best on val/nll (configs/callbacks/default.yaml's ModelCheckpoint)."""
    found = [p for p in log_dir.glob("tensorboard/*/version_0/checkpoints/epoch*.ckpt")]
    if len(found) != 1:
        raise SystemExit(f"{log_dir}: expected one best checkpoint, found {[p.name for p in found]}")
    return found[0]


def first_test_images(datamodule: Any, count: int) -> torch.Tensor:
    """The first `count` test images, as the test stage reads them."""
    datamodule.setup("test")
    images = []
    for x, _ in datamodule.test_dataloader():
        images.append(x)
        if sum(len(i) for i in images) >= count:
            break
    return torch.cat(images)[:count]


def step_cost(runs: dict[str, tuple[Path, str]], rounds: int, min_run_time: float = 2.0, batch_size: int = 200,
              device: str = "cpu") -> dict:
    """{"ms_per_step": {run: ms}, "device": name}: one training step (the loss, backward, an Adam update) of every run's
    model at its trained parameters (JSA's chains then accept as in training), on the same batch of training images,
    timed in alternating rounds in this one process (benchmarks/lib/timing.py), so that every run is timed under the
    same conditions: on one CPU thread, or on `device` (e.g. cuda: the model and batch moved there; the timer
    synchronizes the device, and JSA's chain_rows=auto takes the static rows there, docs/jsa.md#static-or-distinct-rows)."""
    from benchmarks.lib.timing import alternating, median_seconds

    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"error: --cost-device {device}: no CUDA device on this machine")
    steps = {}
    for name, (checkpoint, command) in runs.items():
        datamodule, built = build(overrides_of(command))
        model = type(built).load_from_checkpoint(checkpoint, map_location="cpu").to(target).train()
        datamodule.setup("fit")
        x, index = next(iter(datamodule.train_dataloader()))
        x, index = model.likelihood.prepare(x[:batch_size].to(target)), index[:batch_size].to(target)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)

        def step(model=model, optimizer=optimizer, x=x, index=index) -> None:
            loss = model.training_loss(x, index)["loss"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        steps[name] = step
    torch.manual_seed(0)
    timed = alternating(steps, lambda fn: median_seconds(fn, min_run_time=min_run_time, warm_up=2), rounds, reference=next(iter(steps)))
    for name, (seconds, _) in timed.items():
        print(f"  {name}: {1e3 * seconds:.1f} ms per step", flush=True)
    device_name = torch.cuda.get_device_name(target) if target.type == "cuda" else "cpu, one thread"
    return {"ms_per_step": {name: 1e3 * seconds for name, (seconds, _) in timed.items()}, "device": device_name,
            "torch": torch.__version__}


def is_resolution(runs: dict[str, tuple[Path, str]], images: int, sample_counts: list[int], chunk: int = 50,
                  device: str = "cpu") -> dict:
    """{"is_resolution": {run: {K: {"nll": per-image -log p(x) estimates, "elbo": per-image ELBOs, "seconds"}}}} for
    runs {name: (checkpoint, recorded command)}, measured on `device`; the same images and seed for every K and run."""
    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"error: --is-device {device}: no CUDA device on this machine")
    results: dict[str, dict] = {}
    for name, (checkpoint, command) in runs.items():
        datamodule, built = build(overrides_of(command))
        model = type(built).load_from_checkpoint(checkpoint, map_location="cpu").to(target)
        x = model.likelihood.prepare(first_test_images(datamodule, images)).to(target)
        results[name] = {}
        for count in sample_counts:
            began = time.perf_counter()
            nll, elbo = importance_estimates(model, x, count, chunk)
            results[name][str(count)] = {"nll": nll.tolist(), "elbo": elbo.tolist(), "seconds": time.perf_counter() - began}
            print(f"  {name}: K={count}: NLL {nll.mean():.2f} ({time.perf_counter() - began:.0f} s)", flush=True)
    return {"is_resolution": results}


def unmeasured_runs(out: Path, logs: Path, wanted: Callable[[dict], bool], path: Path, settings: dict[str, Any],
                    what: str) -> Iterator[tuple[dict, Path, dict]]:
    """(record, best checkpoint, measured) for each finished run of a study (a record under out/runs/ for which
    `wanted(record)`) that `path` does not hold measured with the same `settings`; `measured`, the file's runs (none
    where its settings differ), is the caller's to update and write after each run, so an interrupted pass resumes. A
    run whose logs did not survive (made on another machine) is named and skipped: its record still counts."""
    from benchmarks.lib import runner

    kept = runner.read_json(path) if path.exists() else {}
    measured = kept.get("runs", {}) if kept.get("settings") == settings else {}
    for record in runner.read_records(out).values():  # each a run's record, named by its file (others skipped, named)
        if not wanted(record) or record["name"] in measured:
            continue
        try:
            checkpoint = best_checkpoint(logs / record["name"])
        except SystemExit as missing:
            print(f"{what} of {record['name']}: skipped ({missing})", flush=True)
            continue
        yield record, checkpoint, measured


def measure_finished_runs(out: Path, logs: Path, wanted: Callable[[dict], bool], images: int, sample_counts: list[int],
                          device: str = "cpu") -> None:
    """`is_resolution` for every finished run of a study not measured before with the same settings
    (`unmeasured_runs`), kept in out/is-resolution.json, one entry per run. The draws differ between devices, so the
    device is one of the settings."""
    import json

    from common.files import write_file

    path = out / "is-resolution.json"
    settings = {"images": images, "samples": sorted(sample_counts), "device": device}
    for record, checkpoint, measured in unmeasured_runs(out, logs, wanted, path, settings, "IS resolution"):
        print(f"IS resolution of {record['name']}", flush=True)
        run = {record["name"]: (checkpoint, record["command"])}
        measured.update(is_resolution(run, images, settings["samples"], device=device)["is_resolution"])
        write_file(path, json.dumps({"settings": settings, "runs": measured}) + "\n")


def importance_estimates(model: Any, x: torch.Tensor, num_samples: int, chunk: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image of x: the importance-sampled -log p(x) and the ELBO from `num_samples` samples, seed 0 (the same
    draws for every model and count), in chunks of `chunk` images."""
    torch.manual_seed(0)
    nll, elbo = [], []
    with torch.inference_mode():
        for part in x.split(chunk):
            estimate = model.importance_estimate(part, None, num_samples)
            nll.append(estimate[0])
            elbo.append(estimate[1])
    return torch.cat(nll), torch.cat(elbo)


def noise_and_signal(draws: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tr Cov g, ||E g||² / tr Cov g) from n independent draws (n, P) of a gradient g. ||ḡ||² overstates ||E g||² by
    tr Cov g / n (the mean's own variance), so that much is taken off: the ratio's numerator is unbiased."""
    variance = draws.var(0).sum()
    signal = draws.mean(0).square().sum() - variance / draws.shape[0]
    return variance, signal / variance


def gradient_quality(checkpoints: dict[int, Path], reference_command: str, models: list[str], batches: int,
                     repeats: int) -> dict:
    """{"gradients": {epoch: {model: {"encoder"/"decoder": {"variance", "snr"}}}}}: each estimator (a Hydra model
    name) given the reference run's parameters after each epoch, `repeats` estimates on each of `batches` training
    batches; the numbers are means over the batches."""
    from callbacks.gradient_variance import flat_gradients
    from checkpoints.loader import load_checkpoint_file

    base = [o for o in overrides_of(reference_command) if not o.startswith(("model=", "model.prior="))]
    results: dict[str, dict] = {}
    for epoch, checkpoint in checkpoints.items():
        saved = load_checkpoint_file(checkpoint)
        state = saved["state_dict"]
        results[str(epoch)] = {}
        for name in models:
            datamodule, model = build([*base, f"model={name}", "model.prior=uniform"])
            if hasattr(model, "temperature_at"):  # Gumbel-softmax as trained at that step: its annealed temperature then
                model.temperature = model.temperature_at(saved["global_step"])
            parameters = dict(model.named_parameters())  # buffers (REINFORCE's running baseline) keep their own values
            missing = [key for key in model.load_state_dict(state, strict=False).missing_keys if key in parameters]
            if missing:
                raise SystemExit(f"{name} has parameters the reference run lacks: {missing}")
            encoder = [p for p in model.encoder_parameters() if p.requires_grad]
            ids = {id(p) for p in encoder}
            groups = {"encoder": encoder, "decoder": [p for p in model.parameters() if p.requires_grad and id(p) not in ids]}
            datamodule.setup("fit")
            torch.manual_seed(0)
            per_batch: dict[str, list[tuple[float, float]]] = {"encoder": [], "decoder": []}
            for number, (x, index) in enumerate(datamodule.train_dataloader()):
                if number == batches:
                    break
                x = model.likelihood.prepare(x)
                draws = [flat_gradients({"": model.gradient_estimates(x, index)[""]}, groups) for _ in range(repeats)]
                for group in groups:
                    variance, snr = noise_and_signal(torch.stack([d[f"{group}_grad_variance"] for d in draws]))
                    per_batch[group].append((variance.item(), snr.item()))
            results[str(epoch)][name] = {group: {"variance": statistics.mean(v for v, _ in values),
                                                 "snr": statistics.mean(s for _, s in values)}
                                         for group, values in per_batch.items()}
            print(f"  epoch {epoch}, {name}: " + ", ".join(f"{g} variance {r['variance']:.3g} SNR {r['snr']:.3g}"
                                                           for g, r in results[str(epoch)][name].items()), flush=True)
    return {"gradients": results}
