"""Priors p(h) over discrete codes h = (h_1, ..., h_V), h_v ∈ {0, ..., K-1} (docs/priors.md):

    log p(h) = sum_v log p(h_v | h_<v)     (raster order; all V conditionals from one pass over h)

`uniform` (zero logits), `factorized` (V x K logits), `autoregressive` (MADE, Germain et al., 2015) and `pixelcnn`
(gated PixelCNN, van den Oord et al., 2016, no blind spot), listed in `PRIORS`. `log_prob` scores any number of code
sets in one pass; `sample` takes V passes. Learned priors start uniform (zero output layer)."""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.components.precision import full_precision
from samplers.mis import categorical_draw, sample_categorical


class CodePrior(nn.Module):
    """p(h) over V positions with K classes each. A subclass gives the conditionals' logits."""

    is_factorized = False  # p(h) = prod_v p(h_v): log-probabilities (V, K) exist in closed form, as `log_probs()`
    has_network = False  # sized by model.prior_hidden / prior_layers (the constructor's `hidden` and `num_layers`)

    def __init__(self, num_latents: int, num_categories: int) -> None:
        super().__init__()
        self.num_latents, self.num_categories = num_latents, num_categories

    @classmethod
    def from_settings(cls, num_latents: int, num_categories: int, grid: tuple[int, ...] = (),
                      hidden: int | None = None, num_layers: int | None = None) -> CodePrior:
        """The prior a model's settings describe (what `build_prior` calls): V positions, laid out on the H' x W'
        `grid` of a conv backbone (else `grid` is ()), K classes; hidden / num_layers are model.prior_hidden and
        prior_layers, None where not given (then the constructor's defaults), and always None unless `has_network`.
        A prior whose constructor takes other arguments overrides this (PixelCNNPrior takes the grid)."""
        return cls(num_latents, num_categories, **_given(hidden=hidden, num_layers=num_layers))

    def _device(self) -> torch.device:
        """Where the prior's tensors are (a prior without parameters, such as the uniform one, holds buffers)."""
        return next(itertools.chain(self.parameters(), self.buffers())).device

    def conditional_logits(self, codes: Tensor) -> Tensor:
        """Logits of p(h_v | h_<v) at every position, (N, V, K), for code sets (N, V)."""
        raise NotImplementedError

    def log_prob(self, codes: Tensor) -> Tensor:
        """log p(h) for code sets (..., V) (long), shape (...); all of them in one forward pass."""
        flat = codes.reshape(-1, self.num_latents)
        log_probs = full_precision(self.conditional_logits(flat)).log_softmax(-1)
        return log_probs.gather(-1, flat.unsqueeze(-1)).squeeze(-1).sum(-1).view(codes.shape[:-1])

    @torch.no_grad()
    def sample(self, num_samples: int) -> Tensor:
        """num_samples code sets (N, V) drawn from p(h): position by position, V forward passes."""
        codes = torch.zeros(num_samples, self.num_latents, dtype=torch.long, device=self._device())
        for v in range(self.num_latents):
            logits = self.conditional_logits(codes)[:, v]  # depends on codes[:, :v] only
            codes[:, v] = categorical_draw(full_precision(logits).softmax(-1))  # multinomial(., 1) without its host check
        return codes


def _given(**sizes: int | None) -> dict[str, int]:
    return {name: value for name, value in sizes.items() if value is not None}


class FactorizedPrior(CodePrior):
    """p(h) = prod_v softmax(logits_v)[h_v], V x K learned logits (zero at first: the uniform prior)."""

    is_factorized = True

    def __init__(self, num_latents: int, num_categories: int) -> None:
        super().__init__(num_latents, num_categories)
        self.logits = nn.Parameter(torch.zeros(num_latents, num_categories))

    def log_probs(self) -> Tensor:
        """log p(h_v = k), (V, K): what a closed-form KL to the prior needs."""
        return self.logits.log_softmax(-1)

    def conditional_logits(self, codes: Tensor) -> Tensor:
        return self.logits.expand(codes.shape[0], -1, -1)

    def log_prob(self, codes: Tensor) -> Tensor:
        # The V x K log-probabilities once, gathered for every code set (not a log-softmax per set: MIS's hot path).
        flat = codes.reshape(-1, self.num_latents)
        log_probs = self.log_probs().expand(flat.shape[0], -1, -1)
        return log_probs.gather(-1, flat.unsqueeze(-1)).squeeze(-1).sum(-1).view(codes.shape[:-1])

    @torch.no_grad()
    def sample(self, num_samples: int) -> Tensor:
        return sample_categorical(self.log_probs().expand(num_samples, -1, -1), 1)[:, 0]  # positions independent: one draw


