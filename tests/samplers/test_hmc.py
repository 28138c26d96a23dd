"""The rest of the Hamiltonian family (docs/sgmcmc.md): exact HMC, the symmetric-splitting integrator of SGHMC and
mSGNHT, and Santa, against closed-form targets.

Chains are vectorised as in tests/samplers/test_sgmcmc.py: a (K, 2) parameter holds K independent chains on the correlated
2-D Gaussian. Tolerances come from the chains themselves: K independent chains give K independent estimates of each
moment (a per-chain mean and covariance), whose spread over the chains is the Monte Carlo standard error of the
pooled estimate whatever the autocorrelation within a chain (K / that spread² is the effective sample size). Errors
are in target standard deviations, as in tests/samplers/test_sgmcmc.py. All randomness comes from seeded generators.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

import samplers.sgmcmc
from samplers import HMC, SGHMC, SGLD, SGNHT, Santa, leapfrog
from tests.samplers.test_sgmcmc import (MU, NOISE_SD, PRECISION, PRIOR_PRECISION, SIGMA, gaussian_gradient, regression_data,
                                         regression_posterior)
from tests.samplers.test_sgmcmc import single_thread  # noqa: F401  (autouse: one intra-op thread for these tiny tensors)

Z_TOL = 5.0  # errors must stay within 5 Monte Carlo standard errors


def gaussian_energies(theta: Tensor) -> Tensor:
    """U per chain, ½ (θ - μ)ᵀ Σ⁻¹ (θ - μ), for θ of shape (K, 2)."""
    offset = theta - MU.to(theta.dtype)
    return 0.5 * ((offset @ PRECISION.to(theta.dtype)) * offset).sum(-1)


def gaussian_closure(theta: Tensor):
    def closure() -> Tensor:
        energies = gaussian_energies(theta)
        energies.sum().backward()
        return energies

    return closure


def chain_moments(samples: Tensor, mean: Tensor, cov: Tensor) -> dict[str, float]:
    """Pooled mean and covariance of (n, K, d) samples from K independent chains, their errors against (mean, cov)
    in target sd units, and the Monte Carlo standard errors of those estimates from the spread over the chains."""
    samples, mean, cov = samples.double(), mean.double(), cov.double()
    scale = cov.diag().sqrt()
    chains = samples.shape[1]
    chain_means = samples.mean(0)  # (K, d)
    centred = samples - chain_means.mean(0)
    chain_covs = torch.einsum("nki,nkj->kij", centred, centred) / samples.shape[0]  # (K, d, d)
    mean_z = (chain_means.mean(0) - mean) / (chain_means.std(0) / math.sqrt(chains))
    cov_z = (chain_covs.mean(0) - cov) / (chain_covs.std(0) / math.sqrt(chains))
    return {
        "mean_error": float(((chain_means.mean(0) - mean) / scale).abs().max()),
        "cov_error": float(((chain_covs.mean(0) - cov) / torch.outer(scale, scale)).abs().max()),
        "mean_z": float(mean_z.abs().max()),
        "cov_z": float(cov_z.abs().max()),
        "cov_se": float((chain_covs.std(0) / math.sqrt(chains) / torch.outer(scale, scale)).max()),
    }


def assert_matches(samples: Tensor, mean: Tensor, cov: Tensor, what: str) -> dict[str, float]:
    moments = chain_moments(samples, mean, cov)
    assert moments["cov_se"] < 0.02, f"{what}: too few effective samples to test anything ({moments})"
    assert moments["mean_z"] < Z_TOL and moments["cov_z"] < Z_TOL, f"{what}: {moments}"
    return moments


# ----------------------------------------------------------------------------------------
# HMC
# ----------------------------------------------------------------------------------------


def run_hmc(sampler_kwargs: dict, burn_in: int, num_kept: int, num_chains: int = 1000,
            seed: int = 0) -> tuple[Tensor, HMC]:
    theta = torch.zeros(num_chains, 2, requires_grad=True)
    sampler = HMC([theta], generator=torch.Generator().manual_seed(seed), **sampler_kwargs)
    closure = gaussian_closure(theta)
    kept = []
    for step in range(burn_in + num_kept):
        sampler.step(closure)
        if step >= burn_in:
            kept.append(theta.detach().clone())
    return torch.stack(kept), sampler


def test_hmc_recovers_the_gaussian() -> None:
    samples, sampler = run_hmc(dict(lr=0.3, num_leapfrog=5), burn_in=50, num_kept=200)
    assert 0.9 < sampler.acceptance_rate < 1.0
    assert_matches(samples, MU, SIGMA, "HMC h=0.3, L=5")


def test_metropolis_makes_hmc_exact_where_plain_leapfrog_is_biased() -> None:
    """h = 0.8: h ω_max = 1.5 (ω² = 3.45, the stiff precision eigenvalue). Leapfrog conserves a shadow energy whose
    θ-marginal is wider along the stiff direction by about 1 / (1 - h² ω² / 4) = 2.2; resampling p each time
    without a test samples it. The Metropolis test (24% rejected) removes the bias entirely."""
    lr, steps = 0.8, 3
    samples, sampler = run_hmc(dict(lr=lr, num_leapfrog=steps), burn_in=50, num_kept=200)
    assert 0.6 < sampler.acceptance_rate < 0.9
    assert_matches(samples, MU, SIGMA, "HMC h=0.8, L=3")

    generator = torch.Generator().manual_seed(0)
    theta = torch.zeros(1000, 2, requires_grad=True)
    closure = gaussian_closure(theta)

    def energy_and_gradient() -> tuple[Tensor, list[Tensor]]:
        theta.grad = None
        with torch.enable_grad():
            energies = closure()
        return energies.detach(), [theta.grad.clone()]

    kept = []
    with torch.no_grad():
        for step in range(250):  # the same trajectories, every one accepted
            momentum = torch.randn(theta.shape, generator=generator)
            _, grads = energy_and_gradient()
            leapfrog([theta], [momentum], energy_and_gradient, lr, steps, [1.0], grads)
            if step >= 50:
                kept.append(theta.detach().clone())
    unadjusted = chain_moments(torch.stack(kept), MU, SIGMA)
    assert unadjusted["cov_z"] > 10 * Z_TOL and unadjusted["cov_error"] > 0.3, f"unadjusted leapfrog: {unadjusted}"


def test_leapfrog_is_reversible_and_its_energy_error_is_second_order() -> None:
    """Forward L steps, negate p, L steps: back at the start (the map is an involution up to the sign of p). Over a
    fixed trajectory length τ = 1, halving h quarters the energy error |H_end - H_start| (it is O(h²))."""
    generator = torch.Generator().manual_seed(0)
    start = MU.double() + torch.randn(200, 2, generator=generator, dtype=torch.float64)
    start_momentum = torch.randn(200, 2, generator=generator, dtype=torch.float64)
    theta = start.clone().requires_grad_(True)

    def energy_and_gradient() -> tuple[Tensor, list[Tensor]]:
        with torch.enable_grad():
            energies = gaussian_energies(theta)
            (grad,) = torch.autograd.grad(energies.sum(), theta)
        return energies.detach(), [grad]

    errors = []
    with torch.no_grad():
        for lr in (0.1, 0.05, 0.025):
            theta.copy_(start)
            momentum = start_momentum.clone()
            start_energy = gaussian_energies(theta) + 0.5 * momentum.square().sum(-1)
            start_grads = energy_and_gradient()[1]
            energy, grads = leapfrog([theta], [momentum], energy_and_gradient, lr, round(1 / lr), [1.0], start_grads)
            errors.append(float((energy + 0.5 * momentum.square().sum(-1) - start_energy).abs().max()))
            momentum.neg_()
            leapfrog([theta], [momentum], energy_and_gradient, lr, round(1 / lr), [1.0], grads)
            torch.testing.assert_close(theta.detach(), start, rtol=0, atol=1e-12)
            torch.testing.assert_close(-momentum, start_momentum, rtol=0, atol=1e-12)
    slope = math.log(errors[0] / errors[2]) / math.log(4)
    assert 1.9 < slope < 2.1, f"energy error {errors} at h = 0.1, 0.05, 0.025: order {slope:.2f}"


def test_hmc_bayesian_linear_regression_with_a_mass_matrix() -> None:
    """Full-data U, one energy per chain; the diagonal mass M = diag(posterior precision) makes both directions
    move alike (precision eigenvalues 77 and 169: without it h must follow the stiffer one)."""
    x, y = regression_data()
    posterior_mean, posterior_cov = regression_posterior(x, y)
    chains = 500
    w = torch.zeros(chains, 2, requires_grad=True)

    def closure() -> Tensor:
        residual = y - w @ x.T  # (K, N)
        energies = 0.5 * (residual**2).sum(-1) / NOISE_SD**2 + 0.5 * PRIOR_PRECISION * (w**2).sum(-1)
        energies.sum().backward()
        return energies

    mass = torch.linalg.inv(posterior_cov).diag()
    sampler = HMC([w], lr=0.4, num_leapfrog=4, mass=[mass], generator=torch.Generator().manual_seed(1))
    kept = []
    for step in range(250):
        sampler.step(closure)
        if step >= 50:
            kept.append(w.detach().clone())
    assert sampler.acceptance_rate > 0.8
    assert_matches(torch.stack(kept), posterior_mean, posterior_cov, "HMC on the regression posterior")


def test_a_rejected_proposal_is_restored_exactly() -> None:
    """A closure whose energy is NaN away from the start: every proposal is rejected, θ and its gradient are the
    starting ones bit for bit, and the acceptance rate says so."""
    theta = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    start = theta.detach().clone()

    def closure() -> Tensor:
        energy = 0.5 * theta.square().sum()
        energy.backward()
        return energy if torch.equal(theta.detach(), start) else energy * float("nan")

    sampler = HMC([theta], lr=0.1, num_leapfrog=3, generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        energy = sampler.step(closure)
        assert torch.equal(theta.detach(), start) and torch.equal(theta.grad, start)
        assert float(energy) == 0.5 * float(start.square().sum())
    assert sampler.acceptance_rate == 0.0 and sampler.last_accept_prob == 0.0


def test_dual_averaging_tunes_the_step_size_then_freezes_it() -> None:
    """From h = 0.05 (every proposal accepted), 150 warm-up steps of dual averaging bring the acceptance near its
    target 0.65; after the warm-up h no longer changes, and the chains sample the target."""
    theta = torch.zeros(1000, 2, requires_grad=True)
    sampler = HMC([theta], lr=0.05, num_leapfrog=3, adapt_steps=150, target_accept=0.65,
                  generator=torch.Generator().manual_seed(0))
    closure = gaussian_closure(theta)
    for _ in range(150):
        sampler.step(closure)
    tuned = sampler.param_groups[0]["lr"]
    assert tuned > 0.3, f"step size still {tuned}"
    kept, accepted = [], []
    for _ in range(150):
        sampler.step(closure)
        kept.append(theta.detach().clone())
        accepted.append(sampler.last_accept_prob)
        assert sampler.param_groups[0]["lr"] == tuned
    mean_accept = sum(accepted) / len(accepted)
    assert 0.55 < mean_accept < 0.9, f"acceptance after the warm-up: {mean_accept:.3f}"
    assert_matches(torch.stack(kept), MU, SIGMA, f"HMC with the tuned h = {tuned:.3f}")


# ----------------------------------------------------------------------------------------
# Symmetric splitting vs Euler: the order of the stationary bias
# ----------------------------------------------------------------------------------------
# The stationary law of a discretised sampler is off by O(h^k): k = 1 for Euler, k = 2 for the splitting. The bias is
# measured in the stationary covariance of the state (θ, p) against N(μ, Σ) x N(0, I), entry by entry, in target sd
# units. To see O(h²) below the Monte Carlo error, the four step sizes h₀, 2h₀, 4h₀, 8h₀ share one Brownian path
# (the noise of a step 2h is the sum of the two noises of the steps h it replaces, the standard coupling for
# convergence orders of SDE schemes): their Monte Carlo errors are then almost the same, and cancel in the
# differences D(h) = S(2h) - S(h) = c h^k (2^k - 1) + ..., whose log-log slope over h₀, 2h₀, 4h₀ is k.
# SGHMC's first-order error (Euler) sits in p (its θ-marginal is second order on a Gaussian already); mSGNHT's in
# θ (its thermostat holds E[p²] = T exactly).


class BrownianPath:
    """Stands in for samplers.sgmcmc._gaussian_noise: the noise of one step of size 2^level h₀ is the sum of the
    2^level standard normals of the steps of size h₀ it spans, so every level follows the same Brownian path."""

    def __init__(self, seed: int, level: int) -> None:
        self.generator, self.fine_steps = torch.Generator().manual_seed(seed), 2**level

    def __call__(self, like: Tensor, variance: float, generator: torch.Generator | None) -> Tensor:
        fine = torch.randn((self.fine_steps, *like.shape), generator=self.generator)
        return fine.sum(0).mul_(math.sqrt(variance / self.fine_steps))


def whitened_normal(num: int, generator: torch.Generator) -> Tensor:
    """num standard normal 2-vectors whose sample mean is exactly 0 and sample covariance exactly I."""
    z = torch.randn(num, 2, generator=generator, dtype=torch.float64)
    z -= z.mean(0)
    return z @ torch.linalg.inv(torch.linalg.cholesky(torch.cov(z.T, correction=0))).T


def stationary_covariance_error(make_sampler, lr: float, level: int, monkeypatch, chains: int = 10_000,
                                burn_in_time: float = 3.0, kept_time: float = 15.0) -> Tensor:
    """The 8 entries of [Cov(θ) - Σ (sd units), Cov(p) - I], from chains started exactly at the target."""
    generator = torch.Generator().manual_seed(0)
    theta = (MU + (whitened_normal(chains, generator) @ torch.linalg.cholesky(SIGMA.double()).T).float())
    theta.requires_grad_(True)
    sampler = make_sampler([theta], lr)
    sampler.state[theta]["momentum"] = whitened_normal(chains, generator).float()
    if isinstance(sampler, SGNHT):
        sampler.state[theta]["thermostat"] = torch.full((chains, 2), float(sampler.param_groups[0]["noise"]))
    monkeypatch.setattr(samplers.sgmcmc, "_gaussian_noise", BrownianPath(seed=1, level=level))
    burn_in, kept = round(burn_in_time / lr), round(kept_time / lr)
    theta_moment = torch.zeros(2, 2, dtype=torch.float64)
    momentum_moment = torch.zeros(2, 2, dtype=torch.float64)
    for step in range(burn_in + kept):
        theta.grad = (theta.detach() - MU) @ PRECISION  # ∇U, without autograd: the tensors are large, the steps many
        sampler.step()
        if step >= burn_in:
            offset = (theta.detach() - MU).double()
            momentum = sampler.state[theta]["momentum"].double()
            theta_moment += offset.T @ offset
            momentum_moment += momentum.T @ momentum
    scale = SIGMA.double().diag().sqrt()
    theta_error = (theta_moment / (kept * chains) - SIGMA.double()) / torch.outer(scale, scale)
    momentum_error = momentum_moment / (kept * chains) - torch.eye(2, dtype=torch.float64)
    return torch.cat([theta_error.flatten(), momentum_error.flatten()])


ORDER_CASES = {  # name -> integrator -> sampler factory; C h <= 0.48 and A h <= 0.32 keep Euler stable
    "SGHMC": lambda integrator: lambda params, lr: SGHMC(params, lr=lr, friction=3.0, integrator=integrator),
    "mSGNHT": lambda integrator: lambda params, lr: SGNHT(params, lr=lr, noise=2.0, multivariate=True,
                                                          integrator=integrator),
}


@pytest.mark.parametrize("name", list(ORDER_CASES))
def test_splitting_is_second_order_and_euler_first_order(name: str, monkeypatch) -> None:
    fine = 0.02
    slopes, finest_errors = {}, {}
    for integrator in ("euler", "splitting"):
        errors = [stationary_covariance_error(ORDER_CASES[name](integrator), fine * 2**level, level, monkeypatch)
                  for level in range(4)]
        differences = [float((coarse - finer).abs().max()) for finer, coarse in zip(errors, errors[1:])]
        steps = torch.tensor([fine * 2**level for level in range(3)]).log()
        slopes[integrator] = float(torch.linalg.lstsq(torch.stack([steps, torch.ones(3)], 1),
                                                      torch.tensor(differences).log().unsqueeze(1)).solution[0])
        finest_errors[integrator] = float(errors[0].abs().max())
    assert slopes["euler"] < 1.5 < slopes["splitting"], f"{name}: log-log slopes {slopes}"
    assert 0.9 < slopes["euler"] and slopes["splitting"] < 3.0, f"{name}: log-log slopes {slopes}"
    # Both converge to the target itself: at h₀ = 0.02 the whole error (bias and Monte Carlo) is small.
    assert max(finest_errors.values()) < 0.05, f"{name}: errors at h = {fine}: {finest_errors}"


def test_splitting_friction_steps_are_stable_for_any_friction() -> None:
    """Euler's 1 - C h must stay in (-1, 1) and C h >= 2 is refused; the splitting's e^{-Ch/2} is in (0, 1) for
    every C, so it is accepted and stays bounded (accurate only while C h is small: its O(h²) error grows as C²)."""
    with pytest.raises(ValueError, match="friction \\* lr < 2"):
        SGHMC([torch.zeros(2, requires_grad=True)], lr=0.1, friction=30.0)
    theta = torch.zeros(100, 2, requires_grad=True)
    sampler = SGHMC([theta], lr=0.1, friction=30.0, integrator="splitting", generator=torch.Generator().manual_seed(0))
    for _ in range(500):
        theta.grad = (theta.detach() - MU) @ PRECISION
        sampler.step()
    assert torch.isfinite(theta).all() and float((theta.detach() - MU).abs().max()) < 10


# ----------------------------------------------------------------------------------------
# Santa
# ----------------------------------------------------------------------------------------


def gradient_of(potential: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """∇ of the chains' summed `potential`, by autograd."""
    return lambda theta: torch.autograd.grad(potential(theta).sum(), theta)[0]


