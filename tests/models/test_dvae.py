"""The discrete-VAE baselines against exact answers: on a model small enough to enumerate, the
REINFORCE estimate (with each control variate) is unbiased for the exact ELBO gradient and B*
lowers its variance; the Gumbel-softmax estimate is unbiased for the gradient of the relaxed
objective, computed by quadrature over the Gumbel noise."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from models import DiscreteVAE
from samplers import categorical_log_prob
from samplers.score_function import categorical_score_norm_sq, leave_one_out_optimal_baseline
from tests.conftest import mnist_slice, narrow_mlps, train_on_batch

Z_MAX = 4.5  # |mean - exact| / standard error, per checked coordinate


def toy_dvae(num_latents: int = 2, num_categories: int = 3, **kwargs) -> DiscreteVAE:
    torch.manual_seed(0)
    model = DiscreteVAE(
        data_shape=(1, 2, 2), num_latents=num_latents, num_categories=num_categories, code_dim=2,
        likelihood="gaussian", sigma=1.0, **kwargs,
    )
    narrow_mlps(model)  # its tests draw hundreds of gradient estimates
    with torch.no_grad():  # larger weights: q and p(h | x) far apart, so the gradients are not tiny
        for p in model.parameters():
            p.mul_(1.5)
    return model


def toy_x() -> torch.Tensor:
    return torch.rand(1, 1, 2, 2, generator=torch.Generator().manual_seed(5))


def checked_params(model: DiscreteVAE) -> list[torch.Tensor]:
    """The output biases of encoder and decoder: their gradients are those of the logits and of the decoder output."""
    return [model.encoder.net[-1].bias, model.decoder.net[-1].bias]


def flat_grad(value: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.flatten() for g in torch.autograd.grad(value, params)])


def estimates(model: DiscreteVAE, loss_fn, repeats: int = 40, batch: int = 500) -> torch.Tensor:
    """(repeats, P) gradient estimates of the ELBO, each the mean of `batch` independent ones."""
    x = toy_x().expand(batch, -1, -1, -1)
    return torch.stack([-flat_grad(loss_fn(x, model.posterior(x))[0], checked_params(model)) for _ in range(repeats)])


def assert_unbiased(samples: torch.Tensor, exact: torch.Tensor) -> None:
    mean, stderr = samples.mean(0), samples.std(0) / samples.shape[0] ** 0.5
    z = (mean - exact) / stderr
    assert z.abs().max() < Z_MAX, (mean, exact, z)
    assert exact.abs().max() > 5 * stderr.max()  # the test can tell a wrong gradient from the right one


@pytest.mark.parametrize("control_variate", ["optimal", "running_mean", "none"])
def test_reinforce_is_unbiased_for_the_exact_elbo_gradient(control_variate):
    model = toy_dvae(control_variate=control_variate)
    model.baseline_mean.fill_(-3.0)  # any constant keeps the estimate unbiased
    x = toy_x()
    states = torch.tensor(list(itertools.product(range(3), repeat=2)))[None]  # all 9 latent states
    log_q = model.posterior(x)
    log_q_states = categorical_log_prob(log_q, states)
    exact_elbo = (log_q_states.exp() * (model.log_joint(x, states) - log_q_states)).sum()
    exact = flat_grad(exact_elbo, checked_params(model))
    torch.manual_seed(1)
    assert_unbiased(estimates(model, model.reinforce_loss), exact)


def test_optimal_control_variate_lowers_the_variance():
    model = toy_dvae(num_samples=4)
    torch.manual_seed(2)
    x = toy_x().expand(8, -1, -1, -1)
    def encoder_estimates(control_variate: str) -> torch.Tensor:
        encoder_bias = checked_params(model)[:1]
        return torch.stack([
            -flat_grad(model.reinforce_loss(x, model.posterior(x), control_variate)[0], encoder_bias)
            for _ in range(200)
        ])

    variances = {cv: encoder_estimates(cv).var(0).sum() for cv in ("optimal", "none")}
    assert variances["optimal"] < 0.5 * variances["none"], variances
    # The callback's measurement agrees (logged as train/encoder_grad_variance[_no_cv]).
    from callbacks.gradient_variance import flat_gradients, trace_of_covariance
    groups = {"encoder": list(model.encoder.parameters()), "decoder": list(model.decoder.parameters())}
    draws = [flat_gradients(model.gradient_estimates(x, torch.arange(8)), groups) for _ in range(50)]
    measured = {name: trace_of_covariance([d[name] for d in draws]) for name in draws[0]}
    assert measured["encoder_grad_variance"] < measured["encoder_grad_variance_no_cv"]


def test_leave_one_out_baseline_and_score_norm_by_hand():
    signal = torch.tensor([[1.0, 2.0, 4.0]])
    weight = torch.tensor([[1.0, 3.0, 1.0]])
    expected = torch.tensor([[(6 + 4) / 4, (1 + 4) / 2, (1 + 6) / 4]])
    torch.testing.assert_close(leave_one_out_optimal_baseline(signal, weight), expected)
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out_optimal_baseline(signal[:, :1], weight[:, :1])
    log_probs = torch.tensor([[[0.5, 0.3, 0.2]]]).log()  # V=1, K=3
    latent = torch.tensor([[[0], [2]]])  # two samples
    expected = torch.tensor([[(0.5**2 + 0.3**2 + 0.2**2), (0.5**2 + 0.3**2 + 0.8**2)]])  # ||e_k - π||²
    torch.testing.assert_close(categorical_score_norm_sq(log_probs, latent), expected)


def test_gumbel_is_unbiased_for_the_relaxed_objective():
    """K=2: the Gumbel-softmax sample is y_0 = sigmoid((Δ + u) / τ) with u = g_0 - g_1 ~ Logistic(0, 1), so the
    relaxed objective E_u[log p(x | y)] - KL(q || p) is a 1-D integral: midpoint rule in v = sigmoid(u)."""
    tau = 0.7
    model = toy_dvae(num_latents=1, num_categories=2, estimator="gumbel", temperature=tau, temperature_min=tau)
    x = toy_x()
    log_q = model.posterior(x)  # (1, 1, 2)
    v = (torch.arange(20_000, dtype=torch.float32) + 0.5) / 20_000
    y0 = torch.sigmoid((log_q[0, 0, 0] - log_q[0, 0, 1] + torch.logit(v)) / tau)
    relaxed = torch.stack([y0, 1 - y0], -1).unsqueeze(1)  # (N, 1, 2)
    expected_log_px = model.likelihood.log_prob(x, model.decoder_output_relaxed(relaxed)).mean()
    kl = (log_q.exp() * (log_q - model.prior.log_probs())).sum()
    exact = flat_grad(expected_log_px - kl, checked_params(model))
    torch.manual_seed(3)
    assert_unbiased(estimates(model, model.gumbel_loss), exact)


@pytest.mark.parametrize("straight_through", [False, True])
def test_gumbel_averages_num_samples_draws(straight_through):
    """S relaxed samples per example: the estimate's variance falls as 1/S (one sample would leave it unchanged)."""
    def variance(num_samples: int) -> float:
        model = toy_dvae(estimator="gumbel", num_samples=num_samples, straight_through=straight_through)
        x = toy_x().expand(3000, -1, -1, -1)  # one image 3000 times: 3000 independent draws of its estimate, one pass
        torch.manual_seed(6)
        with torch.no_grad():
            return model.gumbel_loss(x, model.posterior(x))[1].var().item()  # the per-example ELBOs

    ratio = variance(8) / variance(1)
    assert 1 / 8 * 0.8 < ratio < 1 / 8 * 1.25, ratio


