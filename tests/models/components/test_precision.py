"""Mixed precision and torch.compile (models/components/precision.py, `model.compile`).

Under bf16 autocast the networks run in bfloat16 and every log-probability in float32: the unit tests
compare each one against the same computation from the network outputs cast to float32 by hand (a sum
of 784 Bernoulli terms in bfloat16 misses by nats). The smoke tests train and evaluate every model
through train.py's `run()` with `trainer.precision=bf16-mixed`, and with `model.compile=true`; the networks inductor
compiles are checked against the eager networks on a small JSA.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import launch.hydra_app
from models import JSA, VAE, VQVAE
from models.components.likelihoods import build_likelihood
from models.components.quantizer import _nearest
from samplers import index_cached_mis
from tests.conftest import mnist_slice, narrow_mlps
from tests.launch.test_configs import STANDALONE, composed

BF16 = dict(device_type="cpu", dtype=torch.bfloat16)


@pytest.mark.parametrize("name", ["bernoulli", "gaussian", "categorical", "discretized_logistic"])
def test_every_likelihood_sums_bf16_outputs_in_float32(name):
    torch.manual_seed(0)
    likelihood = build_likelihood(name, data_shape=(1, 28, 28))
    x = likelihood.prepare(torch.randint(0, 256, (4, 1, 28, 28)) / 255)
    x = (x > 0.5).float() if likelihood.requires_binary_data else x
    out = (3 * torch.randn(4, likelihood.params_per_channel, 28, 28)).bfloat16()
    log_p = likelihood.log_prob(x, out)
    assert log_p.dtype == torch.float32
    torch.testing.assert_close(log_p, likelihood.log_prob(x, out.float()), rtol=0, atol=1e-3)


def test_jsa_scores_mis_candidates_in_float32_under_bf16_autocast(mnist_dir: Path):
    torch.manual_seed(0)
    x, _ = mnist_slice(mnist_dir, 16)
    model = JSA(mis_steps=8, cache_size=16)
    latent = torch.randint(0, model.num_categories, (16, 9, model.num_latents))
    with torch.autocast(**BF16):
        assert model.decoder_output(latent[:, 0]).dtype == torch.bfloat16  # autocast is on: the networks run in bf16
        log_q = model.posterior(x)
        log_joint = model.log_joint(x, latent)
        sample = index_cached_mis(log_q, lambda h: model.log_joint(x, h), 8)
        decoded = model.decoder_output(latent.flatten(0, 1)).unflatten(0, (16, 9))
        logits = model.encoder_logits(x)
    assert log_q.dtype == log_joint.dtype == sample.log_target.dtype == sample.log_proposal.dtype == torch.float32
    # The same bf16 network outputs, summed in float32 by hand.
    by_hand = model.likelihood.log_prob(x.unsqueeze(1), decoded.float()) + model.log_prior(latent)
    torch.testing.assert_close(log_joint, by_hand, rtol=0, atol=1e-3)
    torch.testing.assert_close(log_q, logits.float().log_softmax(-1), rtol=0, atol=1e-6)


def test_vae_weights_and_vqvae_codes_are_float32_under_bf16_autocast(mnist_dir: Path):
    torch.manual_seed(0)
    x, _ = mnist_slice(mnist_dir, 8)
    vae = VAE(latent_dim=8)
    with torch.autocast(**BF16):
        mean, log_var = vae.posterior(x)
        weights = vae.log_importance_weights(x, (mean, log_var), 3)
    assert mean.dtype == log_var.dtype == weights.dtype == torch.float32

    # Points between two codes, whose distances differ by less than bf16 resolves at |z|^2 ~ 64: the codes
    # must be float32's.
    codebook = torch.randn(512, 64)
    pairs = torch.randint(0, 512, (256, 2))
    z = 0.5 * (codebook[pairs[:, 0]] + codebook[pairs[:, 1]]) + 0.01 * torch.randn(256, 64)
    with torch.autocast(**BF16):
        codes = _nearest(z, codebook)
    assert torch.equal(codes, _nearest(z, codebook))
    vqvae = VQVAE()
    with torch.autocast(**BF16):
        quantized = vqvae.quantize(x)
    assert quantized.quantized.dtype == torch.float32


def smoke_run(model: str, tmp_path: Path, *overrides: str) -> dict[str, float]:
    cfg = composed([
        f"model={model}", *overrides, "run_test=true", "data.batch_size=16", "trainer.max_steps=2", "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "model.val_num_samples=2", "model.test_num_samples=2",
        "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false", f"log_dir={tmp_path}",
    ])
    return launch.hydra_app.run(cfg)


def test_gradient_variance_measures_the_estimator_under_the_trainers_precision(mnist_dir: Path, tmp_path: Path):
    """Under bf16-mixed the gradient-variance callback draws the estimates under the same autocast as training."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from callbacks import GradientVariance
    from datamodules import MNISTDataModule

    autocast_in_estimates = []

    class RecordingVAE(VAE):
        def gradient_estimates(self, x, index):
            autocast_in_estimates.append(torch.is_autocast_enabled("cpu"))
            return super().gradient_estimates(x, index)

    trainer = L.Trainer(max_steps=1, limit_val_batches=0, precision="bf16-mixed", logger=CSVLogger(tmp_path), enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, callbacks=[GradientVariance(every_n_steps=1, repeats=2)])
    trainer.fit(RecordingVAE(latent_dim=4), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=8))
    assert autocast_in_estimates == [True, True]