def run_santa(theta: Tensor, sampler: Santa, gradient: Callable[[Tensor], Tensor], steps: int,
              keep_from: int | None = None, thin: int = 5) -> Tensor:
    """`steps` steps of `sampler` (or any optimizer) on θ's gradient `gradient(θ)`; the states kept from `keep_from`
    on, every `thin`-th (θ at the end if none are kept)."""
    kept = []
    for step in range(steps):
        theta.grad = gradient(theta)
        sampler.step()
        if keep_from is not None and step >= keep_from and (step - keep_from) % thin == 0:
            kept.append(theta.detach().clone())
    return torch.stack(kept) if kept else theta.detach()


@pytest.mark.parametrize("integrator", ["splitting", "euler"])
def test_santa_without_annealing_samples_the_gaussian(integrator: str) -> None:
    """β fixed at 1 (anneal_rate 0, T₀ 1), exploration only: Santa is a preconditioned mSGNHT and samples exp(-U).
    h = √η = 0.05; the preconditioner g ≈ 0.8 to 1.1 here and varies slowly (σ = 0.999)."""
    theta = torch.zeros(2000, 2, requires_grad=True)
    sampler = Santa([theta], lr=0.0025, exploration_steps=10**9, anneal_rate=0.0, integrator=integrator,
                    generator=torch.Generator().manual_seed(0))
    samples = run_santa(theta, sampler, gaussian_gradient, steps=2000, keep_from=1000)
    assert_matches(samples, MU, SIGMA, f"Santa ({integrator}) at T = 1")


