"""Vector quantizer of the VQ-VAE (van den Oord et al., 2017), plain torch + torch.distributed (docs/vqvae.md).

    k = argmin_j ||z_e(x) - e_j||^2,   z_q(x) = e_k        (one (N, K) matmul: ||z||^2 - 2 z·e_j + ||e_j||^2)
    quantized = z_e + sg[z_q - z_e]                          (straight-through: the decoder's gradient to z_e)
    L_vq = ||sg[z_e] - e||^2 + beta ||z_e - sg[e]||^2        (codebook + commitment; means over elements)
    EMA:  N_k <- d N_k + (1 - d) n_k,  m_k <- d m_k + (1 - d) s_k,  e_k = m_k / Ñ_k   (Ñ Laplace-smoothed;
          starting at N_k = 1, m_k = e_k, not debiased: docs/vqvae.md#ema-codebook)

Dead codes and k-means init: docs/vqvae.md#dead-codes-and-k-means-initialization. Under DDP every rank keeps the same
codebook (statistics summed, candidates and k-means from rank 0); only training forwards run collectives, so one
rank may quantize alone in eval.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from models.components.code_usage import code_counts
from models.components.precision import full_precision


class QuantizerOutput(NamedTuple):
    quantized: Tensor  # z_e + sg[z_q - z_e]: value z_q, gradient straight through to z_e; layout of z_e
    codes: Tensor  # long, z_e's shape without the channel dim: (B, H', W') or (B, V)
    loss: Tensor  # codebook_loss + beta * commitment_loss
    codebook_loss: Tensor  # ||sg[z_e] - e||^2, mean over elements (0 in EMA mode)
    commitment_loss: Tensor  # ||z_e - sg[e]||^2, mean over elements
    perplexity: Tensor  # exp(entropy of this batch's code histogram); between 1 and K
    restarts: Tensor  # long: number of dead codes re-initialized in this call


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _all_reduce_sum(x: Tensor) -> Tensor:
    if _world_size() > 1:
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def _all_gather(x: Tensor) -> Tensor:
    """Concatenate x from all ranks in rank order (every rank must pass the same shape)."""
    if _world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def _from_rank0(x: Tensor) -> Tensor:
    """Overwrite x with rank 0's copy, so that a random choice is the same on every rank."""
    if _world_size() > 1:
        dist.broadcast(x, src=0)
    return x


def _nearest(x: Tensor, codebook: Tensor) -> Tensor:
    """Index of the nearest code for each row of x (N, D); the (N, K, D) differences are never built.
    In float32 even under bf16-mixed, whose rounding would change which code is nearest
    (models/components/precision.py)."""
    with torch.autocast(x.device.type, enabled=False):
        squared_distances = torch.addmm(
            x.square().sum(1, keepdim=True) + codebook.square().sum(1), x, codebook.t(), alpha=-2
        )
    return squared_distances.argmin(1)


def _sample_rows(x: Tensor, n: int) -> Tensor:
    """n rows of x at random: distinct when x has at least n rows, else drawn with replacement."""
    if len(x) >= n:
        return x[torch.randperm(len(x), device=x.device)[:n]]
    return x[torch.randint(len(x), (n,), device=x.device)]


def _kmeans(x: Tensor, k: int, iters: int) -> Tensor:
    """k centroids of the rows of x: k-means++ seeds, then `iters` Lloyd iterations."""
    # k-means++ (Arthur & Vassilvitskii, 2007): each next seed is a data point drawn with probability
    # proportional to its squared distance to the nearest seed so far, so well-separated clusters
    # each get a seed (uniform seeds often put two in one cluster, a local optimum Lloyd cannot
    # leave). Chosen points have weight 0, so seeds are distinct while distinct points remain.
    seeds = _sample_rows(x, 1)
    min_dist = (x - seeds[0]).square().sum(1)
    for _ in range(k - 1):
        weights = min_dist if min_dist.sum() > 0 else torch.ones_like(min_dist)  # < k distinct points
        seeds = torch.cat([seeds, x[torch.multinomial(weights, 1)]])
        min_dist = torch.minimum(min_dist, (x - seeds[-1]).square().sum(1))
    centroids = seeds
    for _ in range(iters):
        assignment = _nearest(x, centroids)
        counts = torch.bincount(assignment, minlength=k).unsqueeze(1)
        sums = torch.zeros_like(centroids).index_add_(0, assignment, x)
        # an empty cluster keeps its centroid rather than becoming 0/0
        centroids = torch.where(counts > 0, sums / counts.clamp(min=1), centroids)
    return centroids


