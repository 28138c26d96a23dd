"""LightningModules of the collection and the pieces they share."""

from models.base import LatentVariableModel
from models.categorical import CategoricalLatentModel
from models.jsa import JSA
from models.vae import VAE

__all__ = ["CategoricalLatentModel", "JSA", "LatentVariableModel", "VAE"]
