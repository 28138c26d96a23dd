"""models/base.py saves the hyperparameters once for every model: each of its declared settings (configs/settings.py),
the given values over the defaults, and the data's shape; the optimizer and the learning-rate scheduler (factories, not
values) left out."""

from __future__ import annotations

import functools

import pytest
import torch

from checkpoints.registry import registered
from common.signatures import constructor_defaults
from models import JSA, VQVAE

SMALL = {VQVAE: {"num_categories": 16, "code_dim": 4, "hidden_channels": 16}}


@pytest.mark.parametrize("cls", registered("model"), ids=lambda cls: cls.__name__)
def test_every_setting_is_saved_with_the_data_shape_but_not_the_optimizer(cls):
    model = cls(**SMALL.get(cls, {}), lr=0.02, optimizer=torch.optim.SGD,
                scheduler=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=2))
    assert set(model.hparams) == set(constructor_defaults(cls)) | {"data_shape"}
    assert model.hparams["lr"] == 0.02  # the base class's argument, given to the subclass


def test_a_subclass_argument_given_is_saved_with_its_value():
    assert JSA(mis_steps=7, num_latents=3).hparams["mis_steps"] == 7
    assert JSA(mis_steps=7, num_latents=3).hparams["num_latents"] == 3  # CategoricalLatentModel's
