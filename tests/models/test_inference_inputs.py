"""What a notebook gives a trained model's inference calls (models/base.py): a number of importance samples below 1,
or 8-bit images, is refused in one line that names it and what is taken, before any network runs."""

from __future__ import annotations

import pytest
import torch

import models  # noqa: F401 (registers the models: common/registry.py)
from common.registry import registered

SMALL = {"VQVAE": {"num_categories": 16, "code_dim": 4, "hidden_channels": 16}}


@pytest.mark.parametrize("cls", registered("model"), ids=lambda cls: cls.__name__)
def test_inference_refuses_too_few_samples_and_integer_pixels_in_one_line(cls):
    model = cls(**SMALL.get(cls.__name__, {})).eval()
    x = torch.bernoulli(torch.full((2, *model.data_shape), 0.3))
    for call in (model.nll, model.elbo):
        for num_samples in (0, -1):
            with pytest.raises(ValueError, match=rf"^num_samples={num_samples}: expected an integer >= 1"):
                call(x, num_samples=num_samples)
    with pytest.raises(ValueError, match=r"takes images as floats in \[0, 1\], got torch.uint8"):
        model.encode(x.to(torch.uint8))
    assert model.nll(x, num_samples=2).shape == (2,)


@pytest.mark.parametrize("cls", registered("model"), ids=lambda cls: cls.__name__)
def test_decode_takes_what_encode_returns_and_refuses_other_latents_in_one_line(cls):
    model = cls(**SMALL.get(cls.__name__, {})).eval()
    z = model.encode(torch.bernoulli(torch.full((2, *model.data_shape), 0.3)))
    assert model.decode(z).shape == (2, *model.data_shape)
    with pytest.raises(ValueError, match=r"decodes latents of shape \(B, [\d, ]+\) as encode returns them, got \(2, 1\)"):
        model.decode(z.flatten(1)[:, :1])
    if model.has_discrete_latent:
        for outside in (-1, model.num_categories):
            with pytest.raises(ValueError, match=rf"decodes codes: integers in 0..{model.num_categories - 1} "):
                model.decode(torch.full_like(z, outside))
        with pytest.raises(ValueError, match="decodes codes"):
            model.decode(z.float())
    else:
        with pytest.raises(ValueError, match="decodes real-valued latents, got torch.int64"):
            model.decode(z.long())