@pytest.mark.slow  # a long statistical check: the full suite runs it, the quick loop leaves it out
def test_santa_drift_correction_is_harmless_while_g_is_stationary_and_heats_while_it_drifts() -> None:
    """drift_correction=True adds the paper's estimate of T ∇_θ g: the change of g since the last step over the
    displacement h g p. Where g is stationary (v started at the first ∇U², as Santa does) that change is small noise
    and the chains still sample the Gaussian. Started from the paper's v₀ = 0, g shrinks by (1 - σ)^(-1/4) = 5.6
    over ~1 / (1 - σ) = 1000 steps; divided by momenta near 0, those changes kick a few chains far out and Cov(θ)
    ends far off (docs/sgmcmc.md#santa), which is why the option is off by default."""
    errors = {}
    for paper_start in (False, True):
        theta = torch.zeros(2000, 2, requires_grad=True)
        generator = torch.Generator().manual_seed(0)
        sampler = Santa([theta], lr=0.0025, exploration_steps=10**9, anneal_rate=0.0, drift_correction=True,
                        generator=generator)
        if paper_start:  # the state Santa would build at the first step, but with the paper's v₀ = 0
            momentum = torch.randn(theta.shape, generator=generator)
            sampler.state[theta].update(step=0, square_average=torch.zeros_like(theta), momentum=momentum)
        samples = run_santa(theta, sampler, gaussian_gradient, steps=2000, keep_from=1000)
        errors[paper_start] = chain_moments(samples, MU, SIGMA)
    assert errors[False]["mean_z"] < Z_TOL and errors[False]["cov_z"] < Z_TOL, errors[False]
    assert errors[True]["cov_error"] > 0.3, errors[True]


