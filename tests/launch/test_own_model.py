"""A model of one's own in one's own package, declared as CONTRIBUTING says (its settings `<Class>Settings` beside it)
and taking no backbone: both front ends take its settings, check them ("did you mean"), and build it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import launch.cli_app
import launch.hydra_run
from common.signatures import constructor_defaults
from configs.settings import ModelSettings
from launch.checks.settings import SettingsError, check_settings
from models.base import LatentVariableModel
from tests.launch.test_configs import composed


@dataclasses.dataclass(frozen=True)
class BitsAutoencoderSettings(ModelSettings):
    num_bits: int = 8


class BitsAutoencoder(LatentVariableModel):
    """Binary codes from a linear encoder: no backbone setting."""

    def __init__(self, data_shape=(1, 28, 28), optimizer=None, scheduler=None, **settings: Any) -> None:
        super().__init__(BitsAutoencoderSettings(**settings), data_shape, optimizer, scheduler)
        self.encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(self.num_dims, self.settings.num_bits))


@pytest.fixture(autouse=True)
def trusted(monkeypatch):
    monkeypatch.setenv("LATENT_ZOO_TRUST", __name__)


def test_its_settings_are_found_beside_it_and_checked():
    assert constructor_defaults(BitsAutoencoder)["num_bits"] == 8 and "backbone" not in constructor_defaults(BitsAutoencoder)
    with pytest.raises(SettingsError, match="num_bitz: no such setting of BitsAutoencoder; did you mean model.num_bits"):
        check_settings(BitsAutoencoder, {"num_bitz": 4}, "model")


def test_both_front_ends_build_it_without_a_backbone(tmp_path):
    _, model = launch.hydra_run.build(composed([]), {"_target_": f"{__name__}.BitsAutoencoder", "num_bits": 4})
    cli = launch.cli_app.main([f"--model={__name__}.BitsAutoencoder", "--model.num_bits=4", f"--log_dir={tmp_path}"], run=False)
    for built in (model, cli.model):
        assert type(built) is BitsAutoencoder and built.settings.num_bits == 4 and built.hparams["likelihood"] == "bernoulli"
