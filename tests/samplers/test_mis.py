"""Statistical tests of the MIS samplers and the latent cache against exact answers.

On a finite state space MIS with target pi and proposal q has the transition matrix

    P[i, j] = q_j min(1, (pi_j q_i) / (pi_i q_j))   (j != i),     P[i, i] = 1 - sum_{j != i} P[i, j],

so after L steps from a start distribution mu the state is distributed as mu P^L exactly. Histograms of many
independent chains are compared with it by a chi-square test at level ALPHA, from seeded generators.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from scipy.stats import chi2
from torch import Tensor

from samplers import LatentCache, categorical_log_prob, index_cached_mis, mis_chain, naive_mis, sample_categorical
from samplers.cache import cache_dtype

ALPHA = 1e-4  # a histogram "matches" a distribution when the chi-square p-value exceeds this

# ----------------------------------------------------------------------------------------
# Exact answers
# ----------------------------------------------------------------------------------------


def independence_transition_matrix(pi: Tensor, q: Tensor) -> Tensor:
    """The exact MIS transition matrix P (M, M) for target pi and proposal q (both (M,), positive)."""
    ratio = (pi[None, :] * q[:, None]) / (pi[:, None] * q[None, :])  # [i, j] = pi_j q_i / (pi_i q_j)
    P = q[None, :] * ratio.clamp(max=1.0)
    P.fill_diagonal_(0.0)
    P += torch.diag(1.0 - P.sum(dim=1))
    return P


def distribution_after(mu: Tensor, P: Tensor, steps: int) -> Tensor:
    """mu P^steps."""
    return mu @ torch.linalg.matrix_power(P, steps)


def acceptance_probability(pi: Tensor, q: Tensor) -> Tensor:
    """a_i = P(the proposal is accepted | current state i) = sum_j q_j min(1, w_j / w_i), w = pi / q.

    Unlike 1 - P[i, i] this counts accepting a proposal equal to the current state, as the
    samplers' `accepted` counter does (the chain moves to a new candidate with the same value).
    """
    w = pi / q
    return (q[None, :] * (w[None, :] / w[:, None]).clamp(max=1.0)).sum(dim=1)


def expected_accepted(mu: Tensor, pi: Tensor, q: Tensor, steps: int) -> float:
    """E[number of accepted moves in `steps` steps from mu] = sum_t (mu P^t) . a."""
    P, a = independence_transition_matrix(pi, q), acceptance_probability(pi, q)
    return sum(float(distribution_after(mu, P, t) @ a) for t in range(steps))


def total_variation(p: Tensor, r: Tensor) -> float:
    return 0.5 * float((p - r).abs().sum())


# ----------------------------------------------------------------------------------------
# Statistical checks
# ----------------------------------------------------------------------------------------


def histogram(states: Tensor, num_states: int) -> Tensor:
    return torch.bincount(states.flatten(), minlength=num_states).double()


def chi_square_pvalue(counts: Tensor, probs: Tensor) -> float:
    """Pearson chi-square goodness-of-fit p-value of `counts` against `probs` (over the bins with probs > 0)."""
    if counts[probs == 0].sum() > 0:
        return 0.0  # a state of probability zero was visited
    support = probs > 0
    expected = probs[support] * counts.sum()
    assert expected.min() >= 5, "test design: chi-square needs >= 5 expected counts per bin"
    statistic = float(((counts[support] - expected) ** 2 / expected).sum())
    return float(chi2.sf(statistic, int(support.sum()) - 1))


def assert_distributed_as(states: Tensor, probs: Tensor, what: str) -> Tensor:
    """Chi-square test that the integer `states` (0..M-1) are draws from `probs` (M,); returns the histogram."""
    counts = histogram(states, probs.numel())
    pvalue = chi_square_pvalue(counts, probs)
    assert pvalue > ALPHA, (
        f"{what}: chi-square p = {pvalue:.2e} < {ALPHA}\n"
        f"  observed freq {(counts / counts.sum()).numpy().round(4)}\n  exact         {probs.numpy().round(4)}"
    )
    return counts


def assert_mean_close(values: Tensor, exact: float, what: str, num_se: float = 4.0) -> None:
    """|mean(values) - exact| <= num_se standard errors (an exact value when the sample has no spread)."""
    values = values.double()
    se = float(values.std() / values.numel() ** 0.5) if values.numel() > 1 else 0.0
    error = abs(float(values.mean()) - exact)
    assert error <= num_se * se + 1e-12, f"{what}: mean {float(values.mean()):.5f} vs exact {exact:.5f} ({error / max(se, 1e-300):.1f} SE)"


def draw(probs: Tensor, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Independent draws of a state index from `probs` (M,), in the given shape."""
    numel = 1
    for size in shape:
        numel *= size
    return torch.multinomial(probs, numel, replacement=True, generator=generator).view(shape)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------------------