@pytest.mark.slow
@pytest.mark.parametrize("model", STANDALONE)
def test_every_model_trains_and_tests_under_bf16_mixed(model, mnist_dir, tmp_path):
    metrics = smoke_run(model, tmp_path, "trainer.precision=bf16-mixed")
    assert {"test/nll", "test/bpd", "test/elbo"} <= set(metrics)  # trained, validated, then tested
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    assert 100 < metrics["test/nll"] < 2000  # nats of a binarized MNIST image, from an untrained model


@pytest.mark.slow
def test_every_model_trains_and_tests_with_compiled_networks(mnist_dir, tmp_path, monkeypatch):
    compiled = []
    original = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile",
                        lambda self, *a, **k: (compiled.append(type(self).__name__), original(self, *a, **{**k, "backend": "aot_eager"})))
    resets, reset = [], torch._dynamo.reset
    monkeypatch.setattr(torch._dynamo, "reset", lambda: (resets.append(True), reset()))
    for model in STANDALONE:  # one after the other in one process, as a multirun's jobs
        # Dynamo's capture and AOTAutograd's forward and backward graphs (aot_eager), run eagerly: what a model adds is
        # what Dynamo traces (the frames counted below); the kernels inductor writes for the networks' layers are
        # checked against the eager networks in the test below.
        compiled.clear()
        torch._dynamo.utils.counters.clear()
        metrics = smoke_run(model, tmp_path / model, "model.compile=true")
        assert all(math.isfinite(value) for value in metrics.values()), (model, metrics)
        assert len(compiled) == 2, (model, compiled)  # the encoder and the decoder, once each
        frames = torch._dynamo.utils.counters["frames"]
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2, model  # they ran compiled
        assert frames["ok"] == frames["total"], (model, dict(frames))  # every call traced, none left eager at a limit
    assert len(resets) == len(STANDALONE)  # launch.run_builder cleared the previous job's graphs
    # Without launch.run_builder, as in a notebook, models of other shapes built one after the other still run compiled
    # (configure_model's limit): with Dynamo's default of 8, the fifth's networks ran eagerly. Dynamo's graph count
    # and its limit are the same whatever backend runs the graphs: the eager backend, not inductor's code generation.
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, *a, **k: original(self, *a, **{**k, "backend": "eager"}))
    reset()
    torch._dynamo.utils.counters.clear()
    for num_categories in range(2, 8):
        lightning_module = launch.hydra_app.data_and_model(composed(["model=jsa", "model.compile=true", f"model.num_categories={num_categories}"]))[1]
        lightning_module.configure_model()
        x = torch.bernoulli(torch.full((4, 1, 28, 28), 0.2))
        for training in (True, False):
            lightning_module.train(training)
            with torch.set_grad_enabled(training):
                lightning_module.training_loss(x, torch.arange(4)) if training else lightning_module.nll(x, num_samples=2)
    frames = torch._dynamo.utils.counters["frames"]
    assert frames["ok"] == frames["total"], dict(frames)


@pytest.mark.slow  # inductor compiles the encoder and the decoder, in training and in evaluation
def test_networks_compiled_with_inductor_compute_what_the_eager_networks_do():
    """model.compile=true (configure_model, inductor): JSA's compiled encoder and decoder give the eager networks'
    training loss terms and gradients, and the test nll under no_grad, from one seed; every network call ran a
    compiled graph (none left eager)."""
    import copy

    torch.manual_seed(0)
    eager = narrow_mlps(JSA(data_shape=(1, 8, 8), num_latents=3, num_categories=3, code_dim=2, mis_steps=3, cache_size=4,
                            chain_rows="static", compile=True), width=8)
    compiled = copy.deepcopy(eager)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled.configure_model()
    x = torch.bernoulli(torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0)))
    results = []
    for model in (eager, compiled):
        model.train()
        torch.manual_seed(1)
        terms = model.training_loss(x, torch.arange(4))
        model.zero_grad()
        terms["loss"].backward()
        model.eval()
        torch.manual_seed(2)
        with torch.no_grad():
            nll = model.nll(x, num_samples=2)
        results.append((terms, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}, nll))
    (terms, grads, nll), (terms_c, grads_c, nll_c) = results
    assert terms.keys() == terms_c.keys() and grads.keys() == grads_c.keys() and grads
    for name in terms:
        torch.testing.assert_close(terms_c[name], terms[name], rtol=1e-5, atol=1e-5, msg=name)
    for name in grads:
        torch.testing.assert_close(grads_c[name], grads[name], rtol=1e-5, atol=1e-5, msg=name)
    torch.testing.assert_close(nll_c, nll, rtol=1e-5, atol=1e-5)
    frames = torch._dynamo.utils.counters["frames"]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 4 and frames["ok"] == frames["total"], dict(frames)
    torch._dynamo.reset()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for a machine without a GPU")
def test_the_gpu_benchmark_says_in_one_line_that_it_needs_a_gpu_and_names_the_smoke_run():
    from benchmarks.speed import gpu_scaling

    with pytest.raises(SystemExit) as exit_:
        gpu_scaling.main([])
    message = str(exit_.value.code)
    assert message.startswith("error: --device cuda: no CUDA device") and "--tiny" in message and "\n" not in message
