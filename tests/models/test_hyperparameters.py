"""models/base.py saves the hyperparameters once for every model: each of its declared settings (configs/settings.py),
the given values over the defaults, and the data's shape; the optimizer and the learning-rate scheduler (factories, not
values) left out."""

from __future__ import annotations

import dataclasses
import functools
import re

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from common.registry import registered
from checkpoints.trainer import SafeCheckpoints
from common.signatures import constructor_defaults, constructor_hints
from configs.settings import CategoricalSettings
from models import JSA, VAE, VQVAE
from models.categorical import CategoricalLatentModel

SMALL = {VQVAE: {"num_categories": 16, "code_dim": 4, "hidden_channels": 16}}


@pytest.mark.parametrize("cls", registered("model"), ids=lambda cls: cls.__name__)
def test_every_setting_is_saved_with_the_data_shape_but_not_the_optimizer(cls):
    model = cls(**SMALL.get(cls, {}), lr=0.02, optimizer=torch.optim.SGD,
                scheduler=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=2))
    assert set(model.hparams) == set(constructor_defaults(cls)) | {"data_shape"}
    assert model.hparams["lr"] == torch.optim.SGD([torch.zeros(1)]).defaults["lr"]  # the optimizer's own, which it trains with
    assert cls(**SMALL.get(cls, {}), lr=0.02).hparams["lr"] == 0.02  # the base class's argument, given to the subclass: Adam's


def test_a_subclass_argument_given_is_saved_with_its_value():
    assert JSA(mis_steps=7, num_latents=3).hparams["mis_steps"] == 7
    assert JSA(mis_steps=7, num_latents=3).hparams["num_latents"] == 3  # CategoricalLatentModel's


class OwnVAE(VAE):
    """A subclass of one's own with a setting of its own, and a network of its own given to it."""

    def __init__(self, beta: float = 1.0, head: torch.nn.Module | None = None, **settings):
        super().__init__(**settings)
        self.beta, self.head = beta, head


class OwnVAESavingItsSettings(OwnVAE):
    """The same, written with Lightning's usual idiom: `self.save_hyperparameters()` in its constructor."""

    def __init__(self, beta: float = 1.0, head: torch.nn.Module | None = None, **settings):
        super().__init__(beta, head, **settings)
        self.save_hyperparameters()


@pytest.mark.parametrize("own", [OwnVAE, OwnVAESavingItsSettings], ids=lambda cls: cls.__name__)
def test_a_setting_of_a_subclass_of_ones_own_is_saved_and_loaded_with_its_checkpoint(own, tmp_path, monkeypatch):
    """OwnVAE(beta, **settings): beta is a setting beside VAE's declared ones (its default and type from its
    signature), saved in the hyperparameters, and a checkpoint of it loads with it (its module trusted); the same
    where the subclass calls save_hyperparameters() itself (its optimizer, a callable, not among them)."""
    monkeypatch.setenv("LATENT_ZOO_TRUST", __name__)
    assert constructor_defaults(own)["beta"] == 1.0 and constructor_hints(own)["beta"] is float
    assert set(constructor_defaults(own)) == {"beta", "head", *constructor_defaults(VAE)}
    assert "head" not in own(head=torch.nn.Linear(2, 2), latent_dim=4).hparams  # a module: not a value a checkpoint holds
    model = own(beta=0.5, latent_dim=4, optimizer=functools.partial(torch.optim.Adam, lr=1e-3))
    assert model.hparams["beta"] == 0.5 and model.hparams["latent_dim"] == 4 and model.hparams["backbone"] == "mlp"
    assert "optimizer" not in model.hparams
    x = torch.bernoulli(torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    trainer = L.Trainer(max_steps=1, limit_val_batches=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path, callbacks=[SafeCheckpoints()])
    trainer.fit(model, DataLoader(TensorDataset(x, torch.arange(8)), batch_size=4))
    trainer.save_checkpoint(tmp_path / "own.ckpt")
    loaded = own.load_from_checkpoint(tmp_path / "own.ckpt")
    assert loaded.beta == 0.5 and loaded.latent_dim == 4


def test_save_hyperparameters_naming_settings_changes_nothing_and_anything_else_is_refused():
    """Naming settings the constructor saved is Lightning's idiom too (nothing to add); values that are no constructor
    argument, `ignore` or `logger` cannot be honoured (a checkpoint gives back only constructor arguments): refused in a
    line naming the call, not dropped."""
    model = OwnVAE(beta=0.5, latent_dim=4)
    before = dict(model.hparams)
    model.save_hyperparameters("beta", "latent_dim")
    assert dict(model.hparams) == before
    for args, kwargs, named in [(({"extra": 3},), {}, "{'extra': 3}"), (("steps",), {}, "'steps'"),
                                ((), {"ignore": ["beta"]}, "ignore=['beta']"), ((), {"logger": False}, "logger=False")]:
        with pytest.raises(ValueError, match=re.escape(f"OwnVAE.save_hyperparameters({named}): every setting")):
            model.save_hyperparameters(*args, **kwargs)
    assert dict(model.hparams) == before


class OwnEstimator(CategoricalLatentModel):
    """A new estimator of one's own on the collection's categorical model (CONTRIBUTING): a setting of its own, the
    rest passed on as the base's settings."""

    def __init__(self, num_samples: int = 4, data_shape=(1, 28, 28), optimizer=None, scheduler=None, **settings):
        super().__init__(CategoricalSettings(**settings), data_shape, optimizer, scheduler)
        self.num_samples = num_samples


def test_a_direct_subclass_of_a_base_model_takes_the_settings_its_base_is_given():
    """The base's constructor takes `settings: CategoricalSettings`: those are the subclass's settings too, beside its
    own argument (what both front ends check and the run saves)."""
    assert set(constructor_defaults(OwnEstimator)) == {"num_samples", *(f.name for f in dataclasses.fields(CategoricalSettings)),
                                                       "data_shape", "optimizer", "scheduler"}
    assert constructor_hints(OwnEstimator)["lr"] is float and constructor_hints(OwnEstimator)["num_samples"] is int
    model = OwnEstimator(num_samples=3, num_latents=5, lr=0.002)
    assert (model.hparams["num_samples"], model.hparams["num_latents"], model.hparams["lr"]) == (3, 5, 0.002)


@pytest.mark.parametrize("cls", registered("model"), ids=lambda cls: cls.__name__)
def test_an_estimator_setting_of_a_subclass_of_ones_own_names_its_runs(cls):
    """run_tag ends with estimator_tag for every model: a subclass's own setting listed in estimator_settings gives
    its runs a name of their own when it is not at its default."""
    class Own(cls):
        estimator_settings = {**cls.estimator_settings, "tilt": "tilt"}

        def __init__(self, tilt: float = 1.0, **settings):
            super().__init__(**settings)
            self.tilt = tilt

    assert Own(tilt=0.5, **SMALL.get(cls, {})).run_tag == cls(**SMALL.get(cls, {})).run_tag + "-tilt0.5"
    assert Own(**SMALL.get(cls, {})).run_tag == cls(**SMALL.get(cls, {})).run_tag
