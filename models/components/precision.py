"""Mixed precision: the networks may run in bfloat16, every log-probability is computed in float32.

Under `trainer.precision=bf16-mixed` autocast runs the matmuls and convolutions in bfloat16, whose 8-bit
mantissa resolves a number near 500 (a log p(x | h) of MNIST, in nats) only to within 2. MIS accepts on
a difference of two such numbers (docs/mis.md#the-acceptance-ratio), and a bpd is their mean, so the
network outputs are cast up before anything is summed or normalized: likelihoods, log-softmaxes of the
encoder and of the priors, the VAE's Gaussian terms and the VQ-VAE's distances. Autocast leaves the
element-wise ops that follow in float32 (it lowers only matmul-like ops).
"""

from __future__ import annotations

import torch
from torch import Tensor

_HALF = (torch.float16, torch.bfloat16)


def full_precision(t: Tensor) -> Tensor:
    """t in float32 if autocast made it a half type; float32 and float64 tensors are returned as they are."""
    return t.float() if t.dtype in _HALF else t