class UniformPrior(FactorizedPrior):
    """p(h_v) = 1/K: zero logits held in a buffer that no checkpoint stores (nothing to learn, nothing to save)."""

    def __init__(self, num_latents: int, num_categories: int) -> None:
        CodePrior.__init__(self, num_latents, num_categories)
        self.register_buffer("logits", torch.zeros(num_latents, num_categories), persistent=False)

    @torch.no_grad()
    def sample(self, num_samples: int) -> Tensor:
        return torch.randint(self.num_categories, (num_samples, self.num_latents), device=self.logits.device)


class MaskedLinear(nn.Linear):
    """A linear layer whose weight is multiplied by a fixed 0/1 mask (out_features, in_features)."""

    def __init__(self, mask: Tensor) -> None:
        super().__init__(mask.shape[1], mask.shape[0])
        self.register_buffer("mask", mask.float(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight * self.mask, self.bias)


class AutoregressivePrior(CodePrior):
    """MADE over the one-hot codes (Germain et al., 2015, Sec. 4).

    Degrees: input and output position v have degree v (1..V); each hidden unit gets a degree in
    1..V-1. A hidden unit may read an input of degree <= its own, an output of degree v may read a
    hidden unit of degree < v: every path from input v' to output v then has v' < v, so output v is
    p(h_v | h_<v). Output 1 reads nothing but its bias: the marginal p(h_1).
    """

    has_network = True

    def __init__(self, num_latents: int, num_categories: int, hidden: int = 256, num_layers: int = 2) -> None:
        super().__init__(num_latents, num_categories)
        if hidden < max(num_latents - 1, 1) or num_layers < 1:
            raise ValueError(
                f"the autoregressive prior needs prior_hidden >= V - 1 = {num_latents - 1} (a hidden unit for each degree "
                f"1..V-1, else some h_v cannot depend on some earlier h_u) and prior_layers >= 1, got {hidden} and {num_layers}"
            )
        positions = torch.arange(1, num_latents + 1).repeat_interleave(num_categories)  # degree of each one-hot unit
        hidden_degrees = torch.arange(hidden) % max(num_latents - 1, 1) + 1
        layers: list[nn.Module] = []
        previous = positions
        for _ in range(num_layers):
            layers += [MaskedLinear(hidden_degrees.unsqueeze(1) >= previous.unsqueeze(0)), nn.ReLU()]
            previous = hidden_degrees
        self.hidden = nn.Sequential(*layers)
        self.output = MaskedLinear(positions.unsqueeze(1) > previous.unsqueeze(0))
        nn.init.zeros_(self.output.weight)  # start as the uniform prior
        nn.init.zeros_(self.output.bias)

    def conditional_logits(self, codes: Tensor) -> Tensor:
        # A comparison, not F.one_hot: on the CPU (and the CUDA of older torch) one_hot reads the codes' minimum and maximum
        # back to the host to check them, two syncs every step (docs/mis.md#static-shapes-and-no-host-syncs).
        classes = torch.arange(self.num_categories, device=codes.device)
        one_hot = (codes.unsqueeze(-1) == classes).to(self.output.weight.dtype).flatten(1)  # (N, V*K)
        return self.output(self.hidden(one_hot)).view(-1, self.num_latents, self.num_categories)


class GatedMaskedConv(nn.Module):
    """One gated PixelCNN layer (van den Oord et al., 2016, Fig. 2): a vertical and a horizontal stack, gate
    tanh(a) * sigmoid(b). Vertical: a (k//2+1) x k convolution, padded and cropped so that output row i reads input
    rows i-k//2 .. i; horizontal: a 1 x (k//2+1) convolution over the cells to the left and the current one. The first
    layer (`first`) drops the current row / cell from both kernels, so no output sees its own input; later layers read
    the layer below's, which holds only what lies above / to the left. The vertical stack feeds the horizontal (1x1),
    never the other way round.
    """

    def __init__(self, channels: int, kernel: int, first: bool) -> None:
        super().__init__()
        self.first = first
        self.vertical = nn.Conv2d(channels, 2 * channels, (kernel // 2 + 1, kernel), padding=(kernel // 2, kernel // 2))
        self.horizontal = nn.Conv2d(channels, 2 * channels, (1, kernel // 2 + 1), padding=(0, kernel // 2))
        self.vertical_to_horizontal = nn.Conv2d(2 * channels, 2 * channels, 1)
        self.horizontal_out = nn.Conv2d(channels, channels, 1)
        vertical_mask = torch.ones_like(self.vertical.weight)
        horizontal_mask = torch.ones_like(self.horizontal.weight)
        if first:
            vertical_mask[:, :, -1] = 0  # the current row
            horizontal_mask[:, :, :, -1] = 0  # the current cell
        self.register_buffer("vertical_mask", vertical_mask, persistent=False)
        self.register_buffer("horizontal_mask", horizontal_mask, persistent=False)

    def forward(self, vertical_in: Tensor, horizontal_in: Tensor) -> tuple[Tensor, Tensor]:
        height, width = vertical_in.shape[-2:]
        vertical = F.conv2d(vertical_in, self.vertical.weight * self.vertical_mask, self.vertical.bias,
                            padding=self.vertical.padding)[:, :, :height]
        horizontal = F.conv2d(horizontal_in, self.horizontal.weight * self.horizontal_mask, self.horizontal.bias,
                              padding=self.horizontal.padding)[:, :, :, :width]
        vertical_out = _gate(vertical)
        horizontal_out = self.horizontal_out(_gate(horizontal + self.vertical_to_horizontal(vertical)))
        if not self.first:  # the residual of the first layer would carry the current cell's own code
            horizontal_out = horizontal_out + horizontal_in
        return vertical_out, horizontal_out


def _gate(x: Tensor) -> Tensor:
    a, b = x.chunk(2, dim=1)
    return torch.tanh(a) * torch.sigmoid(b)


class PixelCNNPrior(CodePrior):
    """Gated PixelCNN over an H' x W' code grid: codes embedded (K -> C channels), a first layer with
    a 7x7 reach (3 rows up, 3 cells left), `num_layers - 1` layers with a 3x3 reach, then 1x1 convolutions
    to K logits per cell. The reach grows one row per layer: with the defaults (5 layers) a cell sees 7
    rows above it, all of a 7x7 or 8x8 grid."""

    has_network = True

    def __init__(self, grid: Sequence[int], num_categories: int, hidden: int = 64, num_layers: int = 5) -> None:
        if len(grid) != 2:
            raise ValueError(
                "the pixelcnn prior needs a grid of codes (backbone=conv); for a flat latent (backbone=mlp) use "
                "prior=autoregressive"
            )
        if hidden < 1 or num_layers < 1:
            raise ValueError(f"the pixelcnn prior needs prior_hidden >= 1 and prior_layers >= 1, got {hidden} and {num_layers}")
        super().__init__(math.prod(grid), num_categories)
        self.grid = tuple(grid)
        self.embedding = nn.Embedding(num_categories, hidden)
        self.layers = nn.ModuleList(GatedMaskedConv(hidden, 7 if i == 0 else 3, first=i == 0) for i in range(num_layers))
        self.output = nn.Sequential(nn.ReLU(), nn.Conv2d(hidden, hidden, 1), nn.ReLU(), nn.Conv2d(hidden, num_categories, 1))
        nn.init.zeros_(self.output[-1].weight)  # start as the uniform prior
        nn.init.zeros_(self.output[-1].bias)

    @classmethod
    def from_settings(cls, num_latents: int, num_categories: int, grid: tuple[int, ...] = (),
                      hidden: int | None = None, num_layers: int | None = None) -> PixelCNNPrior:
        return cls(grid, num_categories, **_given(hidden=hidden, num_layers=num_layers))

    def conditional_logits(self, codes: Tensor) -> Tensor:
        x = self.embedding(codes.view(-1, *self.grid)).permute(0, 3, 1, 2)  # (N, C, H', W')
        vertical, horizontal = x, x
        for layer in self.layers:
            vertical, horizontal = layer(vertical, horizontal)
        return self.output(horizontal).flatten(2).transpose(1, 2)  # (N, H'W', K), raster order


# ---- the registry -------------------------------------------------------------------------------

# Every prior by the name a model's `prior` setting gives (model.prior=NAME, --model.prior=NAME).
PRIORS: dict[str, type[CodePrior]] = {
    "uniform": UniformPrior,
    "factorized": FactorizedPrior,
    "autoregressive": AutoregressivePrior,
    "pixelcnn": PixelCNNPrior,
}


def factorized_priors() -> list[str]:
    """The registered priors with a closed-form (V, K) table of log-probabilities (`is_factorized`)."""
    return [name for name, prior in PRIORS.items() if prior.is_factorized]


def build_prior(name: str, num_latents: int, num_categories: int, grid: Sequence[int] = (),
                hidden: int | None = None, num_layers: int | None = None) -> CodePrior:
    """The prior registered as `name` over V = num_latents positions (on `grid` for a conv
    backbone); hidden / num_layers: the width and depth of a prior with a network (None: its constructor's default,
    256 x 2 for `autoregressive`, 64 x 5 for `pixelcnn`)."""
    if name not in PRIORS:
        raise ValueError(f"model.prior: unknown prior {name!r}; choose one of {', '.join(PRIORS)}")
    for option, value in (("prior_hidden", hidden), ("prior_layers", num_layers)):
        if value is not None and value < 1:
            raise ValueError(f"model.{option} must be >= 1 (or null: the prior's default), got {value}")
    cls = PRIORS[name]
    if not cls.has_network and (hidden is not None or num_layers is not None):
        sized = " and ".join(other for other, prior in PRIORS.items() if prior.has_network)
        raise ValueError(f"model.prior_hidden and model.prior_layers size the {sized} priors; "
                         f"prior={name} has no network: leave them out")
    return cls.from_settings(num_latents, num_categories, tuple(grid), hidden, num_layers)
