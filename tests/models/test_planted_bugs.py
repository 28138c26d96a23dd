"""Fault-targeted tests: each one fails when a specific, plausible bug is put into the models.

* Gumbel-softmax annealing: step t's relaxed samples use τ_t = max(τ_min, τ_0 exp(-r t)), not τ_0; checked by
  replaying the Gumbel noise recorded before each `gumbel_softmax` call with the scheduled temperature.
* Straight-through Gumbel-softmax: the decoder reads exact one-hot codes and the encoder gets the soft sample's
  gradient when `straight_through=True`, soft codes when False.
* JSA's MIS cache: each example's final state is written to, and read from, the row of its index in the training
  split, not of its position in the batch.
"""

from __future__ import annotations

import math
import sys

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from models import JSA, DiscreteVAE
from tests.conftest import narrow_mlps

# The function under the model's relaxed samples, kept before any monkeypatching.
ORIGINAL_GUMBEL_SOFTMAX = F.gumbel_softmax


# ---- helpers ---------------------------------------------------------------------------------
def binary_images(batch: int, seed: int = 0) -> torch.Tensor:
    """Random 0/1 images (B, 1, 28, 28): the bernoulli likelihood needs binary pixels; the content does not matter."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (batch, 1, 28, 28), generator=generator).float()


def tiny_dvae(**kwargs) -> DiscreteVAE:
    """A Gumbel-softmax discrete VAE on the MLP backbone (default V, K), no gradient-variance measurements."""
    torch.manual_seed(0)
    kwargs = {"backbone": "mlp", **kwargs}
    return DiscreteVAE(estimator="gumbel", **kwargs)


def scheduled_temperature(step: int, tau0: float, tau_min: float, rate: float) -> float:
    """The documented annealing schedule τ_t = max(τ_min, τ_0 exp(-r t))."""
    return max(tau_min, tau0 * math.exp(-rate * step))


def record_gumbel_calls(monkeypatch: pytest.MonkeyPatch, model=None) -> list[dict]:
    """Wrap `torch.nn.functional.gumbel_softmax`: record each call's arguments and the RNG state before it.

    Each record holds `logits` (the tensor passed, still in the graph), `tau`, `hard`, `rng_state`
    (so the call's Gumbel noise can be replayed) and, with `model`, its `global_step` at the call.
    """
    calls: list[dict] = []

    def wrapper(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
        calls.append(
            {
                "logits": logits,
                "tau": float(tau),
                "hard": bool(hard),
                "rng_state": torch.get_rng_state(),
                "step": None if model is None else int(model.global_step),
            }
        )
        return ORIGINAL_GUMBEL_SOFTMAX(logits, tau=tau, hard=hard, dim=dim)

    monkeypatch.setattr(torch.nn.functional, "gumbel_softmax", wrapper)
    return calls


def record_decoder_inputs(monkeypatch: pytest.MonkeyPatch, model) -> list[torch.Tensor]:
    """Wrap the model's `decoder_output_relaxed`: record each (relaxed) one-hot input it receives, still in the graph."""
    inputs: list[torch.Tensor] = []
    original = model.decoder_output_relaxed

    def wrapper(one_hot):
        inputs.append(one_hot)
        return original(one_hot)

    monkeypatch.setattr(model, "decoder_output_relaxed", wrapper)
    return inputs


def replay_soft_sample(call: dict, tau: float, logits: torch.Tensor | None = None) -> torch.Tensor:
    """The soft Gumbel-softmax sample softmax((logits + g) / tau) with the noise g of a recorded call."""
    logits = call["logits"].detach() if logits is None else logits
    saved = torch.get_rng_state()
    torch.set_rng_state(call["rng_state"])
    try:
        return ORIGINAL_GUMBEL_SOFTMAX(logits, tau=tau, hard=False)
    finally:
        torch.set_rng_state(saved)


def is_exact_one_hot(codes: torch.Tensor) -> bool:
    """Every entry 0 or 1, exactly one 1 per latent position (last dimension)."""
    zero_or_one = ((codes == 0) | (codes == 1)).all()
    return bool(zero_or_one and (codes.sum(-1) == 1).all())


# ---- 1. Gumbel temperature annealing -----------------------------------------------------------
def test_gumbel_relaxation_uses_the_annealed_temperature_of_each_step(monkeypatch):
    """Catches the annealing schedule being ignored in training (`current_temperature` returning
    `self.temperature`, or `gumbel_loss` relaxing with `self.temperature`).

    A real Trainer runs 5 steps with r = 0.5, so τ_t = 2.0, 1.21, 0.74, 0.45 and then the floor 0.3.
    At every step the `tau` handed to gumbel_softmax must be τ_t, and the decoder's input must equal
    the relaxed sample recomputed from the same Gumbel noise at τ_t (its sharpness is that of τ_t).
    """
    tau0, tau_min, rate, steps, batch = 2.0, 0.3, 0.5, 5, 4
    model = tiny_dvae(temperature=tau0, temperature_min=tau_min, anneal_rate=rate)
    calls = record_gumbel_calls(monkeypatch, model)
    decoder_inputs = record_decoder_inputs(monkeypatch, model)
    x = binary_images(steps * batch)
    loader = DataLoader(TensorDataset(x, torch.arange(len(x))), batch_size=batch)
    trainer = L.Trainer(
        max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
    )
    trainer.fit(model, train_dataloaders=loader)

    expected = [scheduled_temperature(t, tau0, tau_min, rate) for t in range(steps)]
    assert len(expected) == len(set(expected)), "the schedule must change τ at every step for this test to see it"
    assert len(calls) == steps and len(decoder_inputs) == steps, (len(calls), len(decoder_inputs))
    assert [call["step"] for call in calls] == list(range(steps))
    used = [call["tau"] for call in calls]
    assert used == pytest.approx(expected, rel=1e-6), f"gumbel_softmax got tau {used}, the schedule says {expected}"
    for t, (call, relaxed) in enumerate(zip(calls, decoder_inputs)):
        reference = replay_soft_sample(call, expected[t])
        torch.testing.assert_close(
            relaxed.detach().view_as(reference), reference, msg=lambda m, t=t: f"step {t}: decoder input is not the sample at τ_{t}={expected[t]:.3f}\n{m}"
        )
    # what the model reports matches too
    assert model.current_temperature() == pytest.approx(scheduled_temperature(steps, tau0, tau_min, rate))


# ---- 2. straight-through Gumbel-softmax --------------------------------------------------------
def relaxed_step(monkeypatch: pytest.MonkeyPatch, straight_through: bool, tau: float = 0.7):
    """One `training_loss` of a tiny Gumbel DVAE: (model, loss, the gumbel_softmax call, the decoder input)."""
    model = tiny_dvae(temperature=tau, temperature_min=tau, straight_through=straight_through)
    calls = record_gumbel_calls(monkeypatch)
    decoder_inputs = record_decoder_inputs(monkeypatch, model)
    x = binary_images(8, seed=1)
    loss = model.training_loss(x, torch.arange(8))["loss"]
    assert len(calls) == 1 and len(decoder_inputs) == 1, (len(calls), len(decoder_inputs))
    return model, loss, calls[0], decoder_inputs[0]


def gradient_into_logits(loss: torch.Tensor, relaxed: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dloss/d(decoder input), the part of dloss/d(logits) that flows back through the decoder input)."""
    assert relaxed.requires_grad, "the decoder input is cut off from the graph: no gradient can reach the encoder through it"
    upstream = torch.autograd.grad(loss, relaxed, retain_graph=True)[0]
    (through_sample,) = torch.autograd.grad(relaxed, logits, grad_outputs=upstream, retain_graph=True, allow_unused=True)
    assert through_sample is not None, "no gradient reaches the encoder's logits through the decoder input"
    return upstream, through_sample


def test_straight_through_decodes_exact_one_hot_and_passes_the_soft_gradient(monkeypatch):
    """Catches `straight_through` being ignored (`hard=False` hard-wired in `gumbel_loss`).

    With straight_through=True the decoder must receive exact one-hot codes, the argmax of the relaxed
    sample, while the gradient reaching the encoder through them is the straight-through one,
    hard - soft.detach() + soft: the soft sample's Jacobian applied to dloss/d(decoder input).
    """
    tau = 0.7
    model, loss, call, relaxed = relaxed_step(monkeypatch, straight_through=True, tau=tau)
    logits = call["logits"]
    soft = replay_soft_sample(call, tau)

    assert is_exact_one_hot(relaxed.detach()), f"straight-through decoder input is not one-hot: {relaxed[0]}"
    torch.testing.assert_close(relaxed.detach().view_as(soft), F.one_hot(soft.argmax(-1), soft.shape[-1]).to(soft.dtype))

    upstream, through_sample = gradient_into_logits(loss, relaxed, logits)
    leaf = logits.detach().requires_grad_()
    (expected,) = torch.autograd.grad(replay_soft_sample(call, tau, leaf), leaf, grad_outputs=upstream.view_as(soft))
    assert through_sample.abs().sum() > 0, "the encoder gets no gradient through the straight-through sample"
    torch.testing.assert_close(through_sample, expected)

    loss.backward()
    encoder_grads = [p.grad for p in model.encoder.parameters() if p.requires_grad]
    assert all(g is not None for g in encoder_grads) and sum(g.abs().sum() for g in encoder_grads) > 0


def test_without_straight_through_the_decoder_reads_the_soft_sample(monkeypatch):
    """Catches the opposite fault: `hard=True` regardless of `straight_through`.

    With straight_through=False the decoder must receive the soft sample itself (entries strictly
    between 0 and 1), with its ordinary gradient.
    """
    tau = 0.7
    _, loss, call, relaxed = relaxed_step(monkeypatch, straight_through=False, tau=tau)
    soft = replay_soft_sample(call, tau)

    assert not is_exact_one_hot(relaxed.detach()), "straight_through=False, yet the decoder got hard one-hot codes"
    assert ((relaxed > 0) & (relaxed < 1)).all(), "soft codes must lie strictly inside (0, 1)"
    torch.testing.assert_close(relaxed.detach().view_as(soft), soft)

    upstream, through_sample = gradient_into_logits(loss, relaxed, call["logits"])
    leaf = call["logits"].detach().requires_grad_()
    (expected,) = torch.autograd.grad(replay_soft_sample(call, tau, leaf), leaf, grad_outputs=upstream.view_as(soft))
    torch.testing.assert_close(through_sample, expected)


# ---- 3. JSA's per-example MIS cache ------------------------------------------------------------
def record_mis_samples(monkeypatch: pytest.MonkeyPatch) -> list:
    """Wrap the MIS sampler JSA calls and record each returned sample (latent, candidates, ...)."""
    module = sys.modules[JSA.__module__]  # where JSA looks the sampler up, wherever that module lives

    samples = []
    original = module.index_cached_mis

    def wrapper(*args, **kwargs):
        sample = original(*args, **kwargs)
        samples.append(sample)
        return sample

    monkeypatch.setattr(module, "index_cached_mis", wrapper)
    return samples


def filled_rows(model: JSA) -> set[int]:
    """Indices of the cache rows holding a state; also checks no row is only partly written."""
    codes = model.cache.codes
    full = (codes != model.cache.sentinel).flatten(1).all(1)
    partial = (codes != model.cache.sentinel).flatten(1).any(1) & ~full
    assert not partial.any(), f"partly written cache rows {partial.nonzero().flatten().tolist()}"
    return set(full.nonzero().flatten().tolist())


def test_mis_cache_is_keyed_by_example_index_not_batch_position(monkeypatch):
    """Catches the cache being written or read at the batch position (`torch.arange(len(index))`)
    instead of at the examples' indices in the training split.

    Indices are a shuffled, non-contiguous subset of range(1000) that avoids rows 0..B-1, so a
    write at the batch positions fills the wrong rows and a read there finds them empty. Checked:
    exactly the rows in `index` are filled, each with its example's final chain state; a second
    step over the same examples in another order starts every chain from its own cached state.
    """
    num_examples, batch, steps = 1000, 16, 3
    torch.manual_seed(0)
    model = JSA(backbone="mlp", mis_steps=steps, cache_size=num_examples, cache_start_epoch=0)
    samples = record_mis_samples(monkeypatch)
    generator = torch.Generator().manual_seed(0)
    index = batch + torch.randperm(num_examples - batch, generator=generator)[:batch]
    assert not (index.diff() == 1).all() and index.min() >= batch
    x = binary_images(batch, seed=2)

    assert filled_rows(model) == set()
    first = model.training_loss(x, index)
    assert first["cache_hit_rate"] == 0.0, "a fresh cache has nothing to read"
    assert filled_rows(model) == set(index.tolist()), "the cache rows written are not those of the batch's indices"
    final = samples[-1].latent
    torch.testing.assert_close(model.cache.codes[index].long(), final, msg="row index[i] must hold example i's final chain state")
    codes, has_entry = model.cache.read(index)
    assert has_entry.all()
    torch.testing.assert_close(codes, final)

    # Second visit, other order: each chain starts from its own cached state (candidate 0).
    order = torch.randperm(batch, generator=generator)
    assert not torch.equal(order, torch.arange(batch))
    before = model.cache.codes.clone()
    second = model.training_loss(x[order], index[order])
    assert second["cache_hit_rate"] == 1.0, "the cached states of these examples were not found"
    start = samples[-1].candidates[:, 0]
    torch.testing.assert_close(start, before[index[order]].long(), msg="a chain did not start from its example's cached state")
    assert filled_rows(model) == set(index.tolist())
    torch.testing.assert_close(model.cache.codes[index[order]].long(), samples[-1].latent)


# ---- the categorical importance weight: log p(x, h) - log q(h | x), nothing more --------------


def test_categorical_importance_estimate_equals_the_enumerated_likelihood():
    """Catches an extra (or missing) log q term in the categorical model's importance weights: with
    50,000 samples the estimate of log p(x) must match log Σ_h p(x, h), enumerated over all K^V = 9
    states of a tiny model, to 0.03 nats (a stray log q shifts it by E_q[log q] ≈ -2 nats)."""
    import itertools

    from samplers import importance_log_likelihood

    torch.manual_seed(0)
    model = narrow_mlps(JSA(data_shape=(1, 2, 2), num_latents=2, num_categories=3, code_dim=2, likelihood="gaussian", sigma=1.0)).double()
    x = torch.rand(3, 1, 2, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    states = torch.tensor(list(itertools.product(range(3), repeat=2)))  # (9, V)
    with torch.no_grad():
        exact = model.log_joint(x, states.expand(3, -1, -1)).logsumexp(1)  # (B,)
        posterior = model.posterior(x)
        estimate = importance_log_likelihood(lambda n: model.log_importance_weights(x, posterior, n), 50_000, 10_000)
    torch.testing.assert_close(estimate.log_likelihood, exact, rtol=0, atol=0.03)
    assert (estimate.elbo < exact).all()  # the ELBO from the same weights lies below log p(x)
