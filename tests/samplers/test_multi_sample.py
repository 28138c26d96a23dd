"""RWS and VIMCO against exact answers: on a model small enough to enumerate every S-tuple of samples
(2 latent positions x 2 classes = 4 latent states, S <= 4 samples), the expected gradient of each
model's training loss is computed exactly as Σ_tuples Π_s q(h_s | x) ∇loss(tuple) and compared with

* VIMCO: the exact gradient of the S-sample bound E_q[log (1/S) Σ_s w_s] (unbiased, to float precision);
* RWS: the exact expectation of the self-normalized estimator, written out from per-state gradients;
  and, as S grows, the gradients of log p(x) (θ) and of -KL(p(h|x) || q(h|x)) (φ).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from models import RWS, VIMCO
from samplers import categorical_log_prob
from samplers.multi_sample import importance_weighted_bound, vimco_baselines
from tests.conftest import narrow_mlps

STATES = torch.tensor(list(itertools.product(range(2), repeat=2)))  # all 4 latent states, (4, V=2)


def toy(cls, num_samples: int, **kwargs):
    torch.manual_seed(0)
    model = cls(data_shape=(1, 2, 2), num_latents=2, num_categories=2, code_dim=2, num_samples=num_samples,
                prior="factorized", **kwargs)
    model = narrow_mlps(model).double()  # per-state gradients over every parameter
    with torch.no_grad():  # larger weights and a non-uniform prior: q, p(h | x) and p(h) far apart
        for p in model.parameters():
            p.mul_(2.0)
        model.prior.logits.copy_(torch.tensor([[0.5, -0.5], [-1.0, 1.0]]))
    return model


def toy_x() -> torch.Tensor:
    return torch.tensor([[[[1.0, 0.0], [1.0, 1.0]]]], dtype=torch.float64)


def params(model) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def flat_grad(value: torch.Tensor, wrt: list[torch.Tensor]) -> torch.Tensor:
    grads = torch.autograd.grad(value, wrt, allow_unused=True, retain_graph=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).flatten() for p, g in zip(wrt, grads)])


def expected_loss_gradient(model, num_samples: int, monkeypatch) -> torch.Tensor:
    """Σ over all S-tuples of P(tuple) ∇ training_loss(tuple): the model's own code, its sampler replaced."""
    x = toy_x()
    log_q_states = categorical_log_prob(model.posterior(x), STATES[None]).detach()[0]  # (4,)
    total = 0
    for tuple_ in itertools.product(range(len(STATES)), repeat=num_samples):
        latent = STATES[list(tuple_)][None]  # (1, S, V)
        monkeypatch.setattr("models.categorical.sample_categorical", lambda log_q, n, latent=latent: latent)
        loss = model.training_loss(x, torch.zeros(1, dtype=torch.long))["loss"]
        total = total + log_q_states[list(tuple_)].sum().exp() * flat_grad(loss, params(model))
    return total


@pytest.mark.parametrize("num_samples", [2, 3])
def test_vimco_is_unbiased_for_the_gradient_of_the_s_sample_bound(num_samples, monkeypatch):
    model = toy(VIMCO, num_samples)
    x = toy_x()
    log_q = categorical_log_prob(model.posterior(x), STATES[None])[0]  # (4,), with gradient to φ
    log_w = model.log_joint(x, STATES[None])[0] - log_q  # (4,), with gradient to θ and φ
    tuples = torch.tensor(list(itertools.product(range(len(STATES)), repeat=num_samples)))
    exact_bound = (log_q[tuples].sum(1).exp() * importance_weighted_bound(log_w[tuples])).sum()
    exact = -flat_grad(exact_bound, params(model))
    estimated = expected_loss_gradient(model, num_samples, monkeypatch)
    torch.testing.assert_close(estimated, exact, rtol=1e-9, atol=1e-10)
    assert exact.abs().max() > 1e-2  # not a vacuous comparison, for the encoder (the score term) too
    assert flat_grad(exact_bound, list(model.encoder.parameters())).abs().max() > 1e-3


