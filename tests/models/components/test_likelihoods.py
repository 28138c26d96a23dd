"""The likelihoods for 8-bit images against exact answers: each discrete one is a probability over the 256
levels of every pixel (sums to 1 in float64), bits/dim by hand, gradients reach every parameter; the
gaussian's learned sigma per image, channel or pixel."""

from __future__ import annotations

import math

import pytest
import torch

from models.components.likelihoods import (
    CategoricalLikelihood,
    DiscretizedLogisticLikelihood,
    GaussianLikelihood,
    bits_per_dim,
    build_likelihood,
)

ALL_LEVELS = torch.arange(256, dtype=torch.float64) / 255


def log_prob_of_every_level(likelihood, out: torch.Tensor) -> torch.Tensor:
    """(256, N) log P(level k) for N one-pixel, one-channel images with decoder outputs out (N, P, 1, 1)."""
    return torch.stack([likelihood.log_prob(torch.full((out.shape[0], 1, 1, 1), float(k)), out) for k in ALL_LEVELS])


@pytest.mark.parametrize("likelihood", [DiscretizedLogisticLikelihood(num_mixtures=1), DiscretizedLogisticLikelihood(num_mixtures=4), CategoricalLikelihood()],
                         ids=["logistic-1", "logistic-4", "categorical"])
def test_discrete_likelihoods_sum_to_one_over_the_256_levels(likelihood):
    torch.manual_seed(0)
    out = (3 * torch.randn(200, likelihood.params_per_channel, 1, 1)).double()
    out[:20] *= 4  # sharp and flat mixtures, means far outside [-1, 1]
    log_p = log_prob_of_every_level(likelihood, out)
    assert torch.isfinite(log_p).all()
    torch.testing.assert_close(log_p.logsumexp(0), torch.zeros(200, dtype=torch.float64), rtol=0, atol=1e-9)



# (mixture logits, means in [-1, 1], log-scales), all at PixelCNN++'s floor -7: mass on one or two levels, where the
# float32 rounding of the bin edges shows most. 0 is the edge between levels 127 and 128; 1/255 is level 128's centre.
SHARP_LOGISTICS = {
    "edge-127-128": ([0.0], [0.0], [-7.0]),
    "centre-128": ([0.0], [1 / 255], [-7.0]),
    "minus-half": ([0.0], [-0.5], [-7.0]),
    "near-0": ([0.0], [-0.999], [-7.0]),
    "between-254-255": ([0.0], [1 - 1 / 255], [-7.0]),
    "at-1": ([0.0], [1.0], [-7.0]),
    "mixture": ([0.0, 0.5, -1.0], [0.0, -0.5, 0.3], [-7.0, -7.0, -7.0]),
}


@pytest.mark.parametrize("params", SHARP_LOGISTICS.values(), ids=SHARP_LOGISTICS.keys())
def test_discretized_logistic_sums_to_one_in_float32_at_the_smallest_scale(params):
    """Level k's upper edge and level k + 1's lower edge must be the same float, or the 256 masses do not
    telescope in float32 (edges computed apart as c_k ± 1/255 differ by a rounding)."""
    logits, means, log_scales = (torch.tensor(v) for v in params)
    likelihood = DiscretizedLogisticLikelihood(num_mixtures=len(logits))
    out = torch.cat([logits, means, log_scales]).view(1, -1, 1, 1).expand(256, -1, -1, -1)
    levels = (torch.arange(256) / 255).view(256, 1, 1, 1)  # float32, as the data module gives them
    log_p = likelihood.log_prob(levels, out)
    assert log_p.dtype == torch.float32 and torch.isfinite(log_p).all()
    assert abs(log_p.double().exp().sum().item() - 1) < 2e-6

def test_discretized_logistic_matches_its_definition_by_hand():
    """One logistic, mean 0, scale 0.1: P(k) = σ((c+1/255)/s) - σ((c-1/255)/s), the end levels take the tails."""
    likelihood = DiscretizedLogisticLikelihood(num_mixtures=1)
    s = 0.1
    out = torch.tensor([0.0, 0.0, math.log(s)], dtype=torch.float64).view(1, 3, 1, 1)
    for k in (0, 100, 127, 255):
        c = 2 * k / 255 - 1
        upper = 1.0 if k == 255 else torch.sigmoid(torch.tensor((c + 1 / 255) / s, dtype=torch.float64))
        lower = 0.0 if k == 0 else torch.sigmoid(torch.tensor((c - 1 / 255) / s, dtype=torch.float64))
        got = likelihood.log_prob(torch.full((1, 1, 1, 1), k / 255, dtype=torch.float64), out).exp()
        torch.testing.assert_close(got, torch.as_tensor(upper - lower, dtype=torch.float64).view(1), rtol=1e-10, atol=0)


def test_bits_per_dim_by_hand():
    """A uniform categorical gives every 8-bit pixel probability 1/256: exactly 8 bits per dimension."""
    likelihood = CategoricalLikelihood()
    x = torch.randint(0, 256, (2, 3, 4, 4)).double() / 255
    nll = -likelihood.log_prob(x, torch.zeros(2, 3 * 256, 4, 4, dtype=torch.float64))
    torch.testing.assert_close(nll, torch.full((2,), 48 * math.log(256), dtype=torch.float64))
    torch.testing.assert_close(bits_per_dim(nll, 48), torch.full((2,), 8.0, dtype=torch.float64))
    assert likelihood.nll_offset(48) == 0.0 and DiscretizedLogisticLikelihood().nll_offset(48) == 0.0  # exact, not a density


