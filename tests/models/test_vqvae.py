"""The VQ-VAE as a model: both layouts, the uniform-prior likelihood bound, learning on real MNIST,
code-usage metrics through a real Trainer, checkpoints with the codebook statistics."""

from __future__ import annotations

import math
from pathlib import Path
from unittest.mock import PropertyMock, patch

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from checkpoints.errors import CheckpointError
from checkpoints.trainer import SafeCheckpoints

from datamodules import MNISTDataModule
from models import VQVAE
from tests.conftest import mnist_slice, says, train_on_batch


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
    assert {"loss", "recon_per_dim", "codebook", "commitment", "perplexity", "restarts"} <= set(terms)
    torch.testing.assert_close(terms["loss"], terms["recon_per_dim"] + terms["codebook"] + 0.25 * terms["commitment"])


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


@pytest.mark.slow  # trains on real MNIST: the full suite's, not the quick loop's
def test_vqvae_learns_on_real_mnist(mnist_dir):
    x, index = mnist_slice(mnist_dir)
    model = small_vqvae(num_categories=32, code_dim=8, hidden_channels=32, ema=False, dead_code_threshold=0.0)
    first, last = train_on_batch(model, x, index, steps=100)
    # Per-pixel BCE: log 2 = 0.69 for an untrained decoder; 100 steps on one batch get well below.
    assert first["recon_per_dim"] > 0.6 and last["recon_per_dim"] < 0.25, (first["recon_per_dim"], last["recon_per_dim"])
    assert last["perplexity"] > 1.5  # more than one code in use


def _trainer(tmp_path: Path, max_steps: int, **kwargs) -> L.Trainer:
    return L.Trainer(
        max_steps=max_steps, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=0, logger=False,
        callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True), SafeCheckpoints()], enable_progress_bar=False,
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



# ---- the learned prior: the second stage (docs/priors.md#vq-vaes-second-stage) ----------------

AUTOENCODER = ("encoder.", "decoder.", "quantizer.")


def autoencoder_state(model: VQVAE) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if k.startswith(AUTOENCODER)}


def test_fitting_the_prior_alongside_leaves_the_autoencoder_bit_for_bit(mnist_dir):
    """The prior's loss is on sg[codes] and its parameters are its own: the autoencoder trains exactly as without it."""
    x, index = mnist_slice(mnist_dir, 32)
    states = {}
    for prior in ("uniform", "autoregressive"):
        model = small_vqvae(backbone="mlp", prior=prior)
        torch.manual_seed(1)  # the dead-code restarts draw from the same stream in both runs
        first, last = train_on_batch(model, x, index, steps=5)
        states[prior] = autoencoder_state(model)
    assert last["prior_nll"] < first["prior_nll"]  # and the prior learns
    for name, value in states["uniform"].items():
        assert torch.equal(value, states["autoregressive"][name]), name


def test_frozen_stage_trains_the_prior_only_and_the_bound_uses_it(mnist_dir):
    x, index = mnist_slice(mnist_dir, 32)
    model = small_vqvae(backbone="conv", prior="pixelcnn", prior_hidden=8, prior_layers=2, autoencoder_epochs=1)
    before = autoencoder_state(model)
    prior_before = [p.clone() for p in model.prior.parameters()]
    with patch.object(VQVAE, "current_epoch", new_callable=PropertyMock, return_value=1):  # past autoencoder_epochs
        first, last = train_on_batch(model, x, index, steps=5)
    assert set(first) == {"loss", "prior_nll"} and last["prior_nll"] < first["prior_nll"]
    for name, value in autoencoder_state(model).items():
        assert torch.equal(value, before[name]), f"{name} moved in the frozen stage"
    assert any(not torch.equal(a, b) for a, b in zip(prior_before, model.prior.parameters()))

    model.eval()
    posterior = model.posterior(x)
    log_px = model.likelihood.log_prob(x, posterior.decoded)
    log_prior = model.prior.log_prob(posterior.quantized.codes.flatten(1))
    torch.testing.assert_close(model.nll(x), -(log_px + log_prior))  # the bound with the learned prior
    torch.testing.assert_close(model.uniform_prior_bound(x, posterior), -log_px + 49 * math.log(16))
    assert model.sample_prior(3).shape == (3, 1, 28, 28)


