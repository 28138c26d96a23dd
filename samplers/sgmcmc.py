"""Stochastic-gradient MCMC (SGLD, SGHMC, SGNHT, Santa) as `torch.optim.Optimizer`s (docs/sgmcmc.md; each class's
update rule in its docstring). They sample exp(-U(θ) / T), U(θ) = -log p(θ) - Σ_{x ∈ X} log p(x | θ), from ∇U or its
unbiased minibatch estimate (docs/sgmcmc.md#the-minibatch-potential)

    Û(θ) = -log p(θ) - (N / n) Σ_{x ∈ X̃} log p(x | θ),     X̃ ⊂ X uniformly drawn, |X̃| = n, |X| = N.

After `attach(dataset_size=N)`, `.grad` holds the batch-mean loss's gradient and `step()` multiplies it by N, so
gradient clipping acts before the factor; noise comes from an optional `torch.Generator`. `SampleCollector` keeps
thinned snapshots after a burn-in; exact HMC is samplers/hmc.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from torch import Tensor, nn

Closure = Callable[[], Tensor]
Integrator = Literal["euler", "splitting"]
INTEGRATORS = ("euler", "splitting")


def _gaussian_noise(like: Tensor, variance: float, generator: torch.Generator | None) -> Tensor:
    """ζ ~ N(0, variance · I) with the shape, dtype and device of `like`."""
    noise = torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)
    return noise.mul_(math.sqrt(variance))


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_integrator(integrator: str) -> None:
    _require(integrator in INTEGRATORS, f"integrator must be 'euler' or 'splitting', got {integrator!r}")


def _damped_kick(momentum: Tensor, friction: float | Tensor, kick: Tensor, h: float, integrator: str) -> None:
    """Friction for a time h and one kick (gradient and noise) on p, in place (docs/sgmcmc.md#symmetric-splitting).

        euler:      p ← (1 - h γ) p + kick
        splitting:  p ← e^{-h γ / 2} (e^{-h γ / 2} p + kick)     (friction half step, kick, friction half step)

    γ is SGHMC's friction C, or SGNHT's or Santa's thermostat ξ (a scalar or one per element). The splitting's friction
    half steps solve dp = -γ p dt exactly, so they never overshoot (no C h < 2 limit).
    """
    if integrator == "euler":
        momentum.mul_(1.0 - h * friction).add_(kick)
        return
    decay = torch.exp(friction * (-0.5 * h)) if isinstance(friction, Tensor) else math.exp(-0.5 * h * friction)
    momentum.mul_(decay).add_(kick).mul_(decay)


def _thermostat_step(thermostat: Tensor, momentum: Tensor, dt: float, temperature: float, multivariate: bool) -> None:
    """ξ ← ξ + dt (pᵀp / d - T), or per element ξ ← ξ + dt (p ⊙ p - T) (docs/sgmcmc.md#sgnht)."""
    kinetic = momentum.square() if multivariate else momentum.square().mean()
    thermostat.add_(kinetic - temperature, alpha=dt)


class SGMCMC(torch.optim.Optimizer):
    """Shared plumbing: argument checks on every param group, closure handling, the noise source, and the scaling of a
    batch-mean loss to the minibatch potential: after `attach(dataset_size=N)`, `step()` uses N · `.grad`, which is ∇Û
    (flat prior) when `.grad` is that of the mean loss -(1/n) Σ_batch log p(x | θ). Left at None, `.grad` must be ∇Û.
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
        for name, value in group.items():  # NaN passes every comparison below; inf spoils the first step
            _require(not isinstance(value, float) or math.isfinite(value), f"{name} must be a finite number, got {value}")
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
    """Stochastic gradient Langevin dynamics: θ ← θ - h ∇Û(θ) + N(0, 2 T h I) (docs/sgmcmc.md#sgld).

    Args:
        params: parameters (or param groups) to sample; their `.grad` must hold ∇U or ∇Û.
        lr: step size h > 0; the stationary law carries an O(h) discretisation bias.
        temperature: T = 1/β > 0; samples exp(-U / T). `generator`: the injected noise's (the global RNG if None).
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
    """Stochastic gradient Hamiltonian Monte Carlo with friction C and noise estimate B̂ (docs/sgmcmc.md#sghmc).

    euler (Chen et al.'s symplectic Euler step):
        p ← (1 - h C) p - h ∇Û(θ) + N(0, 2 (C T - B̂) h I),    θ ← θ + h p.
    splitting (A-B-O-B-A; docs/sgmcmc.md#symmetric-splitting; the θ half steps of consecutive iterations merged):
        p ← e^{-Ch/2} (e^{-Ch/2} p - h ∇Û(θ) + N(0, 2 (C T - B̂) h I)),    θ ← θ + h p.

    Args:
        params: parameters (or param groups) to sample; their `.grad` must hold ∇U or ∇Û.
        lr: step size h > 0.
        friction: C > 0. Euler needs C h < 2 (else |1 - C h| >= 1 and p diverges); the splitting has no such limit.
        noise_estimate: B̂ >= 0, estimate of the minibatch-gradient diffusion B = h V / 2 (V the covariance of ∇Û,
            taken as scalar); needs C T >= B̂.
        temperature: T = 1/β > 0; samples exp(-U / T).
        integrator: "euler" (first order: the stationary law is off by O(h)) or "splitting" (O(h²), at the same one
            gradient per step).
        generator: source of the injected noise (the global RNG if None).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        friction: float = 1.0,
        noise_estimate: float = 0.0,
        temperature: float = 1.0,
        integrator: Integrator = "euler",
        generator: torch.Generator | None = None,
    ) -> None:
        defaults = dict(
            lr=lr, friction=friction, noise_estimate=noise_estimate, temperature=temperature, integrator=integrator
        )
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
        _check_integrator(group["integrator"])
        _require(
            group["integrator"] == "splitting" or friction * h < 2,
            f"need friction * lr < 2 with integrator='euler' (momentum decay factor 1 - C h must stay in (-1, 1)), "
            f"got C h = {friction * h}",
        )

    def _update(self, param: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        h, friction = group["lr"], group["friction"]
        state = self.state[param]
        if "momentum" not in state:
            state["momentum"] = torch.zeros_like(param)
        # docs/sgmcmc.md#sghmc: ζ ~ N(0, 2(C - B̂) h), with C → C T for the temperature.
        noise = _gaussian_noise(param, 2.0 * (friction * group["temperature"] - group["noise_estimate"]) * h, self.generator)
        # The kick -h ∇Û + ζ (U = -log p: the momentum moves down the potential), between the friction.
        _damped_kick(state["momentum"], friction, noise.add_(grad, alpha=-h), h, group["integrator"])
        # θ ← θ + h p with the new p (euler: a symplectic Euler step; splitting: two merged half steps).
        param.add_(state["momentum"], alpha=h)


class SGNHT(SGMCMC):
    """Stochastic gradient Nosé-Hoover thermostat with noise amplitude A (docs/sgmcmc.md#sgnht).

        p ← p - h ∇Û(θ) - h ξ p + N(0, 2 A T h I),   θ ← θ + h p,   ξ ← ξ + h (pᵀp / d - T).

    Discretisation: the p update alone has E[p²] = A T / (ξ (1 - ξ h / 2)), so ξ settles at
    (1 - sqrt(1 - 2 A h)) / h ≈ A (1 + A h / 2), not A, and θ is sampled at about T (1 - A h / 2):
    keep A h (with minibatch noise, (A + B) h) small.

    Args:
        params: parameters (or param groups) to sample; their `.grad` must hold ∇U or ∇Û.
        lr: step size h > 0.
        noise: A >= 0, the injected diffusion N(0, 2 A I dt); A = 0 relies on the minibatch noise alone.
        initial_thermostat: starting ξ; None means A, the mode of V(ξ) = d(ξ - A)². With minibatch noise ξ settles
            near A + B, relaxing over about ξ / h steps, so A + B̂ is a better start when B̂ is known.
        multivariate: one ξ per element (mSGNHT) instead of one per tensor; a scalar ξ corrects only the average of an
            anisotropic minibatch noise, not each direction.
        temperature: T = 1/β > 0; samples exp(-U / T).
        integrator: "euler" (above; first order) or "splitting" (A-B-O-B-A, second order;
            docs/sgmcmc.md#symmetric-splitting): p ← e^{-ξh/2} (e^{-ξh/2} p - h ∇Û + ζ), then the merged half steps
            θ ← θ + h p, ξ ← ξ + h (pᵀp / d - T); ξ settles at A + B and θ is sampled at T up to O(h²).
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
        integrator: Integrator = "euler",
        generator: torch.Generator | None = None,
    ) -> None:
        defaults = dict(
            lr=lr, noise=noise, initial_thermostat=initial_thermostat, multivariate=multivariate, temperature=temperature,
            integrator=integrator,
        )
        super().__init__(params, defaults, generator)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        _require(group["noise"] >= 0, f"noise A must be >= 0, got {group['noise']}")
        initial = group["initial_thermostat"]
        _require(initial is None or math.isfinite(initial), f"initial_thermostat must be finite or None, got {initial}")
        _check_integrator(group["integrator"])

    def _update(self, param: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        h, temperature = group["lr"], group["temperature"]
        state = self.state[param]
        if "momentum" not in state:
            state["momentum"] = torch.zeros_like(param)
            initial = group["noise"] if group["initial_thermostat"] is None else group["initial_thermostat"]
            thermostat_shape = param.shape if group["multivariate"] else ()
            state["thermostat"] = torch.full(thermostat_shape, initial, dtype=param.dtype, device=param.device)
        momentum, thermostat = state["momentum"], state["thermostat"]
        # docs/sgmcmc.md#sgnht: p ← (1 - ξ h) p - h ∇Û + ζ, ζ ~ N(0, 2 A h) (× T at temperature T);
        # splitting: the friction e^{-ξh/2} on either side of the kick.
        noise = _gaussian_noise(param, 2.0 * group["noise"] * temperature * h, self.generator)
        _damped_kick(momentum, thermostat, noise.add_(grad, alpha=-h), h, group["integrator"])
        param.add_(momentum, alpha=h)
        # ξ ← ξ + h (pᵀp / d - T) with the new p; per element (mSGNHT) ξ ← ξ + h (p ⊙ p - T). With the
        # splitting this is its two merged half steps: p does not change between them.
        _thermostat_step(thermostat, momentum, h, temperature, group["multivariate"])


class Santa(SGMCMC):
    """Santa: stochastic annealing thermostats with an RMSprop preconditioner (Chen, Carlson, Gan, Li & Carin, 2016;
    docs/sgmcmc.md#santa). It samples exp(-U / T_t) while T_t = T₀ t^(-γ) anneals (exploration), then drops the
    stochastic terms and is a momentum optimizer with one adaptive momentum per element (refinement).

    `lr` is the paper's η; the dynamics run in step h = √η with momentum p = u / h and thermostat ξ = α / h per element,
    as mSGNHT's. With g the preconditioner,

        v ← σ v + (1 - σ) ḡ ⊙ ḡ,     g = 1 / √(λ + √v)     (ḡ: `.grad`; after `attach`, the batch-mean gradient ∇Û / N)

    exploration (steps t <= exploration_steps), Algorithm 2 (integrator="splitting", symmetric splitting):
        p ← e^{-hξ/2} (e^{-hξ/2} p - h g ⊙ ∇Û + ζ),    ζ ~ N(0, 2 T_t h g_{t-1})
        θ ← θ + h g ⊙ p,    ξ ← ξ + h (p ⊙ p - T_t)
    Algorithm 1 (integrator="euler"): ξ ← ξ + h (p ⊙ p - T_t) first (with the old p), then
        p ← (1 - hξ) p - h g ⊙ ∇Û + ζ,    θ ← θ + h g ⊙ p.
    refinement (t > exploration_steps): ξ frozen, no noise:
        p ← e^{-hξ/2} (e^{-hξ/2} p - h g ⊙ ∇Û)   (euler: (1 - hξ) p - h g ⊙ ∇Û),     θ ← θ + h g ⊙ p.

    Euler refinement with α = 1 is RMSprop(lr=η, alpha=σ, eps=λ). Where this differs from the paper's pseudo-code
    (merged θ half steps, v starting at the first ḡ ⊙ ḡ, the drift correction off by default, ξ starting at g):
    docs/sgmcmc.md#santa.

    Args:
        params: parameters (or param groups); their `.grad` must hold ∇U or ∇Û (after `attach`, the batch-mean
            gradient, which the preconditioner uses as ḡ).
        lr: the learning rate η > 0 (the step is h = √η).
        exploration_steps: the number of exploration steps (the paper's burn-in); 0 makes Santa a pure optimizer.
        anneal_rate: γ >= 0 in T_t = T₀ t^(-γ) (β_t = t^γ / T₀); 0 keeps the temperature at T₀.
        temperature: T₀ > 0, the temperature of the first step.
        rms_decay: σ in [0, 1), the decay of the squared-gradient average v.
        eps: λ > 0, keeps g finite where v = 0.
        initial_thermostat: ξ at the start (the paper's α₀ = √η C: C), or None for the first preconditioner g,
            the thermostat's equilibrium when the injected noise 2 T g h is all the noise there is.
        integrator: "splitting" (Santa-SSS, the paper's Algorithm 2) or "euler" (Santa-E, Algorithm 1).
        drift_correction: add the paper's finite-difference estimate of T ∇_θ g, T_t (1 - g_{t-1} / g) ⊘ p with |p|
            floored at 1e-3 √T_t, in the exploration stage.
        generator: source of the injected noise and of the initial momentum (the global RNG if None).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        exploration_steps: int = 10_000,
        anneal_rate: float = 0.5,
        temperature: float = 1.0,
        rms_decay: float = 0.999,
        eps: float = 1e-8,
        initial_thermostat: float | None = None,
        integrator: Integrator = "splitting",
        drift_correction: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        defaults = dict(
            lr=lr, exploration_steps=exploration_steps, anneal_rate=anneal_rate, temperature=temperature,
            rms_decay=rms_decay, eps=eps, initial_thermostat=initial_thermostat, integrator=integrator,
            drift_correction=drift_correction,
        )
        super().__init__(params, defaults, generator)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        steps = group["exploration_steps"]
        _require(isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0,
                 f"exploration_steps must be an integer >= 0, got {steps!r}")
        _require(group["anneal_rate"] >= 0, f"anneal_rate γ must be >= 0, got {group['anneal_rate']}")
        _require(0 <= group["rms_decay"] < 1, f"rms_decay σ must be in [0, 1), got {group['rms_decay']}")
        _require(group["eps"] > 0, f"eps λ must be > 0, got {group['eps']}")
        initial = group["initial_thermostat"]
        _require(initial is None or math.isfinite(initial), f"initial_thermostat must be finite or None, got {initial}")
        _check_integrator(group["integrator"])

    def temperature_at(self, step: int, group: dict[str, Any] | None = None) -> float:
        """T_t = T₀ t^(-γ) of step t (1, 2, ...)."""
        group = self.param_groups[0] if group is None else group
        return group["temperature"] * step ** (-group["anneal_rate"])

    def _update(self, param: Tensor, grad: Tensor, group: dict[str, Any]) -> None:
        h, integrator = math.sqrt(group["lr"]), group["integrator"]
        state = self.state[param]
        if not state:
            state["step"] = 0
            # v starts at the first ḡ ⊙ ḡ (the authors' code), not at the paper's v₀ = 0: see the docstring.
            state["square_average"] = param.grad.square()
            # The paper's u₀ = √η N(0, I): p ~ N(0, T₁ I), the equilibrium; a pure optimizer starts at rest.
            exploring = group["exploration_steps"] > 0
            state["momentum"] = (_gaussian_noise(param, self.temperature_at(1, group), self.generator) if exploring
                                 else torch.zeros_like(param))
        state["step"] += 1
        step = state["step"]
        momentum, square_average = state["momentum"], state["square_average"]
        # v ← σ v + (1 - σ) ḡ², with ḡ the batch-mean gradient (the paper's f̃ / N); g = 1 / √(λ + √v).
        mean_grad = param.grad
        square_average.mul_(group["rms_decay"]).addcmul_(mean_grad, mean_grad, value=1 - group["rms_decay"])
        preconditioner = square_average.sqrt().add_(group["eps"]).rsqrt_()
        previous = state.get("preconditioner", preconditioner)
        if "thermostat" not in state:
            initial = group["initial_thermostat"]
            state["thermostat"] = preconditioner.clone() if initial is None else torch.full_like(param, initial)
        thermostat = state["thermostat"]
        force = grad * preconditioner  # g ⊙ ∇Û
        if step <= group["exploration_steps"]:
            temperature = self.temperature_at(step, group)
            kick = _gaussian_noise(param, 2.0 * temperature * h, self.generator).mul_(previous.sqrt())
            kick.sub_(force, alpha=h)
            if group["drift_correction"]:
                # T ∇_θ g ≈ T (g - g_{t-1}) / Δθ, Δθ = h g p: the paper's (η/β)(1 - g_{t-1} / g) ⊘ u, in p's units.
                floor = 1e-3 * math.sqrt(temperature)
                floored = torch.full_like(momentum, floor).copysign(momentum)
                safe = torch.where(momentum.abs() < floor, floored, momentum)
                kick.add_((1.0 - previous / preconditioner).div_(safe), alpha=temperature)
            if integrator == "euler":  # Algorithm 1: α ← α + (u ⊙ u - η / β) with the old u
                _thermostat_step(thermostat, momentum, h, temperature, multivariate=True)
            _damped_kick(momentum, thermostat, kick, h, integrator)
            if integrator == "splitting":  # Algorithm 2's two half updates of α, merged as θ's are
                _thermostat_step(thermostat, momentum, h, temperature, multivariate=True)
        else:
            _damped_kick(momentum, thermostat, force.mul_(-h), h, integrator)
        param.addcmul_(preconditioner, momentum, value=h)
        state["preconditioner"] = preconditioner


def _parameter_list(params: nn.Module | Tensor | Iterable[Tensor]) -> list[Tensor]:
    if isinstance(params, nn.Module):
        return list(params.parameters())
    if isinstance(params, Tensor):
        return [params]
    return list(params)


class SampleCollector:
    """Keeps every `thin`-th parameter snapshot after `burn_in` steps; call it once per sampler step. Counting steps
    1, 2, ..., it keeps those of steps burn_in + thin, burn_in + 2 thin, ..., so after n calls
    `num_kept == max(0, (n - burn_in) // thin)`.

    keep="list": `samples` holds detached clones (a tuple per kept step); keep="mean": a running mean and sum of squared
    deviations (Welford), O(1) memory. Both answer `mean()` and `variance()` (elementwise, divided by num_kept - 1).
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
