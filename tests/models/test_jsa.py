"""JSA as a model: its MIS step against the exact posterior of a small model, the persistent
cache (written, read, checkpointed), and training on real MNIST."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from scipy import stats

from datamodules import MNISTDataModule
from models import JSA
from samplers import categorical_log_prob
from tests.conftest import mnist_slice, narrow_mlps, train_on_batch

V, K = 2, 3  # 9 joint latent states: small enough to enumerate p(h | x)
ALL_STATES = torch.tensor(list(itertools.product(range(K), repeat=V)))  # (9, V)


def toy_jsa(**kwargs) -> JSA:
    """A JSA whose 9 latent states can be enumerated; its chains continue from the cache from the first epoch."""
    if kwargs.get("use_cache", True):
        kwargs.setdefault("cache_start_epoch", 0)
    if kwargs.get("prior") == "autoregressive":
        kwargs.setdefault("prior_hidden", 8)  # a MADE sized for V = 2 positions, as narrow_mlps sizes the networks
    torch.manual_seed(0)
    model = JSA(data_shape=(1, 2, 2), num_latents=V, num_categories=K, code_dim=2, likelihood="gaussian", sigma=1.0, **kwargs)
    narrow_mlps(model)  # the chains' tests run 20000 of them
    with torch.no_grad():  # larger weights: p(h | x) spread over the states and far from q (TV ~ 0.5)
        for p in model.parameters():
            p.mul_(1.65)
        if kwargs.get("prior") == "autoregressive":  # it starts uniform; make it a real autoregressive p(h)
            for p in model.prior.parameters():
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    return model


def toy_x() -> torch.Tensor:
    return torch.rand(1, 1, 2, 2, generator=torch.Generator().manual_seed(5))


def independence_sampler_matrix(log_target: torch.Tensor, log_proposal: torch.Tensor) -> torch.Tensor:
    """Exact MIS transition matrix: P[i, j] = q_j min(1, w_j / w_i) for j != i."""
    log_w = log_target - log_proposal
    accept = torch.exp(torch.clamp(log_w[None, :] - log_w[:, None], max=0.0))
    transition = log_proposal.exp()[None, :] * accept
    transition.fill_diagonal_(0.0)
    transition += torch.diag(1.0 - transition.sum(1))
    return transition


def chi_square_pvalue(states: torch.Tensor, expected_probs: torch.Tensor) -> float:
    observed = torch.bincount(states, minlength=len(expected_probs)).double()
    expected_probs = expected_probs.double() / expected_probs.double().sum()
    expected = expected_probs * observed.sum()
    keep = expected > 5  # pool the rare cells so the chi-square approximation holds
    observed = torch.cat([observed[keep], observed[~keep].sum(0, keepdim=True)])
    expected = torch.cat([expected[keep], expected[~keep].sum(0, keepdim=True)])
    nonzero = expected > 0
    return float(stats.chisquare(observed[nonzero], expected[nonzero]).pvalue)


@pytest.mark.parametrize("calls, prior", [(1, "uniform"), (3, "uniform"), (3, "autoregressive")])
def test_mis_in_training_step_matches_exact_distribution(calls, prior):
    """B copies of one x, one chain each; `calls` training steps continue the chains via the
    cache. The cached states must follow q P^(L * calls) exactly (P: the MIS transition
    matrix over the 9 enumerated states), and approach p(h | x) ∝ p(h) p(x | h), also with a
    learned autoregressive p(h)."""
    num_chains, steps = 20_000, 4
    model = toy_jsa(mis_steps=steps, cache_size=num_chains, prior=prior)
    x = toy_x()
    with torch.no_grad():
        log_target = model.log_joint(x, ALL_STATES[None])[0]
        log_q = categorical_log_prob(model.posterior(x), ALL_STATES[None])[0]
    log_target, log_q = log_target.double(), log_q.double()
    posterior = torch.softmax(log_target, 0)
    expected = log_q.exp() @ torch.linalg.matrix_power(independence_sampler_matrix(log_target, log_q), steps * calls)

    torch.manual_seed(1)
    batch, index = x.expand(num_chains, -1, -1, -1), torch.arange(num_chains)
    for _ in range(calls):
        model.training_loss(batch, index)
    codes, filled = model.cache.read(index)
    assert filled.all()
    states = codes[:, 0] * K + codes[:, 1]
    assert chi_square_pvalue(states, expected) > 1e-4
    # The chains move toward the exact posterior as they run longer.
    tv = 0.5 * (expected - posterior).abs().sum()
    tv_start = 0.5 * (log_q.exp() - posterior).abs().sum()
    assert tv_start > 0.4 and tv < tv_start


def test_chains_started_at_the_posterior_stay_there():
    """Stationarity through the model's own code path: cache filled with exact posterior draws."""
    num_chains = 20_000
    model = toy_jsa(mis_steps=3, cache_size=num_chains)
    x = toy_x()
    with torch.no_grad():
        posterior = torch.softmax(model.log_joint(x, ALL_STATES[None])[0], 0)
    torch.manual_seed(2)
    start = torch.multinomial(posterior, num_chains, replacement=True)
    index = torch.arange(num_chains)
    model.cache.write(index, ALL_STATES[start])
    terms = model.training_loss(x.expand(num_chains, -1, -1, -1), index)
    assert terms["cache_hit_rate"] == 1.0
    codes, _ = model.cache.read(index)
    assert posterior.max() < 0.5  # a real distribution, not a point mass
    assert chi_square_pvalue(codes[:, 0] * K + codes[:, 1], posterior) > 1e-4


