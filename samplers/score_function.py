"""REINFORCE (score-function) gradient of the ELBO for a categorical q, with control variates (docs/score-function.md).

    f(h) = log p_θ(x, h) - log q_φ(h | x),     ∇φ ELBO = E_q[ ∇φ log q_φ(h | x) · (f(h) - B) ]   for any B independent of h
    B* = E_q[ ||∇φ log q||² f ] / E_q[ ||∇φ log q||² ]                   (the variance-minimizing B)

B* is estimated leave-one-out from the example's other S - 1 samples, so it does not depend on the sample it multiplies.
∇φ log q is taken w.r.t. the encoder's logits (one_hot(h) - softmax(logits) per position): B* is the optimal baseline
of the gradient the encoder back-propagates, at no extra backward pass.
"""

from __future__ import annotations

import torch
from torch import Tensor


def categorical_score_norm_sq(log_probs: Tensor, latent: Tensor) -> Tensor:
    """||∇_logits log q(h | x)||² for every sample: sum over positions of ||one_hot(h_v) - π_v||².

    log_probs: (B, V, K) normalized log-probabilities; latent: (B, S, V) long. Returns (B, S).
    ||e_k - π||² = 1 - 2 π_k + ||π||², summed over the V positions.
    """
    probs = log_probs.exp()
    chosen = probs.unsqueeze(1).expand(-1, latent.shape[1], -1, -1).gather(-1, latent.unsqueeze(-1)).squeeze(-1)
    return (1.0 - 2.0 * chosen + probs.square().sum(-1).unsqueeze(1)).sum(-1)


def leave_one_out_optimal_baseline(signal: Tensor, score_norm_sq: Tensor) -> Tensor:
    """B*_s = sum_{s' != s} ||ψ_s'||² f_s' / sum_{s' != s} ||ψ_s'||²  for each of the S samples, ψ_s = ∇ log q(h_s | x).

    signal, score_norm_sq: (B, S), S >= 2. Returns (B, S); each entry uses only the other samples.
    """
    if signal.shape[1] < 2:
        raise ValueError("the leave-one-out baseline needs at least 2 samples per example")
    weighted = score_norm_sq * signal
    numerator = weighted.sum(1, keepdim=True) - weighted
    denominator = score_norm_sq.sum(1, keepdim=True) - score_norm_sq
    return numerator / denominator.clamp_min(torch.finfo(signal.dtype).tiny)


def score_function_surrogate(log_proposal: Tensor, signal: Tensor, baseline: Tensor | float = 0.0) -> Tensor:
    """A (B,) surrogate whose gradient is the score-function estimate, averaged over the S samples.

    log_proposal: (B, S) log q(h_s | x) with gradient to φ; signal, baseline: the learning signal f and
    the control variate B (no gradient flows through either). Its value is meaningless; only
    its gradient, mean_s (f_s - B_s) ∇φ log q(h_s | x), is.
    """
    return ((signal - baseline).detach() * log_proposal).mean(1)
