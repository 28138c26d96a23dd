"""Building blocks the models share, one module each: `backbones` (encoder/decoder networks),
`likelihoods` (p(x | decoder output)), `priors` (p(h) over discrete codes: uniform, factorized, MADE, gated PixelCNN), `quantizer` (the VQ-VAE's vector
quantizer, plain torch), `code_usage` (statistics
of a discrete latent), `optimizers` (the optimizer factory a model trains with, checked when it is built). Import from the modules, e.g. `from models.components.likelihoods import ...`."""