def rws_exact_expectation(model, num_samples: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(E[the estimate of the loss gradient], its target: -∇θ log p(x) and ∇φ KL(p(h|x) || q)), both from the
    per-state gradients g_p(h) = ∇ log p(x, h) and g_q(h) = ∇ log q(h | x)."""
    x = toy_x()
    log_q = categorical_log_prob(model.posterior(x), STATES[None])[0]
    log_joint = model.log_joint(x, STATES[None])[0]
    g_p = torch.stack([flat_grad(log_joint[s], params(model)) for s in range(len(STATES))])
    g_q = torch.stack([flat_grad(log_q[s], params(model)) for s in range(len(STATES))])
    log_q, log_w = log_q.detach(), (log_joint - log_q).detach()
    expected = 0
    for tuple_ in itertools.product(range(len(STATES)), repeat=num_samples):
        index = list(tuple_)
        weights = log_w[index].softmax(0)  # self-normalized over the tuple (repeats count separately)
        expected = expected - log_q[index].sum().exp() * (weights[:, None] * (g_p[index] + g_q[index])).sum(0)
    posterior = (log_joint.detach() - log_joint.detach().logsumexp(0)).exp()  # p(h | x)
    target = -(posterior[:, None] * (g_p + g_q)).sum(0)  # -∇θ log p(x) and ∇φ KL(p(h|x) || q)
    return expected, target


@pytest.mark.parametrize("num_samples", [1, 2, 3])
def test_rws_expected_gradient_is_that_of_the_self_normalized_estimator(num_samples, monkeypatch):
    model = toy(RWS, num_samples)
    expected, _ = rws_exact_expectation(model, num_samples)
    torch.testing.assert_close(expected_loss_gradient(model, num_samples, monkeypatch), expected, rtol=1e-9, atol=1e-10)


def test_rws_approaches_the_log_likelihood_and_inclusive_kl_gradients_as_s_grows():
    model = toy(RWS, 1)
    errors = []
    for num_samples in (1, 2, 3, 4):
        expected, target = rws_exact_expectation(model, num_samples)
        errors.append((expected - target).norm().item())
    assert errors == sorted(errors, reverse=True) and errors[-1] < 0.5 * errors[0], errors
    assert errors[0] > 1.0  # the S=1 estimate, E_q[∇ log p(x, h) + ∇ log q(h | x)], is visibly biased


def test_vimco_baselines_by_hand():
    log_w = torch.tensor([[0.0, 1.0, 3.0], [-2.0, 0.5, 0.0]], dtype=torch.float64)  # two examples: no mixing across the batch
    by_hand = torch.empty(2, 3, dtype=torch.float64)
    for b in range(2):
        w = log_w[b].exp()
        for s in range(3):
            others = [j for j in range(3) if j != s]
            geometric = torch.exp(log_w[b, others].mean())
            by_hand[b, s] = torch.log((w[others].sum() + geometric) / 3)
    torch.testing.assert_close(vimco_baselines(log_w), by_hand)
    with pytest.raises(ValueError, match="at least 2"):
        vimco_baselines(log_w[:, :1])


def test_the_bound_and_the_baselines_are_computed_in_log_space():
    """L̂ and L̂_{-s} move with every log w: adding ±1000 (weights far beyond float range) adds it to each, where an
    exponential of the unshifted weights would give inf or 0."""
    log_w = torch.tensor([[0.0, 1.0, 3.0], [-2.0, 0.5, 0.0]], dtype=torch.float64)
    for offset in (-1000.0, 1000.0):
        torch.testing.assert_close(importance_weighted_bound(log_w + offset), importance_weighted_bound(log_w) + offset)
        torch.testing.assert_close(vimco_baselines(log_w + offset), vimco_baselines(log_w) + offset)


def test_vimcos_score_term_is_each_samples_bound_minus_its_baseline():
    """∂ surrogate / ∂ log q(h_s | x) = (L̂ − L̂_{-s}) − w̃_s (multi_sample.vimco_surrogate): the score term's learning
    signal with the leave-one-out baseline computed by hand, plus the bound's own gradient through the weights. Both
    estimators, with and without the baseline, are unbiased: only this pins the baseline in the gradient."""
    from samplers.multi_sample import vimco_surrogate

    log_joint = torch.tensor([[0.0, 1.0, 3.0], [-2.0, 0.5, 0.0]], dtype=torch.float64)
    log_proposal = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7]], dtype=torch.float64, requires_grad=True)
    vimco_surrogate(log_joint, log_proposal).sum().backward()
    log_w = (log_joint - log_proposal).detach()
    bound = log_w.exp().mean(1, keepdim=True).log()
    baseline = torch.empty_like(log_w)
    for b, s in itertools.product(range(2), range(3)):
        others = [j for j in range(3) if j != s]
        baseline[b, s] = torch.log((log_w[b, others].exp().sum() + log_w[b, others].mean().exp()) / 3)
    torch.testing.assert_close(log_proposal.grad, (bound - baseline) - log_w.softmax(1))


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="num_samples"):
        VIMCO(num_samples=1)
    with pytest.raises(ValueError, match="num_samples"):
        RWS(num_samples=0)
    with pytest.raises(ValueError, match="sleep_phase"):
        RWS(sleep_phase=True, likelihood="discretized_logistic")


def test_rws_sleep_phase_fits_q_to_the_models_own_samples():
    """With the sleep phase, q is trained on dreams (h, x) ~ p(h) p(x | h): the loss -log q(h | x) on fresh dreams falls."""
    torch.manual_seed(0)
    model = narrow_mlps(RWS(data_shape=(1, 4, 4), num_latents=2, num_categories=3, code_dim=4, num_samples=2,
                            sleep_phase=True))
    with torch.no_grad():  # a fixed generative model whose images say clearly which h drew them
        for p in [*model.decoder.parameters(), *model.embedding.parameters()]:
            p.mul_(5.0).requires_grad_(False)
    optimizer = torch.optim.Adam(model.encoder.parameters(), lr=3e-3)
    before = torch.stack([model.sleep_loss(256) for _ in range(5)]).mean()
    for _ in range(150):
        optimizer.zero_grad()
        model.sleep_loss(64).backward()
        optimizer.step()
    after = torch.stack([model.sleep_loss(256) for _ in range(5)]).mean()
    assert after < before - 0.2, (before, after)


@pytest.mark.parametrize("cls", [RWS, VIMCO])
@pytest.mark.parametrize("backbone, prior", [("mlp", "factorized"), ("mlp", "autoregressive"), ("conv", "uniform"),
                                             ("conv", "factorized"), ("conv", "pixelcnn")])
def test_both_layouts_and_priors_train(cls, backbone, prior):
    """The flat and the spatial layout, each prior: a finite loss, gradients where they belong."""
    torch.manual_seed(0)
    model = cls(data_shape=(1, 28, 28), backbone=backbone, prior=prior, num_samples=3, hidden_channels=8)
    x = (torch.rand(2, 1, 28, 28) > 0.5).float()
    loss = model.training_loss(x, torch.arange(2))["loss"]
    loss.backward()
    assert torch.isfinite(loss)
    assert model.encoder.net[-1].weight.grad.abs().sum() > 0 and model.embedding.weight.grad.abs().sum() > 0
    prior_gradients = [p.grad for p in model.prior.parameters() if p.grad is not None]
    assert (len(prior_gradients) > 0 and sum(g.abs().sum() for g in prior_gradients) > 0) == (prior != "uniform")