def mixture_potential(x: Tensor) -> Tensor:
    """U = -log(0.75 N(x; -2, 1) + 0.25 N(x; 2, 1)): the global mode near -2, a local one near +2, U 1.1 higher."""
    return -torch.logaddexp(math.log(0.75) - 0.5 * (x + 2) ** 2, math.log(0.25) - 0.5 * (x - 2) ** 2)


@pytest.mark.slow  # a long statistical check: the full suite runs it, the quick loop leaves it out
def test_annealed_santa_finds_the_global_mode_more_often_than_sgd_and_adam() -> None:
    """1000 starts spread evenly over [-4, 4]; each method runs 3000 full-gradient steps. SGD and Adam end in the
    mode whose basin they start in (55% global); Santa explores at T₀ = 2, anneals as T_t = 2 t^(-0.3) over 2000
    steps, then refines: 97% end at the global mode."""
    starts = torch.linspace(-4, 4, 1000)

    def at_global_mode(make_optimizer) -> float:
        x = starts.clone().requires_grad_(True)
        end = run_santa(x, make_optimizer([x]), gradient_of(mixture_potential), steps=3000)
        assert torch.isfinite(end).all()
        return float(((end + 2).abs() < 0.05).float().mean())

    sgd = at_global_mode(lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9))
    adam = at_global_mode(lambda params: torch.optim.Adam(params, lr=0.05))
    santa = at_global_mode(lambda params: Santa(params, lr=0.04, exploration_steps=2000, anneal_rate=0.3,
                                                temperature=2.0, generator=torch.Generator().manual_seed(0)))
    assert sgd < 0.6 and adam < 0.6, (sgd, adam)
    assert santa > 0.9 and santa > max(sgd, adam) + 0.3, f"at the global mode: Santa {santa}, SGD {sgd}, Adam {adam}"


