"""The models a user picks (one module each) on the shared base `LatentVariableModel` (models/base.py) and, for
JSA, RWS, VIMCO and the discrete VAEs, the categorical latent model they share (models/categorical.py); the
building blocks every model may use (backbones, likelihoods, priors, the vector quantizer, code-usage statistics)
are in models/components/.

Registration is by definition: a `LatentVariableModel` subclass in a module of models/ registers itself when its class
is defined (`LatentVariableModel.__init_subclass__`, checkpoints/registry.py). Importing this package imports every
module of models/, so `import models` registers them all, and exports each under its class name: `from models import
JSA`, `_target_: models.JSA` in configs/model/, `--model=JSA` in LightningCLI. Adding a model is its module, its
config, its README row and its test (CONTRIBUTING.md): nothing here.
"""

import importlib
import pkgutil

from checkpoints.registry import is_registered, registered
from models.base import LatentVariableModel

for _module in pkgutil.iter_modules(__path__):
    if not _module.ispkg:  # models/components/ holds what models are built of, not models
        importlib.import_module(f"{__name__}.{_module.name}")

globals().update({cls.__name__: cls for cls in registered("model")})
__all__ = ["LatentVariableModel", *(cls.__name__ for cls in registered("model")), "is_registered_model"]


def is_registered_model(class_path: object) -> bool:
    """Whether a class path (as a checkpoint names its model, e.g. `models.jsa.JSA` or `models.JSA`) is one of the
    registered models: checked before a checkpoint's class path is imported, since importing runs code."""
    return is_registered(class_path, "model")
