"""The variance of each model's gradient estimate, in the same tags for every model: `train/encoder_grad_variance`,
`train/decoder_grad_variance`, and `train/encoder_grad_variance_<variant>` for another encoder estimator (`_no_cv`).

Every `every_n_steps` steps the model draws `repeats` independent estimates on that batch (`gradient_estimates`), and
the trace of their sample covariance, Σ_i Var[g_i], is logged over the encoder's parameters (`encoder_parameters()`)
or all the others. It runs under a forked random state, so training's draws are unchanged.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import lightning as L
import torch
from torch import Tensor


def flat_gradients(losses: dict[str, Tensor], groups: dict[str, list[torch.nn.Parameter]]) -> dict[str, Tensor]:
    """{"<group>_grad_variance<variant>": the gradient of each loss for each parameter group, as one vector}."""
    params = [p for group in groups.values() for p in group]
    flat = {}
    for variant, loss in losses.items():  # the variants may share the encoder's pass: keep the graph
        grads = iter(torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True))
        for group, group_params in groups.items():
            if variant and group != "encoder":  # a variant (another control variate) changes only the encoder's estimate
                break
            parts = [torch.zeros_like(p) if g is None else g for p, g in zip(group_params, grads)]
            flat[f"{group}_grad_variance{variant}"] = torch.cat([g.flatten() for g in parts])
    return flat


def trace_of_covariance(draws: list[Tensor]) -> Tensor:
    """Σ_i Var[g_i] over the components of repeated draws g (unbiased sample variance)."""
    return torch.stack(draws).var(0).sum()


class GradientVariance(L.Callback):
    """Logs the trace of the covariance of the encoder's and the decoder's gradient estimates.

    Args:
        every_n_steps: measure on every this many training steps (0: never); each measurement is written
            to the loggers at its step, whatever the trainer's `log_every_n_steps`.
        repeats: independent gradient estimates per measurement (>= 2).
    """

    def __init__(self, every_n_steps: int = 200, repeats: int = 8) -> None:
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0, got {every_n_steps}")
        if repeats < 2:
            raise ValueError(f"repeats must be >= 2 to measure a variance, got {repeats}")
        self.every_n_steps, self.repeats = every_n_steps, repeats

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if not self.every_n_steps or (trainer.global_step + 1) % self.every_n_steps or not trainer.loggers:
            return
        start = time.perf_counter()
        x, index = batch
        encoder = [p for p in pl_module.encoder_parameters() if p.requires_grad]
        encoder_ids = {id(p) for p in encoder}
        groups = {"encoder": encoder, "decoder": [p for p in pl_module.parameters() if p.requires_grad and id(p) not in encoder_ids]}
        devices = [pl_module.device] if pl_module.device.type == "cuda" else []
        draws: dict[str, list[Tensor]] = defaultdict(list)
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            x = pl_module.likelihood.prepare(x)  # (may draw dequantization noise: inside the forked state)
            for _ in range(self.repeats):
                with trainer.precision_plugin.train_step_context():  # the estimator as trained (e.g. under bf16 autocast)
                    losses = pl_module.gradient_estimates(x, index)
                if not losses:
                    return  # the model has no gradient estimate to measure (e.g. the VQ-VAE)
                for name, gradient in flat_gradients(losses, groups).items():
                    draws[name].append(gradient)
        # Straight to the loggers at this step (rank 0's shard under DDP): a value given to self.log in a
        # batch-start hook would be written again at the next logged step. The measurement's own time is
        # logged too, so that a comparison at equal training time can leave it out.
        metrics = {f"train/{name}": trace_of_covariance(gradients).item() for name, gradients in draws.items()}
        metrics["train/grad_variance_time_s"] = time.perf_counter() - start
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
