"""Mixed precision: the networks may run in bfloat16, every log-probability is computed in float32.

bfloat16's 8-bit mantissa resolves a number near 500 (MNIST's log p(x | h), in nats) only to within 2, and MIS accepts
on a difference of two such numbers (docs/mis.md#the-acceptance-ratio). So under `trainer.precision=bf16-mixed` the
network outputs are cast up before anything is summed or normalized (likelihoods, the log-softmaxes of encoder and
priors, the VAE's Gaussian terms, the VQ-VAE's distances); autocast keeps the element-wise ops after them in float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

_HALF = (torch.float16, torch.bfloat16)


def full_precision(t: Tensor) -> Tensor:
    """t in float32 if autocast made it a half type; float32 and float64 tensors are returned as they are."""
    return t.float() if t.dtype in _HALF else t
