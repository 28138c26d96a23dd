"""VectorQuantizer: nearest code, straight-through gradient, VQ losses, EMA codebook, dead-code restart,
k-means init, checkpoints and perplexity, each against a brute-force or hand-computed reference."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from models.components.code_usage import code_counts
from models.components.quantizer import VectorQuantizer

# (input shape, channel_dim): the spatial (B, D, H', W') and the flat (B, V, D) layout, D = 3
LAYOUTS = {"spatial": ((2, 3, 4, 5), 1), "flat": ((2, 7, 3), -1)}


def _channels_last(z_e: Tensor, channel_dim: int) -> Tensor:
    """(N, D) rows of z_e in the order of `codes.reshape(-1)`."""
    return z_e.movedim(channel_dim, -1).reshape(-1, z_e.shape[channel_dim])


def _set_codebook(quantizer: VectorQuantizer, codebook: Tensor) -> None:
    """Set the codebook; in EMA mode also m = e N, else the next EMA update would restore the old m / N."""
    with torch.no_grad():
        quantizer.codebook.copy_(codebook)
        if quantizer.ema:
            quantizer.ema_embed_sum.copy_(codebook * quantizer.ema_cluster_size[:, None])


def _quantizer(num_codes: int = 16, code_dim: int = 3, **kwargs) -> VectorQuantizer:
    torch.manual_seed(0)
    quantizer = VectorQuantizer(num_codes=num_codes, code_dim=code_dim, **kwargs)
    _set_codebook(quantizer, torch.randn(num_codes, code_dim))  # codes spread like the data: most are used
    return quantizer


@pytest.mark.parametrize("layout", LAYOUTS)
def test_nearest_code_shapes_and_lookup(layout: str) -> None:
    shape, channel_dim = LAYOUTS[layout]
    quantizer = _quantizer().eval()
    z_e = torch.randn(shape)
    out = quantizer(z_e, channel_dim=channel_dim)

    flat = _channels_last(z_e, channel_dim)
    brute = (flat[:, None, :] - quantizer.codebook[None]).square().sum(-1).argmin(1)  # (N, K, D) reference
    code_shape = shape[:channel_dim % len(shape)] + shape[channel_dim % len(shape) + 1 :]
    assert out.codes.dtype == torch.long and out.codes.shape == code_shape
    assert torch.equal(out.codes.reshape(-1), brute)
    assert brute.unique().numel() >= 8  # not a trivial case where every vector has the same code

    assert out.quantized.shape == z_e.shape
    for scalar in (out.loss, out.codebook_loss, out.commitment_loss, out.perplexity, out.restarts):
        assert scalar.shape == ()
    assert out.restarts.dtype == torch.long and out.restarts == 0

    looked_up = quantizer.lookup(out.codes, channel_dim=channel_dim)
    expected = quantizer.codebook[brute].reshape(*code_shape, 3).movedim(-1, channel_dim)
    assert torch.equal(looked_up, expected)
    torch.testing.assert_close(out.quantized, looked_up)  # the forward value is z_q


@pytest.mark.parametrize("ema", [True, False])
@pytest.mark.parametrize("decay", [0.0, 1.0, 2.0])
def test_a_decay_outside_0_1_is_refused_with_or_without_ema(decay: float, ema: bool) -> None:
    """The codes' usage, which decides the dead-code restarts, is a moving average with this decay in either mode: at 2
    used codes would go negative and restart at every step, at 1 no code would ever restart."""
    with pytest.raises(ValueError, match=r"decay .* must be in \(0, 1\)"):
        VectorQuantizer(8, 3, ema=ema, decay=decay)


def test_wrong_channel_size_is_refused() -> None:
    quantizer = _quantizer(code_dim=3)
    with pytest.raises(ValueError, match=r"4 channels.*code_dim is 3"):
        quantizer(torch.randn(2, 4, 5, 5))
    with pytest.raises(ValueError, match=r"5 channels.*code_dim is 3"):
        quantizer(torch.randn(2, 3, 5), channel_dim=-1)  # spatial-looking size, flat layout


@pytest.mark.parametrize("ema", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_straight_through_gradient_is_identity(layout: str, ema: bool) -> None:
    shape, channel_dim = LAYOUTS[layout]
    quantizer = _quantizer(ema=ema)
    z_e = torch.randn(shape, requires_grad=True)
    g = torch.randn(shape)
    quantized = quantizer(z_e, channel_dim=channel_dim).quantized
    (grad,) = torch.autograd.grad((quantized * g).sum(), z_e)
    assert torch.equal(grad, g)


def test_loss_gradients_closed_form() -> None:
    quantizer = _quantizer(num_codes=8)
    z_e = torch.randn(2, 3, 4, 4, requires_grad=True)
    out = quantizer(z_e)
    flat, codes = _channels_last(z_e.detach(), 1), out.codes.reshape(-1)
    codebook = quantizer.codebook.detach().clone()
    numel = flat.numel()

    # codebook loss ||sg[z_e] - e||^2: no gradient to the encoder; dL/de_k = sum_{i -> k} 2 (e_k - z_i) / numel
    grad_z, grad_e = torch.autograd.grad(
        out.codebook_loss, [z_e, quantizer.codebook], retain_graph=True, materialize_grads=True
    )
    assert torch.equal(grad_z, torch.zeros_like(z_e))
    expected = torch.zeros_like(codebook)
    used = codes.unique()
    assert 1 < len(used) < 8  # some codes used, some not
    for k in used:
        assigned = flat[codes == k]
        expected[k] = (2 * (codebook[k] - assigned) / numel).sum(0)
        assert grad_e[k].abs().sum() > 0
        # a descent step of size numel / (2 n_k) lands exactly on the mean of the assigned vectors
        torch.testing.assert_close(codebook[k] - numel / (2 * len(assigned)) * grad_e[k], assigned.mean(0))
    torch.testing.assert_close(grad_e, expected)  # includes zero rows for the unused codes

    # commitment loss ||z_e - sg[e]||^2: no gradient to the codebook; dL/dz_e = 2 (z_e - e) / numel
    grad_z, grad_e = torch.autograd.grad(
        out.commitment_loss, [z_e, quantizer.codebook], retain_graph=True, materialize_grads=True
    )
    assert torch.equal(grad_e, torch.zeros_like(codebook))
    torch.testing.assert_close(grad_z, 2 * (z_e - quantizer.lookup(out.codes)) / numel)

    assert quantizer.beta == 0.25
    torch.testing.assert_close(out.loss, out.codebook_loss + 0.25 * out.commitment_loss)
    assert out.codebook_loss > 0 and out.commitment_loss > 0


def test_ema_updates_match_closed_form() -> None:
    decay, eps, k = 0.9, 0.1, 3  # large eps so that a missing Laplace smoothing shows
    quantizer = VectorQuantizer(num_codes=k, code_dim=2, ema=True, decay=decay, epsilon=eps)
    assert "codebook" not in dict(quantizer.named_parameters()) and "codebook" in dict(quantizer.named_buffers())
    # fresh statistics are consistent with the codebook: N = 1, m = e
    torch.testing.assert_close(quantizer.ema_embed_sum / quantizer.ema_cluster_size[:, None], quantizer.codebook)

    codebook = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    _set_codebook(quantizer, codebook)
    z = torch.tensor([[0.5, 0.0], [-0.5, 0.2], [4.2, 0.1], [3.9, -0.3], [4.1, 0.4]])
    assignment = torch.tensor([0, 0, 1, 1, 1])  # code 2 is never used
    counts = torch.tensor([2.0, 3.0, 0.0])
    sums = torch.stack([z[:2].sum(0), z[2:].sum(0), torch.zeros(2)])

    size, embed_sum = torch.ones(k), codebook.clone()
    for _ in range(2):
        out = quantizer(z[None], channel_dim=-1)
        assert torch.equal(out.codes[0], assignment)
        size = decay * size + (1 - decay) * counts
        embed_sum = decay * embed_sum + (1 - decay) * sums
        n = size.sum()
        smoothed = (size + eps) / (n + k * eps) * n
        torch.testing.assert_close(quantizer.ema_cluster_size, size)
        torch.testing.assert_close(quantizer.ema_embed_sum, embed_sum)
        torch.testing.assert_close(quantizer.codebook, embed_sum / smoothed[:, None])
        assert out.codebook_loss == 0
        torch.testing.assert_close(out.loss, 0.25 * out.commitment_loss)

    quantizer.eval()
    before = {name: value.clone() for name, value in quantizer.state_dict().items()}
    quantizer(z[None] + 1.0, channel_dim=-1)
    for name, value in quantizer.state_dict().items():
        assert torch.equal(value, before[name]), name


@pytest.mark.parametrize("ema", [False, True])
def test_dead_code_restart(ema: bool) -> None:
    def run(threshold: float) -> tuple[VectorQuantizer, list]:
        torch.manual_seed(0)
        centres = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
        z = (centres.repeat_interleave(10, 0) + 0.1 * torch.randn(30, 2))[None]  # (1, 30, 2)
        quantizer = VectorQuantizer(num_codes=4, code_dim=2, ema=ema, decay=0.5, dead_code_threshold=threshold)
        _set_codebook(quantizer, torch.cat([centres, torch.tensor([[100.0, 100.0]])]))  # code 3: far from all data
        return quantizer, [(quantizer(z, channel_dim=-1), quantizer.codebook[3].clone()) for _ in range(3)], z

    # usage of code 3: 1 (init) -> 0.5 (step 1, not < 0.3) -> 0.25 (step 2, dead: restarted)
    quantizer, steps, z = run(threshold=0.3)
    (out1, code1), (out2, code2), (out3, _) = steps
    assert out1.restarts == 0 and 3 not in out1.codes and code1[0] > 50
    assert out2.restarts == 1 and 3 not in out2.codes
    assert (z[0] - code2).norm(dim=1).min() == 0  # moved exactly onto an encoder output
    assert 3 in out3.codes and out3.restarts == 0  # and used on the next forward
    assert quantizer.code_usage[3] >= 0.3
    # and stays with the data after the update that follows (in EMA mode: its m and N were reset too)
    assert (z[0] - quantizer.codebook[3]).norm(dim=1).min() < 0.5

    _, steps, _ = run(threshold=0.0)
    assert all(out.restarts == 0 and 3 not in out.codes and code[0] > 50 for out, code in steps)


@pytest.mark.parametrize("seed", range(3))
def test_kmeans_init_finds_blobs_once(seed: int) -> None:
    torch.manual_seed(seed)
    centres = torch.tensor([[3.0, 3.0], [-3.0, 3.0], [3.0, -3.0], [-3.0, -3.0]])
    z = (centres.repeat_interleave(32, 0) + 0.05 * torch.randn(128, 2)).T.reshape(1, 2, 8, 16)  # spatial
    quantizer = VectorQuantizer(num_codes=4, code_dim=2, kmeans_init=True)
    quantizer.eval()(z)
    assert not quantizer.initialized  # only a training forward initializes

    out = quantizer.train()(z)
    assert quantizer.initialized
    distances = torch.cdist(centres, quantizer.codebook.detach())
    assert distances.min(1).values.max() < 0.05  # every blob centre has a code on it ...
    assert distances.argmin(1).unique().numel() == 4  # ... a different one each
    torch.testing.assert_close(out.perplexity, torch.tensor(4.0))
    torch.testing.assert_close(quantizer.usage, torch.full((4,), 32.0))  # usage = the k-means cluster sizes

    initialized = quantizer.codebook.detach().clone()
    quantizer(torch.randn(1, 2, 8, 16))
    assert torch.equal(quantizer.codebook, initialized)


def test_kmeans_init_with_fewer_vectors_than_codes() -> None:
    torch.manual_seed(0)
    z = torch.randn(1, 3, 2)
    quantizer = VectorQuantizer(num_codes=8, code_dim=2, kmeans_init=True)
    quantizer(z, channel_dim=-1)
    assert torch.cdist(quantizer.codebook.detach(), z[0]).min(1).values.max() < 1e-6  # every code is a data point


@pytest.mark.parametrize("ema", [False, True])
def test_state_dict_round_trip(ema: bool) -> None:
    config = dict(num_codes=8, code_dim=3, ema=ema, kmeans_init=True)
    torch.manual_seed(0)
    trained = VectorQuantizer(**config)
    for _ in range(2):
        trained(torch.randn(4, 3, 4, 4))
    expected_keys = {"codebook", "initialized"} | ({"ema_cluster_size", "ema_embed_sum"} if ema else {"usage"})
    assert set(trained.state_dict()) == expected_keys

    restored = VectorQuantizer(**config)
    restored.load_state_dict(trained.state_dict())
    z_e = torch.randn(4, 3, 4, 4)
    for mode in ("eval", "train"):  # a training forward of the restored copy must not redo k-means
        out_a, out_b = getattr(trained, mode)()(z_e), getattr(restored, mode)()(z_e)
        for a, b in zip(out_a, out_b):
            assert torch.equal(a, b)
    for (name, a), b in zip(trained.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("code_of_each_vector", "perplexity"),
    [([0, 0, 1, 1, 2, 2], 3.0), ([0, 1, 2, 3], 4.0), ([1, 1, 1], 1.0), ([0, 0, 1, 2], 2.0**1.5)],  # last: H = 1.5 bits
)
def test_perplexity(code_of_each_vector: list[int], perplexity: float) -> None:
    quantizer = VectorQuantizer(num_codes=4, code_dim=2)
    _set_codebook(quantizer, torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    z = quantizer.codebook.detach()[code_of_each_vector][None]  # each vector sits on its code
    for mode in ("eval", "train"):
        out = getattr(quantizer, mode)()(z, channel_dim=-1)
        assert torch.equal(out.codes[0], torch.tensor(code_of_each_vector))
        assert math.isclose(out.perplexity.item(), perplexity, rel_tol=1e-6)


def test_code_counts_is_bincount_without_the_host_sync() -> None:
    """The sync-free histogram behind the VQ-VAE's and JSA's code usage equals torch.bincount, codes never drawn
    (here the top ones) included as zeros, for any shape of codes."""
    codes = torch.randint(0, 7, (16, 5), generator=torch.Generator().manual_seed(0))
    counts = code_counts(codes, 10)
    assert counts.dtype == torch.float32 and counts.shape == (10,)
    assert torch.equal(counts, torch.bincount(codes.flatten(), minlength=10).float())
    assert counts[7:].eq(0).all() and counts.sum() == codes.numel()


def test_total_loss_gradients_put_beta_on_the_commitment_term() -> None:
    """Without EMA, the gradients of the total loss L = ||sg[z_e] - e||^2 + beta ||z_e - sg[e]||^2 (means over the
    n elements) are dL/dz_e = beta 2 (z_e - e) / n and dL/de_k = sum_{i -> k} 2 (e_k - z_i) / n: the two terms have
    equal values, so only the gradients tell which one beta weighs."""
    beta = 0.4
    quantizer = _quantizer(num_codes=8, beta=beta)
    z_e = torch.randn(2, 3, 4, 4, requires_grad=True)
    out = quantizer(z_e)
    grad_z, grad_e = torch.autograd.grad(out.loss, [z_e, quantizer.codebook])

    flat, codes = _channels_last(z_e.detach(), 1), out.codes.reshape(-1)
    codebook, numel = quantizer.codebook.detach(), z_e.numel()
    torch.testing.assert_close(grad_z, beta * 2 * (z_e.detach() - quantizer.lookup(out.codes).detach()) / numel)
    expected = torch.zeros_like(codebook).index_add_(0, codes, 2 * (codebook[codes] - flat) / numel)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(grad_e, expected)


def test_usage_without_ema_follows_its_decay() -> None:
    """Without EMA, after each training forward the usage is u <- d u + (1 - d) n (n: this batch's code counts,
    from a brute-force nearest code) from u = 1, with d = 0.8 (not 0.5, where d and 1 - d coincide)."""
    decay = 0.8
    quantizer = _quantizer(num_codes=6, code_dim=2, decay=decay)
    usage = torch.ones(6)
    for step in range(3):
        z = torch.randn(1, 20, 2, generator=torch.Generator().manual_seed(step))
        quantizer(z, channel_dim=-1)
        nearest = torch.cdist(z[0], quantizer.codebook.detach()).argmin(1)
        usage = decay * usage + (1 - decay) * torch.bincount(nearest, minlength=6).float()
        torch.testing.assert_close(quantizer.usage, usage)
    assert (usage - 1).abs().max() > 1  # far from the start: d and 1 - d swapped would differ
