"""Metropolis independence sampling (MIS) with the encoder q(h|x) as proposal, index-cached (docs/mis.md).

From the state h, a proposal h' ~ q is accepted with probability min(1, r) (docs/mis.md#the-acceptance-ratio),

    r = [p(x, h') q(h | x)] / [p(x, h) q(h' | x)] = exp(w(h') - w(h)),   w(h) = log p(x, h) - log q(h | x),

so the chain depends only on its candidates' weights: one encoder pass draws the L proposals (and a start), one batched
decoder pass scores the (L+1)B candidates, and `mis_chain` accepts or rejects over candidate indices, at a cost of
T_q + T_p((L+1)B) instead of naive MIS's T_q + L (2 T_p + 3 T_q) (docs/mis.md#cost-model).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import Tensor

LogJoint = Callable[[Tensor], Tensor]  # h (B, N, V) long -> log p(x, h) (B, N)


class MISChain(NamedTuple):
    index: Tensor  # (B,) candidate index c_L of the state after L steps
    accepted: Tensor  # (B,) number of accepted moves
    path: Tensor  # (B, L) candidate index c_t of the state after each step t = 1..L


class NaiveMISSample(NamedTuple):
    latent: Tensor  # (B, V) the chain's final state
    path: Tensor  # (B, L, V) the states after each step
    accepted: Tensor  # (B,) accepted moves out of L


class MISSample(NamedTuple):
    latent: Tensor  # (B, V) the chain's final state h*
    path: Tensor  # (B, L, V) the states after each of the L steps (path[:, -1] == latent)
    accepted: Tensor  # (B,) accepted moves out of L
    candidates: Tensor  # (B, L+1, V) candidate 0 = start state, 1..L = proposals in order
    log_target: Tensor  # (B, L+1) log p(x, h_j) (with the graph of `log_joint`, if it was built under grad)
    log_proposal: Tensor  # (B, L+1) log q(h_j | x)
    path_index: Tensor  # (B, L) candidate index c_t of the state after each step t = 1..L


def mis_chain(log_target: Tensor, log_proposal: Tensor, generator: torch.Generator | None = None) -> MISChain:
    """Run L Metropolis-Hastings steps over L+1 pre-scored candidates (0 the start state, 1..L the proposals, visited
    in order); returns MISChain(index, accepted, path).

    Args:
        log_target: (B, L+1) log p(x, h_j), the unnormalized log target of each candidate.
        log_proposal: (B, L+1) log q(h_j | x).
        generator: source of the uniforms (the global RNG if None).
    """
    if log_target.shape != log_proposal.shape or log_target.dim() != 2 or log_target.shape[1] < 2:
        raise ValueError(f"log_target and log_proposal must both be (B, L+1) with L >= 1, got {tuple(log_target.shape)} and "
                         f"{tuple(log_proposal.shape)}")
    if not (log_target.is_floating_point() and log_proposal.is_floating_point()):
        raise ValueError(f"log_target and log_proposal must be floating point, got {log_target.dtype} and {log_proposal.dtype}")
    batch, num_candidates = log_target.shape
    num_steps = num_candidates - 1
    # Importance log-weights; the acceptance ratio is a difference of two of them and is only ever compared in log
    # space, so nothing is exponentiated. At least float32: a half-precision uniform is 0 often enough (log u = -inf)
    # to accept moves that should almost never be.
    precision = torch.promote_types(torch.promote_types(log_target.dtype, log_proposal.dtype), torch.float32)
    log_weight = log_target.to(precision) - log_proposal.to(precision)
    log_u = torch.rand(batch, num_steps, device=log_target.device, dtype=precision, generator=generator).log()
    current = torch.zeros_like(log_weight[:, 0], dtype=torch.long)
    current_log_weight = log_weight[:, 0]
    accepted = torch.zeros_like(current)
    steps = []
    # The only sequential part: each step compares against the state the previous step left.
    for t in range(1, num_candidates):
        accept = log_u[:, t - 1] < log_weight[:, t] - current_log_weight
        current = torch.where(accept, t, current)
        current_log_weight = torch.where(accept, log_weight[:, t], current_log_weight)
        accepted = accepted + accept
        steps.append(current)
    return MISChain(current, accepted, torch.stack(steps, 1))


def sample_categorical(log_probs: Tensor, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
    """Draw `num_samples` independent h ~ prod_v Cat(h_v; exp(log_probs[:, v])) in one call.

    log_probs: (B, V, K) normalized log-probabilities. Returns (B, num_samples, V) long.
    """
    batch, num_latents, num_categories = log_probs.shape
    probs = log_probs.reshape(batch * num_latents, num_categories).exp()
    if num_samples == 1:  # multinomial's one-draw path would first check the probabilities on the host
        draws = categorical_draw(probs, generator).unsqueeze(-1)
    else:
        draws = torch.multinomial(probs, num_samples, replacement=True, generator=generator)
    return draws.view(batch, num_latents, num_samples).transpose(1, 2)


def categorical_draw(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One draw from each row of `probs` (..., K) (normalized or not), (...) long: argmax_k p_k / E_k with
    E_k ~ Exp(1), the exponential race (the Gumbel-max trick, exponentiated).

    `torch.multinomial(probs, 1)` draws exactly this way, from the same random numbers, but first reads the
    probabilities' extremes back to the host to check them: on an accelerator a sync every call
    (docs/mis.md#static-shapes-and-no-host-syncs). Same draws, without the check.
    """
    return (probs / torch.empty_like(probs).exponential_(generator=generator)).argmax(-1)


