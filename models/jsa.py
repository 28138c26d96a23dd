"""JSA: joint stochastic approximation (Xu & Ou, 2016; Ou & Song, 2020) for the categorical model (docs/jsa.md).

θ by maximum likelihood and φ by the inclusive KL(p_θ(h|x) || q_φ(h|x)), both over the model's posterior, sampled by
one index-cached MIS call per example (samplers/mis.py) with q_φ as the proposal. One step:

    h_0..h_L <- candidates (h_0 = cache[index] or a proposal, L proposals from q); the chain ends in h*
    cache[index] <- h*                                   (every step; read as h_0 from `cache_start_epoch` on)
    loss = -Σ_j λ_j log p_θ(x, h_j) - Σ_j μ_j log q_φ(h_j | x)      (no gradient through the sampling)

λ: the weights of `gradient_states` (samplers/visits.py); μ = λ, or with `q_states="fresh"` the self-normalized
weights of the fresh proposals (docs/jsa.md#what-q-learns-from).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from common.private_api import ignore_in_ddp
from configs.settings import JSASettings
from models.categorical import CategoricalLatentModel
from models.components.code_usage import code_counts, usage_perplexity
from models.components.optimizers import OptimizerFactory, SchedulerFactory
from samplers.cache import CACHE_DIAGNOSTICS, LatentCache, cache_diagnostics, check_cache_size, refresh_starts
from samplers.mis import MISSample, categorical_log_prob, index_cached_mis
from samplers.visits import RowChoice, candidate_weights, fresh_proposal_weights, gradient_rows


class JSA(CategoricalLatentModel):
    """Categorical latent-variable model trained by JSA with the index-cached MIS sampler. Its settings:
    configs/settings.py's JSASettings (mis_steps, the cache, the gradient's states and rows) and CategoricalSettings."""

    def __init__(self, data_shape: Sequence[int] = (1, 28, 28), optimizer: OptimizerFactory | None = None,
                 scheduler: SchedulerFactory | None = None, **settings: Any) -> None:
        super().__init__(JSASettings(**settings), data_shape, optimizer, scheduler)
        s = self.settings
        self.mis_steps, self.use_cache, self.cache_start_epoch, self.cache_refresh = s.mis_steps, s.use_cache, s.cache_start_epoch, s.cache_refresh
        self.gradient_states, self.q_states, self.chain_rows, self.gradient_rows = s.gradient_states, s.q_states, s.chain_rows, s.gradient_rows
        self.cache: LatentCache | None = None
        if s.use_cache and s.cache_size is not None:
            self._allocate_cache(s.cache_size)
        self.register_buffer("class_used", torch.zeros(self.num_categories, dtype=torch.bool))  # `train/classes_used`
        # Every rank keeps the whole cache and writes the gathered pairs of each step (`write_cache`): DDP must not
        # also broadcast these buffers from rank 0.
        ignore_in_ddp(self, ["cache.codes", "cache.changed_epoch", "class_used"])

    config_name = "jsa"  # as in configs/model/ and the run names
    replica_settings = ("cache_start_epoch", "cache_refresh")  # may differ between the replicas of one process
    graph_constants = ("restart_rate",)  # of `step_inputs`: changes only with reads_cache (models/compiled_step.py)
    flag_terms = {"reads_cache": CACHE_DIAGNOSTICS}
    run_tag_keys = ("backbone", "num_categories", "mis_steps", "prior")
    # In the run's name when not the default, e.g. -expected, -qfresh, -rowsstatic, -rows4, -nocache, -cache300, -refresh0.1
    estimator_settings = {"gradient_states": "", "q_states": "q", "chain_rows": "rows", "gradient_rows": "rows",
                          "use_cache": "cache", "cache_start_epoch": "cache", "cache_refresh": "refresh"}

    @property
    def run_tag(self) -> str:
        """Key settings, for the run's name (logs/tensorboard/jsa-<data>-<run_tag>)."""
        return f"{self.backbone}-K{self.num_categories}-L{self.mis_steps}" + self.prior_tag + self.estimator_tag

    def _allocate_cache(self, num_examples: int) -> None:
        self.cache = LatentCache(num_examples, (self.num_latents,), self.num_categories).to(self.device)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        datamodule = self.trainer.datamodule
        if stage == "fit" and self.use_cache and datamodule is not None:
            if self.cache is None:
                self._allocate_cache(datamodule.num_train_examples)
                self.record_resolved(cache_size=datamodule.num_train_examples)  # so load_from_checkpoint rebuilds it
            check_cache_size(self.cache, datamodule.num_train_examples, getattr(datamodule, "val_size", "?"))

    # ---- one JSA step -------------------------------------------------------------
    def training_loss(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        return self.jsa_step(x, index, write_cache=True)

    def gradient_estimates(self, x: Tensor, index: Tensor) -> dict[str, Tensor]:
        """A fresh MIS chain from the same cached states (the cache is read, not written) and its gradient."""
        return {"": self.jsa_step(x, index, write_cache=False)["loss"]}

    def jsa_step(self, x: Tensor, index: Tensor, write_cache: bool) -> dict[str, Tensor]:
        """The steps of docs/jsa.md#one-training-step, numbered as there."""
        log_q = self.posterior(x)  # 1. the step's one encoder pass: log q(h | x), (B, V, K)
        start, has_start, age = self.chain_starts(index)  # 2. the cached states the chains start from, where read
        # 3. MIS with q as proposal, without gradient (Fisher's identity needs none); with every candidate a gradient
        # row, the sampler's one decoder pass keeps its graph and serves the loss too.
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.row_choice(x.device) == "every"):
            sample = index_cached_mis(log_q.detach(), lambda latent: self.log_joint(x, latent), self.mis_steps, start, has_start)
        if write_cache and self.cache is not None:  # 4. the chains' final states back to the cache
            self.write_cache(index, sample.latent)
        loss_p, loss_q = self.jsa_loss(x, log_q, sample, has_start)  # 5. -log p(x, h) and -log q(h | x), weighted
        if not write_cache:
            return {"loss": loss_p + loss_q}
        return {"loss": loss_p + loss_q, "loss_p": loss_p, "loss_q": loss_q, **self.chain_diagnostics(sample, has_start, age)}

    def jsa_loss(self, x: Tensor, log_q: Tensor, sample: MISSample, has_start: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """-E_λ[log p_θ(x, h)] and -E_μ[log q_φ(h | x)], batch means of weighted sums over the L+1 candidates (the weights
        sum to 1 per example; μ by `q_states`). `has_start` marks the chains whose candidate 0 is a cached state."""
        weight = candidate_weights(sample, self.gradient_states)  # λ
        loss_p = -self.weighted_log_joint(x, sample, weight).mean()
        if self.q_states == "fresh":  # μ: self-normalized over the fresh proposals; else μ = λ
            weight = fresh_proposal_weights(sample.log_target, sample.log_proposal, has_start)
        loss_q = -(weight * categorical_log_prob(log_q, sample.candidates)).sum(1).mean()
        return loss_p, loss_q

    def row_choice(self, device: torch.device) -> RowChoice:
        """The rows θ's gradient differentiates (samplers/visits.py, `gradient_rows`): `final`'s one; `gradient_rows` = k
        <= L: k + 1; else, for `chain`, `distinct` for `chain_rows=distinct`, or `auto` where shapes may depend on the
        data (the CPU, docs/jsa.md#static-or-distinct-rows); else `every`."""
        if self.gradient_states == "final":
            return "final"
        if self.gradient_rows is not None:
            return self.gradient_rows if self.gradient_rows <= self.mis_steps else "every"
        distinct = self.chain_rows == "distinct" or (self.chain_rows == "auto" and not self.static_shapes(device))
        return "distinct" if self.gradient_states == "chain" and distinct else "every"

    def weighted_log_joint(self, x: Tensor, sample: MISSample, weight: Tensor) -> Tensor:
        """Σ_j weight_j log p(x, h_j) per example, (B,), with gradient to θ, over the rows of `row_choice`: every
        candidate's score from the sampler's pass, or the chosen rows scored again in one decoder pass."""
        choice = self.row_choice(x.device)
        rows = gradient_rows(weight, choice)
        if choice == "every":
            scores = sample.log_target[rows.example].gather(1, rows.candidate)
        else:
            latent = sample.candidates[rows.example].gather(1, rows.candidate.unsqueeze(-1).expand(-1, -1, sample.candidates.shape[-1]))
            scores = self.log_joint(x[rows.example], latent)
        per_row = (rows.weight * scores).sum(1)
        # new_zeros: under vmap (replicas) a table of each replica's own, not one zeros table broadcast over them
        return per_row.new_zeros(x.shape[0]).index_add(0, rows.example, per_row)

    def check_replicable(self) -> None:
        """Replicas batch the step (models/replicas.py): `distinct` rows, a number that depends on the data, cannot be."""
        if self.chain_rows == "distinct" and self.gradient_rows is None:
            raise ValueError("replicas: model.chain_rows=distinct re-scores a data-dependent number of rows, which one batched "
                             "step of all replicas cannot; use model.chain_rows=auto or static, or model.gradient_rows")

    # ---- the cache ------------------------------------------------------------------
    def step_inputs(self, epoch: int, step: int) -> dict[str, bool | int | float]:
        """Whether the steps of `epoch` read the cache, the epoch (the cache's ages), and the share of chains restarted
        from a fresh proposal instead of their cached state (`cache_refresh` while the cache is read)."""
        reads = self.cache is not None and self.cache_start_epoch is not None and epoch >= self.cache_start_epoch
        return {"reads_cache": reads, "epoch": epoch, "restart_rate": self.cache_refresh if reads else 1.0}

    def chain_starts(self, index: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """(start, has_start, age): the examples' cached states, which chains start from them (those with a state, less
        the share restarted, docs/mis.md#restarting-a-share-of-the-chains) and their ages; Nones if the step reads no cache."""
        if not self.step_input("reads_cache"):
            return None, None, None
        start, has_start = self.cache.read(index)
        has_start = refresh_starts(has_start, self.step_input("restart_rate"))
        return start, has_start, self.cache.age(index, self.step_input("epoch"))  # the age before this step's write

    def write_cache(self, index: Tensor, latent: Tensor) -> None:
        """Store this step's h* for its examples, on every rank: under DDP the (index, h*) pairs of all ranks are gathered
        (B x V integers per rank, not the whole cache) and every rank writes all of them, so the caches stay identical."""
        if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            pairs = self.all_gather(torch.cat([index.unsqueeze(1), latent], dim=1)).flatten(0, 1)  # one collective
            index, latent = pairs[:, 0], pairs[:, 1:]
        self.cache.write(index, latent, self.step_input("epoch"))

    def chain_diagnostics(self, sample: MISSample, has_start: Tensor | None, age: Tensor | None) -> dict[str, Tensor]:
        """The sampler's terms (docs/jsa.md#one-training-step), and the cache's while it is read."""
        counts = code_counts(sample.latent, self.num_categories)
        self.class_used |= counts > 0
        terms = {"acceptance_rate": sample.accepted.float().mean() / self.mis_steps, "perplexity": usage_perplexity(counts),
                 "cache_hit_rate": has_start.float().mean() if has_start is not None else torch.zeros((), device=counts.device),
                 "classes_used": self.class_used.float().mean()}
        return terms if age is None else {**terms, **cache_diagnostics(sample, age, has_start)}