def test_cache_is_written_every_step_and_read_as_start_state():
    model = toy_jsa(mis_steps=2, cache_size=10)
    x = torch.rand(4, 1, 2, 2)
    first = model.training_loss(x, torch.tensor([0, 1, 2, 3]))
    assert first["cache_hit_rate"] == 0.0
    _, filled = model.cache.read(torch.arange(10))
    assert filled.tolist() == [True] * 4 + [False] * 6
    second = model.training_loss(x, torch.tensor([2, 3, 4, 5]))
    assert second["cache_hit_rate"] == 0.5
    assert model.cache.codes.dtype == torch.uint8


def test_without_cache_or_before_cache_start_epoch_chains_restart():
    model = toy_jsa(mis_steps=2, use_cache=False)
    assert model.cache is None
    assert model.training_loss(torch.rand(4, 1, 2, 2), torch.arange(4))["cache_hit_rate"] == 0.0
    late = toy_jsa(mis_steps=2, cache_size=4, cache_start_epoch=5)
    late.training_loss(torch.rand(4, 1, 2, 2), torch.arange(4))
    assert late.training_loss(torch.rand(4, 1, 2, 2), torch.arange(4))["cache_hit_rate"] == 0.0  # epoch 0 < 5
    assert late.cache.read(torch.arange(4))[1].all()  # but written all along


@pytest.mark.parametrize("gradient_states", ["final", "chain"])
def test_loss_terms_and_gradients(gradient_states):
    model = toy_jsa(mis_steps=3, cache_size=8, gradient_states=gradient_states, prior="factorized")
    terms = model.training_loss(torch.rand(8, 1, 2, 2), torch.arange(8))
    torch.testing.assert_close(terms["loss"], terms["loss_p"] + terms["loss_q"])
    assert 0.0 <= terms["acceptance_rate"] <= 1.0
    terms["loss"].backward()
    for name in ("encoder", "decoder", "embedding", "prior.logits"):
        grads = [p.grad for n, p in model.named_parameters() if n.startswith(name)]
        assert all(g is not None and torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads), name


@pytest.mark.parametrize("backbone,data_shape,num_latents", [("mlp", (1, 28, 28), 200), ("conv", (1, 28, 28), None), ("conv", (3, 32, 32), None)])
def test_layouts(backbone, data_shape, num_latents):
    model = JSA(data_shape=data_shape, backbone=backbone, num_latents=num_latents, num_categories=2 if num_latents else 16,
                hidden_channels=16, mis_steps=2, cache_size=6, likelihood="gaussian")
    x = torch.rand(3, *data_shape)
    expected_v = num_latents or (data_shape[1] // 4) * (data_shape[2] // 4)
    assert model.encoder_logits(x).shape == (3, expected_v, model.num_categories)
    assert model.encode(x).shape == (3, expected_v) and model.decode(model.encode(x)).shape == x.shape
    assert model.reconstruct(x).shape == x.shape and model.sample_prior(2).shape == (2, *data_shape)
    assert model.log_importance_weights(x, model.posterior(x), 5).shape == (5, 3)
    assert torch.isfinite(model.training_loss(x, torch.arange(3))["loss"])


def test_invalid_settings_fail_early():
    with pytest.raises(ValueError, match="num_categories"):
        JSA(num_categories=1)
    with pytest.raises(ValueError, match="mis_steps"):
        JSA(mis_steps=0)
    for cache_size in (0, -5, 2.5, 10**9):  # refused by name before any allocation
        with pytest.raises(ValueError, match="^cache_size( must be|=2.5: expected an integer)"):
            JSA(cache_size=cache_size)
    with pytest.raises(ValueError, match="grid"):
        JSA(backbone="conv", num_latents=20)


def _fit(model: JSA, dm: MNISTDataModule, ckpt_dir: Path, max_steps: int, ckpt_path: Path | None = None) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=max_steps, limit_train_batches=4, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
        callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_last=True)], enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return trainer


