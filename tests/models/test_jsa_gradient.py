"""Which states JSA's gradient uses (samplers/visits.py, models/jsa.py): the chain average computed once per
distinct state, its Rao-Blackwellized expectation, and the cache's diagnostics."""

from __future__ import annotations

import itertools

import pytest
import torch

from callbacks.gradient_variance import flat_gradients, trace_of_covariance
from models import JSA
from samplers import (MISSample, candidate_weights, gradient_rows, categorical_log_prob, expected_visits, fresh_proposal_weights,
                      index_cached_mis, mis_chain, sum_and_sample,
                      visit_counts)
from samplers.cache import cache_diagnostics
from tests.conftest import mnist_slice, train_on_batch
from tests.models.test_jsa import toy_jsa

L = 5


def enumerated_visits(log_weight: torch.Tensor) -> torch.Tensor:
    """E[n_j] for one chain by summing over all 2^L accept/reject outcomes, each with its exact probability."""
    num_steps = log_weight.shape[0] - 1
    visits = torch.zeros_like(log_weight)
    for outcome in itertools.product([False, True], repeat=num_steps):
        probability, current, counts = 1.0, 0, torch.zeros_like(log_weight)
        for t, accept in enumerate(outcome, 1):
            log_ratio = log_weight[t] - log_weight[current]
            a = 0.0 if torch.isnan(log_ratio) else float(torch.exp(log_ratio.clamp(max=0.0)))
            probability *= a if accept else 1.0 - a
            current = t if accept else current
            counts[current] += 1
        visits += probability * counts
    return visits


def test_expected_visits_equal_the_enumeration_of_the_uniforms():
    generator = torch.Generator().manual_seed(0)
    log_target = torch.randn(6, L + 1, dtype=torch.float64, generator=generator) * 3
    log_proposal = torch.randn(6, L + 1, dtype=torch.float64, generator=generator)
    log_target[1, 2] = log_target[1, 4] = 10.0  # ties
    log_target[2, 0] = -torch.inf  # a start state of zero probability: the first proposal is always taken
    log_target[3, :] = -torch.inf  # every ratio NaN: never accepts
    visits = expected_visits(log_target, log_proposal)
    exact = torch.stack([enumerated_visits(w) for w in log_target - log_proposal])
    torch.testing.assert_close(visits, exact, rtol=0, atol=1e-12)
    torch.testing.assert_close(visits.sum(1), torch.full((6,), float(L), dtype=torch.float64))
    assert visits[3, 0] == L and visits[2, 0] == 0


def test_expected_visits_equal_the_average_of_many_chains():
    generator = torch.Generator().manual_seed(1)
    log_target = torch.randn(1, L + 1, generator=generator) * 2
    log_proposal = torch.randn(1, L + 1, generator=generator)
    num_chains = 200_000
    chains = mis_chain(log_target.expand(num_chains, -1), log_proposal.expand(num_chains, -1), torch.Generator().manual_seed(2))
    counts = visit_counts(chains.path, L + 1, torch.float64)
    standard_error = counts.std(0) / num_chains**0.5
    z = (counts.mean(0) - expected_visits(log_target, log_proposal)[0].double()) / standard_error.clamp(min=1e-12)
    assert z.abs().max() < 5, z


