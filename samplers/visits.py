"""How much each of an MIS call's L+1 candidates counts in JSA's gradient (docs/jsa.md#which-states-the-gradient-uses).

An average of −∇ log p_θ(x, h) − ∇ log q_φ(h | x) over the chain's states is a weighted sum over the candidates (0 the
start, 1..L the proposals), weights summing to 1 per example: `final`, the last state (weight 1); `chain`, the L states
after each step (n_j / L, n_j = `visit_counts`); `expected`, E[n_j | candidates] / L (`expected_visits`), the same mean
as `chain` with no more variance (Rao-Blackwell). `sum_and_sample` turns weights into k + 1 gradient rows per example.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor

from configs.settings import GradientStates
from samplers.mis import MISSample, categorical_draw

RowChoice = int | Literal["every", "final", "distinct"]


def candidate_weights(sample: MISSample, gradient_states: GradientStates) -> Tensor:
    """λ (B, L+1): how much each candidate of one MIS call counts in the gradient, for `gradient_states`."""
    num_candidates, num_steps, dtype = sample.candidates.shape[1], sample.path_index.shape[1], sample.log_target.dtype
    if gradient_states == "final":
        return visit_counts(sample.path_index[:, -1:], num_candidates, dtype)
    if gradient_states == "chain":
        return visit_counts(sample.path_index, num_candidates, dtype) / num_steps
    return expected_visits(sample.log_target, sample.log_proposal) / num_steps


def visit_counts(path_index: Tensor, num_candidates: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """n_j: how many of the chain's L steps ended on candidate j. path_index (B, L) long -> (B, L+1) of `dtype`."""
    counts = path_index.new_zeros(path_index.shape[0], num_candidates, dtype=dtype)  # per replica under vmap
    return counts.scatter_add(1, path_index, torch.ones_like(path_index, dtype=counts.dtype))


def expected_visits(log_target: Tensor, log_proposal: Tensor) -> Tensor:
    """E[n_j | candidates]: the expected number of the L steps that end on candidate j, (B, L+1).

    Once the candidates are scored, `samplers.mis.mis_chain` is random only through its uniforms. With π_t(i) the
    probability that it sits on candidate i after step t (π_0 = δ_0), step t proposes candidate t and accepts from i
    with probability a_it = min(1, exp(w_t − w_i)), w = log p(x, h) − log q(h | x), so

        π_t(t) = Σ_{i<t} π_{t−1}(i) a_it,    π_t(i) = π_{t−1}(i) (1 − a_it)  (i < t),

    and E[n_j] = Σ_{t=1..L} π_t(j): O(L²) tensor operations per batch. A NaN log-ratio (both weights −inf) never
    accepts, as in `mis_chain`.
    """
    if log_target.shape != log_proposal.shape or log_target.dim() != 2:
        raise ValueError(f"log_target and log_proposal must both be (B, L+1), got {tuple(log_target.shape)} and {tuple(log_proposal.shape)}")
    log_weight = (log_target - log_proposal).detach()
    batch, num_candidates = log_weight.shape
    occupancy = torch.zeros_like(log_weight)  # π_t
    occupancy[:, 0] = 1.0
    visits = torch.zeros_like(log_weight)
    for t in range(1, num_candidates):  # sequential in t only, as the chain itself
        log_ratio = torch.nan_to_num(log_weight[:, t : t + 1] - log_weight[:, :t], nan=-torch.inf)
        moved = occupancy[:, :t] * log_ratio.clamp(max=0.0).exp()  # (B, t): mass that jumps to candidate t
        occupancy[:, :t] -= moved
        occupancy[:, t] = moved.sum(1)
        visits += occupancy
    return visits


