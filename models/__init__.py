"""LightningModules of the collection and the pieces they share."""

from models.base import LatentVariableModel
from models.categorical import CategoricalLatentModel
from models.jsa import JSA
from models.vae import VAE
from models.vqvae import VQVAE

__all__ = ["CategoricalLatentModel", "JSA", "LatentVariableModel", "VAE", "VQVAE"]