def test_santa_refinement_is_rmsprop() -> None:
    """With no exploration Santa is its zero-temperature optimizer. Euler with α = h ξ = 1 forgets u each step:
    θ ← θ - η g² ⊙ ∇U = θ - η ∇U / (λ + √v), which is torch's RMSprop (lr η, alpha σ, eps λ) step for step, given
    the same start for v (Santa's v starts at the first ∇U ⊙ ∇U)."""
    lr, decay, eps = 0.01, 0.9, 1e-6
    start = torch.randn(50, generator=torch.Generator().manual_seed(0)) * 3
    santa_x, rms_x = start.clone().requires_grad_(True), start.clone().requires_grad_(True)
    santa = Santa([santa_x], lr=lr, exploration_steps=0, rms_decay=decay, eps=eps, integrator="euler",
                  initial_thermostat=1 / math.sqrt(lr))
    rmsprop = torch.optim.RMSprop([rms_x], lr=lr, alpha=decay, eps=eps)
    for step in range(200):
        for x, optimizer in ((santa_x, santa), (rms_x, rmsprop)):
            optimizer.zero_grad()
            mixture_potential(x).sum().backward()
            if step == 0 and optimizer is rmsprop:  # torch's v starts at 0: start it where Santa's does
                rmsprop.state[rms_x] = {"step": torch.tensor(0.0), "square_avg": rms_x.grad.square()}
            optimizer.step()
        torch.testing.assert_close(santa_x, rms_x, rtol=1e-5, atol=1e-6)