def test_fresh_proposal_weights_normalize_the_fresh_candidates_and_a_row_without_mass_gets_none():
    """μ_j ∝ p(x, h_j) / q(h_j | x) over the fresh candidates, 0 on a cached start; a row whose fresh candidates all
    have p(x, h_j) = 0 gets zeros (nothing to normalize), not NaN."""
    log_target = torch.tensor([[0.0, 1.0, 2.0], [0.0, -torch.inf, -torch.inf], [-torch.inf, -torch.inf, -torch.inf]])
    weight = fresh_proposal_weights(log_target, torch.zeros(3, 3), has_start=torch.tensor([True, True, False]))
    torch.testing.assert_close(weight[0], torch.tensor([0.0, 1.0, 2.0]).masked_fill(torch.tensor([True, False, False]),
                                                                                     -torch.inf).softmax(0))
    assert weight[1:].tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_the_weights_carry_no_gradient_and_mu_is_the_softmax_at_any_offset():
    """λ (each gradient_states) and μ weight the gradient rows and are not differentiated (no gradient through the
    sampling, docs/jsa.md): none carries a graph from log p(x, h). μ is a softmax in log space: adding ±1000 to every
    log p(x, h_j) of a row changes nothing (a ratio of exponentials would be NaN)."""
    generator = torch.Generator().manual_seed(3)
    log_target = (torch.randn(4, L + 1, dtype=torch.float64, generator=generator) * 3).requires_grad_()
    log_proposal = torch.randn(4, L + 1, dtype=torch.float64, generator=generator)
    chain = mis_chain(log_target.detach(), log_proposal, torch.Generator().manual_seed(4))
    candidates = torch.arange(L + 1).expand(4, -1).unsqueeze(-1)
    sample = MISSample(chain.path[:, -1:], chain.path.unsqueeze(-1), chain.accepted, candidates, log_target, log_proposal, chain.path)
    for states in ("final", "chain", "expected"):
        assert not candidate_weights(sample, states).requires_grad, states
    assert not fresh_proposal_weights(log_target, log_proposal).requires_grad
    exact = (log_target - log_proposal).detach().softmax(1)
    for offset in (-1000.0, 1000.0):
        torch.testing.assert_close(fresh_proposal_weights(log_target.detach() + offset, log_proposal), exact)


def test_visit_counts():
    path = torch.tensor([[0, 0, 2, 2, 2], [1, 2, 3, 4, 5]])
    assert visit_counts(path, 6).tolist() == [[2, 0, 3, 0, 0, 0], [0, 1, 1, 1, 1, 1]]


def toy64(**kwargs) -> JSA:
    return toy_jsa(mis_steps=L, prior="autoregressive", **kwargs).double()


