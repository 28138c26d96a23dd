"""Statistical tests of the SG-MCMC samplers (SGLD, SGHMC, SGNHT) against closed-form targets.

A parameter of shape (K, 2) holds K independent chains on a 2-D target; mean and covariance are pooled over chains
and kept steps, with errors in units of the target's standard deviations s_i = sqrt(Σ_ii):

    mean error = max_i |m_i - μ_i| / s_i,        covariance error = max_ij |S_ij - Σ_ij| / (s_i s_j).

Each step size keeps its O(h) stationary bias well inside the tolerance, while a wrong update (a missing √2, noise 2h
instead of 2(C - B̂)h, a missing N/n) is many times larger. All randomness comes from seeded generators.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from checkpoints.errors import CheckpointError
from checkpoints.trainer import SafeCheckpoints
from samplers import SGHMC, SGLD, SGNHT, SampleCollector

MU = torch.tensor([1.0, -2.0])
SIGMA = torch.tensor([[2.0, 0.6], [0.6, 0.5]])  # correlation 0.6; precision eigenvalues 0.45 and 3.45
PRECISION = torch.linalg.inv(SIGMA)
NUM_CHAINS = 4000
MEAN_TOL = 0.04  # in target standard deviations; Monte Carlo sd of the pooled mean is ~0.01
COV_TOL = 0.04  # in s_i s_j; Monte Carlo sd ~0.01, discretisation bias <= 0.017 (SGLD, see GAUSSIAN_CASES)

SamplerFactory = Callable[..., torch.optim.Optimizer]


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """The tensors here are tiny: one intra-op thread is fastest, and avoids contention on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------


def gaussian_potential(theta: Tensor, mean: Tensor = MU, precision: Tensor = PRECISION) -> Tensor:
    """U = Σ_chains ½ (θ - μ)ᵀ Σ⁻¹ (θ - μ) for θ of shape (K, 2)."""
    offset = theta - mean.to(theta.dtype)
    return 0.5 * ((offset @ precision.to(theta.dtype)) * offset).sum()


def gaussian_gradient(theta: Tensor) -> Tensor:
    """∇U = (θ - μ) Σ⁻¹ of `gaussian_potential`, without autograd: the samplers read the gradient, not how it was
    made, and the chains' many steps then cost the sampler's own work."""
    return (theta.detach() - MU) @ PRECISION


def minibatch_potential(log_prior: Tensor, log_likelihood_sum: Tensor, dataset_size: int, batch_size: int) -> Tensor:
    """Û(θ) = -log p(θ) - (N / n) Σ_{x in batch} log p(x | θ), the unbiased minibatch potential
    (docs/sgmcmc.md#the-minibatch-potential). Elementwise: (K,) inputs give K chains' potentials."""
    if batch_size < 1 or dataset_size < batch_size:
        raise ValueError(f"need 1 <= batch_size <= dataset_size, got batch_size={batch_size}, dataset_size={dataset_size}")
    return -log_prior - (dataset_size / batch_size) * log_likelihood_sum


def standardized_errors(samples: Tensor, mean: Tensor, cov: Tensor) -> tuple[float, float]:
    """(mean error, covariance error) of (..., 2) samples, pooled over all leading dims, in target sd units."""
    flat = samples.reshape(-1, samples.shape[-1]).double()
    mean, cov = mean.double(), cov.double()
    scale = cov.diag().sqrt()
    mean_error = ((flat.mean(0) - mean) / scale).abs().max()
    cov_error = ((torch.cov(flat.T) - cov) / torch.outer(scale, scale)).abs().max()
    return float(mean_error), float(cov_error)


def run_gaussian_chains(
    make_sampler: SamplerFactory,
    burn_in: int,
    num_kept: int,
    thin: int = 5,
    num_chains: int = NUM_CHAINS,
    gradient_noise: float = 0.0,
    seed: int = 0,
) -> tuple[Tensor, torch.optim.Optimizer]:
    """Run chains from θ = 0 on the Gaussian target; returns the kept samples (num_kept, K, 2) and the sampler.

    `gradient_noise` > 0 adds N(0, gradient_noise · I) to every gradient, a stand-in for the
    minibatch noise of known variance V (docs/sgmcmc.md#sghmc: B = h V / 2).
    """
    generator = torch.Generator().manual_seed(seed)
    theta = torch.zeros(num_chains, 2, requires_grad=True)
    sampler = make_sampler([theta], generator)
    collector = SampleCollector(theta, burn_in=burn_in, thin=thin)
    for _ in range(burn_in + num_kept * thin):
        theta.grad = gaussian_gradient(theta)
        if gradient_noise > 0:
            theta.grad += torch.randn(theta.shape, generator=generator) * gradient_noise**0.5
        sampler.step()
        collector()
    assert collector.num_kept == num_kept
    return collector.stacked()[0], sampler


