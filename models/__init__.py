"""The models a user picks (one module each) on the shared base `LatentVariableModel` (models/base.py) and, for
JSA, RWS, VIMCO and the discrete VAEs, the categorical latent model they share (models/categorical.py); the
building blocks every model may use (backbones, likelihoods, priors, the vector quantizer, code-usage statistics)
are in models/components/.

The registry: LightningCLI's `--model=NAME` finds every class imported here, and each Hydra
config in configs/model/ names one with `_target_`. Adding a model: its module, its config, one
line here, one row in README.md (CONTRIBUTING.md).
"""

from checkpoints.registry import is_registered, register
from models.base import LatentVariableModel
from models.dvae import DiscreteVAE
from models.jsa import JSA
from models.rws import RWS
from models.vae import VAE
from models.vimco import VIMCO
from models.vqvae import VQVAE

__all__ = ["LatentVariableModel", "DiscreteVAE", "JSA", "RWS", "VAE", "VIMCO", "VQVAE", "is_registered_model"]

register("model", DiscreteVAE, JSA, RWS, VAE, VIMCO, VQVAE)  # the only models a checkpoint may name (checkpoints/registry.py)


def is_registered_model(class_path: object) -> bool:
    """Whether a class path (as a checkpoint names its model, e.g. `models.jsa.JSA` or `models.JSA`) is one of the
    registered models: checked before a checkpoint's class path is imported, since importing runs code."""
    return is_registered(class_path, "model")
