"""The refit-q check of a trained categorical model: is an arm's lower NLL its decoder's, or an artifact of its q?
A poorer proposal q overstates -log p(x) more, so each final decoder gets a fresh q (encoder re-initialized from one
seed) trained by one objective for every arm, RWS's wake-q step (a self-normalized estimate of
−∇ KL(p_θ(h | x) ‖ q(h | x)); no chain, no cache), decoder and prior frozen, and the NLL is estimated again.
Used by benchmarks/studies/verdict_study.py (--refit-q); kept in --out/refit-q.json, written after each run, so an
interrupted pass resumes."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.lib.at_checkpoints import build, first_test_images, importance_estimates, overrides_of, unmeasured_runs
from samplers.multi_sample import rws_surrogate


def refit_q(model: Any, datamodule: Any, steps: int, lr: float = 3e-4, seed: int = 0, num_samples: int = 20,
            device: str = "cpu") -> tuple[Any, list[float]]:
    """(a copy of `model` whose encoder was re-initialized with `seed` and trained `steps` Adam steps of the RWS
    wake-q loss with `num_samples` proposals, θ frozen; that loss at every step)."""
    model = copy.deepcopy(model).to(device).train()
    torch.manual_seed(seed)
    for module in model.encoder.modules():  # a fresh q: the arm's own q must not carry over
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    encoder = list(model.encoder_parameters())
    trainable = {id(p) for p in encoder}
    for p in model.parameters():
        p.requires_grad_(id(p) in trainable)
    optimizer = torch.optim.Adam(encoder, lr=lr)
    losses: list[float] = []
    while len(losses) < steps:
        for x, _ in datamodule.train_dataloader():
            x = model.likelihood.prepare(x.to(device))
            _, log_joint, log_proposal = model.score_proposals(x, model.posterior(x), num_samples)
            loss = -rws_surrogate(log_joint, log_proposal).mean()  # its gradient reaches φ only: θ is frozen
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))  # off the training path: a measurement
            if len(losses) == steps:
                break
    return model.eval(), losses


def refit_finished_runs(out: Path, logs: Path, wanted: Callable[[dict], bool], steps: int, images: int, samples: int,
                        device: str = "cpu", lr: float = 3e-4) -> None:
    """`refit_q` for the best checkpoint (under logs/<run>) of every finished run of a study (a record under out/runs/
    for which `wanted(record)`) not refitted before with the same settings, then its per-image NLL and ELBO at
    `samples` importance samples on the first `images` test images, seed 0 (the draws of at_checkpoints'
    is_resolution); out/refit-q.json keeps them with the loss's mean over the last tenth of the steps."""
    from common.files import write_file

    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"error: --is-device {device}: no CUDA device on this machine")
    path = out / "refit-q.json"
    settings = {"steps": steps, "images": images, "samples": samples, "device": device, "lr": lr, "seed": 0,
                "objective": "rws wake-q, 20 proposals"}
    for record, checkpoint, measured in unmeasured_runs(out, logs, wanted, path, settings, "refit-q"):
        began = time.perf_counter()
        datamodule, built = build(overrides_of(record["command"]))
        datamodule.setup("fit")
        model = type(built).load_from_checkpoint(checkpoint, map_location="cpu")
        refitted, losses = refit_q(model, datamodule, steps, lr=lr, device=device)
        x = refitted.likelihood.prepare(first_test_images(datamodule, images)).to(device)
        nll, elbo = importance_estimates(refitted, x, samples)
        tail = losses[-max(1, len(losses) // 10):]
        measured[record["name"]] = {"nll": nll.tolist(), "elbo": elbo.tolist(), "final_loss": sum(tail) / len(tail),
                                    "seconds": time.perf_counter() - began}
        print(f"refit-q of {record['name']}: NLL {nll.mean():.2f} at {samples} samples ({time.perf_counter() - began:.0f} s)", flush=True)
        write_file(path, json.dumps({"settings": settings, "runs": measured}) + "\n")