def fresh_proposal_weights(log_target: Tensor, log_proposal: Tensor, has_start: Tensor | None = None) -> Tensor:
    """Self-normalized importance weights over the candidates drawn fresh from q, (B, L+1), rows summing to 1.

    μ_j ∝ p(x, h_j) / q(h_j | x) over the fresh candidates j, 0 on a cached start (candidate 0 where `has_start`):
    Σ_j μ_j ∇ log q(h_j | x) is the wake-phase q gradient of reweighted wake-sleep (Bornschein & Bengio, 2015), a
    consistent estimate of E_{p(h|x)}[∇ log q(h | x)] as the number of proposals grows, and it reads nothing the cache
    fed back. Log-space: a softmax of the log-weights, no exponential of an unnormalized weight. A row whose fresh
    candidates all have p(x, h_j) = 0 has no weights to normalize: zeros (no q gradient from it), not NaN.
    """
    log_weight = (log_target - log_proposal).detach()
    if has_start is not None:
        cached = torch.zeros_like(log_weight, dtype=torch.bool)
        cached[:, 0] = has_start
        log_weight = log_weight.masked_fill(cached, -torch.inf)
    none = log_weight.amax(dim=1, keepdim=True) == -torch.inf
    return torch.softmax(log_weight.masked_fill(none, 0.0), dim=1).masked_fill(none, 0.0)


def sum_and_sample(weight: Tensor, num_exact: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Σ_j λ_j g_j over N candidates as k + 1 rows: the k largest weights exactly, plus one candidate drawn from the
    remaining mass (Liu et al., 2019, "Rao-Blackwellized stochastic gradients for discrete distributions").

    With T the top k and R = Σ_{j∉T} λ_j, Σ_{j∈T} λ_j g_j + R g_J with P(J = j) = λ_j / R (j ∉ T) has expectation
    Σ_j λ_j g_j for any g, and equals it when at most k weights are non-zero (R = 0).

    `weight`: (B, N) non-negative weights (not differentiated); `num_exact`: k, 1 <= k < N; `generator`: the one draw
    per example. Returns (rows, row_weight), both (B, k+1): candidate indices and weights, each row summing to Σ_j λ_j;
    row k is the drawn one, weighted by R (0 where R = 0, so that the shape never depends on the data).
    """
    weight = weight.detach()
    if not 1 <= num_exact < weight.shape[1]:
        raise ValueError(f"sum_and_sample needs 1 <= k < N = {weight.shape[1]} candidates, got k = {num_exact}")
    top_weight, top_rows = weight.topk(num_exact, dim=1)
    rest = weight.scatter(1, top_rows, 0.0)  # the weights outside the top k
    rest_mass = rest.sum(1, keepdim=True)
    drawn = categorical_draw(rest, generator).unsqueeze(1)  # ∝ rest; a row of zeros draws 0, weighted by R = 0
    return torch.cat([top_rows, drawn], 1), torch.cat([top_weight, rest_mass], 1)


class GradientRows(NamedTuple):
    """The rows of θ's gradient: candidate[n, r] of example example[n], weighted by weight[n, r]."""

    example: Tensor  # (N,)
    candidate: Tensor  # (N, R)
    weight: Tensor  # (N, R)


def gradient_rows(weight: Tensor, rows: RowChoice, generator: torch.Generator | None = None) -> GradientRows:
    """Rows giving Σ_j λ_j ∇ log p_θ(x, h_j) from the weights λ (B, L+1) (docs/jsa.md#which-states-the-gradient-uses):

    `every`: all L+1 candidates, weighted by λ (0 for the unvisited): shapes fixed by B and L;
    `final`: the one candidate of weight 1 (λ one-hot, `gradient_states=final`);
    `distinct`: one row per candidate of non-zero weight: the fewest rows, but their number needs a host sync;
    k (int): k + 1 rows, the k largest weights exactly and one drawn from the rest (`sum_and_sample`).
    """
    if rows == "distinct":
        example, candidate = weight.nonzero(as_tuple=True)  # sync: the number of rows depends on the data
        return GradientRows(example, candidate.unsqueeze(1), weight[example, candidate].unsqueeze(1))
    examples = torch.arange(weight.shape[0], device=weight.device)
    if rows == "every":
        return GradientRows(examples, torch.arange(weight.shape[1], device=weight.device).expand_as(weight), weight)
    if rows == "final":
        candidate = weight.argmax(1, keepdim=True)
        return GradientRows(examples, candidate, weight.gather(1, candidate))
    return GradientRows(examples, *sum_and_sample(weight, rows, generator))
