"""Lightning callbacks for what every model shares but no model's algorithm needs to know: image grids, the HPARAMS tab,
training speed, the test stage's cost, gradient variance, SG-MCMC sample collection, and the checkpoint callback
(Lightning's, with last.ckpt after every validation); those that guard a run (the NaN guard, preemption, the DDP
process group) are in callbacks/guards/. configs/callbacks/default.yaml lists the set both front ends switch on;
launch/run_builder.py adds `SaveOnPreemption`. What makes a checkpoint whole (random state, atomic files, resume checks) is
in checkpoints/, and every model adds it.
"""

from callbacks.gradient_variance import GradientVariance
from callbacks.guards.nonfinite import NonFiniteLossGuard
from callbacks.guards.preemption import SaveOnPreemption
from callbacks.hparams import HparamsWithMetrics
from callbacks.images import ImageGrids
from callbacks.posterior_samples import PosteriorSamples
from callbacks.progress import LineProgressBar, progress_bar
from callbacks.speed import TrainingSpeed
from callbacks.testing_cost import TestCost
from callbacks.validation_checkpoint import ValidationCheckpoint

__all__ = [
    "GradientVariance",
    "HparamsWithMetrics",
    "ImageGrids",
    "LineProgressBar",
    "NonFiniteLossGuard",
    "PosteriorSamples",
    "SaveOnPreemption",
    "TestCost",
    "TrainingSpeed",
    "ValidationCheckpoint",
    "progress_bar",
]
