"""The code priors (models/components/priors.py) against exact answers on spaces small enough to enumerate:
normalized, causal, `sample` distributed as `log_prob` says, the batched candidate path equal to the
per-set path."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chisquare

from models.components.priors import AutoregressivePrior, FactorizedPrior, PixelCNNPrior, build_prior


def randomized(prior: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """The prior in float64 with its zero-initialized output layer (the learned priors start uniform, which would
    pass the tests below trivially) drawn at random; the other layers keep their random initialization (weights of
    N(0, 1) everywhere would saturate every gate of a deep PixelCNN)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in prior.parameters():
            if not parameter.any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return prior.double()


# (name, prior): tiny configurations with K^V code sets to enumerate.
PRIORS = {
    "factorized": lambda: FactorizedPrior(3, 3),
    "autoregressive": lambda: AutoregressivePrior(3, 3, hidden=16, num_layers=2),
    "autoregressive_1layer": lambda: AutoregressivePrior(4, 2, hidden=5, num_layers=1),
    "pixelcnn": lambda: PixelCNNPrior((2, 3), 2, hidden=8, num_layers=2),
}


def all_code_sets(prior) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(prior.num_categories), repeat=prior.num_latents)))


@pytest.mark.parametrize("name", PRIORS)
def test_normalized(name):
    """sum over all K^V code sets of p(h) is 1 to float64 precision."""
    prior = randomized(PRIORS[name]())
    total = prior.log_prob(all_code_sets(prior)).logsumexp(0)
    assert abs(total.item()) < 1e-10


@pytest.mark.parametrize("name", PRIORS)
def test_causal(name):
    """Changing the code at position j never changes the conditionals at positions <= j."""
    prior = randomized(PRIORS[name]())
    codes = all_code_sets(prior)
    logits = prior.conditional_logits(codes)
    for j in range(prior.num_latents):
        changed = codes.clone()
        changed[:, j] = (changed[:, j] + 1) % prior.num_categories
        after = prior.conditional_logits(changed)
        assert torch.equal(after[:, : j + 1], logits[:, : j + 1]), f"position {j} leaks into the conditionals up to it"
        if name != "factorized" and j < prior.num_latents - 1:  # and the later ones do read it
            assert not torch.allclose(after[:, j + 1 :], logits[:, j + 1 :])


@pytest.mark.parametrize("prior", [AutoregressivePrior(20, 3), PixelCNNPrior((7, 7), 3), PixelCNNPrior((8, 8), 3)],
                         ids=["made-20", "pixelcnn-7x7", "pixelcnn-8x8"])
def test_every_position_reads_every_earlier_one_and_no_other(prior):
    """At the default sizes: the conditional at position i depends on the code at j exactly when j < i (raster
    order), so there is neither a leak nor a blind spot nor a reach too short for the grid."""
    prior = randomized(prior)
    codes = torch.randint(3, (1, prior.num_latents), generator=torch.Generator().manual_seed(0))
    base = prior.conditional_logits(codes)[0]
    changed = torch.cat([codes.clone() for _ in range(prior.num_latents)])
    positions = torch.arange(prior.num_latents)
    changed[positions, positions] = (changed[positions, positions] + 1) % 3
    depends = (prior.conditional_logits(changed) - base).abs().amax(-1) > 1e-12  # [j, i]: changing j moves i
    assert torch.equal(depends, positions.unsqueeze(1) < positions.unsqueeze(0))


@pytest.mark.parametrize("name", PRIORS)
def test_sample_agrees_with_log_prob(name):
    """A chi-squared test of 20000 draws against exp(log_prob) over all code sets."""
    prior = randomized(PRIORS[name](), seed=1)
    torch.manual_seed(0)
    draws = prior.sample(20000)
    sets = all_code_sets(prior)
    index = (draws.unsqueeze(1) == sets.unsqueeze(0)).all(-1).float().argmax(1)
    observed = torch.bincount(index, minlength=len(sets)).double()
    expected = prior.log_prob(sets).exp() * len(draws)
    assert chisquare(observed.numpy(), expected.detach().numpy()).pvalue > 1e-3


@pytest.mark.parametrize("name", PRIORS)
def test_batched_candidates_equal_per_set(name):
    """log_prob over (B, N, V) candidates in one pass equals log_prob of each set alone."""
    prior = randomized(PRIORS[name]())
    candidates = torch.randint(prior.num_categories, (4, 5, prior.num_latents))
    batched = prior.log_prob(candidates)
    one_by_one = torch.stack([torch.stack([prior.log_prob(c[None])[0] for c in row]) for row in candidates])
    assert batched.shape == (4, 5)
    torch.testing.assert_close(batched, one_by_one)


