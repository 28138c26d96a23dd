"""Multi-sample estimators on S importance samples h_1..h_S ~ q(h | x): RWS and VIMCO (docs/multi-sample.md).

    log w_s = log p_θ(x, h_s) - log q_φ(h_s | x),       w̃_s = w_s / Σ_j w_j  (self-normalized)

Each function takes `log_joint` (B, S) with gradient to θ and `log_proposal` (B, S) with gradient to φ (the samples
carry none) and returns a (B,) surrogate whose gradient is the estimator. Everything stays in log space.
"""

from __future__ import annotations

import math

from torch import Tensor


def importance_weighted_bound(log_weight: Tensor) -> Tensor:
    """L̂ = log (1/S) Σ_s w_s per example, (B, S) -> (B,): its expectation over h_1..h_S ~ q is the S-sample bound
    L_S (Burda et al., 2016)."""
    return log_weight.logsumexp(1) - math.log(log_weight.shape[1])


def rws_surrogate(log_joint: Tensor, log_proposal: Tensor) -> Tensor:
    """Reweighted wake-sleep (Bornschein & Bengio, 2015), the wake phase for both networks (docs/multi-sample.md#rws):

        θ: Σ_s w̃_s ∇θ log p_θ(x, h_s)      (self-normalized estimate of ∇θ log p_θ(x))
        φ: Σ_s w̃_s ∇φ log q_φ(h_s | x)     (self-normalized estimate of -∇φ KL(p_θ(h|x) || q_φ(h|x)))

    w̃ is detached: no gradient passes through the weights. The (B,) value, Σ_s w̃_s (log p(x, h_s) + log q(h_s | x)),
    is no bound.
    """
    weights = (log_joint - log_proposal).detach().softmax(1)
    return (weights * (log_joint + log_proposal)).sum(1)


def vimco_baselines(log_weight: Tensor) -> Tensor:
    """VIMCO's leave-one-out baselines L̂_{-s} (Mnih & Rezende, 2016, eq. 9), (B, S) -> (B, S), S >= 2:

        L̂_{-s} = log (1/S) [ Σ_{j≠s} w_j + f̂_{-s} ],   log f̂_{-s} = (1/(S-1)) Σ_{j≠s} log w_j,

    the bound with sample s replaced by the geometric mean of the others: independent of h_s, so subtracting it keeps
    the estimate unbiased. In log space, row s of an (S, S) matrix holds log w with entry s replaced by log f̂_{-s}.
    """
    num = log_weight.shape[1]
    if num < 2:
        raise ValueError("VIMCO's leave-one-out baselines need at least 2 samples per example")
    log_geometric = (log_weight.sum(1, keepdim=True) - log_weight) / (num - 1)  # (B, S): log f̂_{-s}
    replaced = log_weight.unsqueeze(1).expand(-1, num, -1).clone()  # (B, S, S): row s = log w
    replaced.diagonal(dim1=1, dim2=2).copy_(log_geometric)  # ... with entry s replaced
    return replaced.logsumexp(-1) - math.log(num)


def vimco_surrogate(log_joint: Tensor, log_proposal: Tensor) -> Tensor:
    """VIMCO (Mnih & Rezende, 2016): the gradient of the S-sample bound L_S (docs/multi-sample.md#vimco):

        ∇ L_S = ∇ E[L̂] = E[ Σ_s (L̂ - L̂_{-s}) ∇φ log q_φ(h_s | x) + Σ_s w̃_s ∇ log w_s ],

    a score-function term with the per-sample learning signal L̂ - L̂_{-s}, plus the gradient of L̂ through the weights
    (θ: Σ w̃_s ∇θ log p(x, h_s); φ: -Σ w̃_s ∇φ log q(h_s | x)). The returned (B,) surrogate's value is L̂.
    """
    log_weight = log_joint - log_proposal
    bound = importance_weighted_bound(log_weight)  # gradient: Σ_s w̃_s ∇ log w_s
    signal = (bound.unsqueeze(1) - vimco_baselines(log_weight)).detach()  # L̂ - L̂_{-s}, (B, S)
    score_term = (signal * log_proposal).sum(1)
    return bound + score_term - score_term.detach()
