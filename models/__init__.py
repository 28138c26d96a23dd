"""The models a user picks, one module each, on `LatentVariableModel` (models/base.py) and, for the categorical ones,
`CategoricalLatentModel` (models/categorical.py); shared building blocks are in models/components/.

A subclass registers itself when defined (`LatentVariableModel.__init_subclass__`, common/registry.py). Importing
this package imports every module of models/ and exports each class by name: `from models import JSA`,
`_target_: models.JSA`, `--model=JSA`. Adding a model needs nothing here (CONTRIBUTING.md).
"""

import importlib
import pkgutil

from common.registry import is_registered, registered
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