def test_cache_is_checkpointed_and_restored_on_mnist(mnist_dir, tmp_path):
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32)
    model = JSA(mis_steps=3, val_num_samples=2)
    _fit(model, dm, tmp_path, max_steps=4)
    assert model.cache.num_examples == 55_000
    saved = torch.load(tmp_path / "last.ckpt", weights_only=False)
    codes = saved["state_dict"]["cache.codes"]
    assert (codes != 255).all(1).sum() == 4 * 32  # one entry per example seen
    torch.testing.assert_close(codes, model.cache.codes)

    restored = JSA.load_from_checkpoint(tmp_path / "last.ckpt")
    torch.testing.assert_close(restored.cache.codes, codes)

    resumed = JSA(mis_steps=3, val_num_samples=2)
    trainer = _fit(resumed, dm, tmp_path, max_steps=8, ckpt_path=tmp_path / "last.ckpt")
    assert trainer.global_step == 8
    assert (resumed.cache.codes != 255).all(1).sum() > 4 * 32  # the saved chains plus the new ones
    assert ((resumed.cache.codes != 255).all(1) >= (codes != 255).all(1)).all()


def test_cache_size_must_match_the_training_split(mnist_dir, tmp_path):
    dm = MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", val_size=10_000)
    with pytest.raises(ValueError, match="cache holds 55000 chains"):
        _fit(JSA(cache_size=55_000), dm, tmp_path, max_steps=1)


def test_jsa_learns_on_real_mnist(mnist_dir):
    x, index = mnist_slice(mnist_dir, 128)
    torch.manual_seed(0)
    model = JSA(mis_steps=3, cache_size=128)
    first, last = train_on_batch(model, x, index, steps=50)
    # That it learns, with room on both sides for another CPU's arithmetic: an untrained model's loss_p lies above
    # 450 and 50 steps bring it well under 280; what breaks the estimator finely, the exact-answer tests catch.
    assert first["loss_p"] > 450 and last["loss_p"] < 280, (first["loss_p"], last["loss_p"])
    nll = -model.log_importance_weights(x[:64], model.posterior(x[:64]), 50).logsumexp(0).mean() + torch.log(torch.tensor(50.0))
    assert nll < 250


# ---- the cache remedies: q's states and restarts (docs/jsa.md#what-q-learns-from, docs/mis.md) ---------------------
@pytest.mark.parametrize("q_states", ["chain", "fresh"])
def test_q_states_leave_the_sampler_alone(q_states):
    """What q learns from is not the chain: chains started at the exact posterior stay there with either setting."""
    num_chains = 20_000
    model = toy_jsa(mis_steps=3, cache_size=num_chains, q_states=q_states)
    x = toy_x()
    with torch.no_grad():
        posterior = torch.softmax(model.log_joint(x, ALL_STATES[None])[0], 0)
    torch.manual_seed(2)
    index = torch.arange(num_chains)
    model.cache.write(index, ALL_STATES[torch.multinomial(posterior, num_chains, replacement=True)])
    model.training_loss(x.expand(num_chains, -1, -1, -1), index)
    codes, _ = model.cache.read(index)
    assert chi_square_pvalue(codes[:, 0] * K + codes[:, 1], posterior) > 1e-4