def gradients(model: JSA, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def path_average_loss(model: JSA, x: torch.Tensor, log_q: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """The chain-average loss as the JSA paper's code writes it: every one of the L states scored, with gradient."""
    return -model.log_joint(x, path).mean() - categorical_log_prob(log_q, path).mean()


def with_path(sample: MISSample, path_index: torch.Tensor) -> MISSample:
    path = sample.candidates.gather(1, path_index.unsqueeze(-1).expand(-1, -1, sample.candidates.shape[-1]))
    return sample._replace(path_index=path_index, path=path, latent=path[:, -1])


@pytest.mark.parametrize("path_kind", ["sampled", "shuffled", "repeated", "all_rejected", "all_accepted"])
def test_chain_gradient_from_distinct_states_equals_the_path_average(path_kind):
    """Every parameter (encoder, decoder, embedding, the MADE prior) to 1e-10 in float64."""
    model = toy64(gradient_states="chain")
    x = torch.rand(7, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(4)
    log_q = model.posterior(x)
    with torch.no_grad():
        sample = index_cached_mis(log_q.detach(), lambda h: model.log_joint(x, h), L)
    steps = torch.arange(1, L + 1).expand(7, -1)
    path_index = {
        "sampled": sample.path_index,
        "shuffled": sample.path_index[:, torch.randperm(L)],
        "repeated": torch.tensor([0, 3, 3, 1, 3]).expand(7, -1),
        "all_rejected": torch.zeros(7, L, dtype=torch.long),
        "all_accepted": steps,
    }[path_kind]
    sample = with_path(sample, path_index)
    ours = gradients(model, sum(model.jsa_loss(x, log_q, sample)))
    log_q = model.posterior(x)
    reference = gradients(model, path_average_loss(model, x, log_q, sample.path))
    assert ours.keys() == reference.keys() and any(n.startswith("prior.") for n in ours)
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=0, atol=1e-10, msg=name)


def test_chain_training_step_equals_the_path_average_with_a_shared_random_stream():
    model = toy64(gradient_states="chain", cache_size=6)
    x = torch.rand(6, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    index = torch.arange(6)
    model.training_loss(x, index)  # fill the cache: the next step starts from it
    start, has_start = model.cache.read(index)
    torch.manual_seed(6)
    ours = gradients(model, model.training_loss(x, index)["loss"])
    torch.manual_seed(6)
    log_q = model.posterior(x)
    with torch.no_grad():
        sample = index_cached_mis(log_q.detach(), lambda h: model.log_joint(x, h), L, start, has_start)
    reference = gradients(model, path_average_loss(model, x, log_q, sample.path))
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=0, atol=1e-10, msg=name)


def test_expected_gradient_is_the_chain_gradient_in_expectation():
    """Same candidates, many chains. Every estimate is linear in its weights, ĝ = Σ_j λ_j G_j with G_j the gradient of
    candidate j's term; so (1) the model's chain gradient is checked to be λ_chain · G for 20 chains, then (2) the
    mean of λ_chain · G over 100,000 chains must be the model's `expected` gradient within Monte Carlo error:
    E||mean - expected||^2 = trace(Cov(ĝ))/n for an unbiased mean, so a ratio far above 1 means a bias."""
    model = toy_jsa(mis_steps=L, prior="factorized", gradient_states="expected").double()  # moderate log-weights
    x = torch.rand(3, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    torch.manual_seed(8)
    log_q = model.posterior(x)
    sample = index_cached_mis(log_q.detach(), lambda h: model.log_joint(x, h), L)
    flat = lambda grads: torch.cat([g.flatten() for g in grads.values()])  # noqa: E731
    expected = flat(gradients(model, sum(model.jsa_loss(x, log_q, sample))))

    # G: (B(L+1), P), the gradient of -[log p(x_b, h_bj) + log q(h_bj | x_b)] / B, the term weight λ_bj multiplies.
    terms = -(model.log_joint(x, sample.candidates) + categorical_log_prob(model.posterior(x), sample.candidates)) / 3
    params = [p for p in model.parameters() if p.requires_grad]
    G = torch.stack([torch.cat([g.flatten() for g in torch.autograd.grad(t, params, retain_graph=True, allow_unused=False)])
                     for t in terms.flatten()])

    model.gradient_states = "chain"
    generator = torch.Generator().manual_seed(9)
    for _ in range(20):
        chain = mis_chain(sample.log_target.detach(), sample.log_proposal, generator)
        log_q = model.posterior(x)
        ours = flat(gradients(model, sum(model.jsa_loss(x, log_q, with_path(sample, chain.path)))))
        torch.testing.assert_close(ours, visit_counts(chain.path, L + 1, torch.float64).flatten() / L @ G, rtol=0, atol=1e-10)

    num_chains = 100_000
    chains = mis_chain(sample.log_target.detach().repeat(num_chains, 1), sample.log_proposal.repeat(num_chains, 1), generator)
    weights = visit_counts(chains.path, L + 1, torch.float64).view(num_chains, -1) / L  # (n, B(L+1))
    squared_error = (weights.mean(0) @ G - expected).square().sum()
    monte_carlo = torch.trace(torch.cov(weights.T) @ G @ G.T) / num_chains
    assert monte_carlo > 0 and squared_error / monte_carlo < 4, (squared_error, monte_carlo)


@pytest.mark.slow  # trains on real MNIST for 40 steps
def test_expected_gradient_varies_less_than_the_chain_gradient_on_a_trained_model(mnist_dir):
    """Rao-Blackwell: at the parameters of a model trained for 40 steps on real MNIST, fresh gradient estimates
    (new proposals and chains from the same cached states) vary less with `expected` than with `chain`."""
    x, index = mnist_slice(mnist_dir, 64)
    torch.manual_seed(0)
    model = JSA(mis_steps=10, cache_size=64, cache_start_epoch=0, gradient_states="chain")
    train_on_batch(model, x, index, steps=40)
    encoder = list(model.encoder_parameters())
    groups = {"encoder": encoder, "decoder": [p for p in model.parameters() if p.requires_grad and all(p is not e for e in encoder)]}
    variance = {}
    for mode in ("chain", "expected"):
        model.gradient_states = mode
        torch.manual_seed(1)
        draws = [flat_gradients(model.gradient_estimates(x, index), groups) for _ in range(12)]
        variance[mode] = {name: float(trace_of_covariance([d[name] for d in draws])) for name in draws[0]}
    for name in variance["chain"]:
        assert variance["expected"][name] < 0.8 * variance["chain"][name], variance


def test_expected_and_final_train_and_the_cache_starts_the_chain():
    for mode in ("expected", "final"):
        model = toy_jsa(mis_steps=3, cache_size=8, gradient_states=mode, prior="factorized")
        terms = model.training_loss(torch.rand(8, 1, 2, 2), torch.arange(8))
        terms["loss"].backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
        assert model.cache.read(torch.arange(8))[1].all()


def test_cache_diagnostics_on_a_constructed_case():
    log_target = torch.tensor([[5.0, 1.0, 2.0], [0.0, 4.0, 1.0], [3.0, 3.0, 0.0], [9.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    candidates = torch.tensor([[0, 1, 2]] * 4 + [[2, 2, 1]]).unsqueeze(-1)  # (B, L+1, V=1): the start, then 2 proposals
    # example 4 accepts its first proposal, the cached state itself: it never leaves it, so it counts as stuck
    path = torch.tensor([[0, 0], [1, 1], [0, 0], [0, 0], [2, 2]]).unsqueeze(-1)
    sample = MISSample(latent=path[:, -1], path=path, accepted=torch.tensor([0, 1, 0, 0, 1]), candidates=candidates,
                       log_target=log_target, log_proposal=torch.zeros(5, 3), path_index=None)
    has_start = torch.tensor([True, True, True, False, True])  # example 3 started from a fresh proposal: not counted
    diagnostics = cache_diagnostics(sample, torch.tensor([3.0, 3.0, 1.0, 7.0, 5.0]), has_start)
    assert diagnostics["cache_stuck_rate"] == pytest.approx(3 / 4)
    assert diagnostics["cache_age_epochs"] == pytest.approx((3 + 3 + 1 + 5) / 4)
    assert diagnostics["cache_log_weight_gap"] == pytest.approx((3.0 - 4.0 + 0.0 + 0.0) / 4)


def test_the_age_of_a_cached_state_counts_from_its_last_change_and_is_read_before_the_step_writes():
    model = toy_jsa(mis_steps=2, cache_size=4)
    model.cache.write(torch.arange(4), torch.zeros(4, 2, dtype=torch.long), epoch=0)
    model.cache.write(torch.arange(4), torch.tensor([[0, 0], [0, 0], [1, 0], [2, 2]]), epoch=2)  # 0, 1 stayed put
    assert model.cache.age(torch.arange(4), 3).tolist() == [3, 3, 1, 1]
    model.cache.codes[:] = torch.tensor([[0, 1], [1, 1], [2, 1], [0, 2]])  # states no chain will propose again below
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JSA, "current_epoch", property(lambda self: 3))
        terms = model.training_loss(torch.rand(4, 1, 2, 2), torch.arange(4))
    assert terms["cache_age_epochs"] == pytest.approx(2.0)
    moved = (model.cache.codes.long() != torch.tensor([[0, 1], [1, 1], [2, 1], [0, 2]])).any(1)
    assert model.cache.changed_epoch.tolist() == torch.where(moved, 3, torch.tensor([0, 0, 2, 2])).tolist()


def test_cache_diagnostics_are_logged_only_when_the_cache_is_read():
    model = toy_jsa(mis_steps=2, cache_size=4)
    first = model.training_loss(torch.rand(4, 1, 2, 2), torch.arange(4))
    assert "cache_stuck_rate" in first and first["cache_age_epochs"] == 0  # read, but nothing cached yet: 0
    late = toy_jsa(mis_steps=2, cache_size=4, cache_start_epoch=1)
    assert "cache_stuck_rate" not in late.training_loss(torch.rand(4, 1, 2, 2), torch.arange(4))


# ---- chain_rows: the chain gradient with static shapes (docs/jsa.md#static-or-distinct-rows) ----------------------

@pytest.mark.parametrize("path_kind", ["sampled", "repeated", "all_rejected", "all_accepted"])
def test_static_chain_rows_give_the_distinct_rows_gradient_and_the_path_average(path_kind):
    """`static` weights the L+1 candidates of the sampler's scored pass by visit counts / L: the same gradient as
    the distinct rows re-scored (and as the paper's path average), every parameter to 1e-10 in float64."""
    static, distinct = toy64(gradient_states="chain", chain_rows="static"), toy64(gradient_states="chain", chain_rows="distinct")
    x = torch.rand(7, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(4)
    log_q = static.posterior(x)
    sample = index_cached_mis(log_q.detach(), lambda h: static.log_joint(x, h), L)  # with the graph, as the static step
    path_index = {
        "sampled": sample.path_index,
        "repeated": torch.tensor([0, 3, 3, 1, 3]).expand(7, -1),
        "all_rejected": torch.zeros(7, L, dtype=torch.long),
        "all_accepted": torch.arange(1, L + 1).expand(7, -1),
    }[path_kind]
    sample = with_path(sample, path_index)
    ours = gradients(static, sum(static.jsa_loss(x, log_q, sample)))
    detached = sample._replace(log_target=sample.log_target.detach())
    reference = gradients(distinct, sum(distinct.jsa_loss(x, distinct.posterior(x), detached)))
    path_average = gradients(distinct, path_average_loss(distinct, x, distinct.posterior(x), sample.path))
    assert ours.keys() == reference.keys() == path_average.keys() and any(n.startswith("prior.") for n in ours)
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=0, atol=1e-10, msg=name)
        torch.testing.assert_close(ours[name], path_average[name], rtol=0, atol=1e-10, msg=name)


def test_a_static_rows_training_step_equals_the_distinct_rows_step():
    """The whole step (cache read and write, a shared random stream): loss, every gradient and the cache alike."""
    models = {rows: toy64(gradient_states="chain", chain_rows=rows, cache_size=6) for rows in ("static", "distinct")}
    x = torch.rand(6, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    index = torch.arange(6)
    results = {}
    for rows, model in models.items():
        torch.manual_seed(6)
        model.training_loss(x, index)  # fill the cache: the next step starts from it
        terms = model.training_loss(x, index)
        results[rows] = (terms["loss"].detach(), gradients(model, terms["loss"]), model.cache.codes.clone())
    (loss, grads, codes), (loss_d, grads_d, codes_d) = results["static"], results["distinct"]
    torch.testing.assert_close(loss, loss_d, rtol=0, atol=1e-10)
    assert torch.equal(codes, codes_d) and grads.keys() == grads_d.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], grads_d[name], rtol=0, atol=1e-10, msg=name)


def test_chain_rows_auto_is_static_on_an_accelerator_and_distinct_on_the_cpu():
    model = toy_jsa(mis_steps=2)
    assert model.chain_rows == "auto"
    assert model.row_choice(torch.device("cuda")) == model.row_choice(torch.device("mps")) == "every"
    assert model.row_choice(torch.device("cpu")) == "distinct"
    assert toy_jsa(mis_steps=2, chain_rows="static").row_choice(torch.device("cpu")) == "every"
    assert toy_jsa(mis_steps=2, chain_rows="distinct").row_choice(torch.device("cuda")) == "distinct"
    with pytest.raises(ValueError, match="chain_rows='fixed': expected one of 'auto', 'static', 'distinct'"):
        toy_jsa(chain_rows="fixed")
    for states in ("final", "expected"):  # they score their own rows: chain_rows would be ignored
        with pytest.raises(ValueError, match=f"chain_rows='static' applies to gradient_states 'chain'.*'{states}'"):
            toy_jsa(gradient_states=states, chain_rows="static")


# ---- gradient_rows: k + 1 rows per example, sum-and-sample (docs/jsa.md#a-fixed-number-of-gradient-rows) ----------

def test_sum_and_sample_keeps_the_top_weights_and_draws_the_rest_in_proportion():
    weight = torch.tensor([[0.1, 0.4, 0.0, 0.2, 0.3, 0.0],   # rest {0: 0.1, 3: 0.2} after the top two
                           [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]],  # one state: nothing left to draw
                          dtype=torch.float64)
    rows, row_weight = sum_and_sample(weight.repeat(100_000, 1), 2, torch.Generator().manual_seed(0))
    rows, row_weight = rows.view(100_000, 2, 3), row_weight.view(100_000, 2, 3)
    assert (rows[:, 0, :2] == torch.tensor([1, 4])).all() and (row_weight[:, 0, :2] == weight[0, [1, 4]]).all()
    assert (row_weight[:, 0, 2] == weight[0, [0, 3]].sum()).all() and (row_weight[:, 1] == weight.new_tensor([1.0, 0.0, 0.0])).all()
    torch.testing.assert_close(row_weight.sum(-1), weight.sum(1).expand(100_000, -1))
    drawn = rows[:, 0, 2]
    assert set(drawn.unique().tolist()) == {0, 3}  # never a top row, never a weight of 0
    share = (drawn == 3).double().mean()
    assert abs(share - 2 / 3) < 5 * (2 / 9 / 100_000) ** 0.5, share
    with pytest.raises(ValueError, match="1 <= k < N = 6"):
        sum_and_sample(weight, 6)


@pytest.mark.parametrize("rows", ["every", "final", "distinct", 2, 3])
def test_gradient_rows_give_the_weighted_sum_over_the_candidates(rows):
    """For any per-candidate values g (B, L+1), Σ over an example's rows of weight · g[example, candidate] is Σ_j λ_j g_j:
    exactly for every choice here: at most 3 candidates per example carry weight, so k = 2's drawn row is the one left
    (its expectation in general: `test_the_expectation_over_the_sampled_row_is_the_full_gradient`)."""
    weight = torch.tensor([[0.0, 0.6, 0.0, 0.4, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.2, 0.2, 0.0, 0.0, 0.6]],
                          dtype=torch.float64)
    if rows == "final":
        weight = (weight == weight.max(1, keepdim=True).values).double()  # one-hot: the final state's weight
    g = torch.randn(weight.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    chosen = gradient_rows(weight, rows, torch.Generator().manual_seed(1))
    total = torch.zeros(3, dtype=torch.float64).index_add(0, chosen.example, (chosen.weight * g[chosen.example].gather(1, chosen.candidate)).sum(1))
    expected = (weight * g).sum(1)
    torch.testing.assert_close(total, expected, rtol=0, atol=1e-12)
    shape = {"every": (3, 6), "final": (3, 1), "distinct": (6, 1), 2: (3, 3), 3: (3, 4)}[rows]
    assert tuple(chosen.candidate.shape) == tuple(chosen.weight.shape) == shape


def force_draw(monkeypatch, candidate: int) -> None:
    """Make sum_and_sample's one draw per example land on `candidate`."""
    monkeypatch.setattr("samplers.visits.categorical_draw", lambda probs, generator=None: torch.full(probs.shape[:-1], candidate))


def one_example(sample: MISSample, b: int) -> MISSample:
    return MISSample(*(field[b : b + 1] for field in sample))


@pytest.mark.parametrize("gradient_states, k", [("chain", 1), ("chain", 2), ("expected", 1), ("expected", 2)])
def test_the_expectation_over_the_sampled_row_is_the_full_gradient(monkeypatch, gradient_states, k):
    """Unbiased, shown exactly: for each example, the k+1-row gradient for every possible draw J = j, weighted by
    P(J = j) = λ_j / R, sums to the gradient over every weighted candidate (static rows), for every parameter (encoder,
    decoder, embedding, the MADE prior) in float64."""
    rows = {"chain_rows": "static"} if gradient_states == "chain" else {}  # (expected scores every row)
    sampled, full = toy64(gradient_states=gradient_states, gradient_rows=k), toy64(gradient_states=gradient_states, **rows)
    x = torch.rand(4, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(4)
    sample = index_cached_mis(full.posterior(x).detach(), lambda h: full.log_joint(x, h), L)  # with the graph, for `full`
    sample = with_path(sample, torch.cat([torch.arange(1, L + 1).expand(2, -1), sample.path_index[2:]]))  # 5 states visited in two
    reference = gradients(full, sum(full.jsa_loss(x, full.posterior(x), sample)))

    weight = candidate_weights(sample, sampled.gradient_states)
    detached = sample._replace(log_target=sample.log_target.detach())
    expectation = {name: torch.zeros_like(g) for name, g in reference.items()}
    largest_rest = 0.0
    for b in range(4):
        rest = weight[b].scatter(0, weight[b].topk(k).indices, 0.0)
        draws = {j: rest[j] / rest.sum() for j in rest.nonzero()[:, 0].tolist()} or {0: 1.0}  # R = 0: exact, any draw
        largest_rest = max(largest_rest, float(rest.sum()))
        for j, probability in draws.items():
            force_draw(monkeypatch, j)
            grads = gradients(sampled, sum(sampled.jsa_loss(x[b : b + 1], sampled.posterior(x[b : b + 1]), one_example(detached, b))))
            for name in expectation:
                expectation[name] += probability * grads[name] / 4
    assert largest_rest > 0.1  # the drawn row carries weight: an error in it shows far above atol
    assert expectation.keys() == reference.keys() and any(n.startswith("prior.") for n in reference)
    for name in reference:
        torch.testing.assert_close(expectation[name], reference[name], rtol=0, atol=1e-10, msg=name)


def test_sampled_rows_are_the_full_gradient_when_at_most_k_states_were_visited():
    """A path over 3 distinct candidates: with k = 3 every draw has weight 0 and the gradient is exact, draw or not."""
    full = toy64(gradient_states="chain", chain_rows="static")
    x = torch.rand(7, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(4)
    sample = with_path(index_cached_mis(full.posterior(x).detach(), lambda h: full.log_joint(x, h), L),
                       torch.tensor([0, 3, 3, 1, 3]).expand(7, -1))
    reference = gradients(full, sum(full.jsa_loss(x, full.posterior(x), sample)))
    sampled = toy64(gradient_states="chain", gradient_rows=3)
    detached = sample._replace(log_target=sample.log_target.detach())
    ours = gradients(sampled, sum(sampled.jsa_loss(x, sampled.posterior(x), detached)))
    for name in reference:
        torch.testing.assert_close(ours[name], reference[name], rtol=0, atol=1e-10, msg=name)


@pytest.mark.parametrize("gradient_states", ["chain", "expected"])
def test_gradient_rows_of_at_least_L_plus_one_are_the_static_rows(gradient_states):
    """k >= L + 1 keeps every row: the whole step (cache read and write, one random stream) as chain_rows=static's,
    loss, every gradient and the cache identical."""
    results = []
    every_row = dict(chain_rows="static") if gradient_states == "chain" else {}  # (expected scores every row)
    for settings in (every_row, dict(gradient_rows=L + 1), dict(gradient_rows=50)):
        model = toy64(gradient_states=gradient_states, cache_size=6, **settings)
        x = torch.rand(6, 1, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        torch.manual_seed(6)
        model.training_loss(x, torch.arange(6))
        terms = model.training_loss(x, torch.arange(6))
        results.append((terms["loss"].detach(), gradients(model, terms["loss"]), model.cache.codes.clone()))
    for loss, grads, codes in results[1:]:
        assert torch.equal(loss, results[0][0]) and torch.equal(codes, results[0][2])
        assert all(torch.equal(grads[name], results[0][1][name]) for name in grads) and grads.keys() == results[0][1].keys()


def test_sampled_rows_score_the_candidates_without_autograd(monkeypatch):
    """The saving: with k + 1 rows the sampler's pass over the L + 1 candidates builds no graph (static rows need it)."""
    import models.jsa

    grad_enabled = []
    sampler = models.jsa.index_cached_mis

    def recording(*args, **kwargs):
        grad_enabled.append(torch.is_grad_enabled())
        return sampler(*args, **kwargs)

    monkeypatch.setattr(models.jsa, "index_cached_mis", recording)
    for settings in (dict(gradient_rows=2), dict(gradient_rows=2, gradient_states="expected"), dict(chain_rows="static")):
        toy64(cache_size=4, **settings).training_loss(torch.rand(4, 1, 2, 2, dtype=torch.float64), torch.arange(4))
    assert grad_enabled == [False, False, True]


def test_gradient_rows_settings_are_checked():
    cpu = torch.device("cpu")
    assert toy_jsa(mis_steps=2, gradient_rows=2).row_choice(cpu) == 2 and toy_jsa(mis_steps=2, gradient_rows=3).row_choice(cpu) == "every"
    for bad, message in ((0, "gradient_rows must be >= 1"), (2.5, "gradient_rows=2.5: expected an integer"),
                         (True, "gradient_rows=True: expected an integer")):
        with pytest.raises(ValueError, match=message):
            toy_jsa(gradient_rows=bad)
    with pytest.raises(ValueError, match="'final' differentiates one row already"):
        toy_jsa(gradient_rows=2, gradient_states="final")
    with pytest.raises(ValueError, match="gradient_rows and chain_rows='distinct' both choose"):
        toy_jsa(gradient_rows=2, chain_rows="distinct")
