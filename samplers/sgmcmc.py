"""Stochastic-gradient MCMC (SGLD, SGHMC, SGNHT) as `torch.optim.Optimizer`s (docs/sgmcmc.md).

Target: the posterior p(θ | X) ∝ exp(-U(θ)) with the potential energy

    U(θ) = -log p(θ) - Σ_{x ∈ X} log p(x | θ).

Each sampler is a discretised SDE whose stationary distribution is exp(-U(θ) / T), T = 1/β the
temperature, and it needs only ∇U, which may be replaced by the
unbiased minibatch estimate (docs/sgmcmc.md#the-minibatch-potential)

    Û(θ) = -log p(θ) - (N / n) Σ_{x ∈ X̃} log p(x | θ),     X̃ ⊂ X uniformly drawn, |X̃| = n, |X| = N.

The factor N/n makes E[∇Û] = ∇U; without it the likelihood is down-weighted n/N times and the
chain samples a posterior that has seen n data points, not N (`SGMCMC.attach` applies the factor to a
batch-mean loss).

The loss whose gradient sits in `.grad` when `.step()` is called is Û (or U); after `attach(dataset_size=N)`
it is the batch-mean loss and `step()` multiplies it by N. Gradient clipping (e.g. Lightning's
`gradient_clip_val`) then acts on the batch-mean gradient, before the factor N. With step size
h (the optimizer's `lr`), momentum p (kinetic energy K(p) = pᵀp / 2, mass I), temperature T,
and ζ a fresh Gaussian each step:

SGLD (Welling & Teh, 2011; docs/sgmcmc.md#sgld): Euler-Maruyama for the first-order Langevin SDE dθ = -∇U dt + N(0, 2T I dt),

    θ ← θ - h ∇Û(θ) + ζ,                  ζ ~ N(0, 2 T h I).

SGHMC (Chen et al., 2014; docs/sgmcmc.md#sghmc), friction C, gradient-noise estimate B̂:

    p ← p - h ∇Û(θ) - h C p + ζ,          ζ ~ N(0, 2 (C T - B̂) h I),
    θ ← θ + h p.

The minibatch gradient brings its own noise: h ∇Û = h ∇U + N(0, h² V), i.e. a diffusion
B = h V / 2 in p. Injecting 2(C T - B̂)h instead of 2 C T h cancels it when B̂ ≈ B (at T = 1
this is Chen et al.'s 2(C - B̂)h; the minibatch noise is not tempered, so B̂ is not scaled by T).
With B̂ = 0 the error is B / C, which is O(h) and small for large C.

SGNHT (Ding et al., 2014; docs/sgmcmc.md#sgnht), noise amplitude A, thermostat ξ (starts at A):

    p ← p - h ∇Û(θ) - h ξ p + ζ,          ζ ~ N(0, 2 A T h I),
    θ ← θ + h p,
    ξ ← ξ + h (pᵀp / d - T).

By equipartition E[pᵀp / d] = T at equilibrium, so ξ is a friction that grows when the system is
too hot and shrinks when too cold; it absorbs the unknown minibatch noise (E[ξ] → A + B) without
an estimate B̂. Here ξ is one scalar per parameter tensor (d = numel), or one per element with
`multivariate=True` (mSGNHT, docs/sgmcmc.md#sgnht).

Large friction (docs/sgmcmc.md#large-friction-sghmc-becomes-sgld): as C → ∞ the momentum relaxes in time 1/C and θ
follows first-order Langevin dynamics on the slow clock s = t / C, so SGHMC with (h, C) moves like
SGLD with step h / C per iteration. At C h = 1 (B̂ = 0) this is exact: the p update forgets the
old p, p = -h∇U + N(0, 2T), and θ ← θ - h²∇U + N(0, 2 T h²) is SGLD with step h².

Momentum starts at 0 and is never resampled. All per-parameter state ('momentum', 'thermostat')
lives in `self.state`, so `state_dict()` / `load_state_dict()` round-trip it; the noise comes from
an optional `torch.Generator` (not part of the state dict).

`SampleCollector` keeps, after a burn-in, every `thin`-th snapshot of the parameters (or only
their running mean and variance).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

Closure = Callable[[], Tensor]


def _gaussian_noise(like: Tensor, variance: float, generator: torch.Generator | None) -> Tensor:
    """ζ ~ N(0, variance · I) with the shape, dtype and device of `like`."""
    noise = torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)
    return noise.mul_(math.sqrt(variance))


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class SGMCMC(torch.optim.Optimizer):
    """Shared plumbing: argument checks on every param group, closure handling, the noise source,
    and the scaling of a batch-mean loss to the minibatch potential.

    `dataset_size`: when training code back-propagates the *mean* loss over a minibatch,
    -(1/n) Σ_batch log p(x | θ), the gradient of the potential Û = -(N/n) Σ_batch log p(x | θ)
    (flat prior) is N times `.grad`; `attach(dataset_size=N)` makes `step()` use N · `.grad`
    (docs/sgmcmc.md#the-minibatch-potential). Left at None, `.grad` must already be ∇Û.
    """

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any], generator: torch.Generator | None) -> None:
        self.generator = generator
        self.dataset_size: int | None = None
        super().__init__(params, defaults)

    def attach(self, dataset_size: int, seed: int) -> None:
        """Set up for training on a batch-mean loss: scale gradients by `dataset_size`, and draw the noise
        from a generator seeded with `seed` (unless one was given), the same on every DDP rank, because
        DDP averages the gradients but never re-synchronizes the parameters."""
        _require(dataset_size >= 1, f"dataset_size must be >= 1, got {dataset_size}")
        self.dataset_size = dataset_size
        if self.generator is None:
            device = self.param_groups[0]["params"][0].device
            self.generator = torch.Generator(device=device).manual_seed(seed)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.generator is not None:  # so that a resumed chain draws the noise an uninterrupted one would
            state["generator_state"] = self.generator.get_state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        generator_state = state_dict.pop("generator_state", None)
        super().load_state_dict(state_dict)
        if generator_state is not None and self.generator is not None:
            self.generator.set_state(generator_state)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        self._check_group(self.param_groups[-1])

    def _check_group(self, group: dict[str, Any]) -> None:
        _require(group["lr"] > 0, f"step size lr must be > 0, got {group['lr']}")
        _require(group["temperature"] > 0, f"temperature must be > 0, got {group['temperature']}")

    @torch.no_grad()
    def step(self, closure: Closure | None = None) -> Tensor | None:
        """One update of every parameter with a gradient; `closure` (re)computes the potential."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
                grad = param.grad if self.dataset_size is None else param.grad * self.dataset_size
                self._update(param, grad, group)
        return loss

    def _update(self, param: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        raise NotImplementedError


class SGLD(SGMCMC):
    """Stochastic gradient Langevin dynamics: θ ← θ - h ∇Û(θ) + N(0, 2 T h I).

    Args:
        params: parameters (or param groups) to sample; their `.grad` must hold ∇U or ∇Û.
        lr: step size h > 0. The stationary law carries an O(h) discretisation bias.
        temperature: T = 1/β > 0; samples exp(-U / T).
        generator: source of the injected noise (the global RNG if None).
    """

    def __init__(
        self, params: Iterable[Any], lr: float, temperature: float = 1.0, generator: torch.Generator | None = None
    ) -> None:
        super().__init__(params, dict(lr=lr, temperature=temperature), generator)

    def _update(self, param: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        h, temperature = group["lr"], group["temperature"]
        # docs/sgmcmc.md#sgld: ζ ~ N(0, 2 I h), with the temperature T = 1/β: N(0, (2/β) h).
        noise = _gaussian_noise(param, 2.0 * temperature * h, self.generator)
        param.add_(grad, alpha=-h).add_(noise)


class SGHMC(SGMCMC):
    """Stochastic gradient Hamiltonian Monte Carlo with friction C and noise estimate B̂.

        p ← p - h ∇Û(θ) - h C p + N(0, 2 (C T - B̂) h I),    θ ← θ + h p.

    Args:
        params: parameters (or param groups) to sample; their `.grad` must hold ∇U or ∇Û.
        lr: step size h > 0.
        friction: C > 0 (scalar). Needs C h < 2, otherwise |1 - C h| >= 1 and p diverges.
        noise_estimate: B̂ >= 0, estimate of the minibatch-gradient diffusion B = h V / 2
            (V the covariance of ∇Û, taken as scalar); must satisfy C T >= B̂.
        temperature: T = 1/β > 0; samples exp(-U / T).
        generator: source of the injected noise (the global RNG if None).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        friction: float = 1.0,
        noise_estimate: float = 0.0,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        defaults = dict(lr=lr, friction=friction, noise_estimate=noise_estimate, temperature=temperature)
        super().__init__(params, defaults, generator)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        h, friction, noise_estimate = group["lr"], group["friction"], group["noise_estimate"]
        _require(friction > 0, f"friction C must be > 0, got {friction}")
        _require(noise_estimate >= 0, f"noise_estimate B̂ must be >= 0, got {noise_estimate}")
        # docs/sgmcmc.md#sghmc: C ⪰ B̂, so that the injected variance 2(C T - B̂)h is >= 0.
        _require(
            friction * group["temperature"] >= noise_estimate,
            f"need friction * temperature >= noise_estimate (injected noise variance 2(C T - B̂) h >= 0), "
            f"got C={friction}, T={group['temperature']}, B̂={noise_estimate}",
        )
        _require(friction * h < 2, f"need friction * lr < 2 (momentum decay factor 1 - C h must stay in (-1, 1)), got C h = {friction * h}")

    def _update(self, param: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        h, friction = group["lr"], group["friction"]
        state = self.state[param]
        if "momentum" not in state:
            state["momentum"] = torch.zeros_like(param)
        momentum = state["momentum"]
        # docs/sgmcmc.md#sghmc: ζ ~ N(0, 2(C - B̂) h), with C → C T for the temperature.
        noise = _gaussian_noise(param, 2.0 * (friction * group["temperature"] - group["noise_estimate"]) * h, self.generator)
        # p ← (1 - C h) p - h ∇Û + ζ (U = -log p: the momentum moves down the potential).
        momentum.mul_(1.0 - friction * h).add_(grad, alpha=-h).add_(noise)
        # θ ← θ + h p with the new p (Chen et al.'s order: a symplectic Euler step).
        param.add_(momentum, alpha=h)


class SGNHT(SGMCMC):
    """Stochastic gradient Nosé-Hoover thermostat with noise amplitude A.

        p ← p - h ∇Û(θ) - h ξ p + N(0, 2 A T h I),   θ ← θ + h p,   ξ ← ξ + h (pᵀp / d - T).

    Discretisation: the p update alone has E[p²] = A T / (ξ (1 - ξ h / 2)), so ξ settles at
    (1 - sqrt(1 - 2 A h)) / h ≈ A (1 + A h / 2), not A, and θ is sampled at about T (1 - A h / 2):
    keep A h (with minibatch noise, (A + B) h) small.

    Args:
        params: parameters (or param groups) to sample; their `.grad` must hold ∇U or ∇Û.
        lr: step size h > 0.
        noise: A >= 0, the injected diffusion (docs/sgmcmc.md#sgnht: N(0, 2 A I dt)). A = 0 relies
            on the minibatch noise alone.
        initial_thermostat: starting ξ (a friction); None means the group's A, the mode of
            V(ξ) = d(ξ - A)² (docs/sgmcmc.md#sgnht). With minibatch noise ξ settles near A + B, and it relaxes only on a
            time scale of about ξ SDE time units (ξ / h steps), so A + B̂ is a better start when
            B̂ is known. Far from equilibrium (a start far from the mode) ξ overshoots likewise.
        multivariate: one ξ per element (mSGNHT) instead of one per parameter tensor. A scalar ξ
            cools the whole tensor by one friction, so it corrects the average of an anisotropic
            minibatch noise, not each direction.
        temperature: T = 1/β > 0; samples exp(-U / T).
        generator: source of the injected noise (the global RNG if None).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        noise: float = 1.0,
        initial_thermostat: float | None = None,
        multivariate: bool = False,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        defaults = dict(
            lr=lr, noise=noise, initial_thermostat=initial_thermostat, multivariate=multivariate, temperature=temperature
        )
        super().__init__(params, defaults, generator)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        _require(group["noise"] >= 0, f"noise A must be >= 0, got {group['noise']}")
        initial = group["initial_thermostat"]
        _require(initial is None or math.isfinite(initial), f"initial_thermostat must be finite or None, got {initial}")

    def _update(self, param: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        h, temperature = group["lr"], group["temperature"]
        state = self.state[param]
        if "momentum" not in state:
            state["momentum"] = torch.zeros_like(param)
            initial = group["noise"] if group["initial_thermostat"] is None else group["initial_thermostat"]
            thermostat_shape = param.shape if group["multivariate"] else ()
            state["thermostat"] = torch.full(thermostat_shape, initial, dtype=param.dtype, device=param.device)
        momentum, thermostat = state["momentum"], state["thermostat"]
        # docs/sgmcmc.md#sgnht: p ← (1 - ξ h) p - h ∇Û + ζ, ζ ~ N(0, 2 A h) (× T at temperature T).
        noise = _gaussian_noise(param, 2.0 * group["noise"] * temperature * h, self.generator)
        momentum.sub_(momentum * thermostat, alpha=h).add_(grad, alpha=-h).add_(noise)
        param.add_(momentum, alpha=h)
        # ξ ← ξ + h (pᵀp / d - T) with the new p; per element (mSGNHT) ξ ← ξ + h (p ⊙ p - T).
        kinetic = momentum.square() if group["multivariate"] else momentum.square().mean()
        thermostat.add_(kinetic - temperature, alpha=h)


def _parameter_list(params: nn.Module | Tensor | Iterable[Tensor]) -> list[Tensor]:
    if isinstance(params, nn.Module):
        return list(params.parameters())
    if isinstance(params, Tensor):
        return [params]
    return list(params)


class SampleCollector:
    """Keeps every `thin`-th parameter snapshot after `burn_in` steps; call it once per sampler step.

    With steps counted 1, 2, ..., the snapshots of steps burn_in + thin, burn_in + 2 thin, ... are
    kept, so after n calls `num_kept == max(0, (n - burn_in) // thin)`.

    keep="list": `samples` holds detached clones (one tuple per kept step, one tensor per parameter).
    keep="mean": only a running mean and sum of squared deviations (Welford), O(1) memory.
    Both modes answer `mean()` and `variance()` (elementwise, unbiased: divides by num_kept - 1).
    """

    def __init__(self, params: nn.Module | Tensor | Iterable[Tensor], burn_in: int = 0, thin: int = 1, keep: str = "list") -> None:
        _require(burn_in >= 0, f"burn_in must be >= 0, got {burn_in}")
        _require(thin >= 1, f"thin must be >= 1, got {thin}")
        _require(keep in ("list", "mean"), f"keep must be 'list' or 'mean', got {keep!r}")
        self.params = _parameter_list(params)
        self.burn_in, self.thin, self.keep = burn_in, thin, keep
        self.num_steps = 0
        self.num_kept = 0
        self.samples: list[tuple[Tensor, ...]] = []
        self._mean: list[Tensor] = []
        self._squared_deviation: list[Tensor] = []

    def __call__(self) -> bool:
        """Count one sampler step; keep a snapshot if it is due. Returns whether one was kept."""
        self.num_steps += 1
        after_burn_in = self.num_steps - self.burn_in
        if after_burn_in <= 0 or after_burn_in % self.thin != 0:
            return False
        snapshot = tuple(param.detach().clone() for param in self.params)
        self.num_kept += 1
        if self.keep == "list":
            self.samples.append(snapshot)
        else:
            self._accumulate(snapshot)
        return True

    update = __call__

    def _accumulate(self, snapshot: tuple[Tensor, ...]) -> None:
        if not self._mean:
            self._mean = [value.clone() for value in snapshot]
            self._squared_deviation = [torch.zeros_like(value) for value in snapshot]
            return
        # Welford: mean_n = mean_{n-1} + (x - mean_{n-1}) / n, M2 += (x - mean_{n-1})(x - mean_n).
        for mean, squared_deviation, value in zip(self._mean, self._squared_deviation, snapshot):
            delta = value - mean
            mean.add_(delta / self.num_kept)
            squared_deviation.add_(delta * (value - mean))

    def stacked(self) -> list[Tensor]:
        """Per parameter, the kept snapshots stacked along a new leading dim: (num_kept, *shape)."""
        _require(self.keep == "list", "stacked() needs keep='list'")
        _require(self.num_kept > 0, "no samples kept yet")
        return [torch.stack(values) for values in zip(*self.samples)]

    def mean(self) -> list[Tensor]:
        """Per parameter, the mean of the kept snapshots."""
        _require(self.num_kept > 0, "no samples kept yet")
        if self.keep == "list":
            return [values.mean(dim=0) for values in self.stacked()]
        return [mean.clone() for mean in self._mean]

    def variance(self) -> list[Tensor]:
        """Per parameter, the elementwise unbiased variance of the kept snapshots."""
        _require(self.num_kept > 1, "variance needs at least two kept samples")
        if self.keep == "list":
            return [values.var(dim=0) for values in self.stacked()]
        return [squared_deviation / (self.num_kept - 1) for squared_deviation in self._squared_deviation]
