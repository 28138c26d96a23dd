"""Encoder/decoder networks shared by every model, for 28x28x1 (MNIST) and 32x32x3 (CIFAR-10) images; `build_backbone`
returns (encoder, decoder, grid), the decoder's output having the image's shape, read by a likelihood.

* `mlp`: flatten -> 512 -> 256 -> features, and its mirror; the latent is (B, channels).
* `conv`: the VQ-VAE paper's (van den Oord et al., 2017): two stride-2 4x4 convolutions, a 3x3 convolution, two
  residual blocks, a 1x1 projection; the latent is a (B, channels, H/4, W/4) grid.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn

from configs.settings import Activation, BackboneName


def activation_layer(name: Activation) -> nn.Module:
    """The hidden layers' nonlinearity: ReLU, or LeakyReLU with slope 0.2 (the JSA paper's code, `lrelu`)."""
    if name == "relu":
        return nn.ReLU()
    if name == "leaky_relu":
        return nn.LeakyReLU(0.2)
    raise ValueError(f"unknown activation {name!r}; choose 'relu' or 'leaky_relu'")


def _mlp(sizes: Sequence[int], activation: Activation = "relu") -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:
            layers.append(activation_layer(activation))
    return nn.Sequential(*layers)


class MLPEncoder(nn.Module):
    def __init__(self, data_shape: Sequence[int], out_features: int, hidden: Sequence[int] = (512, 256),
                 activation: Activation = "relu") -> None:
        super().__init__()
        num_pixels = data_shape[0] * data_shape[1] * data_shape[2]
        self.net = _mlp([num_pixels, *hidden, out_features], activation)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x.flatten(1))


class MLPDecoder(nn.Module):
    def __init__(self, in_features: int, data_shape: Sequence[int], hidden: Sequence[int] = (256, 512),
                 activation: Activation = "relu") -> None:
        super().__init__()
        self.data_shape = tuple(data_shape)
        num_pixels = data_shape[0] * data_shape[1] * data_shape[2]
        self.net = _mlp([in_features, *hidden, num_pixels], activation)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z).unflatten(-1, self.data_shape)


class ResidualBlock(nn.Module):
    """x + conv1x1(relu(conv3x3(relu(x)))), as in the VQ-VAE paper."""

    def __init__(self, channels: int, hidden_channels: int | None = None) -> None:
        super().__init__()
        hidden_channels = hidden_channels or channels
        self.block = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(channels, hidden_channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden_channels, channels, 1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.block(x)


class ConvEncoder(nn.Module):
    def __init__(self, data_shape: Sequence[int], out_channels: int, hidden_channels: int = 64, num_res_blocks: int = 2) -> None:
        super().__init__()
        _check_conv_shape(data_shape)
        c = hidden_channels
        self.net = nn.Sequential(
            nn.Conv2d(data_shape[0], c // 2, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(c // 2, c, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, padding=1),
            *[ResidualBlock(c) for _ in range(num_res_blocks)],
            nn.ReLU(),
            nn.Conv2d(c, out_channels, 1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class ConvDecoder(nn.Module):
    def __init__(self, in_channels: int, data_shape: Sequence[int], hidden_channels: int = 64, num_res_blocks: int = 2) -> None:
        super().__init__()
        _check_conv_shape(data_shape)
        c = hidden_channels
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, c, 3, padding=1),
            *[ResidualBlock(c) for _ in range(num_res_blocks)],
            nn.ReLU(),
            nn.ConvTranspose2d(c, c // 2, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(c // 2, data_shape[0], 4, stride=2, padding=1),
        )

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


def _check_conv_shape(data_shape: Sequence[int]) -> None:
    if len(data_shape) != 3 or data_shape[1] % 4 or data_shape[2] % 4:
        raise ValueError(f"conv backbone needs images (C, H, W) with H and W divisible by 4, got {tuple(data_shape)}")


def latent_grid(name: BackboneName, data_shape: Sequence[int]) -> tuple[int, ...]:
    """The latent grid of backbone `name`: () for the MLP, (H/4, W/4) for the conv net."""
    if name == "mlp":
        return ()
    if name == "conv":
        _check_conv_shape(data_shape)
        return (data_shape[1] // 4, data_shape[2] // 4)
    raise ValueError(f"unknown backbone {name!r}; choose 'mlp' or 'conv'")


def build_backbone(
    name: BackboneName,
    data_shape: Sequence[int],
    encoder_channels: int,
    decoder_channels: int,
    hidden_channels: int = 64,
    num_res_blocks: int = 2,
    output_channels: int | None = None,
    activation: Activation = "relu",
) -> tuple[nn.Module, nn.Module, tuple[int, ...]]:
    """Return (encoder, decoder, latent grid) for backbone `name`.

    The grid is () for the MLP (latent (B, C)) and (H/4, W/4) for the conv net. The decoder outputs
    `output_channels` maps of the image's size (default C): a likelihood with several parameters per
    pixel and channel (e.g. a mixture of discretized logistics) asks for C times that many.
    `activation` is the MLP's nonlinearity (the conv nets keep the VQ-VAE paper's ReLU).
    """
    if len(data_shape) != 3:
        raise ValueError(f"data_shape must be (C, H, W), got {tuple(data_shape)}")
    if hidden_channels < 1:
        raise ValueError(f"hidden_channels (the conv backbone's width) must be >= 1, got {hidden_channels}")
    grid = latent_grid(name, data_shape)
    output_shape = (output_channels or data_shape[0], *data_shape[1:])
    if name == "mlp":
        return (MLPEncoder(data_shape, encoder_channels, activation=activation),
                MLPDecoder(decoder_channels, output_shape, activation=activation), grid)
    activation_layer(activation)  # an unknown name is an error here too
    encoder = ConvEncoder(data_shape, encoder_channels, hidden_channels, num_res_blocks)
    decoder = ConvDecoder(decoder_channels, output_shape, hidden_channels, num_res_blocks)
    return encoder, decoder, grid