@pytest.mark.parametrize("name", ["autoregressive", "pixelcnn"])
def test_learned_priors_start_uniform(name):
    prior = build_prior(name, 6, 3, grid=(2, 3))
    codes = torch.randint(3, (10, 6))
    torch.testing.assert_close(prior.log_prob(codes), torch.full((10,), -6 * torch.log(torch.tensor(3.0)).item()))


def test_uniform_is_frozen_and_names_are_checked():
    uniform = build_prior("uniform", 4, 5)
    assert not any(p.requires_grad for p in uniform.parameters())
    assert build_prior("learned", 4, 5).logits.requires_grad  # the older name of `factorized`
    with pytest.raises(ValueError, match="model.prior: unknown prior 'made'; choose one of uniform, factorized, autoregressive, pixelcnn"):
        build_prior("made", 4, 5)
    with pytest.raises(ValueError, match="needs a grid of codes .*prior=autoregressive"):
        build_prior("pixelcnn", 4, 5)
    with pytest.raises(ValueError, match="model.prior_hidden and model.prior_layers size the autoregressive and pixelcnn priors"):
        build_prior("factorized", 4, 5, hidden=32)
    with pytest.raises(ValueError, match=r"needs prior_hidden >= V - 1 = 11"):
        build_prior("autoregressive", 12, 5, hidden=5)


# ---- the priors inside the models -------------------------------------------------------------

from models import JSA, RWS, VIMCO, DiscreteVAE  # noqa: E402


def tiny_model(cls, prior: str, **kwargs):
    """V = 3 positions, K = 2 classes (8 code sets), a 2x2 image, a random learned prior."""
    torch.manual_seed(0)
    model = cls(data_shape=(1, 2, 2), num_latents=3, num_categories=2, code_dim=2, likelihood="bernoulli",
                prior=prior, prior_hidden=8, **kwargs).double()
    with torch.no_grad():
        for parameter in model.prior.parameters():
            if parameter.requires_grad:
                parameter.copy_(torch.randn_like(parameter))
    return model


@pytest.mark.parametrize("cls", [JSA, RWS, VIMCO, DiscreteVAE])
def test_models_score_with_the_exact_prior_and_train_it(cls):
    """log p(x, h) = log p(x | h) + log p(h) with the prior's exact log p(h); the IS-NLL converges to the exact
    -log p(x) = -logsumexp_h log p(x, h) over all 8 code sets; the training loss trains the prior."""
    model = tiny_model(cls, "autoregressive")
    x = torch.tensor([[[[0.0, 1.0], [1.0, 1.0]]], [[[1.0, 0.0], [0.0, 0.0]]]], dtype=torch.float64)
    sets = torch.tensor(list(itertools.product(range(2), repeat=3)))
    with torch.no_grad():
        log_joint = model.log_joint(x, sets.expand(2, -1, -1))
        log_px_given_h = model.likelihood.log_prob(x.unsqueeze(1), model.decoder_output(sets).unsqueeze(0).expand(2, -1, -1, -1, -1))
    torch.testing.assert_close(log_joint, log_px_given_h + model.prior.log_prob(sets).detach())
    exact_nll = -log_joint.logsumexp(1)
    torch.manual_seed(2)
    torch.testing.assert_close(model.nll(x, 100_000), exact_nll, atol=0.02, rtol=0)  # a wrong p(h) is off by ~1 nat

    loss = model.training_loss(x, torch.arange(2))["loss"]
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.prior.parameters())
    assert sum(p.grad.abs().sum() for p in model.prior.parameters()) > 0


def test_gumbel_refuses_an_autoregressive_prior():
    with pytest.raises(ValueError, match="estimator=gumbel takes the KL to the prior in closed form, which needs a factorized prior"):
        DiscreteVAE(estimator="gumbel", prior="autoregressive")
    DiscreteVAE(estimator="gumbel", prior="factorized")  # closed form exists


def test_samples_come_from_the_prior():
    """sample_prior decodes codes drawn by the prior: a prior that puts all mass on one code set gives one image."""
    model = JSA(num_latents=4, num_categories=3, prior="autoregressive", prior_hidden=16)
    with torch.no_grad():
        model.prior.output.bias.copy_(torch.tensor([0.0, 0.0, 50.0]).repeat(4))  # h_v = 2 everywhere
    images = model.sample_prior(5)
    torch.testing.assert_close(images, model.decoder_output(torch.full((5, 4), 2)))


def test_checkpoints_with_the_old_prior_logits_load():
    """Checkpoints written before the priors became modules hold `prior_logits`; they load into `prior.logits`."""
    model = JSA(num_latents=4, num_categories=3, prior="factorized")
    state = model.state_dict()
    state["prior_logits"] = torch.randn(4, 3)
    del state["prior.logits"]
    model.load_state_dict(state)
    torch.testing.assert_close(model.prior.logits.detach(), state["prior_logits"])