class VectorQuantizer(nn.Module):
    """Nearest-code quantization with the straight-through estimator (module docstring).

    Args:
        num_codes, code_dim: K, the codebook size, and D, the size of a code (the channel size of z_e).
        beta: weight of the commitment loss.
        ema, decay, epsilon: train the codebook by EMA of assigned vectors (instead of the codebook loss), with decay d
            (also that of the usage tracked for dead codes) and Laplace smoothing epsilon of the cluster sizes.
        dead_code_threshold: restart codes whose usage (EMA of per-batch counts) is below this; 0 = off.
        kmeans_init, kmeans_iters: initialize the codebook by that many Lloyd iterations on the first training batch.

    Buffers: `codebook` (a Parameter without EMA), `ema_cluster_size` (N_k, also the usage) and `ema_embed_sum` (m_k)
    with EMA, `usage` without, and `initialized` (False until k-means has run, so a resumed run does not redo it).
    """

    def __init__(
        self,
        num_codes: int = 512,
        code_dim: int = 64,
        beta: float = 0.25,
        ema: bool = False,
        decay: float = 0.99,
        epsilon: float = 1e-5,
        dead_code_threshold: float = 0.0,
        kmeans_init: bool = False,
        kmeans_iters: int = 10,
    ) -> None:
        super().__init__()
        if num_codes < 1 or code_dim < 1:
            raise ValueError(f"num_codes and code_dim must be >= 1, got {num_codes} and {code_dim}")
        if beta < 0:
            raise ValueError(f"beta (the commitment weight) must be >= 0, got {beta}")
        if not 0 < decay < 1:  # the codes' usage (dead-code restarts) is an average too, with or without EMA
            raise ValueError(f"decay (of the EMA codebook statistics and code usage) must be in (0, 1), got {decay}")
        if dead_code_threshold < 0:
            raise ValueError(f"dead_code_threshold must be >= 0, got {dead_code_threshold}")
        self.num_codes, self.code_dim, self.beta, self.ema = num_codes, code_dim, beta, ema
        self.decay, self.epsilon = decay, epsilon
        self.dead_code_threshold, self.kmeans_iters = dead_code_threshold, kmeans_iters

        # uniform(-1/K, 1/K), the init of zalando's pytorch-vq-vae and taming-transformers
        codebook = torch.empty(num_codes, code_dim).uniform_(-1 / num_codes, 1 / num_codes)
        # Every code starts as if it had been assigned one vector, itself: N_k = 1 and m_k = e_k, so
        # m_k / N_k is the codebook from the start. (With the common start N_k = 0, m_k = e_k, a code
        # unused for t steps becomes d^t e_k / (smoothed N_k ~ eps), thrown far from the data for good.)
        if ema:
            self.register_buffer("codebook", codebook)
            self.register_buffer("ema_cluster_size", torch.ones(num_codes))
            self.register_buffer("ema_embed_sum", codebook.clone())
        else:
            self.codebook = nn.Parameter(codebook)
            self.register_buffer("usage", torch.ones(num_codes))
        self.register_buffer("initialized", torch.tensor(not kmeans_init))
        self._kmeans_pending = kmeans_init
        # A loaded state (checkpoint, resume) says whether k-means has run already.
        self.register_load_state_dict_post_hook(lambda module, _: setattr(module, "_kmeans_pending", not bool(module.initialized)))

    @property
    def code_usage(self) -> Tensor:
        """EMA of each code's per-batch count, pooled over ranks (`ema_cluster_size` or `usage`)."""
        return self.ema_cluster_size if self.ema else self.usage

    def forward(self, z_e: Tensor, channel_dim: int = 1) -> QuantizerOutput:
        """Quantize z_e: (B, D, H', W') with channel_dim=1, or (B, V, D) with channel_dim=-1."""
        if z_e.shape[channel_dim] != self.code_dim:
            raise ValueError(
                f"z_e has {z_e.shape[channel_dim]} channels along dim {channel_dim} (shape {tuple(z_e.shape)}), "
                f"but code_dim is {self.code_dim}"
            )
        z = full_precision(z_e).movedim(channel_dim, -1)  # the codebook and its statistics stay float32
        flat = z.reshape(-1, self.code_dim)
        if self.training and self._kmeans_pending:  # a Python mirror of `initialized`: no host sync per step
            self._kmeans_init(flat.detach())

        codes = _nearest(flat.detach(), self.codebook.detach())
        z_q = self.codebook[codes]
        commitment_loss = F.mse_loss(flat, z_q.detach())
        codebook_loss = flat.new_zeros(()) if self.ema else F.mse_loss(z_q, flat.detach())
        quantized = flat + (z_q - flat).detach()

        counts = code_counts(codes, self.num_codes).to(flat.dtype)
        restarts = torch.zeros((), dtype=torch.long, device=flat.device)
        if self.training:
            counts = self._update_statistics(flat.detach(), codes, counts)
            if self.dead_code_threshold > 0:
                restarts = self._restart_dead_codes(flat.detach())
        probs = counts / counts.sum()
        perplexity = torch.special.entr(probs).sum().exp()  # entr(p) = -p log p, with entr(0) = 0

        return QuantizerOutput(
            quantized=quantized.reshape(z.shape).movedim(-1, channel_dim),
            codes=codes.reshape(z.shape[:-1]),
            loss=codebook_loss + self.beta * commitment_loss,
            codebook_loss=codebook_loss,
            commitment_loss=commitment_loss,
            perplexity=perplexity,
            restarts=restarts,
        )

    def lookup(self, codes: Tensor, channel_dim: int = 1) -> Tensor:
        """Codes -> their vectors, in forward's layout: (B, H', W') -> (B, D, H', W') with channel_dim=1,
        (B, V) -> (B, V, D) with channel_dim=-1."""
        return self.codebook[codes].movedim(-1, channel_dim)

    @torch.no_grad()
    def _update_statistics(self, flat: Tensor, codes: Tensor, counts: Tensor) -> Tensor:
        """Update the usage (and, in EMA mode, the codebook) from this batch; return the pooled counts."""
        if self.ema:
            sums = torch.zeros_like(self.ema_embed_sum).index_add_(0, codes, flat)
            # one all_reduce for counts and sums together
            pooled = _all_reduce_sum(torch.cat([counts.unsqueeze(1), sums], 1))
            counts, sums = pooled[:, 0], pooled[:, 1:]
            self.ema_cluster_size.lerp_(counts, 1 - self.decay)  # N <- d N + (1 - d) n
            self.ema_embed_sum.lerp_(sums, 1 - self.decay)  # m <- d m + (1 - d) s
            n = self.ema_cluster_size.sum()
            smoothed = (self.ema_cluster_size + self.epsilon) / (n + self.num_codes * self.epsilon) * n
            self.codebook.copy_(self.ema_embed_sum / smoothed.unsqueeze(1))
        else:
            counts = _all_reduce_sum(counts)
            self.usage.lerp_(counts, 1 - self.decay)
        return counts

    @torch.no_grad()
    def _set_codes(self, mask: Tensor, vectors: Tensor, counts: Tensor) -> None:
        """Where `mask` (K,), put `vectors` (K, D) with usage `counts` (K,) (EMA: m_k = e_k N_k, so m/N = e).

        Selected on the device with `torch.where`, so the caller never reads the mask on the host.
        """
        rows = mask.unsqueeze(1)
        self.codebook.copy_(torch.where(rows, vectors, self.codebook))
        if self.ema:
            self.ema_cluster_size.copy_(torch.where(mask, counts, self.ema_cluster_size))
            self.ema_embed_sum.copy_(torch.where(rows, vectors * counts.unsqueeze(1), self.ema_embed_sum))
        else:
            self.usage.copy_(torch.where(mask, counts, self.usage))

    @torch.no_grad()
    def _restart_dead_codes(self, flat: Tensor) -> Tensor:
        """Move codes with usage < threshold onto random encoder outputs of the batch (rank 0's under DDP).

        Every step draws a candidate for every code and keeps those of the dead ones: no host sync to
        find out which (and how many) codes are dead. usage is identical on every rank (pooled
        statistics) and the candidates come from rank 0, so every rank restarts the same codes alike.
        """
        dead = self.code_usage < self.dead_code_threshold
        candidates = _from_rank0(_sample_rows(flat, self.num_codes))
        # usage = threshold: not dead now; dead again only if the new code attracts nothing
        self._set_codes(dead, candidates, flat.new_full((self.num_codes,), self.dead_code_threshold))
        return dead.sum()

    @torch.no_grad()
    def _kmeans_init(self, flat: Tensor) -> None:
        data = _all_gather(flat)
        centroids = _from_rank0(_kmeans(data, self.num_codes, self.kmeans_iters))
        # every rank holds the same data and centroids, so the same counts (in units of a pooled batch)
        counts = torch.bincount(_nearest(data, centroids), minlength=self.num_codes).to(data.dtype)
        self._set_codes(torch.ones(self.num_codes, dtype=torch.bool, device=data.device), centroids, counts)
        self.initialized.fill_(True)
        self._kmeans_pending = False