@pytest.mark.parametrize("name", ["discretized_logistic", "categorical", "gaussian"])
def test_gradient_reaches_every_decoder_output_and_parameter(name):
    likelihood = build_likelihood(name, learn_sigma=True, sigma_shape="pixel", num_mixtures=3, data_shape=(3, 4, 4))
    out = torch.randn(2, 3 * likelihood.params_per_channel, 4, 4, requires_grad=True)
    x = torch.randint(0, 256, (2, 3, 4, 4)) / 255
    likelihood.log_prob(likelihood.prepare(x), out).sum().backward()
    assert (out.grad != 0).float().mean() > 0.99  # every mixture weight, mean, scale or logit moves
    for param in likelihood.parameters():
        assert param.grad is not None and (param.grad != 0).all()
    assert likelihood.mean(out).shape == x.shape and 0 <= likelihood.mean(out).min() and likelihood.mean(out).max() <= 1


@pytest.mark.parametrize("shape,expected", [("image", ()), ("channel", (3, 1, 1)), ("pixel", (3, 4, 4))])
def test_gaussian_sigma_per_image_channel_or_pixel(shape, expected):
    likelihood = GaussianLikelihood(sigma=0.2, learn_sigma=True, sigma_shape=shape, data_shape=(3, 4, 4))
    assert likelihood.log_sigma.shape == expected and isinstance(likelihood.log_sigma, torch.nn.Parameter)
    x, mean = torch.rand(1, 3, 4, 4), torch.rand(1, 3, 4, 4)
    expected_log_p = torch.distributions.Normal(mean, 0.2).log_prob(x).sum()
    torch.testing.assert_close(likelihood.log_prob(x, mean)[0], expected_log_p)
    with pytest.raises(ValueError, match="sigma_shape"):
        GaussianLikelihood(sigma_shape="row")


def test_bernoulli_log_prob_equals_torch_bernoulli_for_every_candidate():
    """x l - softplus(l) with x broadcast over the candidates, against torch.distributions.Bernoulli (extreme logits too)."""
    from models.components.likelihoods import BernoulliLikelihood

    torch.manual_seed(0)
    x = torch.bernoulli(torch.full((3, 1, 4, 4), 0.4))
    logits = torch.randn(3, 5, 1, 4, 4) * 30  # (B, candidates, C, H, W)
    expected = torch.distributions.Bernoulli(logits=logits.double()).log_prob(x.unsqueeze(1).double()).flatten(2).sum(-1)
    got = BernoulliLikelihood().log_prob(x.unsqueeze(1), logits)
    assert got.shape == (3, 5) and torch.allclose(got.double(), expected, atol=1e-3, rtol=1e-5)


def test_bernoulli_mean_and_samples_follow_sigmoid_of_the_logits():
    """mean(l) = σ(l), and the average of 20,000 draws of sample(l) is σ(l) within 0.02 (standard error ≤ 0.0036)."""
    from models.components.likelihoods import BernoulliLikelihood

    likelihood, logits = BernoulliLikelihood(), torch.tensor([-3.0, 0.0, 3.0])
    assert torch.equal(likelihood.mean(logits), torch.sigmoid(logits))
    torch.manual_seed(0)
    draws = likelihood.sample(logits.expand(20_000, -1))
    assert set(draws.unique().tolist()) <= {0.0, 1.0}
    assert (draws.mean(0) - torch.sigmoid(logits)).abs().max() < 0.02


def test_gaussian_dequantization_spreads_a_level_uniformly_over_its_bin():
    """prepare(x) = (255 x + u) / 256, u ~ U[0, 1): level 100 lands in [100/256, 101/256), spread as a uniform of
    width 1/256 (standard deviation 1 / (256 √12))."""
    torch.manual_seed(0)
    x_tilde = GaussianLikelihood().prepare(torch.full((10_000,), 100 / 255, dtype=torch.float64))
    assert x_tilde.min() >= 100 / 256 and x_tilde.max() < 101 / 256
    assert abs(x_tilde.std().item() * 256 * math.sqrt(12) - 1) < 0.1


def test_gaussian_nll_offset_is_log_256_per_dimension():
    """The dequantized density's bin width is 1/256 per dimension: D log 256 nats turn it into a probability of 8-bit data."""
    assert GaussianLikelihood().nll_offset(784) == 784 * math.log(256.0)


def test_discretized_logistic_floors_the_log_scale_at_minus_7():
    """One logistic centred on level 128 (c = 1/255) with log-scale -10 scores as with -7, PixelCNN++'s floor:
    P(128) = σ(e^7 / 255) - σ(-e^7 / 255), the bin's half-width 1/255 over the scale e^-7."""
    likelihood = DiscretizedLogisticLikelihood(num_mixtures=1)
    x = torch.full((1, 1, 1, 1), 128 / 255, dtype=torch.float64)
    log_p = {s: likelihood.log_prob(x, torch.tensor([0.0, 1 / 255, s], dtype=torch.float64).view(1, 3, 1, 1)) for s in (-10.0, -7.0)}
    half_width = torch.tensor(math.exp(7.0) / 255, dtype=torch.float64)
    expected = torch.sigmoid(half_width) - torch.sigmoid(-half_width)
    torch.testing.assert_close(log_p[-10.0].exp(), expected.view(1), rtol=1e-10, atol=0)
    assert torch.equal(log_p[-10.0], log_p[-7.0])
