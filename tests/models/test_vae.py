"""The Gaussian VAE: shapes, learning on real MNIST, evaluation bounds, checkpoint/resume."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from checkpoints.trainer import SafeCheckpoints

from datamodules import MNISTDataModule
from models import VAE
from tests.conftest import mnist_slice, narrow_mlps, train_on_batch


@pytest.mark.parametrize("backbone", ["mlp", "conv"])
@pytest.mark.parametrize("data_shape", [(1, 28, 28), (3, 32, 32)])
def test_shapes(backbone, data_shape):
    model = VAE(data_shape=data_shape, backbone=backbone, latent_dim=4, hidden_channels=16, likelihood="gaussian")
    x = torch.rand(3, *data_shape)
    assert model.reconstruct(x).shape == x.shape
    assert model.sample_prior(5).shape == (5, *data_shape)
    assert model.log_importance_weights(x, model.posterior(x), 7).shape == (7, 3)
    terms = model.training_loss(x, torch.arange(3))
    assert terms["loss"].shape == () and torch.isfinite(terms["loss"])


def test_training_lowers_the_loss_on_real_mnist(mnist_dir):
    torch.manual_seed(0)
    x, _ = mnist_slice(mnist_dir, 256)
    first, last = train_on_batch(narrow_mlps(VAE(latent_dim=16)), x, torch.arange(len(x)), steps=60)
    # A freshly initialized decoder scores ~ 784 log 2 = 543 nats; 60 Adam steps on one
    # batch reach well under 250.
    assert first["loss"] > 450 and last["loss"] < 250, (first["loss"], last["loss"])


def test_evaluation_nll_is_at_most_negative_elbo(mnist_dir):
    torch.manual_seed(0)
    model = VAE(latent_dim=8, val_num_samples=50)
    x, _ = mnist_slice(mnist_dir, 32)
    logged = {}
    model.log = lambda name, value, **kw: logged.__setitem__(name, value)
    model.evaluation_step((x, torch.arange(32)), stage="val")
    metrics = {name: m.compute() for name, m in model.eval_metrics["val"].items()}
    assert set(logged) == {"val/nll", "val/bpd", "val/elbo", "val/recon_mse", "val/psnr", "val/num_images"}
    assert logged["val/num_images"] == 32  # the batch's images, which Lightning sums over the batches and processes
    assert metrics["nll"] <= -metrics["elbo"]
    torch.testing.assert_close(metrics["bpd"], metrics["nll"] / (784 * torch.log(torch.tensor(2.0))))
    # PSNR of the split's mean squared error (pixels in [0, 1]): 10 log10(1 / MSE).
    torch.testing.assert_close(metrics["psnr"], -10 * torch.log10(metrics["recon_mse"]))


def test_bernoulli_likelihood_refuses_grey_pixels(mnist_dir, tmp_path):
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="none")
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, default_root_dir=tmp_path)
    with pytest.raises(MisconfigurationException, match="binarize"):  # a setting the trainer refuses: one line in train.py
        trainer.fit(VAE(likelihood="bernoulli"), datamodule=dm)


def _trainer(tmp_path: Path, max_steps: int) -> L.Trainer:
    return L.Trainer(
        max_steps=max_steps,
        limit_train_batches=3,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True), SafeCheckpoints()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_resume_from_checkpoint_continues_training(mnist_dir, tmp_path):
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32)
    first = VAE(latent_dim=4, val_num_samples=2)
    _trainer(tmp_path, max_steps=3).fit(first, datamodule=dm)
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 3 and ckpt["model_class"] == "models.vae.VAE"

    resumed = VAE(latent_dim=4, val_num_samples=2)
    trainer = _trainer(tmp_path, max_steps=6)
    trainer.fit(resumed, datamodule=dm, ckpt_path=tmp_path / "last.ckpt")
    assert trainer.global_step == 6 and trainer.current_epoch == 2
    # Adam's step counter went on from the checkpoint's 3, not from 0.
    adam_steps = {int(s["step"]) for s in trainer.optimizers[0].state.values()}
    assert adam_steps == {6}

    restored = VAE.load_from_checkpoint(tmp_path / "last.ckpt")
    for name, tensor in resumed.state_dict().items():
        torch.testing.assert_close(restored.state_dict()[name], tensor, msg=name)


@pytest.mark.parametrize("test_seed", [2**64, -1, True])
def test_a_test_seed_outside_numpys_range_is_refused_when_the_model_is_built(test_seed):
    """Not after training, when the test stage would first seed with it (torch's and numpy's OverflowError)."""
    with pytest.raises(ValueError, match=r"^test_seed(=True: expected an integer| must be an integer in \[0, 4294967295\] \(numpy's seed range\), got )"):
        VAE(test_seed=test_seed)


def test_training_loss_is_the_reparameterized_elbo_with_the_closed_form_kl():
    """On a tiny VAE: the decoded z equals mu + sigma * eps for the same eps (seeded draw), `kl` equals
    torch.distributions' KL(N(mu, sigma) || N(0, 1)) summed over latents, `recon` is -log p(x | z) and
    `loss` their sum, all from the encoder's own mu and log sigma^2."""
    torch.manual_seed(0)
    model = narrow_mlps(VAE(data_shape=(1, 2, 2), latent_dim=3, likelihood="gaussian"), width=8)
    with torch.no_grad():  # mu far from 0 and sigma far from 1, so each part of z and of the KL shows
        model.encoder.net[-1].bias.copy_(torch.tensor([1.0, -0.8, 0.5, 1.2, -1.5, 0.9]))
    x = torch.rand(4, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    mean, log_var = model.posterior(x)
    assert log_var.abs().min() > 0.2 and mean.abs().min() > 0.1
    decoded = []
    model.decoder.register_forward_hook(lambda module, args, out: decoded.append(args[0].detach()))
    torch.manual_seed(7)
    eps = torch.randn_like(mean)
    torch.manual_seed(7)
    terms = model.training_loss(x, torch.arange(4))

    sigma = torch.exp(0.5 * log_var)
    torch.testing.assert_close(decoded[0], mean + sigma * eps)
    posterior, prior = torch.distributions.Normal(mean, sigma), torch.distributions.Normal(0.0, 1.0)
    kl = torch.distributions.kl_divergence(posterior, prior).sum(-1)
    torch.testing.assert_close(terms["kl"], kl.mean())
    recon = -model.likelihood.log_prob(x, model.decoder(mean + sigma * eps)).mean()
    torch.testing.assert_close(terms["recon"], recon)
    torch.testing.assert_close(terms["loss"], kl.mean() + recon)
