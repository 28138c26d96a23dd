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