def test_santa_refinement_is_deterministic_and_descends_to_the_mode() -> None:
    """The splitting's refinement, with momentum e^{-α} per element, draws no noise (two generators, one
    trajectory) and ends at the mode of U (here the Gaussian's mean), to within its RMSprop-like step η."""
    ends = []
    for seed in (0, 1):
        theta = torch.zeros(8, 2, requires_grad=True)
        sampler = Santa([theta], lr=0.01, exploration_steps=0, initial_thermostat=5.0,
                        generator=torch.Generator().manual_seed(seed))
        ends.append(run_santa(theta, sampler, gaussian_gradient, steps=1500))
    assert torch.equal(ends[0], ends[1])
    torch.testing.assert_close(ends[0], MU.expand(8, 2), rtol=0, atol=0.01)


def test_santa_switches_from_exploration_to_refinement() -> None:
    """Up to exploration_steps the chain gets noise at T_t = T₀ t^(-γ); afterwards ξ is frozen and no noise is drawn."""
    theta = torch.zeros(6, 2, requires_grad=True)
    generator = torch.Generator().manual_seed(0)
    sampler = Santa([theta], lr=0.01, exploration_steps=20, anneal_rate=0.5, temperature=3.0, generator=generator)
    assert sampler.temperature_at(1) == 3.0 and sampler.temperature_at(4) == 1.5
    run_santa(theta, sampler, gaussian_gradient, steps=20)
    thermostat, drawn = sampler.state[theta]["thermostat"].clone(), generator.get_state()
    run_santa(theta, sampler, gaussian_gradient, steps=10)
    assert torch.equal(sampler.state[theta]["thermostat"], thermostat) and torch.equal(generator.get_state(), drawn)