def test_straight_through_decodes_the_hard_sample_and_anneals():
    model = toy_dvae(estimator="gumbel", straight_through=True, temperature=1.0, temperature_min=0.5, anneal_rate=0.1)
    torch.manual_seed(4)
    relaxed = F.gumbel_softmax(torch.zeros(5, 2, 3), tau=1.0, hard=True)
    assert set(relaxed.unique().tolist()) == {0.0, 1.0}  # forward: exact one-hots
    torch.testing.assert_close(model.decoder_output_relaxed(relaxed), model.decoder_output(relaxed.argmax(-1)))
    assert model.current_temperature() == 1.0


def test_each_estimator_keeps_its_number_of_samples_by_default():
    """REINFORCE 4 (B* needs two or more), Gumbel 1, the settings they always ran with; any S when given."""
    assert DiscreteVAE().num_samples == 4 and DiscreteVAE(estimator="gumbel").num_samples == 1
    assert DiscreteVAE(estimator="gumbel", num_samples=20).num_samples == 20


def test_invalid_settings_fail_early():
    with pytest.raises(ValueError, match="estimator"):
        DiscreteVAE(estimator="rebar")
    with pytest.raises(ValueError, match="num_samples"):
        DiscreteVAE(num_samples=1, control_variate="optimal")
    with pytest.raises(ValueError, match="temperature"):
        DiscreteVAE(estimator="gumbel", temperature=0.5, temperature_min=1.0)