def categorical_log_prob(log_probs: Tensor, latent: Tensor) -> Tensor:
    """log q(h | x) = sum_v log_probs[v, h_v] for every candidate, by gather.

    log_probs: (B, V, K); latent: (B, N, V) long. Returns (B, N).
    """
    expanded = log_probs.unsqueeze(1).expand(-1, latent.shape[1], -1, -1)
    return expanded.gather(-1, latent.unsqueeze(-1)).squeeze(-1).sum(-1)


def index_cached_mis(
    log_q: Tensor,
    log_joint: LogJoint,
    num_steps: int,
    start: Tensor | None = None,
    has_start: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> MISSample:
    """One MIS call of JSA in the index-cached form (module docstring); `generator` draws proposals and accept/reject.

    Args:
        log_q: (B, V, K) log q(h_v | x) from one encoder pass (its gradient is not used).
        log_joint: scores candidates in one batched decoder pass, (B, N, V) -> (B, N) log p(x, h).
        num_steps: L, the number of MH steps (= proposals).
        start, has_start: (B, V) start states (e.g. the per-example cache), used where the (B,) bool `has_start` is
            True; elsewhere (or when `start` is None) the chain starts from a fresh proposal.
    """
    if num_steps < 1:
        raise ValueError(f"MIS needs at least one step, got num_steps={num_steps}")
    if start is not None and (start.is_floating_point() or start.is_complex()):
        raise ValueError(f"start must hold class indices (an integer tensor), got {start.dtype}")
    # Candidate 0 is drawn too and replaced by the cached state where there is one: this keeps
    # every shape static (no branching on data), at the price of one extra categorical draw.
    candidates = sample_categorical(log_q, num_steps + 1, generator)
    if start is not None:
        keep = has_start if has_start is not None else torch.ones(start.shape[0], dtype=torch.bool, device=start.device)
        candidates[:, 0] = torch.where(keep.unsqueeze(-1), start.to(candidates.dtype), candidates[:, 0])
    log_proposal = categorical_log_prob(log_q, candidates)
    log_target = log_joint(candidates)
    chain = mis_chain(log_target.detach(), log_proposal, generator)  # the accept/reject takes no gradient
    path = candidates.gather(1, chain.path.unsqueeze(-1).expand(-1, -1, candidates.shape[-1]))
    return MISSample(path[:, -1], path, chain.accepted, candidates, log_target, log_proposal, chain.path)


def naive_mis(
    log_q_fn: Callable[[], Tensor],
    log_joint_fn: LogJoint,
    num_steps: int,
    start: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> NaiveMISSample:
    """Reference MIS in its textbook form (docs/mis.md#naive-mis), not used in training: the tests check
    `index_cached_mis` against it (same distribution) and benchmarks/speed/mis_speed.py times it against it.

    Each step runs the encoder to sample h' ~ q and for q(h' | x), q(h_t | x), and the decoder for p(x, h'), p(x, h_t):
    O(2 T_p + 3 T_q) per step. `log_q_fn()` runs the encoder and returns (B, V, K) log-probabilities;
    `log_joint_fn(h)` runs the decoder on (B, 1, V) and returns (B, 1).
    """
    current = sample_categorical(log_q_fn(), 1, generator)[:, 0] if start is None else start.long()
    batch = current.shape[0]
    accepted = torch.zeros(batch, dtype=torch.long, device=current.device)
    states = [current]
    for _ in range(num_steps):
        proposal = sample_categorical(log_q_fn(), 1, generator)[:, 0]
        log_r = (
            log_joint_fn(proposal.unsqueeze(1))[:, 0]
            - log_joint_fn(current.unsqueeze(1))[:, 0]
            + categorical_log_prob(log_q_fn(), current.unsqueeze(1))[:, 0]
            - categorical_log_prob(log_q_fn(), proposal.unsqueeze(1))[:, 0]
        )
        log_u = torch.rand(batch, device=log_r.device, dtype=log_r.dtype, generator=generator).log()
        accept = log_u < log_r
        current = torch.where(accept.unsqueeze(-1), proposal, current)
        accepted += accept
        states.append(current)
    return NaiveMISSample(current, torch.stack(states[1:], dim=1), accepted)