def test_fresh_q_states_read_nothing_the_cache_fed_back():
    """With `q_states="fresh"` q's loss and gradient are the same whatever the cached states; with `chain` they are not."""
    x, index = toy_x().expand(64, -1, -1, -1), torch.arange(64)
    losses = {}
    for q_states in ("chain", "fresh"):
        for fill in (0, 2):
            model = toy_jsa(mis_steps=3, cache_size=64, q_states=q_states)
            model.cache.write(index, torch.full((64, V), fill))
            torch.manual_seed(7)
            loss_q = model.training_loss(x, index)["loss_q"]
            encoder_grad = torch.autograd.grad(loss_q, list(model.encoder.parameters()))
            losses[q_states, fill] = (loss_q, encoder_grad)
    torch.testing.assert_close(losses["fresh", 0], losses["fresh", 2])
    assert not torch.allclose(losses["chain", 0][0], losses["chain", 2][0])


def test_fresh_q_gradient_is_the_inclusive_kl_gradient():
    """Σ_j μ_j ∇ log q(h_j | x) over many fresh proposals ≈ E_{p(h|x)}[∇ log q(h | x)], the enumerated gradient of
    KL(p(h|x) || q(h|x)) (up to sign); a cached candidate 0 gets weight 0."""
    from samplers import fresh_proposal_weights, index_cached_mis

    model = toy_jsa(mis_steps=1, cache_size=1, q_states="fresh")
    x = toy_x()
    encoder = list(model.encoder.parameters())
    with torch.no_grad():
        posterior = torch.softmax(model.log_joint(x, ALL_STATES[None])[0], 0)
    exact = torch.autograd.grad(-(posterior * categorical_log_prob(model.posterior(x), ALL_STATES[None])[0]).sum(), encoder)

    chains, proposals = 16, 4000
    log_q = model.posterior(x).expand(chains, -1, -1)
    torch.manual_seed(3)
    with torch.no_grad():
        sample = index_cached_mis(log_q.detach(), lambda h: model.log_joint(x.expand(chains, -1, -1, -1), h), proposals,
                                  start=torch.zeros(chains, V, dtype=torch.long), has_start=torch.ones(chains, dtype=torch.bool))
    weight = fresh_proposal_weights(sample.log_target, sample.log_proposal, torch.ones(chains, dtype=torch.bool))
    assert (weight[:, 0] == 0).all() and torch.allclose(weight.sum(1), torch.ones(chains))
    estimate = torch.autograd.grad(-(weight * categorical_log_prob(log_q, sample.candidates)).sum(1).mean(), encoder)
    flat_exact, flat_estimate = torch.cat([g.flatten() for g in exact]), torch.cat([g.flatten() for g in estimate])
    assert flat_exact.norm() > 0.1  # q is far from the posterior: a real gradient
    assert (flat_estimate - flat_exact).norm() < 0.05 * flat_exact.norm()


def test_cache_refresh_restarts_a_share_of_the_chains_with_the_predicted_law():
    """With ρ = cache_refresh, the law of the cached states after c steps follows μ_c = (1 − ρ) μ_{c−1} P^L + ρ q P^L
    (μ_1 = q P^L, every chain fresh), exactly, and its fixed point is never further from p(h | x) than q P^L."""
    num_chains, steps, calls, rho = 10_000, 2, 3, 0.25  # (not 0.5: a share kept and its complement alike)
    model = toy_jsa(mis_steps=steps, cache_size=num_chains, cache_refresh=rho)
    x = toy_x()
    with torch.no_grad():
        log_target = model.log_joint(x, ALL_STATES[None])[0].double()
        log_q = categorical_log_prob(model.posterior(x), ALL_STATES[None])[0].double()
    kernel = torch.linalg.matrix_power(independence_sampler_matrix(log_target, log_q), steps)
    fresh = log_q.exp() @ kernel
    law = fresh
    for _ in range(calls - 1):
        law = (1 - rho) * law @ kernel + rho * fresh
    persistent = log_q.exp() @ torch.linalg.matrix_power(kernel, calls)  # ρ = 0
    assert 0.5 * (law - persistent).abs().sum() > 0.04  # the two laws differ: the test tells them apart

    torch.manual_seed(1)
    index = torch.arange(num_chains)
    hit_rates = [float(model.training_loss(x.expand(num_chains, -1, -1, -1), index)["cache_hit_rate"]) for _ in range(calls)]
    assert hit_rates[0] == 0.0 and all(abs(rate - (1 - rho)) < 0.02 for rate in hit_rates[1:])
    codes, _ = model.cache.read(index)
    assert chi_square_pvalue(codes[:, 0] * K + codes[:, 1], law) > 1e-4

    posterior = torch.softmax(log_target, 0)
    fixed_point = rho * fresh @ torch.linalg.inv(torch.eye(len(fresh), dtype=fresh.dtype) - (1 - rho) * kernel)
    assert 0.5 * (fixed_point - posterior).abs().sum() <= 0.5 * (fresh - posterior).abs().sum() + 1e-12