def test_santa_noise_is_scaled_by_the_previous_preconditioner() -> None:
    """Exploration's noise is N(0, 2 T h g_{t-1}), with the preconditioner of the step before: step 2 by hand from the
    state after step 1, with σ = 0 (g = 1 / √(λ + |ḡ|) of the current gradient alone) and no annealing."""
    lr, temperature, eps = 0.04, 1.5, 1e-8
    h = math.sqrt(lr)
    first, second = torch.linspace(0.5, 2.0, 6, dtype=torch.float64), torch.linspace(3.0, 0.2, 6, dtype=torch.float64)
    theta = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    generator = torch.Generator().manual_seed(0)
    sampler = Santa([theta], lr=lr, exploration_steps=10, anneal_rate=0.0, temperature=temperature, rms_decay=0.0,
                    eps=eps, generator=generator)
    theta.grad = first
    sampler.step()
    state = sampler.state[theta]
    start, momentum, thermostat = theta.detach().clone(), state["momentum"].clone(), state["thermostat"].clone()
    z = torch.randn(6, generator=torch.Generator().set_state(generator.get_state()), dtype=torch.float64)  # the next draws
    theta.grad = second
    sampler.step()
    previous, preconditioner = (first.abs() + eps).rsqrt(), (second.abs() + eps).rsqrt()
    kick = (2 * temperature * h) ** 0.5 * z * previous.sqrt() - h * second * preconditioner
    decay = torch.exp(-0.5 * h * thermostat)
    momentum = decay * (decay * momentum + kick)
    torch.testing.assert_close(state["momentum"], momentum, rtol=0, atol=1e-12)
    torch.testing.assert_close(state["thermostat"], thermostat + h * (momentum.square() - temperature), rtol=0, atol=1e-12)
    torch.testing.assert_close(theta.detach(), start + h * preconditioner * momentum, rtol=0, atol=1e-12)


def test_hydra_selects_santa_and_the_splitting_integrator() -> None:
    """optimizer=santa, and optimizer.integrator=splitting for sghmc and sgnht, compose and build the model's
    optimizer (the training loop attaches it like every sampler)."""
    from tests.launch.test_configs import composed

    import launch.hydra_app

    for overrides, cls, integrator in ((["optimizer=santa"], Santa, "splitting"),
                                       (["optimizer=sghmc", "optimizer.integrator=splitting"], SGHMC, "splitting"),
                                       (["optimizer=sgnht", "optimizer.integrator=splitting"], SGNHT, "splitting"),
                                       (["optimizer=sghmc"], SGHMC, "euler")):
        _, model = launch.hydra_app.data_and_model(composed(["model=vae", *overrides]))
        optimizer = model.optimizer_factory(model.parameters())
        assert isinstance(optimizer, cls) and optimizer.param_groups[0]["integrator"] == integrator, overrides


