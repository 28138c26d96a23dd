"""The VQ-VAE as a model: both layouts, the uniform-prior likelihood bound, learning on real MNIST,
code-usage metrics through a real Trainer, checkpoints with the codebook statistics."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import MNISTDataModule
from models import VQVAE
from tests.conftest import mnist_slice, train_on_batch


def small_vqvae(**kwargs) -> VQVAE:
    torch.manual_seed(0)
    return VQVAE(**{"num_categories": 16, "code_dim": 4, "hidden_channels": 16, **kwargs})


@pytest.mark.parametrize(
    ("backbone", "data_shape", "code_shape"),
    [("conv", (1, 28, 28), (7, 7)), ("conv", (3, 32, 32), (8, 8)), ("mlp", (1, 28, 28), (20,))],
)
def test_layouts(backbone, data_shape, code_shape):
    model = small_vqvae(backbone=backbone, data_shape=data_shape, likelihood="gaussian")
    x = torch.rand(3, *data_shape)
    assert model.num_latents == math.prod(code_shape)
    model.eval()  # a training forward moves the EMA codebook between the calls compared below
    vq = model.quantize(x)
    assert vq.codes.shape == (3, *code_shape)
    assert model.decoder_output(vq.codes).shape == x.shape
    torch.testing.assert_close(model.encode(x), vq.codes)
    torch.testing.assert_close(model.decode(vq.codes), model.reconstruct(x))  # z_q is the looked-up code
    assert model.sample_prior(5).shape == (5, *data_shape)
    terms = model.train().training_loss(x, torch.arange(3))
    assert {"loss", "recon", "codebook", "commitment", "perplexity", "restarts"} <= set(terms)
    torch.testing.assert_close(terms["loss"], terms["recon"] + terms["codebook"] + 0.25 * terms["commitment"])


def test_invalid_settings_fail_early():
    with pytest.raises(ValueError, match="num_categories"):
        VQVAE(num_categories=1)
    with pytest.raises(ValueError, match="grid"):
        VQVAE(backbone="conv", num_latents=20)


def test_gradients_reach_encoder_decoder_and_codebook():
    model = small_vqvae(ema=False)
    model.training_loss(torch.rand(4, 1, 28, 28).round(), torch.arange(4))["loss"].backward()
    for name in ("encoder", "decoder", "quantizer.codebook"):
        grads = [p.grad for n, p in model.named_parameters() if n.startswith(name)]
        assert grads and all(g is not None and torch.isfinite(g).all() for g in grads), name
        assert any(g.abs().sum() > 0 for g in grads), name


@pytest.mark.parametrize("likelihood", ["bernoulli", "gaussian"])
def test_nll_is_the_uniform_prior_bound_whatever_the_sample_count(likelihood):
    """-log p(x) <= -log p(x | z_q(x)) + n log K: the importance weights of the point-mass posterior."""
    model = small_vqvae(likelihood=likelihood).eval()
    x = torch.rand(5, 1, 28, 28)
    x = x.round() if likelihood == "bernoulli" else x
    with torch.no_grad():
        bound = -model.likelihood.log_prob(x, model.decoder_output_quantized(model.quantize(x).quantized)) + 49 * math.log(16)
        log_w = model.log_importance_weights(x, model.posterior(x), 7)
    assert log_w.shape == (7, 5)
    torch.testing.assert_close(-log_w, bound.expand(7, -1))
    nll = math.log(7) - log_w.logsumexp(0)  # what the shared evaluation computes from them
    torch.testing.assert_close(nll, bound)


def test_vqvae_learns_on_real_mnist(mnist_dir):
    x, index = mnist_slice(mnist_dir)
    model = small_vqvae(num_categories=32, code_dim=8, hidden_channels=32, ema=False, dead_code_threshold=0.0)
    first, last = train_on_batch(model, x, index, steps=100)
    # Per-pixel BCE: log 2 = 0.69 for an untrained decoder; 100 steps on one batch get well below.
    assert first["recon"] > 0.6 and last["recon"] < 0.25, (first["recon"], last["recon"])
    assert last["perplexity"] > 1.5  # more than one code in use


def _trainer(tmp_path: Path, max_steps: int, **kwargs) -> L.Trainer:
    return L.Trainer(
        max_steps=max_steps, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=0, logger=False,
        callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], enable_progress_bar=False,
        enable_model_summary=False, log_every_n_steps=1, **kwargs,
    )


def test_code_usage_metrics_and_checkpoint_round_trip(mnist_dir, tmp_path):
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32)
    model = small_vqvae(ema=True, kmeans_init=True, dead_code_threshold=0.5)
    trainer = _trainer(tmp_path, max_steps=3)
    trainer.fit(model, datamodule=dm)
    metrics = trainer.callback_metrics
    for tag in ("train/perplexity", "train/perplexity_epoch", "train/codes_used", "val/perplexity", "val/codes_used",
                "train/restarts", "val/nll", "val/bpd"):
        assert tag in metrics and torch.isfinite(metrics[tag]), tag
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=False)
    for name in ("codebook", "ema_cluster_size", "ema_embed_sum", "initialized"):
        torch.testing.assert_close(ckpt["state_dict"][f"quantizer.{name}"], getattr(model.quantizer, name))
    restored = VQVAE.load_from_checkpoint(tmp_path / "last.ckpt")
    assert restored.quantizer.ema and bool(restored.quantizer.initialized)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(restored.state_dict()[name], tensor, msg=name)

    assert 1.0 <= metrics["val/perplexity"] <= 16 and 0.0 < metrics["val/codes_used"] <= 1.0
    # val/perplexity is pooled over the validation epoch: recompute it from the two val batches' codes.
    model.eval()  # Lightning leaves the model in train mode; a training forward would move the EMA codebook
    codes = torch.cat([model.quantize(x).codes.flatten() for x, _ in list(dm.val_dataloader())[:2]])
    probs = torch.bincount(codes, minlength=16) / codes.numel()
    expected = torch.exp(-(probs * probs.clamp_min(1e-12).log()).sum())
    torch.testing.assert_close(metrics["val/perplexity"], expected, rtol=0.1, atol=0)  # fresh binarization