@pytest.mark.parametrize("setting, message", [({"q_states": "fresh_ones"}, "q_states"), ({"cache_refresh": 1.5}, "cache_refresh"),
                                              ({"cache_refresh": float("nan")}, "cache_refresh"), ({"cache_refresh": -0.1}, "cache_refresh")])
def test_cache_remedy_settings_are_checked(setting, message):
    with pytest.raises(ValueError, match=message):
        JSA(**setting)


# ---- replicas: R runs of one JSA as one batched step (torch.func.vmap over stacked parameters and buffers) ---------

class TrainingLoss(torch.nn.Module):
    """A model's training loss as a module's forward, for torch.func.functional_call."""

    def __init__(self, model: JSA) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return self.model.training_loss(x, index)["loss"]


def replica_step(models: list[JSA], x: torch.Tensor, index: torch.Tensor, seed: int) -> tuple[dict, torch.Tensor, dict]:
    """(gradients, losses, buffers after the step), each stacked over the replicas: one vmapped step of all of them."""
    from torch.func import functional_call, grad_and_value, stack_module_state, vmap

    params, buffers = stack_module_state([TrainingLoss(m) for m in models])
    template = TrainingLoss(copy.deepcopy(models[0]))
    torch.manual_seed(seed)
    grads, losses = vmap(grad_and_value(lambda p, b, x, i: functional_call(template, (p, b), (x, i))),
                         randomness="different")(params, buffers, x, index)
    return grads, losses, buffers


def replica_models(count: int, **kwargs) -> list[JSA]:
    models = []
    for r in range(count):
        model = toy_jsa(mis_steps=5, cache_size=6, **kwargs).double()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * r)  # a replica's own weights
        models.append(model)
    return models


@pytest.mark.parametrize("settings", [dict(gradient_rows=2), dict(gradient_states="expected", q_states="fresh"),
                                      dict(chain_rows="static", cache_refresh=0.5)])
def test_a_jsa_step_vmapped_over_one_replica_is_the_step(settings):
    """The whole step (MIS, the cache read and written, the loss) runs under torch.func.vmap over stacked parameters and
    buffers (no in-place write into an unbatched tensor), and with one replica it is the plain step: the same loss,
    gradients and cache from the same seed."""
    (model,) = replica_models(1, **settings)
    plain = copy.deepcopy(model)
    x = torch.rand(1, 6, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    index = torch.arange(6).expand(1, -1)
    plain.training_loss(x[0], index[0])  # a filled cache: the step reads it
    model.cache.codes.copy_(plain.cache.codes)
    grads, losses, buffers = replica_step([model], x, index, seed=7)
    torch.manual_seed(7)
    loss = plain.training_loss(x[0], index[0])["loss"]
    loss.backward()
    # float64 to the last bits: vmap's batched kernels may sum in another order (AVX2 and AVX-512 differ)
    torch.testing.assert_close(losses[0], loss, rtol=0, atol=1e-12)
    for name, p in plain.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[f"model.{name}"][0], p.grad, rtol=0, atol=1e-12, msg=name)
    assert torch.equal(buffers["model.cache.codes"][0], plain.cache.codes)


def test_vmapped_replicas_do_not_interact():
    """Replica 0's data and weights changed: every other replica's loss, gradients and cache are exactly as before."""
    models = replica_models(3, gradient_rows=2)
    x = torch.rand(3, 6, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    index = torch.arange(6).expand(3, -1)
    grads, losses, buffers = replica_step([copy.deepcopy(m) for m in models], x, index, seed=7)
    with torch.no_grad():
        for p in models[0].parameters():
            p.mul_(-2.0)
    x_changed = x.clone()
    x_changed[0] = 1 - x_changed[0]
    grads_changed, losses_changed, buffers_changed = replica_step(models, x_changed, index, seed=7)
    assert losses_changed[0] != losses[0] and torch.equal(losses_changed[1:], losses[1:])
    for name in grads:
        assert torch.equal(grads_changed[name][1:], grads[name][1:]), name
    assert torch.equal(buffers_changed["model.cache.codes"][1:], buffers["model.cache.codes"][1:])
