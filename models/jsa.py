"""JSA: joint stochastic approximation (Xu & Ou, 2016; Ou & Song, 2020) for the categorical model (docs/jsa.md).

JSA fits p_θ(x, h) and q_φ(h | x) by stochastic approximation of the two gradients

    ∇θ: E_{p_θ(h|x)}[ ∇θ log p_θ(x, h) ]          (maximum likelihood for θ)
    ∇φ: E_{p_θ(h|x)}[ ∇φ log q_φ(h | x) ]         (inclusive KL(p_θ(h|x) || q_φ(h|x)) for φ)

with the expectations over the model's own posterior estimated by one MCMC sample h* per
example. h* comes from Metropolis independence sampling with q_φ as the proposal, run in the
index-cached form (samplers/mis.py, docs/mis.md#index-cached-mis): one encoder pass, one batched
decoder pass over the L+1 candidates, the chain over candidate indices. Each example's chain persists across
epochs in a per-example cache (samplers/cache.py): the next visit starts from the state the
chain reached (re-scored under the current networks), so the chain keeps mixing.

One training step (no gradient through the sampling):
    h* <- MIS(x; start = cache[index], L steps);  cache[index] <- h*
    loss = -log p_θ(x, h*) - log q_φ(h* | x)
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from callbacks.checkpoint_files import CheckpointError
from models.components.categorical import CategoricalLatentModel
from models.components.code_usage import usage_perplexity
from samplers.cache import LatentCache
from samplers.mis import categorical_log_prob, index_cached_mis

GradientStates = Literal["final", "chain"]


class JSA(CategoricalLatentModel):
    """Categorical latent-variable model trained by JSA with the index-cached MIS sampler.

    Args:
        mis_steps: L, Metropolis-Hastings steps per training example and step (>= 1).
        use_cache: start each chain from the example's cached state (else from a fresh proposal).
        cache_start_epoch: read the cache only from this epoch on (it is written from the start).
        gradient_states: which states the gradient step uses: `final` (the chain's last state,
            docs/jsa.md#final-state-or-chain-average) or `chain` (the average over the L states the chain visited, as in
            the official JSA code).
        cache_size: number of training examples; filled in from the data module when left out.
        **kwargs: the model's arguments (see `CategoricalLatentModel`: backbone, num_latents,
            num_categories, ...) and the shared ones (see `LatentVariableModel`).
    """

    def __init__(
        self,
        mis_steps: int = 10,
        use_cache: bool = True,
        cache_start_epoch: int = 0,
        gradient_states: GradientStates = "final",
        cache_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.save_hyperparameters(ignore=["optimizer"])  # a callable; the HPARAMS tab names its class (callbacks/hparams.py)
        if mis_steps < 1:
            raise ValueError(f"mis_steps (L) must be >= 1, got {mis_steps}")
        if gradient_states not in ("final", "chain"):
            raise ValueError(f"gradient_states must be 'final' or 'chain', got {gradient_states!r}")
        if cache_start_epoch < 0:
            raise ValueError(f"cache_start_epoch must be >= 0, got {cache_start_epoch}")
        self.mis_steps = mis_steps
        self.use_cache = use_cache
        self.cache_start_epoch = cache_start_epoch
        self.gradient_states = gradient_states
        self.cache: LatentCache | None = None
        if use_cache and cache_size is not None:
            self._allocate_cache(cache_size)
        # Classes that h* has used so far (for `train/classes_used`).
        self.register_buffer("class_used", torch.zeros(self.num_categories, dtype=torch.bool))
        # Every rank keeps the whole cache and updates it with the gathered pairs of each step
        # (see `_write_cache`); DDP must not also broadcast these buffers from rank 0 each step.
        self._ddp_params_and_buffers_to_ignore = ["cache.codes", "class_used"]

    config_name = "jsa"  # as in configs/model/ and the run names
    run_tag_keys = ("backbone", "num_categories", "mis_steps", "prior")

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/jsa-<data>-<run_tag>)."""
        return f"{self.backbone}-K{self.num_categories}-L{self.mis_steps}" + self.prior_tag

    def _allocate_cache(self, num_examples: int) -> None:
        self.cache = LatentCache(num_examples, (self.num_latents,), self.num_categories).to(self.device)
        self.hparams["cache_size"] = num_examples  # so load_from_checkpoint rebuilds it

    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule = self.trainer.datamodule
        if stage != "fit" or not self.use_cache or datamodule is None:
            return
        num_examples = datamodule.num_train_examples
        if self.cache is None:
            self._allocate_cache(num_examples)
        elif self.cache.num_examples != num_examples:  # a cache sized by a checkpoint (cache_size)
            raise CheckpointError(
                f"the checkpoint's JSA cache holds {self.cache.num_examples} chains but the training split has {num_examples} "
                f"examples (data.val_size={getattr(datamodule, 'val_size', '?')}: another validation split or data set?); use the "
                "data settings it was trained with, or start a new run"
            )

    # ---- one JSA step -------------------------------------------------------------
    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        return self.jsa_step(x, index, write_cache=True)

    def gradient_estimates(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """A fresh MIS chain from the same cached states (the cache is read, not written) and its gradient."""
        return {"": self.jsa_step(x, index, write_cache=False)["loss"]}

    def jsa_step(self, x: Tensor, index: Tensor, write_cache: bool) -> dict[str, Tensor]:
        log_q = self.posterior(x)  # the one encoder pass of this step: log q(h | x), (B, V, K)
        read_cache = self.cache is not None and self.current_epoch >= self.cache_start_epoch
        with torch.no_grad():
            start, has_start = self.cache.read(index) if read_cache else (None, None)
            sample = index_cached_mis(
                log_q.detach(), lambda latent: self.log_joint(x, latent), self.mis_steps, start, has_start
            )
        if self.cache is not None and write_cache:
            self._write_cache(index, sample.latent)

        # h*: (B, 1, V) for `final`, (B, L, V) for `chain`; the loss averages over them.
        states = sample.latent.unsqueeze(1) if self.gradient_states == "final" else sample.path
        loss_p = -self.log_joint(x, states).mean()
        loss_q = -categorical_log_prob(log_q, states).mean()
        if not write_cache:
            return {"loss": loss_p + loss_q}

        counts = torch.bincount(states.flatten(), minlength=self.num_categories)
        self.class_used |= counts > 0
        zero = torch.zeros((), device=x.device)
        return {
            "loss": loss_p + loss_q,
            "loss_p": loss_p,
            "loss_q": loss_q,
            "acceptance_rate": sample.accepted.float().mean() / self.mis_steps,
            "cache_hit_rate": has_start.float().mean() if has_start is not None else zero,
            "perplexity": usage_perplexity(counts.float()),
            "classes_used": self.class_used.float().mean(),
        }

    def _write_cache(self, index: Tensor, latent: Tensor) -> None:
        """Store this step's h* for its examples, on every rank.

        Under DDP each rank samples only its shard; the (index, h*) pairs of all ranks are
        gathered (B x V integers per rank, not the whole cache) and every rank writes all of
        them, so the caches stay identical.
        """
        if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            # One collective for both: rows (index, h*_1..h*_V) of all ranks.
            pairs = self.all_gather(torch.cat([index.unsqueeze(1), latent], dim=1)).flatten(0, 1)
            index, latent = pairs[:, 0], pairs[:, 1:]
        self.cache.write(index, latent)