@pytest.mark.parametrize("estimator", ["reinforce", "gumbel"])
def test_discrete_vae_learns_on_real_mnist(mnist_dir, estimator):
    x, index = mnist_slice(mnist_dir, 128)
    torch.manual_seed(0)
    first, last = train_on_batch(narrow_mlps(DiscreteVAE(estimator=estimator)), x, index, steps=50)
    # -ELBO: ~ 784 log 2 + V log K = 589 nats untrained; 50 Adam steps on one batch get well below 300.
    assert first["loss"] > 450 and last["loss"] < 300, (first["loss"], last["loss"])


def test_running_mean_baseline_follows_its_decay():
    """With decay d = 0.8, after each training step the stored baseline is b_t = d b_{t-1} + (1 - d) f̄_t from b_0 = 0,
    where f̄_t is the mean over the batch and the S samples of f(h) = log p(x, h) - log q(h | x) of that step's
    draws (recorded from score_proposals); the loss reported is -f̄_t, its gradient to each log q(h_s | x) is
    -(f_s - b_{t-1}) / (B S) (the baseline before this step's update), and an eval step leaves b alone."""
    decay = 0.8
    model = toy_dvae(control_variate="running_mean", baseline_decay=decay)
    drawn, proposals = [], []
    score_proposals = model.score_proposals

    def recording(*args):
        latent, log_joint, log_proposal = score_proposals(*args)
        log_proposal.retain_grad()
        drawn.append((log_joint - log_proposal).detach())
        proposals.append(log_proposal)
        return latent, log_joint, log_proposal

    model.score_proposals = recording
    x = torch.rand(3, 1, 2, 2, generator=torch.Generator().manual_seed(8))
    torch.manual_seed(9)
    expected = torch.tensor(0.0)
    for step in range(3):
        terms = model.training_loss(x, torch.arange(3))
        assert drawn[step].shape == (3, model.num_samples)
        torch.testing.assert_close(terms["loss"], -drawn[step].mean())
        terms["loss"].backward()
        torch.testing.assert_close(proposals[step].grad, -(drawn[step] - expected) / drawn[step].numel())
        expected = decay * expected + (1 - decay) * drawn[step].mean()
        torch.testing.assert_close(model.baseline_mean, expected)
        torch.testing.assert_close(terms["baseline"], expected)
    assert expected.abs() > 1.0  # far enough from the start that d and 1 - d swapped would show
    model.eval()
    model.training_loss(x, torch.arange(3))
    torch.testing.assert_close(model.baseline_mean, expected)


def test_gumbel_kl_is_kl_of_q_to_a_skewed_prior():
    """With a skewed factorized prior p and a skewed q(h | x), the relaxed ELBO's KL term (the decoder's
    log-likelihood zeroed out) equals KL(q || p) = sum_h q(h) (log q(h) - log p(h)) enumerated over all K^V states,
    which here differs from KL(p || q)."""
    model = toy_dvae(estimator="gumbel", prior="factorized")
    with torch.no_grad():
        model.prior.logits.copy_(torch.tensor([[2.0, 0.0, -1.0], [-1.5, 1.0, 0.5]]))
        model.encoder.net[-1].bias.add_(torch.tensor([-1.0, 0.5, 2.0, 1.5, -2.0, 0.0]))
    model.likelihood.log_prob = lambda x, out: out.new_zeros(out.shape[:2])  # (B, S): only -KL is left
    x = torch.rand(2, 1, 2, 2, generator=torch.Generator().manual_seed(10))
    log_q = model.posterior(x)
    states = torch.tensor(list(itertools.product(range(3), repeat=2)))  # all 9 latent states
    log_q_states = categorical_log_prob(log_q, states.expand(2, -1, -1))  # (B, 9)
    log_p_states = model.prior.log_prob(states)  # (9,)
    kl_q_p = (log_q_states.exp() * (log_q_states - log_p_states)).sum(-1)
    kl_p_q = (log_p_states.exp() * (log_p_states - log_q_states)).sum(-1)
    assert (kl_q_p - kl_p_q).abs().min() > 0.1
    loss, elbo = model.gumbel_loss(x, log_q)
    torch.testing.assert_close(elbo, -kl_q_p)
    torch.testing.assert_close(loss, kl_q_p.mean())
