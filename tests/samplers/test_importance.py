"""The importance-sampled log-likelihood against closed forms.

Toy model: the VAE's own code (prior, likelihood, log weights) with a linear decoder,
so that p(x) = N(x; b, W W^T + sigma^2 I) is known exactly.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models import VAE
from samplers import importance_log_likelihood, log_mean_exp

SIGMA = 0.5


class FixedGaussianEncoder(nn.Module):
    """Returns the same (mean, log-variance) for every input: a hand-set q(z | x)."""

    def __init__(self, mean: torch.Tensor, log_var: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("params", torch.cat([mean, log_var], dim=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.params.expand(x.shape[0], -1)


def linear_gaussian_vae(weight: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor, log_var: torch.Tensor) -> VAE:
    model = VAE(data_shape=(1, 2, 2), latent_dim=2, likelihood="gaussian", sigma=SIGMA).double()
    linear = nn.Linear(2, 4).double()
    linear.weight.data.copy_(weight)
    linear.bias.data.copy_(bias)
    model.decoder = nn.Sequential(linear, nn.Unflatten(-1, (1, 2, 2)))
    model.encoder = FixedGaussianEncoder(mean, log_var)
    return model


def exact_log_px(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    cov = weight @ weight.T + SIGMA**2 * torch.eye(4, dtype=weight.dtype)
    return torch.distributions.MultivariateNormal(bias, cov).log_prob(x.flatten(1))


# Orthogonal columns make the exact posterior diagonal, so the VAE's q can equal it.
WEIGHT = torch.tensor([[2.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
BIAS = torch.tensor([0.1, -0.2, 0.3, 0.0], dtype=torch.float64)
X = torch.tensor([[1.0, 0.5, -0.5, 0.2]], dtype=torch.float64).view(1, 1, 2, 2)


def exact_posterior(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean (1, 2) and covariance (2, 2) of p(z | x) for one image x."""
    precision = torch.eye(2, dtype=torch.float64) + WEIGHT.T @ WEIGHT / SIGMA**2
    cov = torch.linalg.inv(precision)
    return (cov @ WEIGHT.T @ (x.flatten() - BIAS) / SIGMA**2).view(1, 2), cov


def test_exact_posterior_gives_exact_likelihood_for_any_sample_size():
    # q = p(z | x): every weight p(x, z) / q(z | x) equals p(x), so one sample is exact.
    mean, cov = exact_posterior(X)
    model = linear_gaussian_vae(WEIGHT, BIAS, mean, torch.log(torch.diagonal(cov)).view(1, 2))
    exact = exact_log_px(X, WEIGHT, BIAS)
    for num_samples in (1, 7, 100):
        log_w = model.log_importance_weights(X, model.posterior(X), num_samples)
        torch.testing.assert_close(log_w, exact.expand(num_samples, 1), rtol=0, atol=1e-6)


def test_estimate_is_below_and_converges_to_exact_log_likelihood():
    # A poor proposal (the prior): the estimate is biased low and the bias shrinks with S.
    torch.manual_seed(0)
    model = linear_gaussian_vae(WEIGHT, BIAS, torch.zeros(1, 2, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64))
    exact = exact_log_px(X, WEIGHT, BIAS).item()
    errors = {}
    for num_samples in (4, 64, 4096):
        estimates = torch.stack(
            [importance_log_likelihood(lambda n: model.log_importance_weights(X, model.posterior(X), n), num_samples, 512).log_likelihood for _ in range(50)]
        )
        mean, stderr = estimates.mean().item(), estimates.std().item() / math.sqrt(50)
        assert mean < exact + 3 * stderr, f"S={num_samples}: estimate {mean} above log p(x)={exact}"
        errors[num_samples] = abs(mean - exact)
    assert errors[4] > errors[64] > errors[4096]
    assert errors[4096] < 0.02


def test_a_wider_proposal_samples_with_its_standard_deviation():
    """q = N(posterior mean, 0.5^2 I), log-variance log 0.25, wider than p(z | x) (standard deviations 0.24, 0.33): z must
    be drawn as mu + exp(log_var / 2) eps for the weights p(x, z) / q(z) to average to p(x): with S = 4096 the estimate
    is within 0.05 of the exact log p(x), where a draw of standard deviation 0.25 (the variance) misses it by far more."""
    mean, _ = exact_posterior(X)
    model = linear_gaussian_vae(WEIGHT, BIAS, mean, torch.full((1, 2), math.log(0.25), dtype=torch.float64))
    torch.manual_seed(0)
    estimate = log_mean_exp(model.log_importance_weights(X, model.posterior(X), 4096))
    torch.testing.assert_close(estimate, exact_log_px(X, WEIGHT, BIAS), rtol=0, atol=0.05)


def test_gaussian_likelihood_reports_nll_and_elbo_in_nats_of_8_bit_data():
    """nll and elbo of a dequantized draw x~ = prepare(x), shifted by the bin width's D log 256 (D = 4):
    nll = D log 256 - log mean_s w_s and elbo = mean_s log w_s - D log 256, so nll <= -elbo (Jensen). One seed
    replays the same draw and weights (S = one chunk) for both and by hand."""
    model = linear_gaussian_vae(WEIGHT, BIAS, torch.zeros(1, 2, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64))
    x = torch.tensor([200.0, 150.0, 50.0, 100.0], dtype=torch.float64).view(1, 1, 2, 2) / 255
    num_samples, offset = model.eval_chunk_size, 4 * math.log(256)
    torch.manual_seed(0)
    x_tilde = model.likelihood.prepare(x)
    log_w = model.log_importance_weights(x_tilde, model.posterior(x_tilde), num_samples)
    torch.manual_seed(0)
    nll = model.nll(x, num_samples)
    torch.manual_seed(0)
    elbo = model.elbo(x, num_samples)
    torch.testing.assert_close(nll, offset - log_mean_exp(log_w))
    torch.testing.assert_close(elbo, log_w.mean(0) - offset)
    assert nll <= -elbo


def test_chunking_does_not_change_the_estimate_and_elbo_is_below():
    log_w = torch.randn(1000, 8, dtype=torch.float64) * 3
    draws = iter(log_w.split(128))  # hand out the same weights in chunks
    chunked = importance_log_likelihood(lambda n: next(draws), 1000, 128)
    torch.testing.assert_close(chunked.log_likelihood, log_mean_exp(log_w))
    torch.testing.assert_close(chunked.elbo, log_w.mean(0))
    assert torch.all(chunked.elbo <= chunked.log_likelihood)  # Jensen


def test_log_mean_exp_is_stable_for_large_values():
    log_w = torch.tensor([[1000.0], [1000.0]])
    assert log_mean_exp(log_w).item() == pytest.approx(1000.0)