# ----------------------------------------------------------------------------------------
# Gaussian target, full gradient
# ----------------------------------------------------------------------------------------

# (factory, burn-in, kept) per sampler. Stationary biases, from the exact moment recursion of each
# linear scheme: SGLD variance along precision eigenvalue λ is 1/(λ(1 - hλ/2)), +1.7% at h = 0.01,
# λ = 3.45. SGHMC's θ-marginal bias is below 0.2% at h = 0.05, C = 2. SGNHT's ξ settles where the
# discrete E[p²] = T, ξ = (1 - sqrt(1 - 2Ah)) / h, which samples θ at about T(1 - Ah/2): -1% at A = 1, h = 0.02.
GAUSSIAN_CASES = {
    "SGLD": (lambda params, g, **kw: SGLD(params, lr=0.01, generator=g, **kw), 1500, 300),
    "SGHMC": (lambda params, g, **kw: SGHMC(params, lr=0.05, friction=2.0, generator=g, **kw), 800, 200),
    "SGNHT": (lambda params, g, **kw: SGNHT(params, lr=0.02, noise=1.0, generator=g, **kw), 1500, 300),
    "mSGNHT": (lambda params, g, **kw: SGNHT(params, lr=0.02, noise=1.0, multivariate=True, generator=g, **kw), 1500, 300),
}


@pytest.mark.slow  # a long statistical check: the full suite runs it, the quick loop leaves it out
@pytest.mark.parametrize("name", list(GAUSSIAN_CASES))
def test_recovers_gaussian_mean_and_covariance(name: str) -> None:
    make_sampler, burn_in, num_kept = GAUSSIAN_CASES[name]
    samples, _ = run_gaussian_chains(make_sampler, burn_in, num_kept)
    mean_error, cov_error = standardized_errors(samples, MU, SIGMA)
    assert mean_error < MEAN_TOL, f"{name}: mean off by {mean_error:.4f} sd"
    assert cov_error < COV_TOL, f"{name}: covariance off by {cov_error:.4f}"


@pytest.mark.parametrize("name", ["SGLD", "SGHMC", "SGNHT"])
def test_temperature_scales_the_covariance(name: str) -> None:
    """At temperature T the stationary law is exp(-U / T) = N(μ, T Σ) (docs/sgmcmc.md, β = 1/T)."""
    temperature = 2.5
    make_sampler, burn_in, num_kept = GAUSSIAN_CASES[name]
    samples, sampler = run_gaussian_chains(lambda p, g: make_sampler(p, g, temperature=temperature), burn_in, num_kept)
    mean_error, cov_error = standardized_errors(samples, MU, temperature * SIGMA)
    assert mean_error < MEAN_TOL and cov_error < COV_TOL, f"{name} at T={temperature}: errors {mean_error:.4f}, {cov_error:.4f}"
    if name == "SGNHT":
        # Noise 2ATh and target E[p²] = T together keep ξ at A (1.01 discretely at A = 1, h = 0.02). A
        # thermostat that heats with 2Ah but aims at T would sample at T too, with ξ = A / T instead.
        (state,) = sampler.state.values()
        assert float(state["thermostat"]) == pytest.approx(1.0, rel=0.05)


@pytest.mark.slow  # a long statistical check: the full suite runs it, the quick loop leaves it out
def test_sghmc_noise_estimate_cancels_gradient_noise() -> None:
    """Gradient noise N(0, V) is a diffusion B = hV/2 in p; B̂ = B removes it (docs/sgmcmc.md#sghmc).

    h = 0.02, V = 50: B = 0.5 against C = 1, so ignoring it (B̂ = 0) samples at about T = (C + B)/C = 1.5.
    """
    lr, friction, variance = 0.02, 1.0, 50.0
    noise_diffusion = lr * variance / 2
    corrected, _ = run_gaussian_chains(
        lambda p, g: SGHMC(p, lr=lr, friction=friction, noise_estimate=noise_diffusion, generator=g), 1500, 300, gradient_noise=variance
    )
    mean_error, cov_error = standardized_errors(corrected, MU, SIGMA)
    assert mean_error < MEAN_TOL and cov_error < COV_TOL, f"B̂ = B: errors {mean_error:.4f}, {cov_error:.4f}"
    naive, _ = run_gaussian_chains(lambda p, g: SGHMC(p, lr=lr, friction=friction, generator=g), 1500, 300, gradient_noise=variance)
    _, naive_error = standardized_errors(naive, MU, SIGMA)
    _, hot_error = standardized_errors(naive, MU, (1 + noise_diffusion / friction) * SIGMA)
    assert naive_error > 0.3 and hot_error < 2 * COV_TOL, f"B̂ = 0: error vs Σ {naive_error:.3f}, vs 1.5 Σ {hot_error:.3f}"


