"""Lightning callbacks for what every model shares but no model's algorithm needs to know: the NaN guard,
preemption, image grids, the HPARAMS tab, training speed, the test stage's cost, gradient variance, the
collection of SG-MCMC samples, and the checkpoint callback (Lightning's, with last.ckpt after every validation). Those that guard a run rather than measure it (the NaN guard, preemption, the DDP process
group) are in callbacks/guards/.

configs/callbacks/default.yaml lists the set both front ends switch on (launch/rules.py reads it for LightningCLI);
`SaveOnPreemption` (SIGTERM, Ctrl-C) is added by the launch side (launch/rules.py). The callbacks without which a
checkpoint is not whole (random state, atomic files, resume checks) live in checkpoints/, and every model adds them.
"""

import sys

from callbacks import testing_cost
from callbacks.gradient_variance import GradientVariance
from callbacks.guards import nonfinite, preemption, process_group
from callbacks.guards.nonfinite import NonFiniteLossGuard
from callbacks.guards.preemption import SaveOnPreemption
from callbacks.hparams import HparamsWithMetrics
from callbacks.images import ImageGrids
from callbacks.posterior_samples import PosteriorSamples
from callbacks.progress import LineProgressBar, progress_bar
from callbacks.speed import TrainingSpeed
from callbacks.testing_cost import TestCost
from callbacks.validation_checkpoint import ValidationCheckpoint

# Where these modules were before: a LightningCLI run's config.yaml names each callback by its module
# (`class_path: callbacks.nonfinite.NonFiniteLossGuard`), and `fit -c <an older run>/config.yaml` still loads it.
# Kept for good: a run's config outlives the layout.
MOVED_MODULES = {"callbacks.nonfinite": nonfinite, "callbacks.preemption": preemption,
                 "callbacks.process_group": process_group, "callbacks.test_cost": testing_cost}
for _old, _module in MOVED_MODULES.items():
    sys.modules.setdefault(_old, _module)
del _old, _module

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
