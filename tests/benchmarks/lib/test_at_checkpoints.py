"""The field study's measurement at shared parameters (benchmarks/lib/at_checkpoints.py) against a known answer."""

from __future__ import annotations

import torch

from benchmarks.lib.at_checkpoints import noise_and_signal


def test_noise_and_signal_recovers_a_known_gradient_distribution():
    """Draws g = μ + σ ε: tr Cov = P σ², SNR = ||μ||² / (P σ²). Few draws per measurement (n = 4), as the study
    takes them, averaged over many measurements: the signal's correction for the mean's own variance matters there
    (without it the SNR comes out near 0.25 + 0.25 instead of 0.25)."""
    torch.manual_seed(0)
    num_params, sigma, draws, measurements = 50, 2.0, 4, 4000
    mean = torch.full((num_params,), 0.5 * sigma)  # ||μ||² = 0.25 P σ²
    samples = mean + sigma * torch.randn(measurements, draws, num_params)
    results = [noise_and_signal(samples[i]) for i in range(measurements)]
    variance = torch.stack([v for v, _ in results]).mean()
    signal = torch.stack([v * s for v, s in results]).mean()  # the unbiased numerator, ||μ||²
    expected_variance = num_params * sigma ** 2
    assert abs(variance / expected_variance - 1) < 0.02
    assert abs(signal / (mean.square().sum()) - 1) < 0.05
    assert abs(signal / expected_variance - 0.25) < 0.0125


def test_refit_q_trains_a_fresh_encoder_against_the_frozen_decoder_and_its_q_improves():
    """benchmarks/lib/refit_q.py: the refit starts from a re-initialized encoder (not the model's own q), changes only
    the encoder (the decoder and prior are the model's, the model itself untouched), is reproducible from its seed,
    and its q becomes a better proposal for the frozen decoder: the RWS loss falls and the 50-sample NLL of the
    refitted q is below that of the fresh one."""
    from benchmarks.lib.at_checkpoints import build, first_test_images, importance_estimates
    from benchmarks.lib.refit_q import refit_q

    # the model is initialized from the run's seed (1), as train.py does; the refit's fresh encoder from refit_q's (0)
    datamodule, model = build(["experiment=jsa_paper", "model=jsa", "seed=1", "data.batch_size=20", "data.num_workers=0"])
    datamodule.setup("fit")
    with torch.no_grad():  # a decoder whose likelihood depends strongly on the code: a sharp posterior, which a fresh,
        for p in model.decoder.parameters():  # near-uniform q proposes poorly (an untrained one's is near-uniform too)
            p.mul_(3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fresh, _ = refit_q(model, datamodule, steps=0)
    refitted, losses = refit_q(model, datamodule, steps=30, lr=1e-2)
    again, _ = refit_q(model, datamodule, steps=2, lr=1e-2)
    same, _ = refit_q(model, datamodule, steps=2, lr=1e-2)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the model is left as it was
    encoder = {f"encoder.{k}" for k in model.encoder.state_dict()}
    for k, v in refitted.state_dict().items():
        if k in encoder and v.is_floating_point():
            assert not torch.equal(v, before[k]) and not torch.equal(v, fresh.state_dict()[k]), k
        elif k not in encoder:
            assert torch.equal(v, before[k]), f"{k} moved: only q is refitted"
    assert any(not torch.equal(fresh.state_dict()[k], before[k]) for k in encoder)  # re-initialized, not the model's q
    assert all(torch.equal(v, same.state_dict()[k]) for k, v in again.state_dict().items())  # the seed fixes the refit
    assert sum(losses[-5:]) < sum(losses[:5])
    x = model.likelihood.prepare(first_test_images(datamodule, 20))
    assert importance_estimates(refitted, x, 50)[0].mean() < importance_estimates(fresh, x, 50)[0].mean()
