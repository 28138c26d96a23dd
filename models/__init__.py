"""LightningModules of the collection and the pieces they share."""

from models.base import LatentVariableModel
from models.categorical import CategoricalLatentModel
from models.dvae import DiscreteVAE
from models.jsa import JSA
from models.vae import VAE
from models.vqvae import VQVAE

__all__ = ["CategoricalLatentModel", "DiscreteVAE", "JSA", "LatentVariableModel", "VAE", "VQVAE"]