def test_sgnht_thermostat_absorbs_gradient_noise() -> None:
    """SGNHT needs no B̂: ξ rises from A to about A + B (docs/sgmcmc.md#sgnht) and θ is sampled correctly."""
    lr, amplitude, variance = 0.02, 1.0, 50.0
    noise_diffusion = lr * variance / 2
    samples, sampler = run_gaussian_chains(
        lambda p, g: SGNHT(p, lr=lr, noise=amplitude, generator=g), 1500, 300, gradient_noise=variance
    )
    mean_error, cov_error = standardized_errors(samples, MU, SIGMA)
    assert mean_error < MEAN_TOL and cov_error < COV_TOL, f"errors {mean_error:.4f}, {cov_error:.4f}"
    (state,) = sampler.state.values()
    # Discrete fixed point (1 - sqrt(1 - 2(A + B)h)) / h = 1.52 for A + B = 1.5, h = 0.02.
    assert float(state["thermostat"]) == pytest.approx(amplitude + noise_diffusion, rel=0.05)


# ----------------------------------------------------------------------------------------
# SGHMC with large friction is SGLD (docs/sgmcmc.md#large-friction-sghmc-becomes-sgld)
# ----------------------------------------------------------------------------------------
# Overdamped limit: for C → ∞, θ follows dθ = -∇U ds + N(0, 2 ds) on the clock s = t / C, so one
# SGHMC step (h, C) is one SGLD step of size ε = h / C. At C h = 1 the correspondence is exact.


def test_sghmc_with_unit_friction_step_is_sgld() -> None:
    """C h = 1: p ← -h∇U + N(0, 2), θ ← θ - h²∇U + N(0, 2h²), i.e. SGLD with ε = h², noise for noise."""
    lr = 0.1
    paths = []
    for make in (lambda p, g: SGHMC(p, lr=lr, friction=1 / lr, generator=g), lambda p, g: SGLD(p, lr=lr**2, generator=g)):
        theta = torch.zeros(16, 2, dtype=torch.float64, requires_grad=True)
        sampler = make([theta], torch.Generator().manual_seed(3))
        path = []
        for _ in range(50):
            sampler.zero_grad()
            gaussian_potential(theta).backward()
            sampler.step()
            path.append(theta.detach().clone())
        paths.append(torch.stack(path))
    torch.testing.assert_close(paths[0], paths[1], rtol=0, atol=1e-10)


