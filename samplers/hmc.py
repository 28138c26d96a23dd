"""Hamiltonian Monte Carlo with leapfrog trajectories and a Metropolis-Hastings test (docs/sgmcmc.md#hmc).

Target exp(-U(θ) / T), U the full-data potential. A step draws p ~ N(0, T M), runs `num_leapfrog` leapfrog steps of
size h on H(θ, p) = U(θ) + ½ pᵀ M⁻¹ p,

    p ← p - (h/2) ∇U(θ),    θ ← θ + h M⁻¹ p,    p ← p - (h/2) ∇U(θ)      (inner half kicks merged),

and accepts with probability min(1, exp(-(H_end - H_start) / T)), else restores θ and its gradient bit for bit: the
leapfrog is reversible and volume-preserving, so exp(-H / T) is invariant for any h.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from samplers.sgmcmc import SGMCMC, Closure, _gaussian_noise, _require

Gradient = Callable[[], tuple[Tensor, list[Tensor]]]


def leapfrog(
    params: Sequence[Tensor], momenta: Sequence[Tensor], gradient: Gradient, step_size: float, num_steps: int,
    inverse_mass: Sequence[Tensor | float], grads: Sequence[Tensor],
) -> tuple[Tensor, list[Tensor]]:
    """`num_steps` leapfrog steps of size `step_size` on H = U + ½ pᵀ M⁻¹ p, in place on `params` and `momenta`.

    `grads` is ∇U at the starting θ; `gradient()` returns (U, ∇U) at the current θ. Returns (U, ∇U) at the end.
    Inner half kicks are merged into full ones: L + 1 kicks (two halves), L drifts, L gradient evaluations.
    """
    for momentum, grad in zip(momenta, grads):
        momentum.sub_(grad, alpha=0.5 * step_size)
    energy = None
    for index in range(num_steps):
        for param, momentum, inverse in zip(params, momenta, inverse_mass):
            param.add_(momentum * inverse, alpha=step_size)
        energy, grads = gradient()
        kick = step_size if index < num_steps - 1 else 0.5 * step_size
        for momentum, grad in zip(momenta, grads):
            momentum.sub_(grad, alpha=kick)
    assert energy is not None
    return energy, list(grads)


class HMC(SGMCMC):
    """Hamiltonian Monte Carlo (module docstring). `step(closure)` runs one trajectory and accepts or rejects it,
    evaluating the closure (torch.optim's convention; it may return one energy per chain, shape (K,)) num_leapfrog + 1
    times. `acceptance_rate`: the fraction of proposals (chains x steps) accepted so far; `last_accept_prob`: the mean
    acceptance probability of the last step.

    Args:
        params: parameters to sample, in one param group.
        lr: leapfrog step size h > 0 (the initial one when adapting).
        num_leapfrog: L >= 1 leapfrog steps per trajectory (trajectory length L h).
        mass: the diagonal mass M, a number (M = m I) or one tensor per parameter broadcastable to it, all > 0;
            ideally M⁻¹ ≈ the posterior covariance, so that every direction moves alike.
        temperature: T > 0; samples exp(-U / T).
        adapt_steps: warm-up steps whose step size dual averaging (Hoffman & Gelman, 2014) tunes (0: h stays fixed).
        target_accept: the mean acceptance probability the adaptation aims at, in (0, 1).
        generator: source of the momenta and of the acceptance draws (the global RNG if None).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        num_leapfrog: int = 10,
        mass: float | Sequence[Tensor] = 1.0,
        temperature: float = 1.0,
        adapt_steps: int = 0,
        target_accept: float = 0.65,
        generator: torch.Generator | None = None,
    ) -> None:
        defaults = dict(lr=lr, num_leapfrog=num_leapfrog, mass=mass, temperature=temperature, adapt_steps=adapt_steps,
                        target_accept=target_accept)
        super().__init__(params, defaults, generator)
        group = self.param_groups[0]
        # Dual averaging (Hoffman & Gelman, 2014, Algorithm 5) with their γ = 0.05, t₀ = 10, κ = 0.75.
        group.update(num_proposed=0, num_accepted=0, last_accept_prob=float("nan"), adapted=0,
                     log_step_average=math.log(lr), accept_error_average=0.0, log_step_shrink_target=math.log(10 * lr))

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _require(not self.param_groups, "HMC samples one param group (one step size and one accept test for all)")
        super().add_param_group(param_group)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        steps = group["num_leapfrog"]
        _require(isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1,
                 f"num_leapfrog must be an integer >= 1, got {steps!r}")
        adapt = group["adapt_steps"]
        _require(isinstance(adapt, int) and not isinstance(adapt, bool) and adapt >= 0,
                 f"adapt_steps must be an integer >= 0, got {adapt!r}")
        _require(0 < group["target_accept"] < 1, f"target_accept must be in (0, 1), got {group['target_accept']}")
        mass = group["mass"]
        if isinstance(mass, (int, float)):
            _require(mass > 0, f"mass must be > 0, got {mass}")
        else:
            mass = list(mass)
            _require(len(mass) == len(group["params"]), f"mass needs one tensor per parameter: got {len(mass)} "
                                                        f"for {len(group['params'])}")
            for value, param in zip(mass, group["params"]):
                _require(bool((torch.as_tensor(value) > 0).all()), "mass must be > 0 everywhere")
                _require(torch.broadcast_shapes(torch.as_tensor(value).shape, param.shape) == param.shape,
                         f"mass of shape {tuple(torch.as_tensor(value).shape)} does not broadcast to its parameter's "
                         f"{tuple(param.shape)}")
            group["mass"] = mass

    @property
    def acceptance_rate(self) -> float:
        group = self.param_groups[0]
        return group["num_accepted"] / group["num_proposed"] if group["num_proposed"] else float("nan")

    @property
    def last_accept_prob(self) -> float:
        return self.param_groups[0]["last_accept_prob"]

    def _energy_and_gradients(self, closure: Closure, params: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """(U, ∇U) at the current θ, times N after `attach(dataset_size=N)`."""
        for param in params:
            param.grad = None
        with torch.enable_grad():
            energy = closure()
        if energy is None or not isinstance(energy, Tensor):
            raise ValueError("HMC's closure must return the potential U as a tensor (a scalar, or one per chain)")
        if all(param.grad is None for param in params) and energy.requires_grad:  # a closure that only returns U
            with torch.enable_grad():
                grads = torch.autograd.grad(energy.sum(), params, allow_unused=True)
            for param, grad in zip(params, grads):
                param.grad = grad
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]
        energy = energy.detach()
        if self.dataset_size is not None:
            energy = energy * self.dataset_size
            for grad in grads:
                grad.mul_(self.dataset_size)
        return energy, grads

    @torch.no_grad()
    def step(self, closure: Closure | None = None) -> Tensor:  # type: ignore[override]
        """One trajectory and its accept/reject; returns U at the state the chain is in afterwards."""
        if closure is None:
            raise ValueError("HMC.step needs a closure that returns the potential U "
                             "(zero_grad, U.backward(), return U)")
        group = self.param_groups[0]
        params = list(group["params"])
        h, temperature = group["lr"], group["temperature"]
        energy, grads = self._energy_and_gradients(closure, params)
        chains = energy.shape[0] if energy.dim() == 1 else None
        per_chain = chains is not None and all(p.dim() >= 1 and p.shape[0] == chains for p in params)
        _require(energy.dim() == 0 or per_chain,
                 f"the closure returned U of shape {tuple(energy.shape)}: a scalar, or one energy per chain with every "
                 f"parameter's leading dimension the chain")
        mass = group["mass"]
        if isinstance(mass, (int, float)):
            masses: list[Tensor | float] = [float(mass)] * len(params)
        else:
            masses = [torch.as_tensor(m).to(p) for m, p in zip(mass, params)]
        inverse_mass = [1.0 / m for m in masses]
        start = [param.detach().clone() for param in params]
        start_energy, start_grads = energy, grads
        # p ~ N(0, T M): the momentum marginal of exp(-H / T).
        momenta = [_gaussian_noise(param, temperature, self.generator).mul_(m.sqrt() if isinstance(m, Tensor) else math.sqrt(m))
                   for param, m in zip(params, masses)]
        start_kinetic = self._kinetic(momenta, inverse_mass, chains)
        energy, grads = leapfrog(params, momenta, lambda: self._energy_and_gradients(closure, params), h,
                                 group["num_leapfrog"], inverse_mass, grads)
        # log acceptance = -(ΔU + ΔK) / T, in float64; a NaN or infinite energy is a rejection.
        end_kinetic = self._kinetic(momenta, inverse_mass, chains)
        delta = (energy.double() - start_energy.double()) + (end_kinetic - start_kinetic)
        log_accept = torch.nan_to_num(-delta / temperature, nan=-math.inf).clamp(max=0.0)
        uniform = torch.rand(log_accept.shape, generator=self.generator, dtype=torch.float64,
                             device=log_accept.device)
        accept = uniform.log() < log_accept
        for param, begin, grad, begin_grad in zip(params, start, grads, start_grads):
            keep = accept.view(-1, *[1] * (param.dim() - 1)) if chains is not None else accept
            param.copy_(torch.where(keep, param, begin))  # rejected: the start, exactly
            param.grad = torch.where(keep, grad, begin_grad)
        energy = torch.where(accept, energy, start_energy)
        accept_prob = float(log_accept.exp().mean())
        group["num_proposed"] += accept.numel()
        group["num_accepted"] += int(accept.sum())
        group["last_accept_prob"] = accept_prob
        if group["adapted"] < group["adapt_steps"]:
            self._adapt(group, accept_prob)
        return energy

    @staticmethod
    def _kinetic(momenta: list[Tensor], inverse_mass: list[Tensor | float], chains: int | None) -> Tensor:
        """½ pᵀ M⁻¹ p, per chain (summed over every dimension but the first) or in total, in float64."""
        total: Tensor | float = 0.0
        for momentum, inverse in zip(momenta, inverse_mass):
            energy = (momentum.double().square() * (inverse.double() if isinstance(inverse, Tensor) else inverse))
            total = total + (energy.reshape(energy.shape[0], -1).sum(1) if chains is not None else energy.sum())
        assert isinstance(total, Tensor)
        return 0.5 * total

    @staticmethod
    def _adapt(group: dict[str, Any], accept_prob: float) -> None:
        """One dual-averaging update of log h; the last warm-up step freezes h at the averaged value."""
        group["adapted"] += 1
        m = group["adapted"]
        weight = 1.0 / (m + 10.0)  # t₀ = 10
        error = group["target_accept"] - accept_prob
        group["accept_error_average"] = (1 - weight) * group["accept_error_average"] + weight * error
        log_step = group["log_step_shrink_target"] - math.sqrt(m) / 0.05 * group["accept_error_average"]  # γ = 0.05
        average_weight = m ** -0.75  # κ = 0.75
        group["log_step_average"] = average_weight * log_step + (1 - average_weight) * group["log_step_average"]
        group["lr"] = math.exp(log_step) if m < group["adapt_steps"] else math.exp(group["log_step_average"])
