"""Lightning callbacks for what every model shares but no model's algorithm needs to know:
the NaN guard, random-state checkpointing, image grids, the HPARAMS tab, training speed, gradient
variance, and the
collection of SG-MCMC samples.

`default_callbacks()` is the set both front ends switch on (Hydra: configs/callbacks/default.yaml;
LightningCLI: train.py); `RandomStateCheckpoint` is added by every model itself
(`LatentVariableModel.configure_callbacks`), because exact resume cannot work without it.
"""

from callbacks.gradient_variance import GradientVariance
from callbacks.hparams import HparamsWithMetrics
from callbacks.images import ImageGrids
from callbacks.nonfinite import NonFiniteLossGuard
from callbacks.posterior_samples import PosteriorSamples
from callbacks.progress import LineProgressBar, progress_bar
from callbacks.random_state import RandomStateCheckpoint
from callbacks.speed import TrainingSpeed


def default_callbacks() -> list:
    """The callbacks of `configs/callbacks/default.yaml` (besides checkpointing), with their defaults."""
    return [NonFiniteLossGuard(), ImageGrids(), HparamsWithMetrics(), TrainingSpeed(), GradientVariance(), progress_bar()]


__all__ = [
    "GradientVariance",
    "HparamsWithMetrics",
    "ImageGrids",
    "LineProgressBar",
    "NonFiniteLossGuard",
    "PosteriorSamples",
    "RandomStateCheckpoint",
    "TrainingSpeed",
    "default_callbacks",
    "progress_bar",
]