# 1. mis_chain against the exact transition matrix on a 6-state space
# ----------------------------------------------------------------------------------------

# q is badly matched to pi (q_0 / pi_0 = 1/6), so the chain needs many steps: q P^16 is still
# measurably different from pi and every L below has its own exact answer.
PI = torch.tensor([0.30, 0.25, 0.15, 0.12, 0.10, 0.08], dtype=torch.float64)
Q = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.25, 0.25], dtype=torch.float64)
NUM_CHAINS = 100_000


def run_chains_on_states(start_probs: Tensor, num_steps: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """NUM_CHAINS chains over candidates h_0 ~ start_probs, h_1..h_L ~ Q, with an unnormalized target.

    Returns (state after each step (B, L), final state (B,), accepted (B,)).
    """
    generator = seeded(seed)
    states = torch.cat([draw(start_probs, (NUM_CHAINS, 1), generator), draw(Q, (NUM_CHAINS, num_steps), generator)], dim=1)
    offset = 200.0 * torch.rand(NUM_CHAINS, 1, dtype=torch.float64, generator=generator) - 100.0  # per-chain constant
    chain = mis_chain(PI.log()[states] + offset, Q.log()[states], generator=generator)
    assert chain.path.shape == (NUM_CHAINS, num_steps) and chain.index.shape == chain.accepted.shape == (NUM_CHAINS,)
    assert torch.equal(chain.path[:, -1], chain.index)
    return states.gather(1, chain.path), states.gather(1, chain.index[:, None])[:, 0], chain.accepted


def test_transition_matrix_helper_is_a_reversible_kernel_for_pi():
    """The helper itself: rows sum to 1, detailed balance pi_i P_ij = pi_j P_ji, hence pi P = pi."""
    P = independence_transition_matrix(PI, Q)
    assert (P >= 0).all()
    torch.testing.assert_close(P.sum(dim=1), torch.ones(6, dtype=torch.float64))
    flow = PI[:, None] * P
    torch.testing.assert_close(flow, flow.T)
    torch.testing.assert_close(PI @ P, PI)


@pytest.mark.parametrize("num_steps", [1, 5, 20])
def test_chain_started_from_target_stays_at_target(num_steps):
    """h_0 ~ pi: the final state is distributed exactly as pi (stationarity), for an unnormalized target."""
    path, final, accepted = run_chains_on_states(PI, num_steps, seed=100 + num_steps)
    assert_distributed_as(final, PI, f"final state, start ~ pi, L={num_steps}")
    assert_distributed_as(path[:, num_steps // 2], PI, f"state after step {num_steps // 2 + 1}, start ~ pi")
    assert_mean_close(accepted, expected_accepted(PI, PI, Q, num_steps), "accepted moves, start ~ pi")


@pytest.mark.parametrize("num_steps", [1, 2, 4, 16])
def test_chain_started_from_proposal_follows_q_P_power_L(num_steps):
    """h_0 ~ q: the state after t steps is distributed as q P^t (every t <= L), and not as pi."""
    P = independence_transition_matrix(PI, Q)
    path, final, accepted = run_chains_on_states(Q, num_steps, seed=200 + num_steps)
    for t in range(1, num_steps + 1):
        assert_distributed_as(path[:, t - 1], distribution_after(Q, P, t), f"state after step {t} of {num_steps}, start ~ q")
    exact = distribution_after(Q, P, num_steps)
    counts = assert_distributed_as(final, exact, f"final state, start ~ q, L={num_steps}")
    # Power: the same histogram rejects pi, so matching q P^L is not just "close to the target".
    assert chi_square_pvalue(counts, PI) < ALPHA
    # The empirical distance to the target tracks the exact one.
    assert abs(total_variation(counts / counts.sum(), PI) - total_variation(exact, PI)) < 0.01
    assert_mean_close(accepted, expected_accepted(Q, PI, Q, num_steps), "accepted moves, start ~ q")


def test_exact_distance_to_target_shrinks_with_steps():
    """The exact ||q P^L - pi||_TV strictly decreases over L = 0, 1, 2, 4, 16 and 16 steps are not yet converged."""
    P = independence_transition_matrix(PI, Q)
    distances = [total_variation(distribution_after(Q, P, steps), PI) for steps in (0, 1, 2, 4, 16)]
    assert all(later < earlier for earlier, later in zip(distances, distances[1:])), distances
    assert distances[-1] < 0.5 * distances[0]
    assert distances[-1] > 0.01  # not converged: the L=16 test above checks its histogram rejects pi


# ----------------------------------------------------------------------------------------
# 2. Accept / reject against the closed-form MH rule
# ----------------------------------------------------------------------------------------


def test_infinite_log_ratios_decide_deterministically():
    """Exact: min(1, exp(+inf)) = 1, min(1, exp(-inf)) = 0, for every uniform of 10_000 chains."""
    B, inf = 10_000, float("inf")
    zeros = torch.zeros(B, 3, dtype=torch.float64)
    cases = {
        # log_target of (start, proposal 1, proposal 2) -> expected path
        "impossible start is always left": ([-inf, 0.0, 0.0], [1, 2]),
        "impossible proposals are never taken": ([0.0, -inf, -inf], [0, 0]),
        "impossible proposal skipped, next one can still win": ([0.0, -inf, 1e30], [0, 2]),
        "overwhelming proposal always taken": ([0.0, 1e30, 0.0], [1, 1]),
    }
    for name, (row, expected_path) in cases.items():
        log_target = torch.tensor(row, dtype=torch.float64).expand(B, 3)
        chain = mis_chain(log_target, zeros, generator=seeded(1))
        assert (chain.path == torch.tensor(expected_path)).all(), name
        assert (chain.accepted == sum(a != b for a, b in zip([0, *expected_path], expected_path))).all(), name
    # A proposal that q itself gives probability ~0 has importance weight +inf relative to the start.
    log_proposal = torch.tensor([0.0, -inf], dtype=torch.float64).expand(B, 2)
    chain = mis_chain(torch.zeros(B, 2, dtype=torch.float64), log_proposal, generator=seeded(2))
    assert (chain.index == 1).all() and (chain.accepted == 1).all()


def test_a_uniform_of_zero_still_rejects_an_impossible_proposal(monkeypatch):
    """Accept when log u < log ratio, strictly: a uniform draw of exactly 0 (log u = -inf, one in 2^24 in float32)
    never takes a proposal of p(x, h) = 0 (log ratio -inf), and takes any other."""
    real_rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *shape, **kwargs: torch.zeros_like(real_rand(*shape, **kwargs)))
    chain = mis_chain(torch.tensor([[0.0, -torch.inf, -50.0]]), torch.zeros(1, 3))
    assert chain.path.tolist() == [[0, 2]] and chain.accepted.tolist() == [1]


def test_three_step_chain_matches_hand_derivation():
    """Path, index and accept count equal the ones derived by hand from the known uniforms.

    mis_chain draws its uniforms as torch.rand(B, L) (in log_target's dtype) from the generator; recreating the same
    seed gives u, and the log weights w are set at fixed margins around log u, so each step's
    decision (accept iff log u_t < w_t - w_current) is known in advance. log_proposal is random
    (w = log_target - log_proposal), so a sign slip on log q changes the decisions.
    """
    seed, B, L = 7, 4, 3
    lu = torch.rand(B, L, dtype=torch.float64, generator=seeded(seed)).log()
    lu1, lu2, lu3 = lu.unbind(1)
    zero = torch.zeros(B, dtype=torch.float64)
    w1_accept = lu1 + 50.0  # far above the start: accepted
    log_weight = torch.stack(
        [
            # accept 1; reject 2 (it is 1 below the current state 1, and it would be accepted against
            # the start, i.e. if the current weight was not updated); accept 3 against state 1.
            torch.stack([zero[0], w1_accept[0], w1_accept[0] + lu2[0] - 1.0, w1_accept[0] + lu3[0] + 1.0]),
            # reject 1; reject 2 (it is compared with the start, not with rejected candidate 1,
            # against which it would be accepted); accept 3.
            torch.stack([zero[1], lu1[1] - 1.0, lu2[1] - 1.0, lu3[1] + 1.0]),
            # reject everything.
            torch.stack([zero[2], lu1[2] - 1.0, lu2[2] - 1.0, lu3[2] - 1.0]),
            # accept every step, each time against the candidate just accepted.
            torch.stack([zero[3], lu1[3] + 1.0, lu1[3] + lu2[3] + 2.0, lu1[3] + lu2[3] + lu3[3] + 3.0]),
        ]
    )
    log_proposal = 5.0 * torch.randn(B, L + 1, dtype=torch.float64, generator=seeded(99))
    chain = mis_chain(log_weight + log_proposal, log_proposal, generator=seeded(seed))
    assert chain.path.tolist() == [[1, 1, 3], [0, 0, 3], [0, 0, 0], [1, 2, 3]]
    assert chain.index.tolist() == [3, 3, 0, 3]
    assert chain.accepted.tolist() == [2, 1, 0, 3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_step_acceptance_rate_is_min_one_exp_delta(dtype):
    """Empirical acceptance rate of one step with w_1 - w_0 = delta is min(1, exp(delta)) within 4 SE;
    +-1e4 must give exactly 1 / 0 with no overflow (no NaN, no warnings)."""
    B = 200_000
    deltas = [-1e4, -30.0, -5.0, -1.0, -0.1, 0.0, 0.5, 3.0, 1e4]
    generator = seeded(11)
    for delta in deltas:
        # split delta between target and proposal: delta = (t1 - q1) - (t0 - q0)
        log_target = torch.tensor([[-3.0, -3.0 + delta / 2]], dtype=dtype).expand(B, 2)
        log_proposal = torch.tensor([[-1.0, -1.0 - delta / 2]], dtype=dtype).expand(B, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            chain = mis_chain(log_target, log_proposal, generator=generator)
        exact = min(1.0, float(torch.tensor(delta, dtype=torch.float64).exp()))
        assert_mean_close(chain.accepted, exact, f"acceptance rate at delta={delta} ({dtype})")
        assert torch.equal(chain.index, chain.accepted)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_accept_as_rarely_as_the_ratio_says(dtype):
    """Half-precision log-scores give the chain of their float32 values: with w_1 - w_0 = -12 a move is accepted with
    probability exp(-12) = 6e-6, about once in 200,000 chains (uniforms drawn in half precision are 0, log u = -inf,
    once in a few thousand draws, and each such draw would accept)."""
    chains = 200_000
    log_target = torch.tensor([[0.0, -12.0]], dtype=dtype).expand(chains, 2)
    chain = mis_chain(log_target, torch.zeros_like(log_target), generator=seeded(12))
    assert chain.accepted.sum() <= 10, f"{int(chain.accepted.sum())} of {chains} moves accepted at exp(-12) in {dtype}"


def test_mis_chain_rejects_mismatched_shapes_no_step_and_integer_scores():
    with pytest.raises(ValueError, match="must both be"):
        mis_chain(torch.zeros(3, 4), torch.zeros(3, 5))
    with pytest.raises(ValueError, match="must both be"):
        mis_chain(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="L >= 1"):  # the start alone: no step to take
        mis_chain(torch.zeros(2, 1), torch.zeros(2, 1))
    with pytest.raises(ValueError, match="floating point"):
        mis_chain(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))


# ----------------------------------------------------------------------------------------
# 3. index_cached_mis and naive_mis on a 9-state model
# ----------------------------------------------------------------------------------------

V, K = 2, 3  # two latent positions with three classes each: 9 joint states s = h_0 * K + h_1
Q_LOGITS = torch.tensor([[1.2, 0.0, -0.6], [-0.4, 0.9, 0.2]], dtype=torch.float64)
LOG_Q = Q_LOGITS.log_softmax(-1)  # (V, K)
LOG_JOINT_TABLE = torch.tensor([-0.8, 0.6, 1.1, 0.9, -0.5, 0.3, 1.4, -0.2, 0.1], dtype=torch.float64) - 40.0
Q_JOINT = (LOG_Q[0][:, None] + LOG_Q[1][None, :]).flatten().exp()  # exact product proposal over the 9 states
PI_JOINT = LOG_JOINT_TABLE.softmax(0)  # exact target
P_JOINT = independence_transition_matrix(PI_JOINT, Q_JOINT)
NUM_EXAMPLES = 60_000


def state_of(h: Tensor) -> Tensor:
    """(..., V) latents -> joint state index."""
    return h[..., 0] * K + h[..., 1]


def latent_of(state: Tensor) -> Tensor:
    return torch.stack([state // K, state % K], dim=-1)


def log_joint(h: Tensor) -> Tensor:
    """The toy "decoder": (B, N, V) -> (B, N) log p(x, h), the same table for every example."""
    return LOG_JOINT_TABLE[state_of(h)]


def batch_log_q(batch: int) -> Tensor:
    return LOG_Q.expand(batch, V, K)


def run_sampler(sampler: str, num_steps: int, start: Tensor | None, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """Run `sampler` on NUM_EXAMPLES identical examples; returns (latent, path, accepted)."""
    generator, log_q = seeded(seed), batch_log_q(NUM_EXAMPLES)
    if sampler == "index_cached":
        has_start = None if start is None else torch.ones(NUM_EXAMPLES, dtype=torch.bool)
        out = index_cached_mis(log_q, log_joint, num_steps, start=start, has_start=has_start, generator=generator)
    else:
        out = naive_mis(lambda: log_q, log_joint, num_steps, start=start, generator=generator)
    assert out.latent.shape == (NUM_EXAMPLES, V) and out.path.shape == (NUM_EXAMPLES, num_steps, V)
    assert torch.equal(out.path[:, -1], out.latent)
    return out.latent, out.path, out.accepted


def test_toy_model_is_not_trivial():
    """q and pi over the 9 joint states differ substantially, and 10 steps do not reach pi."""
    assert total_variation(Q_JOINT, PI_JOINT) > 0.2
    assert total_variation(distribution_after(Q_JOINT, P_JOINT, 10), PI_JOINT) > 0.01


@pytest.mark.parametrize("sampler", ["index_cached", "naive"])
@pytest.mark.parametrize("num_steps", [1, 3, 10])
def test_sampler_from_fresh_proposal_follows_q_P_power_L(sampler, num_steps):
    """Start h_0 ~ q: the final state is distributed as the exact q P^L over the 9 joint states,
    the state after step t as q P^t, and the mean accept count matches its exact expectation."""
    latent, path, accepted = run_sampler(sampler, num_steps, start=None, seed=300 + num_steps)
    exact = distribution_after(Q_JOINT, P_JOINT, num_steps)
    assert_distributed_as(state_of(latent), exact, f"{sampler}: final state, L={num_steps}")
    t = (num_steps + 1) // 2
    assert_distributed_as(state_of(path[:, t - 1]), distribution_after(Q_JOINT, P_JOINT, t), f"{sampler}: state after step {t}")
    assert_mean_close(accepted, expected_accepted(Q_JOINT, PI_JOINT, Q_JOINT, num_steps), f"{sampler}: accepted moves")


@pytest.mark.parametrize("sampler", ["index_cached", "naive"])
@pytest.mark.parametrize("num_steps", [1, 3, 10])
def test_sampler_started_from_target_stays_at_target(sampler, num_steps):
    """Start = exact draws from pi (has_start all True): the final state is still distributed as pi."""
    start = latent_of(draw(PI_JOINT, (NUM_EXAMPLES,), seeded(400 + num_steps)))
    latent, _, accepted = run_sampler(sampler, num_steps, start=start, seed=500 + num_steps)
    assert_distributed_as(state_of(latent), PI_JOINT, f"{sampler}: final state from pi, L={num_steps}")
    assert_mean_close(accepted, expected_accepted(PI_JOINT, PI_JOINT, Q_JOINT, num_steps), f"{sampler}: accepted moves")


def test_index_cached_mis_candidates_and_their_scores():
    """With a mixed has_start mask: candidate 0 is `start` exactly where has_start and a fresh q draw
    elsewhere; proposals are q draws; log_proposal / log_target equal the enumerated log q / log p
    of the candidates; path and latent are the candidates picked by mis_chain on those scores."""
    B, L = 40_000, 4
    has_start = torch.arange(B) % 3 == 0
    # Cached rows hold the state (2, 2) (q gives it 0.03); the others hold the uint8 cache's empty
    # sentinel 255, as LatentCache.read returns them: it must never be scored or gathered.
    start = torch.where(has_start[:, None], latent_of(torch.full((B,), 8)), torch.full((B, V), 255))
    out = index_cached_mis(batch_log_q(B), log_joint, L, start=start, has_start=has_start, generator=seeded(600))
    assert out.candidates.shape == (B, L + 1, V) and out.log_target.shape == out.log_proposal.shape == (B, L + 1)
    assert torch.equal(out.candidates[has_start, 0], start[has_start])
    assert_distributed_as(state_of(out.candidates[~has_start, 0]), Q_JOINT, "fresh start candidates")
    for j in range(1, L + 1):
        assert_distributed_as(state_of(out.candidates[:, j]), Q_JOINT, f"proposal {j}")
    states = state_of(out.candidates)
    torch.testing.assert_close(out.log_proposal, Q_JOINT.log()[states])
    torch.testing.assert_close(out.log_proposal, categorical_log_prob(batch_log_q(B), out.candidates))
    torch.testing.assert_close(out.log_target, LOG_JOINT_TABLE[states])
    # Each step either stays (previous state, candidate 0 before step 1) or moves to that step's proposal.
    previous = torch.cat([out.candidates[:, :1], out.path[:, :-1]], dim=1)
    stays = (out.path == previous).all(-1)
    moves = (out.path == out.candidates[:, 1:]).all(-1)
    assert (stays | moves).all()
    assert ((out.accepted >= (~stays).sum(1)) & (out.accepted <= moves.sum(1))).all()
    assert torch.equal(out.latent, out.path[:, -1])


def test_index_cached_mis_without_start_ignores_has_start_and_needs_a_step():
    """start=None: every chain starts from a fresh q draw; num_steps < 1 is refused."""
    B = 30_000
    out = index_cached_mis(batch_log_q(B), log_joint, 1, has_start=torch.ones(B, dtype=torch.bool), generator=seeded(700))
    assert_distributed_as(state_of(out.candidates[:, 0]), Q_JOINT, "start candidates without start")
    with pytest.raises(ValueError):
        index_cached_mis(batch_log_q(2), log_joint, 0)
    with pytest.raises(ValueError, match="class indices"):  # not truncated to indices in silence
        index_cached_mis(batch_log_q(2), log_joint, 1, start=torch.full((2, V), 1.7))


# ----------------------------------------------------------------------------------------
# 4. sample_categorical and categorical_log_prob
# ----------------------------------------------------------------------------------------


def test_sample_categorical_marginals_match_probabilities():
    """Each (example, position) histogram matches exp(log_probs[b, v]) (all different), and positions are independent."""
    B, Vs, Ks, N = 3, 4, 5, 20_000
    log_probs = (1.0 * torch.randn(B, Vs, Ks, generator=seeded(800))).log_softmax(-1)
    h = sample_categorical(log_probs, N, seeded(801))
    assert h.shape == (B, N, Vs) and h.dtype == torch.long
    for b in range(B):
        for v in range(Vs):
            assert_distributed_as(h[b, :, v], log_probs[b, v].exp(), f"example {b}, position {v}")
    pair_probs = (log_probs[0, 0][:, None] + log_probs[0, 1][None, :]).exp().flatten()
    assert_distributed_as(h[0, :, 0] * Ks + h[0, :, 1], pair_probs, "joint of positions 0 and 1")


def test_categorical_log_prob_matches_a_loop():
    """log q(h) = sum_v log_probs[b, v, h[b, n, v]], computed by explicit loops."""
    B, N, Vs, Ks = 2, 3, 4, 5
    log_probs = torch.randn(B, Vs, Ks, generator=seeded(900)).log_softmax(-1)
    h = torch.randint(0, Ks, (B, N, Vs), generator=seeded(901))
    expected = torch.tensor(
        [[sum(float(log_probs[b, v, h[b, n, v]]) for v in range(Vs)) for n in range(N)] for b in range(B)]
    )
    torch.testing.assert_close(categorical_log_prob(log_probs, h), expected)


# ----------------------------------------------------------------------------------------
# 5. LatentCache
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "num_categories, dtype",
    [(10, torch.uint8), (255, torch.uint8), (256, torch.int16), (512, torch.int16), (40_000, torch.int32)],
)
def test_cache_dtype_and_roundtrip_of_the_largest_class(num_categories, dtype):
    """Smallest dtype with room for classes 0..K-1 plus a sentinel; class K-1 survives a write / read."""
    assert cache_dtype(num_categories) == dtype
    cache = LatentCache(5, (2, 3), num_categories)
    assert cache.codes.dtype == dtype and cache.codes.shape == (5, 2, 3)
    latent = torch.tensor([[[0, num_categories - 1, 1], [num_categories - 2, 0, num_categories - 1]]])
    cache.write(torch.tensor([2]), latent)
    codes, has_entry = cache.read(torch.tensor([2, 0]))
    assert codes.dtype == torch.long and torch.equal(codes[0], latent[0])
    assert has_entry.tolist() == [True, False]


def test_cache_empty_entries_and_roundtrip():
    """A fresh cache has no entries; written entries read back exactly; unwritten ones stay empty."""
    cache = LatentCache(10, (4,), 7)
    _, has_entry = cache.read(torch.arange(10))
    assert not has_entry.any() and float(cache.fill_rate()) == 0.0
    index = torch.tensor([7, 2, 5])
    latent = torch.randint(0, 7, (3, 4), generator=seeded(1000))
    cache.write(index, latent)
    codes, has_entry = cache.read(torch.tensor([5, 7, 2, 3]))
    assert torch.equal(codes[:3], latent[[2, 0, 1]])
    assert has_entry.tolist() == [True, True, True, False]
    assert float(cache.fill_rate()) == pytest.approx(0.3)
    cache.codes[7, 1] = cache.sentinel  # an entry with one empty position is not an entry
    assert cache.read(torch.tensor([7]))[1].tolist() == [False]


def test_cache_duplicate_indices_last_occurrence_wins():
    """With repeated indices in one write, every example ends with its LAST occurrence's latent
    (compared with a Python dict filled in order), over many random batches."""
    generator = seeded(1100)
    for _ in range(50):
        cache = LatentCache(6, (3,), 300)
        index = torch.randint(0, 6, (20,), generator=generator)
        latent = torch.randint(0, 300, (20, 3), generator=generator)
        last = {}
        for i, row in zip(index.tolist(), latent):
            last[i] = row
        cache.write(index, latent)
        keys = torch.tensor(sorted(last))
        codes, has_entry = cache.read(keys)
        assert has_entry.all()
        assert torch.equal(codes, torch.stack([last[k] for k in keys.tolist()]))
    # A hand example: example 3 is written three times, example 1 twice.
    cache = LatentCache(4, (1,), 10)
    cache.write(torch.tensor([3, 1, 3, 3, 1]), torch.tensor([[1], [2], [3], [4], [5]]))
    assert cache.read(torch.tensor([3, 1]))[0].flatten().tolist() == [4, 5]


def test_cache_survives_state_dict_roundtrip():
    """`codes` is in state_dict(); a fresh cache loading it reads back the same entries and empties."""
    cache = LatentCache(8, (2,), 256)
    cache.write(torch.tensor([0, 5]), torch.tensor([[255, 3], [17, 0]]))
    state = cache.state_dict()
    assert set(state) == {"codes", "changed_epoch"}
    fresh = LatentCache(8, (2,), 256)
    fresh.load_state_dict(state)
    for reader in (cache, fresh):
        codes, has_entry = reader.read(torch.arange(8))
        assert codes[[0, 5]].tolist() == [[255, 3], [17, 0]]
        assert has_entry.tolist() == [True, False, False, False, False, True, False, False]