def test_sghmc_first_step_injects_noise_of_variance_two_c_t_minus_b_h() -> None:
    """From rest with a zero gradient, one euler step is the injected noise alone: p = sqrt(2 (C T - B̂) h) z with z
    the generator's first normals, then θ = h p."""
    lr, friction, noise_estimate, temperature = 0.1, 2.0, 0.5, 1.5
    theta = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    theta.grad = torch.zeros_like(theta)
    sampler = SGHMC([theta], lr=lr, friction=friction, noise_estimate=noise_estimate, temperature=temperature,
                    generator=torch.Generator().manual_seed(0))
    sampler.step()
    z = torch.randn(6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    momentum = (2 * (friction * temperature - noise_estimate) * lr) ** 0.5 * z
    torch.testing.assert_close(sampler.state[theta]["momentum"], momentum, rtol=0, atol=1e-12)
    torch.testing.assert_close(theta.detach(), lr * momentum, rtol=0, atol=1e-12)


def test_sgnht_thermostat_starts_at_the_noise_amplitude() -> None:
    """ξ starts at A: from rest with a zero gradient, one step gives p = sqrt(2 A T h) z (z the generator's first
    normals) and ξ = A + h (mean(p²) - T)."""
    lr, amplitude, temperature = 0.1, 0.7, 1.0
    theta = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    theta.grad = torch.zeros_like(theta)
    sampler = SGNHT([theta], lr=lr, noise=amplitude, temperature=temperature, generator=torch.Generator().manual_seed(0))
    sampler.step()
    z = torch.randn(6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    momentum = (2 * amplitude * temperature * lr) ** 0.5 * z
    torch.testing.assert_close(sampler.state[theta]["momentum"], momentum, rtol=0, atol=1e-12)
    thermostat = amplitude + lr * (momentum.square().mean() - temperature)
    torch.testing.assert_close(sampler.state[theta]["thermostat"], thermostat, rtol=0, atol=1e-12)


def ensemble_path(make_sampler: SamplerFactory, checkpoints: list[int], num_chains: int, seed: int) -> list[Tensor]:
    """The (K, 2) chain states at each checkpoint step, from θ = 0."""
    generator = torch.Generator().manual_seed(seed)
    theta = torch.zeros(num_chains, 2, requires_grad=True)
    sampler = make_sampler([theta], generator)
    states = []
    for step in range(1, max(checkpoints) + 1):
        theta.grad = gaussian_gradient(theta)
        sampler.step()
        if step in checkpoints:
            states.append(theta.detach().clone())
    return states


def test_sghmc_with_large_friction_moves_like_sgld() -> None:
    """C = 10, h = 0.05 (C h = 0.5, not the exact case) against SGLD with ε = h / C = 0.005.

    The exact moment recursions differ by at most 0.016 sd (mean) and 0.013 (covariance) from step
    30 on; both chains share a seed, so the Monte Carlo part of the difference is small. A low
    friction C = 1 under the same mapping (ε = 0.05) is off by more than 1 sd at step 30.
    """
    lr, friction, checkpoints = 0.05, 10.0, [30, 100, 300]
    sghmc = ensemble_path(lambda p, g: SGHMC(p, lr=lr, friction=friction, generator=g), checkpoints, NUM_CHAINS, seed=5)
    sgld = ensemble_path(lambda p, g: SGLD(p, lr=lr / friction, generator=g), checkpoints, NUM_CHAINS, seed=5)
    for step, heavy, langevin in zip(checkpoints, sghmc, sgld):
        langevin_mean, langevin_cov = langevin.double().mean(0), torch.cov(langevin.double().T)
        mean_error, cov_error = standardized_errors(heavy, langevin_mean, SIGMA)
        cov_gap = float(((torch.cov(heavy.double().T) - langevin_cov) / torch.outer(SIGMA.diag().sqrt(), SIGMA.diag().sqrt())).abs().max())
        assert mean_error < 0.03 and cov_gap < 0.03, f"step {step}: SGHMC vs SGLD mean gap {mean_error:.4f}, cov gap {cov_gap:.4f}"

    (light,) = ensemble_path(lambda p, g: SGHMC(p, lr=lr, friction=1.0, generator=g), [30], NUM_CHAINS, seed=5)
    (light_langevin,) = ensemble_path(lambda p, g: SGLD(p, lr=lr / 1.0, generator=g), [30], NUM_CHAINS, seed=5)
    light_gap, _ = standardized_errors(light, light_langevin.double().mean(0), SIGMA)
    assert light_gap > 0.3, f"C = 1 should not follow SGLD(h/C), gap only {light_gap:.3f}"

    # Stationary: SGHMC(C = 10) samples the target, as SGLD does. Its slowest mode relaxes like SGLD's
    # with ε = 0.005, in 1 / (ε λ_min) = 440 steps, hence the long burn-in and run.
    samples, _ = run_gaussian_chains(lambda p, g: SGHMC(p, lr=lr, friction=friction, generator=g), 2700, 300)
    mean_error, cov_error = standardized_errors(samples, MU, SIGMA)
    assert mean_error < MEAN_TOL and cov_error < COV_TOL, f"stationary SGHMC(C=10): errors {mean_error:.4f}, {cov_error:.4f}"


# ----------------------------------------------------------------------------------------
# Bayesian linear regression with minibatch gradients
# ----------------------------------------------------------------------------------------
# y = X w + N(0, σ²), prior w ~ N(0, I/α): the posterior is N(m, S) with
#     S = (α I + XᵀX / σ²)⁻¹,    m = S Xᵀ y / σ².
# Each chain draws its own minibatch of n = 25 of the N = 100 points (with replacement) every step;
# `minibatch_potential` rescales the likelihood by N/n. SGLD's stationary variance is inflated by the
# discretisation (hλ/2) and by the minibatch noise (about (N/n) hλ/2): with posterior precision
# eigenvalues 77 and 169 and h = 6e-5, by 1.2% to 2.5%. A missing N/n would make the posterior 4× wider.

DATASET_SIZE, BATCH_SIZE, NOISE_SD, PRIOR_PRECISION = 100, 25, 1.0, 1.0
REGRESSION_CHAINS = 2000
REGRESSION_MEAN_TOL, REGRESSION_COV_TOL = 0.05, 0.06  # Monte Carlo sd ~0.012 (mean), ~0.018 (cov)


def regression_data() -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(11)
    feature_cov = torch.tensor([[1.0, 0.3], [0.3, 1.0]])
    x = torch.randn(DATASET_SIZE, 2, generator=generator) @ torch.linalg.cholesky(feature_cov).T
    y = x @ torch.tensor([0.5, -1.0]) + NOISE_SD * torch.randn(DATASET_SIZE, generator=generator)
    return x, y


def regression_posterior(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    precision = PRIOR_PRECISION * torch.eye(2) + x.T @ x / NOISE_SD**2
    cov = torch.linalg.inv(precision)
    return cov @ x.T @ y / NOISE_SD**2, cov


def minibatch_gradient_diffusion(x: Tensor, y: Tensor, w: Tensor, lr: float) -> float:
    """B̂ = h tr(V) / (2d), V = (N²/n) Cov_i[∇_w -log p(y_i | x_i, w)] the minibatch-gradient covariance at w."""
    per_point = -x * ((y - x @ w) / NOISE_SD**2).unsqueeze(-1)
    gradient_cov = DATASET_SIZE**2 / BATCH_SIZE * torch.cov(per_point.T, correction=0)
    return lr * float(gradient_cov.trace()) / (2 * 2)


def run_regression_chains(
    make_sampler: SamplerFactory, burn_in: int, num_kept: int, start: Tensor, thin: int = 5, seed: int = 0
) -> Tensor:
    """K chains from `start`, each drawing its own minibatch every step; the kept samples (num_kept, K, 2)."""
    x, y = regression_data()
    generator = torch.Generator().manual_seed(seed)
    w = start.expand(REGRESSION_CHAINS, 2).clone().requires_grad_(True)
    sampler = make_sampler([w], generator)
    collector = SampleCollector(w, burn_in=burn_in, thin=thin)
    for _ in range(burn_in + num_kept * thin):
        index = torch.randint(DATASET_SIZE, (REGRESSION_CHAINS, BATCH_SIZE), generator=generator)
        residual = y[index] - (x[index] @ w.unsqueeze(-1)).squeeze(-1)  # (K, n)
        log_likelihood_sum = -0.5 * (residual**2).sum(-1) / NOISE_SD**2
        log_prior = -0.5 * PRIOR_PRECISION * (w**2).sum(-1)
        sampler.zero_grad()
        minibatch_potential(log_prior, log_likelihood_sum, DATASET_SIZE, BATCH_SIZE).sum().backward()
        sampler.step()
        collector()
    return collector.stacked()[0]


def regression_noise_estimate(lr: float) -> float:
    x, y = regression_data()
    return minibatch_gradient_diffusion(x, y, regression_posterior(x, y)[0], lr)


def sghmc_for_regression(params, generator: torch.Generator) -> SGHMC:
    """C = 20, h = 0.005, B̂ = 0.7 from the gradient covariance at the posterior mean (B is ~0.5-0.9 by direction)."""
    return SGHMC(params, lr=0.005, friction=20.0, noise_estimate=regression_noise_estimate(0.005), generator=generator)


def sgnht_for_regression(params, generator: torch.Generator) -> SGNHT:
    """A = 10, h = 0.002; ξ starts at A + B̂ (B̂ = 0.27), where it will settle, rather than at A.

    ξ relaxes towards A + B on a time scale of about ξ SDE time units, ξ / h = 5000 steps here, so a
    start at A would leave the chain ~B/A = 3% too hot for the whole run. Bias at equilibrium:
    -(A + B) h / 2 = -1% from the discretisation, about ±1% from the anisotropy of V that one scalar ξ
    cannot follow.
    """
    lr, amplitude = 0.002, 10.0
    initial = amplitude + regression_noise_estimate(lr)
    return SGNHT(params, lr=lr, noise=amplitude, initial_thermostat=initial, generator=generator)


# (factory, burn-in, kept, start). SGLD and SGHMC start at the prior mean w = 0, about 7 posterior sds
# away. SGNHT starts at the posterior mode: from far away the descent turns potential energy into
# kinetic energy, ξ (the integral of the excess, docs/sgmcmc.md) overshoots, and the
# overshoot too decays only over ~ξ / h steps.
REGRESSION_CASES = {
    "SGLD": (lambda params, g: SGLD(params, lr=6e-5, generator=g), 1400, 300, "prior"),
    "SGHMC": (sghmc_for_regression, 500, 200, "prior"),
    "SGNHT": (sgnht_for_regression, 500, 200, "mode"),
}


@pytest.mark.slow  # thousands of sampler steps: the full suite's, not the quick loop's
@pytest.mark.parametrize("name", list(REGRESSION_CASES))
def test_bayesian_linear_regression_posterior(name: str) -> None:
    make_sampler, burn_in, num_kept, start = REGRESSION_CASES[name]
    posterior_mean, posterior_cov = regression_posterior(*regression_data())
    start_point = torch.zeros(2) if start == "prior" else posterior_mean
    samples = run_regression_chains(make_sampler, burn_in, num_kept, start_point)
    mean_error, cov_error = standardized_errors(samples, posterior_mean, posterior_cov)
    assert mean_error < REGRESSION_MEAN_TOL, f"{name}: posterior mean off by {mean_error:.4f} sd"
    assert cov_error < REGRESSION_COV_TOL, f"{name}: posterior covariance off by {cov_error:.4f}"


def test_minibatch_potential_is_unbiased() -> None:
    """Averaged over every size-n subset drawn uniformly, (N/n) Σ_batch log p equals the full-data sum."""
    log_likelihood = torch.randn(6, generator=torch.Generator().manual_seed(0))
    log_prior = torch.tensor(-1.5)
    full = -log_prior - log_likelihood.sum()
    subsets = torch.combinations(torch.arange(6), r=2)
    estimates = minibatch_potential(log_prior, log_likelihood[subsets].sum(-1), dataset_size=6, batch_size=2)
    torch.testing.assert_close(estimates.mean(), full)
    with pytest.raises(ValueError, match="batch_size"):
        minibatch_potential(log_prior, log_likelihood.sum(), dataset_size=3, batch_size=4)


# ----------------------------------------------------------------------------------------
# Arguments, state, sample collection
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: SGLD(p, lr=0.0), "lr"),
        (lambda p: SGLD(p, lr=0.1, temperature=0.0), "temperature"),
        (lambda p: SGHMC(p, lr=-1.0), "lr"),
        (lambda p: SGHMC(p, lr=0.1, friction=0.0), "friction"),
        (lambda p: SGHMC(p, lr=0.1, friction=1.0, noise_estimate=-0.1), "noise_estimate"),
        (lambda p: SGHMC(p, lr=0.1, friction=1.0, noise_estimate=2.0), "friction \\* temperature >= noise_estimate"),
        (lambda p: SGHMC(p, lr=0.1, friction=2.0, noise_estimate=1.5, temperature=0.5), "noise_estimate"),
        (lambda p: SGHMC(p, lr=0.1, friction=20.0), "friction \\* lr < 2"),
        (lambda p: SGNHT(p, lr=0.1, noise=-1.0), "noise"),
        (lambda p: SGNHT(p, lr=0.1, temperature=-1.0), "temperature"),
        (lambda p: SGLD([{"params": p}, {"params": [torch.zeros(1, requires_grad=True)], "lr": -1.0}], lr=0.1), "lr"),
    ],
)
def test_invalid_arguments_raise(make: Callable, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make([torch.zeros(2, requires_grad=True)])


def test_boundary_arguments_are_accepted() -> None:
    SGHMC([torch.zeros(2, requires_grad=True)], lr=0.1, friction=1.0, noise_estimate=1.0)  # C = B̂
    SGNHT([torch.zeros(2, requires_grad=True)], lr=0.1, noise=0.0)  # A = 0: minibatch noise only


@pytest.mark.parametrize(
    "make, keys",
    [
        (lambda p, g: SGHMC(p, lr=0.05, friction=2.0, generator=g), {"momentum"}),
        (lambda p, g: SGNHT(p, lr=0.05, noise=1.0, generator=g), {"momentum", "thermostat"}),
        (lambda p, g: SGNHT(p, lr=0.05, noise=1.0, multivariate=True, generator=g), {"momentum", "thermostat"}),
    ],
)
def test_state_dict_round_trip(make: SamplerFactory, keys: set[str]) -> None:
    """A sampler rebuilt from state_dict() (and the same generator state) continues the identical chain."""

    def advance(theta: Tensor, sampler: torch.optim.Optimizer, steps: int) -> None:
        for _ in range(steps):
            sampler.zero_grad()
            gaussian_potential(theta).backward()
            sampler.step()

    theta = torch.zeros(8, 2, requires_grad=True)
    sampler = make([theta], torch.Generator().manual_seed(0))
    advance(theta, sampler, 10)
    saved = copy.deepcopy(sampler.state_dict())
    assert set(saved["state"][0]) == keys
    assert saved["state"][0]["momentum"].abs().sum() > 0

    twin_theta = theta.detach().clone().requires_grad_(True)
    twin_generator = torch.Generator()
    twin_generator.set_state(sampler.generator.get_state())
    twin = make([twin_theta], twin_generator)
    twin.load_state_dict(saved)
    for key in keys:
        torch.testing.assert_close(twin.state[twin_theta][key], sampler.state[theta][key], rtol=0, atol=0)
    advance(theta, sampler, 10)
    advance(twin_theta, twin, 10)
    torch.testing.assert_close(twin_theta, theta, rtol=0, atol=0)


def test_step_evaluates_closure_and_skips_parameters_without_gradient() -> None:
    theta = torch.zeros(4, 2, requires_grad=True)
    frozen = torch.ones(3, requires_grad=True)
    sampler = SGHMC([theta, frozen], lr=0.05, friction=2.0, generator=torch.Generator().manual_seed(0))

    def closure() -> Tensor:
        sampler.zero_grad()
        potential = gaussian_potential(theta)
        potential.backward()
        return potential

    loss = sampler.step(closure)
    assert loss is not None and torch.isfinite(loss)
    assert not torch.equal(theta.detach(), torch.zeros(4, 2))
    torch.testing.assert_close(frozen.detach(), torch.ones(3), rtol=0, atol=0)
    assert frozen not in sampler.state


def test_sample_collector_burn_in_and_thinning() -> None:
    """Steps burn_in + thin, burn_in + 2 thin, ... are kept: (n - burn_in) // thin of n."""
    value = torch.zeros(2)
    collector = SampleCollector(value, burn_in=7, thin=3)
    kept_steps = []
    for step in range(1, 21):
        value.fill_(step)
        if collector():
            kept_steps.append(step)
        assert collector.num_kept == max(0, (step - 7) // 3)
    assert kept_steps == [10, 13, 16, 19]
    assert [float(sample[0][0]) for sample in collector.samples] == [10.0, 13.0, 16.0, 19.0]
    value.fill_(-1.0)  # snapshots are clones, untouched by later in-place updates
    assert float(collector.stacked()[0][0, 0]) == 10.0


def test_sample_collector_running_mean_matches_list() -> None:
    module = nn.Linear(3, 2)
    as_list = SampleCollector(module, burn_in=5, thin=2, keep="list")
    as_mean = SampleCollector(module, burn_in=5, thin=2, keep="mean")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(45):
            for param in module.parameters():
                param.add_(torch.randn(param.shape, generator=generator)).add_(3.0)  # drifting: a large mean
            as_list()
            as_mean.update()
    assert as_list.num_kept == as_mean.num_kept == 20
    for from_list, running in zip(as_list.mean(), as_mean.mean()):
        torch.testing.assert_close(running, from_list)
    for from_list, running in zip(as_list.variance(), as_mean.variance()):
        torch.testing.assert_close(running, from_list)
    with pytest.raises(ValueError, match="keep='list'"):
        as_mean.stacked()
    with pytest.raises(ValueError, match="thin"):
        SampleCollector(module, thin=0)


# ----------------------------------------------------------------------------------------
# The samplers as the optimizer of a model of the collection
# ----------------------------------------------------------------------------------------


@pytest.mark.slow  # a long statistical check: the full suite runs it, the quick loop leaves it out
def test_sgld_trains_a_collection_model_on_the_potential(mnist_dir, tmp_path):
    """optimizer=SGLD: the sampler moves on U = N x batch-mean loss; the callback collects samples."""
    import functools

    import lightning as L

    from callbacks import PosteriorSamples
    from datamodules import MNISTDataModule
    from models import VAE

    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32)
    model = VAE(latent_dim=4, val_num_samples=2, optimizer=functools.partial(SGLD, lr=1e-8))
    collect = PosteriorSamples(burn_in=2, thin=2, keep="list", use_mean=True)
    trainer = L.Trainer(
        max_steps=8, limit_train_batches=8, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[collect],
    )
    trainer.fit(model, datamodule=dm)
    assert isinstance(trainer.optimizers[0], SGLD) and trainer.optimizers[0].dataset_size == dm.num_train_examples == 55_000
    assert model.posterior_samples is collect.collector and collect.collector.num_kept == 3  # steps 4, 6, 8
    for param, mean in zip(model.parameters(), collect.collector.mean()):  # use_mean: the posterior mean is loaded
        assert torch.equal(param, mean)
    assert torch.isfinite(trainer.callback_metrics["train/loss"]) and trainer.callback_metrics["train/posterior_samples"] == 3


def test_sgld_step_inside_training_is_scaled_by_the_dataset_size(mnist_dir):
    """Catches the SG-MCMC loss not being multiplied by N: at a negligible temperature an SGLD step inside
    `Trainer.fit` must move every parameter by exactly -h · N · ∇(batch-mean loss)."""
    import functools

    import lightning as L

    from datamodules import MNISTDataModule
    from models import VAE

    class RecordStep(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            self.before = [p.detach().clone() for p in pl_module.parameters()]
            self.grads = [p.grad.detach().clone() for p in pl_module.parameters()]

    lr = 1e-7
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="static", batch_size=16)
    model = VAE(latent_dim=4, val_num_samples=2, optimizer=functools.partial(SGLD, lr=lr, temperature=1e-30))
    record = RecordStep()
    trainer = L.Trainer(
        max_steps=1, limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[record], accelerator="cpu",
        precision="64-true",  # so that the update is compared without float32 rounding
    )
    trainer.fit(model, datamodule=dm)
    for before, grad, after in zip(record.before, record.grads, model.parameters()):
        torch.testing.assert_close(after.detach() - before, -lr * dm.num_train_examples * grad, rtol=1e-6, atol=1e-15)


def test_a_bad_sampler_setting_is_refused_when_the_model_is_built_not_at_the_first_step():
    """Both front ends turn a constructor's ValueError into one line; the optimizer's own checks must run there too."""
    import functools

    import launch.hydra_app
    from launch.checks.settings import SettingsError
    from models import VAE
    from samplers import SGLD
    from tests.launch.test_configs import composed

    with pytest.raises(ValueError, match="optimizer: step size lr must be > 0"):
        VAE(optimizer=functools.partial(SGLD, lr=-1.0))
    with pytest.raises(SettingsError, match=r"^optimizer \(Santa\): step size lr must be > 0"):
        launch.hydra_app.data_and_model(composed(["model=vae", "optimizer=santa", "optimizer.lr=-1"]))


def test_hmc_is_refused_as_a_training_optimizer_in_both_front_ends():
    """HMC's accept/reject needs the full-data energy (docs/sgmcmc.md#hmc); as a Lightning optimizer it would test a
    minibatch's, with fresh latents each closure call. It subclasses SGMCMC, so it must be refused by name."""
    import functools

    import launch.hydra_app
    from launch.checks.settings import SettingsError
    from models import VAE
    from samplers import HMC
    from tests.launch.test_configs import composed

    with pytest.raises(ValueError, match="optimizer: HMC is not a training optimizer"):
        VAE(optimizer=functools.partial(HMC, lr=0.01))
    with pytest.raises(SettingsError, match=r"^optimizer \(HMC\): HMC is not a training optimizer"):
        launch.hydra_app.data_and_model(composed(["model=vae", "optimizer=sgld", "optimizer._target_=samplers.HMC"]))


def test_posterior_samples_are_in_the_checkpoint_and_a_resumed_run_continues_the_collection(mnist_dir, tmp_path):
    """Nothing is lost: resumed from the checkpoint of step 4, an 8-step run keeps the same snapshots, the same count
    and the same step count as the uninterrupted run (whose checkpoint it is), and refuses another `keep` or `thin`, or
    no collection."""
    import functools

    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from callbacks import PosteriorSamples
    from datamodules import MNISTDataModule
    from models import VAE

    def run(ckpt_path=None, keep="list", thin=1, collecting=True):
        L.seed_everything(0)
        dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="static", batch_size=16)
        model = VAE(latent_dim=4, val_num_samples=2, optimizer=functools.partial(SGLD, lr=1e-8))
        collect = PosteriorSamples(burn_in=2, thin=thin, keep=keep)
        every_4 = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1, filename="{step}")
        trainer = L.Trainer(max_steps=8, limit_train_batches=20, limit_val_batches=0, num_sanity_val_steps=0,
                            logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                            callbacks=[*[collect][:collecting], *[every_4][:ckpt_path is None], SafeCheckpoints()],
                            accelerator="cpu")
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
        return collect.collector

    straight = run()
    assert straight.num_kept == 6  # steps 3..8
    resumed = run(ckpt_path=tmp_path / "step=4.ckpt")
    assert (resumed.num_steps, resumed.num_kept) == (8, 6)
    for a, b in zip(straight.samples, resumed.samples, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)
    with pytest.raises(CheckpointError, match="keep=mean: the checkpoint.s samples were collected with keep=list"):
        run(ckpt_path=tmp_path / "step=4.ckpt", keep="mean")
    with pytest.raises(CheckpointError, match="thin=2: the checkpoint.s samples were collected with thin=1"):
        run(ckpt_path=tmp_path / "step=4.ckpt", thin=2)
    with pytest.raises(CheckpointError, match=r"PosteriorSamples callback collected.*resume with it \(callbacks=sgmcmc"):
        run(ckpt_path=tmp_path / "step=4.ckpt", collecting=False)  # Lightning would drop the samples with a warning


def test_posterior_samples_settings_are_checked_when_built():
    from callbacks import PosteriorSamples

    for settings, message in (({"keep": "foo"}, "keep must be 'mean' or 'list'"), ({"burn_in": -1}, "burn_in must be"),
                              ({"thin": 0}, "thin must be"), ({"use_mean": "yes"}, "use_mean must be")):
        with pytest.raises(ValueError, match=message):
            PosteriorSamples(**settings)