def test_checkpoints_from_before_the_priors_load():
    """A uniform-prior VQ-VAE stores no prior: state dicts written before the priors existed load strictly."""
    old = {k: v for k, v in small_vqvae().state_dict().items() if not k.startswith("prior.")}
    assert old.keys() == small_vqvae().state_dict().keys()
    small_vqvae().load_state_dict(old)


def test_second_stage_from_a_checkpoint(mnist_dir, tmp_path):
    stage1 = small_vqvae(backbone="mlp")
    path = tmp_path / "vqvae.ckpt"
    torch.save({"state_dict": stage1.state_dict(), "model_class": "models.vqvae.VQVAE"}, path)
    stage2 = small_vqvae(backbone="mlp", prior="autoregressive", autoencoder_checkpoint=str(path))
    assert stage2.autoencoder_epochs == 0  # frozen from the start
    stage2.load_autoencoder(str(path))
    for name, value in autoencoder_state(stage1).items():
        assert torch.equal(stage2.state_dict()[name], value)
    other = small_vqvae(backbone="mlp", num_categories=8, prior="autoregressive")
    with pytest.raises(CheckpointError, match="holds another VQ-VAE .*use the backbone, num_categories"):
        other.load_autoencoder(str(path))
    relu_elsewhere = small_vqvae(backbone="mlp", activation="leaky_relu", prior="autoregressive")
    torch.save({"state_dict": stage1.state_dict(), "model_class": "models.vqvae.VQVAE", "hyper_parameters": dict(stage1.hparams)}, path)
    with pytest.raises(CheckpointError) as refused:
        relu_elsewhere.load_autoencoder(str(path))  # the same shapes, another network
    says(refused.value, "activation", "'relu'", "'leaky_relu'", "stage-1 settings: model.activation=relu", "(LightningCLI: --model.activation=relu)")
    with pytest.raises(CheckpointError) as refused:  # with its hyperparameters, the settings it was trained with
        other.load_autoencoder(str(path))
    says(refused.value, f"num_categories={stage1.hparams['num_categories']} there, 8 here",
         f"stage-1 settings: model.num_categories={stage1.hparams['num_categories']}")
    with pytest.raises(CheckpointError, match="model.autoencoder_checkpoint: no file"):  # one line, not a traceback
        other.load_autoencoder(str(tmp_path / "missing.ckpt"))
    with pytest.raises(ValueError, match="a second stage fits a learned prior; set model.prior"):
        small_vqvae(autoencoder_epochs=2)
    with pytest.raises(ValueError) as refused:
        small_vqvae(prior="pixelcnn", autoencoder_epochs=0)
    says(refused.value, "autoencoder_epochs=0", "model.autoencoder_checkpoint")


def test_a_freeze_mid_run_is_refused_under_ddp_without_unused_parameter_search():
    """After autoencoder_epochs the autoencoder gets no gradients, which DDP's default strategy refuses: say so at set-up."""
    from types import SimpleNamespace

    model = small_vqvae(backbone="mlp", prior="autoregressive", autoencoder_epochs=2)
    for kwargs, refused in (({}, True), ({"find_unused_parameters": True}, False)):
        trainer = SimpleNamespace(datamodule=None, world_size=2, strategy=SimpleNamespace(_ddp_kwargs=kwargs))
        with patch.object(VQVAE, "trainer", new_callable=PropertyMock, return_value=trainer):
            if refused:
                with pytest.raises(MisconfigurationException) as refused:
                    model.setup("fit")
                says(refused.value, "model.autoencoder_epochs=2", "DDP", "ddp_find_unused_parameters_true")
            else:
                model.setup("fit")
