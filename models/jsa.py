"""JSA: joint stochastic approximation (Xu & Ou, 2016; Ou & Song, 2020) for the categorical model (docs/jsa.md).

JSA fits p_θ(x, h) and q_φ(h | x) by stochastic approximation of the two gradients

    ∇θ: E_{p_θ(h|x)}[ ∇θ log p_θ(x, h) ]          (maximum likelihood for θ)
    ∇φ: E_{p_θ(h|x)}[ ∇φ log q_φ(h | x) ]         (inclusive KL(p_θ(h|x) || q_φ(h|x)) for φ)

with the expectations over the model's own posterior estimated by one MCMC sample h* per
example. h* comes from Metropolis independence sampling with q_φ as the proposal, run in the
index-cached form (samplers/mis.py, docs/mis.md#index-cached-mis): one encoder pass, one batched
decoder pass over the L+1 candidates, the chain over candidate indices. Each example's chain persists across
epochs in a per-example cache (samplers/cache.py): once `cache_start_epoch` is reached, the next visit starts
from the state the chain reached (re-scored under the current networks), so the chain keeps mixing. By default
(`cache_start_epoch=None`, the setting benchmarks/results/cache-study/ supports) the cache is written every step,
so that its diagnostics and a later `cache_start_epoch` find it filled, and never read: every chain starts from a
fresh proposal.

One training step (no gradient through the sampling):
    h_0..h_L <- candidates (start = cache[index], L proposals from q); the chain over them ends in h*
    cache[index] <- h*
    loss = -Σ_j λ_j log p_θ(x, h_j) - Σ_j μ_j log q_φ(h_j | x)
with the weights λ_j of `gradient_states` (samplers/visits.py): 1 on h* (`final`), the chain's visit
frequencies (`chain`), or their expectation given the candidates (`expected`); μ = λ (`q_states="chain"`), or the
self-normalized importance weights of the fresh proposals (`q_states="fresh"`, docs/jsa.md#what-q-learns-from).
With `gradient_rows=k` the θ term is differentiated on k + 1 rows per example only, the k largest λ_j exactly and one
drawn from the rest (`sum_and_sample`, docs/jsa.md#a-fixed-number-of-gradient-rows): the same gradient in expectation.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from checkpoints.errors import CheckpointError
from common.private_api import ignore_in_ddp
from models.categorical import CategoricalLatentModel
from models.components.code_usage import code_counts, usage_perplexity
from samplers.cache import LatentCache, refresh_starts
from samplers.mis import MISSample, categorical_log_prob, index_cached_mis
from samplers.visits import expected_visits, fresh_proposal_weights, sum_and_sample, visit_counts

GradientStates = Literal["final", "chain", "expected"]
QStates = Literal["chain", "fresh"]
ChainRows = Literal["auto", "static", "distinct"]
CACHE_DIAGNOSTICS = ("cache_stuck_rate", "cache_age_epochs", "cache_log_weight_gap")  # `cache_diagnostics`


class JSA(CategoricalLatentModel):
    """Categorical latent-variable model trained by JSA with the index-cached MIS sampler.

    Args:
        mis_steps: L, Metropolis-Hastings steps per training example and step (>= 1).
        use_cache: keep a per-example cache of each chain's last state (written every step; read from
            `cache_start_epoch` on). False: no cache at all.
        cache_start_epoch: read the cache from this epoch on (it is written from the start); None (the default): never,
            each chain starts from a fresh proposal, the best setting of the cache study (docs/mis.md#when-does-the-cache-help).
        cache_refresh: ρ, the share of chains that restart from a fresh proposal instead of their cached state, drawn
            anew each step (0: none; docs/mis.md#restarting-a-share-of-the-chains).
        q_states: the states q's gradient uses: `chain`, the states θ's gradient uses (the JSA paper); `fresh`, this
            step's fresh proposals weighted by self-normalized importance weights, which the cache never feeds
            (docs/jsa.md#what-q-learns-from).
        gradient_states: which states the gradient step uses (docs/jsa.md#which-states-the-gradient-uses): `final`
            (the chain's last state), `chain` (the average over the L states the chain visited, as in the official
            JSA code; each distinct state is scored once) or `expected` (that average's expectation over the
            accept/reject draws given the candidates: Rao-Blackwellized, same mean, lower variance).
        chain_rows: how `chain` scores the states it averages, the same gradient either way
            (docs/jsa.md#static-or-distinct-rows): `distinct` re-scores the distinct visited states only (fewest rows,
            but their number depends on the data: a host sync and a new shape each step), `static` weights all L+1
            candidates of the sampler's one decoder pass by their visit counts (static shapes: no sync, compiles whole),
            `auto` (the default): `static` on an accelerator and for replicas, `distinct` on the CPU.
        gradient_rows: k, the decoder rows per example that θ's gradient differentiates for `chain` and `expected`:
            the k candidates of largest weight exactly plus one drawn from the remaining weight and weighted by it
            (sum-and-sample; unbiased, exact when at most k candidates carry weight), a fixed k + 1 rows whatever
            the chain did, with the candidates scored once without autograd (docs/jsa.md#a-fixed-number-of-gradient-rows).
            k >= L + 1 is `chain_rows=static` exactly. None (the default): every weighted row, as `chain_rows` says.
        cache_size: number of training examples; filled in from the data module when left out.
        **kwargs: the model's arguments (see `CategoricalLatentModel`: backbone, num_latents,
            num_categories, ...) and the shared ones (see `LatentVariableModel`).
    """

    def __init__(
        self,
        mis_steps: int = 20,
        use_cache: bool = True,
        cache_start_epoch: int | None = None,
        gradient_states: GradientStates = "chain",
        q_states: QStates = "chain",
        cache_refresh: float = 0.0,
        cache_size: int | None = None,
        chain_rows: ChainRows = "auto",
        gradient_rows: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if mis_steps < 1:
            raise ValueError(f"mis_steps (L) must be >= 1, got {mis_steps}")
        if gradient_states not in ("final", "chain", "expected"):
            raise ValueError(f"gradient_states must be 'final', 'chain' or 'expected', got {gradient_states!r}")
        if q_states not in ("chain", "fresh"):
            raise ValueError(f"q_states must be 'chain' or 'fresh', got {q_states!r}")
        if chain_rows not in ("auto", "static", "distinct"):
            raise ValueError(f"chain_rows must be 'auto', 'static' or 'distinct', got {chain_rows!r}")
        self.chain_rows = chain_rows
        if gradient_rows is not None and (isinstance(gradient_rows, bool) or not isinstance(gradient_rows, int)):
            raise ValueError(f"gradient_rows must be a whole number >= 1 (or null: every weighted row), got {gradient_rows!r}")
        if gradient_rows is not None and gradient_rows < 1:
            raise ValueError(f"gradient_rows must be >= 1 (or null: every weighted row), got {gradient_rows}")
        if gradient_rows is not None:
            if gradient_states == "final":
                raise ValueError("gradient_rows applies to gradient_states 'chain' and 'expected'; 'final' differentiates one row already")
            if chain_rows != "auto":
                raise ValueError(f"gradient_rows and chain_rows={chain_rows!r} both choose the rows of the gradient: set one of them")
        self.gradient_rows = gradient_rows
        if cache_start_epoch is not None and cache_start_epoch < 0:
            raise ValueError(f"cache_start_epoch must be >= 0, got {cache_start_epoch}")
        if not 0.0 <= cache_refresh <= 1.0:  # a NaN fails this too
            raise ValueError(f"cache_refresh must be a share between 0 and 1, got {cache_refresh}")
        self.mis_steps = mis_steps
        self.use_cache = use_cache
        self.cache_start_epoch = cache_start_epoch
        self.gradient_states = gradient_states
        self.q_states = q_states
        self.cache_refresh = cache_refresh
        self.cache: LatentCache | None = None
        if use_cache and cache_size is not None:
            self._allocate_cache(cache_size)
        # Classes that h* has used so far (for `train/classes_used`).
        self.register_buffer("class_used", torch.zeros(self.num_categories, dtype=torch.bool))
        self.register_buffer("compiled_epoch", torch.zeros((), dtype=torch.int32), persistent=False)  # cache_epoch()
        self.compiled_reads_cache = False
        # The batched step of several replicas (models/replicas.py) reads the settings they may differ in
        # (`replica_settings`) from these per-replica 0-d buffers, not from the Python values a single run reads.
        self.batched_replicas = False
        self.register_buffer("replica_reads_cache", torch.zeros((), dtype=torch.bool), persistent=False)
        self.register_buffer("replica_cache_refresh", torch.tensor(float(cache_refresh)), persistent=False)
        # Every rank keeps the whole cache and updates it with the gathered pairs of each step
        # (see `_write_cache`); DDP must not also broadcast these buffers from rank 0 each step.
        ignore_in_ddp(self, ["cache.codes", "cache.changed_epoch", "class_used"])

    config_name = "jsa"  # as in configs/model/ and the run names
    replica_settings = ("cache_start_epoch", "cache_refresh")  # may differ between the replicas of one process
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
        read_cache, epoch = self.cache_epoch()
        start, has_start = self.cache.read(index) if read_cache else (None, None)
        if read_cache and self.batched_replicas:  # a replica that does not read the cache yet starts every chain fresh
            has_start = refresh_starts(has_start & self.replica_reads_cache, self.replica_cache_refresh)
        elif read_cache:
            has_start = refresh_starts(has_start, self.cache_refresh)
        age = self.cache.age(index, epoch) if read_cache else None  # before this step's write
        # `expected` (and `chain` with static rows) weights every candidate, so its one decoder pass keeps the graph and
        # serves the chain and the loss alike; `final` and `chain` with distinct rows score the candidates without
        # gradient and re-score the few they keep.
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.weights_every_candidate(x.device)):
            sample = index_cached_mis(log_q.detach(), lambda latent: self.log_joint(x, latent), self.mis_steps, start, has_start)
        if self.cache is not None and write_cache:
            self._write_cache(index, sample.latent, epoch)

        loss_p, loss_q = self.jsa_loss(x, log_q, sample, has_start)
        if not write_cache:
            return {"loss": loss_p + loss_q}

        counts = code_counts(sample.latent, self.num_categories)
        self.class_used |= counts > 0
        zero = torch.zeros((), device=x.device)
        terms = {
            "loss": loss_p + loss_q,
            "loss_p": loss_p,
            "loss_q": loss_q,
            "acceptance_rate": sample.accepted.float().mean() / self.mis_steps,
            "cache_hit_rate": has_start.float().mean() if has_start is not None else zero,
            "perplexity": usage_perplexity(counts),
            "classes_used": self.class_used.float().mean(),
        }
        if read_cache:
            terms.update(self.cache_diagnostics(sample, age, has_start))
        return terms

    def jsa_loss(self, x: Tensor, log_q: Tensor, sample: MISSample, has_start: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """-E_λ[log p_θ(x, h)] and -E_μ[log q_φ(h | x)], batch means: weighted sums over the L+1 candidates, the
        weights summing to 1 per example (`candidate_weights`; μ by `q_states`); with `gradient_rows` the θ term is
        the unbiased k + 1-row estimate of its sum (`weighted_log_joint`). `has_start` marks the chains whose
        candidate 0 is a cached state."""
        weight = self.candidate_weights(sample)
        loss_p = -self.weighted_log_joint(x, sample, weight).mean()
        if self.q_states == "fresh":
            weight = fresh_proposal_weights(sample.log_target, sample.log_proposal, has_start)
        loss_q = -(weight * categorical_log_prob(log_q, sample.candidates)).sum(1).mean()
        return loss_p, loss_q

    def candidate_weights(self, sample: MISSample) -> Tensor:
        """(B, L+1): how much each candidate counts in the gradient, for `gradient_states` (docs/jsa.md)."""
        num_candidates, dtype = sample.candidates.shape[1], sample.log_target.dtype
        if self.gradient_states == "final":
            return visit_counts(sample.path_index[:, -1:], num_candidates, dtype)
        if self.gradient_states == "chain":
            return visit_counts(sample.path_index, num_candidates, dtype) / self.mis_steps
        return expected_visits(sample.log_target, sample.log_proposal) / self.mis_steps

    def static_chain_rows(self, device: torch.device) -> bool:
        """Whether `chain` weights all L+1 scored candidates (`static`) rather than re-scoring the distinct visited
        ones (`distinct`); `auto`: static on an accelerator, where a host sync and a new shape cost more than the
        extra rows, distinct on the CPU, where the rows are the cost (docs/jsa.md#static-or-distinct-rows).
        `gradient_rows` of at least L + 1 keeps every row: static."""
        if self.gradient_rows is not None:
            return self.gradient_rows > self.mis_steps
        # replicas (models/replicas.py) batch the step with vmap, which cannot take a data-dependent number of rows
        return self.chain_rows == "static" or (self.chain_rows == "auto" and (device.type != "cpu" or self.batched_replicas))

    def check_replicable(self) -> None:
        """Replicas batch the step (models/replicas.py): `distinct` rows, a number that depends on the data, cannot be."""
        if self.chain_rows == "distinct" and self.gradient_rows is None:
            raise ValueError("replicas: chain_rows=distinct re-scores a data-dependent number of rows, which one batched step "
                             "of all replicas cannot; use chain_rows=auto or static, or gradient_rows")

    def sampled_rows(self) -> bool:
        """Whether θ's gradient takes the fixed k + 1 rows of `sum_and_sample` (`gradient_rows` = k <= L)."""
        return self.gradient_rows is not None and self.gradient_rows <= self.mis_steps

    def weights_every_candidate(self, device: torch.device) -> bool:
        """Whether the loss is a weighted sum over the scores of the sampler's one decoder pass, which then keeps
        its graph: `expected`, and `chain` with static rows; not with sampled rows, whose pass takes no gradient."""
        if self.sampled_rows():
            return False
        return self.gradient_states == "expected" or (self.gradient_states == "chain" and self.static_chain_rows(device))

    def weighted_log_joint(self, x: Tensor, sample: MISSample, weight: Tensor) -> Tensor:
        """Σ_j weight_j log p(x, h_j) per example, (B,), with gradient to θ.

        `expected`, and `chain` with static rows: the candidates' scores already carry the graph (the weights of the
        unvisited candidates are 0). `final`: one row per example. `chain` with distinct rows: one row per distinct
        (example, candidate) pair the chain visited, in one decoder pass; a rejection repeats the current state, so
        at acceptance rate a there are about 1 + aL such rows per example, not L. Selecting them costs one host
        sync (their number depends on the data). `gradient_rows` = k: k + 1 rows per example (`sum_and_sample`),
        a fixed shape: unbiased, and exact where at most k candidates carry weight.
        """
        if self.weights_every_candidate(x.device):
            return (weight * sample.log_target).sum(1)
        if self.gradient_states == "final":
            return self.log_joint(x, sample.latent.unsqueeze(1))[:, 0]
        if self.sampled_rows():
            rows, row_weight = sum_and_sample(weight, self.gradient_rows)  # (B, k+1) each
            latent = sample.candidates.gather(1, rows.unsqueeze(-1).expand(-1, -1, sample.candidates.shape[-1]))
            return (row_weight * self.log_joint(x, latent)).sum(1)
        example, candidate = weight.nonzero(as_tuple=True)  # sync: chain_rows=distinct, the CPU's path (accelerators take static)
        log_joint = self.log_joint(x[example], sample.candidates[example, candidate].unsqueeze(1))[:, 0]  # (R,)
        return torch.zeros(x.shape[0], dtype=log_joint.dtype, device=x.device).index_add(0, example, weight[example, candidate] * log_joint)

    def cache_epoch(self) -> tuple[bool, int | Tensor]:
        """(whether this step reads the cache, the epoch it ages and writes the cache in). In a compiled step
        (model.compile=step) the epoch is the 0-d tensor `before_compiled_step` filled, so that the graph does not
        bake the epoch number in and recompile every epoch (docs/mis.md#compiling-the-whole-step); the read is a
        Python flag there, one recompile at `cache_start_epoch`. The batched step of replicas reads them so too (set by
        models/replicas.py: the flag says whether any replica reads the cache, `replica_reads_cache` which ones do)."""
        if torch.compiler.is_compiling() or self.batched_replicas:
            return self.compiled_reads_cache, self.compiled_epoch
        return self.reads_cache_at(self.current_epoch), self.current_epoch

    def reads_cache_at(self, epoch: int) -> bool:
        """Whether the steps of `epoch` start the chains from the cache (`cache_start_epoch`)."""
        return self.cache is not None and self.cache_start_epoch is not None and epoch >= self.cache_start_epoch

    def before_compiled_step(self) -> None:
        self.compiled_reads_cache, epoch = self.cache_epoch()
        self.compiled_epoch.fill_(epoch)

    def replica_gates(self, epoch: int) -> dict[str, Tensor]:
        """This replica's values of the buffers the batched step reads in `epoch` (models/replicas.py)."""
        return {"replica_reads_cache": torch.tensor(self.reads_cache_at(epoch)), "compiled_epoch": torch.tensor(epoch, dtype=torch.int32),
                "replica_cache_refresh": torch.tensor(float(self.cache_refresh))}

    def replica_terms(self, terms: dict[str, Any], epoch: int) -> dict[str, Any]:
        """Of the batched step's terms (models/replicas.py), those this replica's single run logs in `epoch`: the cache
        diagnostics only once it reads the cache (the batched step computes them for every replica when one does)."""
        if self.reads_cache_at(epoch):
            return terms
        return {tag: value for tag, value in terms.items() if tag.rsplit("/", 1)[-1] not in CACHE_DIAGNOSTICS}

    def cache_diagnostics(self, sample: MISSample, age: Tensor, has_start: Tensor) -> dict[str, Tensor]:
        """Over the chains that start from a cached state (docs/mis.md#when-the-cache-helps):

        cache_stuck_rate: the fraction that never leave it in this step's L proposals;
        cache_age_epochs: the mean number of epochs since their state last changed (`age`, read before this step's write);
        cache_log_weight_gap: the mean of w(cached) - max_j w(proposal j), w = log p(x, h) - log q(h | x); > 0 where the
            cached state outweighs every fresh proposal (a stale state the chain cannot leave, or a mode q misses).
        """
        log_weight = (sample.log_target - sample.log_proposal).detach()
        started = has_start.float()
        num_started = started.sum().clamp(min=1.0)

        def mean_over_started(value: Tensor) -> Tensor:
            return (value * started).sum() / num_started

        return {
            "cache_stuck_rate": mean_over_started((sample.accepted == 0).float()),
            "cache_age_epochs": mean_over_started(age),
            "cache_log_weight_gap": mean_over_started(log_weight[:, 0] - log_weight[:, 1:].max(1).values),
        }

    def _write_cache(self, index: Tensor, latent: Tensor, epoch: int | Tensor) -> None:
        """Store this step's h* for its examples, on every rank.

        Under DDP each rank samples only its shard; the (index, h*) pairs of all ranks are
        gathered (B x V integers per rank, not the whole cache) and every rank writes all of
        them, so the caches stay identical.
        """
        if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            # One collective for both: rows (index, h*_1..h*_V) of all ranks.
            pairs = self.all_gather(torch.cat([index.unsqueeze(1), latent], dim=1)).flatten(0, 1)
            index, latent = pairs[:, 0], pairs[:, 1:]
        self.cache.write(index, latent, epoch)