# ----------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: HMC(p, lr=0.0), "lr must be > 0"),
        (lambda p: HMC(p, lr=-0.1), "lr must be > 0"),
        (lambda p: HMC(p, lr=0.1, num_leapfrog=0), "num_leapfrog must be an integer >= 1"),
        (lambda p: HMC(p, lr=0.1, num_leapfrog=2.5), "num_leapfrog must be an integer >= 1"),
        (lambda p: HMC(p, lr=0.1, mass=0.0), "mass must be > 0"),
        (lambda p: HMC(p, lr=0.1, mass=[torch.tensor([1.0, -1.0])]), "mass must be > 0"),
        (lambda p: HMC(p, lr=0.1, adapt_steps=-1), "adapt_steps"),
        (lambda p: HMC(p, lr=0.1, target_accept=1.0), "target_accept"),
        (lambda p: HMC([{"params": p}, {"params": [torch.zeros(1, requires_grad=True)]}], lr=0.1), "one param group"),
        (lambda p: SGHMC(p, lr=0.1, integrator="leapfrog"),
         "integrator must be 'euler' or 'splitting', got 'leapfrog'"),
        (lambda p: SGNHT(p, lr=0.1, integrator="Splitting"), "integrator must be 'euler' or 'splitting'"),
        (lambda p: Santa(p, lr=0.1, integrator="sss"), "integrator must be 'euler' or 'splitting'"),
        (lambda p: SGHMC(p, lr=0.0, integrator="splitting"), "lr must be > 0"),
        (lambda p: Santa(p, lr=0.0), "lr must be > 0"),
        (lambda p: Santa(p, lr=-1e-6), "lr must be > 0"),
        (lambda p: Santa(p, lr=0.1, exploration_steps=-1), "exploration_steps"),
        (lambda p: Santa(p, lr=0.1, anneal_rate=-0.5), "anneal_rate"),
        (lambda p: Santa(p, lr=0.1, rms_decay=1.0), "rms_decay"),
        (lambda p: Santa(p, lr=0.1, eps=0.0), "eps"),
        (lambda p: Santa(p, lr=0.1, temperature=0.0), "temperature"),
    ],
)
def test_bad_values_raise_one_clear_line(make, match: str) -> None:
    with pytest.raises(ValueError, match=match) as raised:
        make([torch.zeros(2, requires_grad=True)])
    assert "\n" not in str(raised.value)


def test_hmc_step_needs_a_closure() -> None:
    sampler = HMC([torch.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="closure"):
        sampler.step()


def test_integrator_default_keeps_the_euler_chain() -> None:
    """integrator="euler" (the default) is the step SGHMC and SGNHT always took: SGHMC at C h = 1 is still SGLD."""
    paths = []
    for make in (lambda p, g: SGHMC(p, lr=0.1, friction=10.0, generator=g), lambda p, g: SGLD(p, lr=0.01, generator=g)):
        theta = torch.zeros(16, 2, dtype=torch.float64, requires_grad=True)
        sampler = make([theta], torch.Generator().manual_seed(3))
        for _ in range(20):
            theta.grad = (theta.detach() - MU.double()) @ PRECISION.double()
            sampler.step()
        paths.append(theta.detach())
    torch.testing.assert_close(paths[0], paths[1], rtol=0, atol=1e-10)


def test_chains_of_one_dimensional_parameters_sample_their_target():
    """A (K,) parameter holds K one-dimensional chains, one energy each: N(1, 1) sampled with mean 1 and variance 1."""
    from samplers import HMC

    theta = torch.zeros(2000, requires_grad=True)
    sampler = HMC([theta], lr=0.5, num_leapfrog=3, generator=torch.Generator().manual_seed(0))

    def closure() -> torch.Tensor:
        sampler.zero_grad()
        energies = 0.5 * (theta - 1.0).square()
        energies.sum().backward()
        return energies

    for _ in range(200):
        sampler.step(closure)
    assert abs(theta.mean().item() - 1.0) < 0.1 and abs(theta.var().item() - 1.0) < 0.15
