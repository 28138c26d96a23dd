"""A model of one's own in one's own package, declared as CONTRIBUTING says (its settings `<Class>Settings` beside it)
and taking no backbone: both front ends take its settings, check them ("did you mean"), and build it; a Hydra config
of one's own extends its defaults as the collection's configs do."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import launch.checks.hydra_config
import launch.hydra_app
import launch.run_builder
import launch.cli_app
from common.signatures import constructor_defaults
from configs.settings import ModelSettings
from launch.checks.precheck import EarlyRefusal
from launch.checks.hydra_check import check_hydra
from launch.checks.settings import SettingsError, check_composed, check_settings
from models import VAE
from models.base import LatentVariableModel
from tests.conftest import refused, says
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
    _, model = launch.hydra_app.data_and_model(composed([]), {"_target_": f"{__name__}.BitsAutoencoder", "num_bits": 4})
    cli = launch.cli_app.main([f"--model={__name__}.BitsAutoencoder", "--model.num_bits=4", f"--log_dir={tmp_path}"], run=False)
    for built in (model, cli.model):
        assert type(built) is BitsAutoencoder and built.settings.num_bits == 4 and built.hparams["likelihood"] == "bernoulli"


def test_a_config_of_ones_own_extends_its_classs_defaults_and_its_settings_are_checked(tmp_path):
    """A config in one's own --config-dir extends `/model_defaults@model: <Class>` for the class it builds, as the
    collection's configs do: every setting the class takes composes without +, and a typo is one line."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "bits.yaml").write_text(f"# @package _global_\ndefaults:\n  - /model_defaults@model: BitsAutoencoder\n"
                                                  f"  - _self_\nmodel:\n  _target_: {__name__}.BitsAutoencoder\n  num_bits: 4\n")
    cfg = launch.checks.hydra_config.compose(["model=bits", "model.val_num_samples=2"], [tmp_path])
    _, model = launch.hydra_app.data_and_model(cfg)
    assert type(model) is BitsAutoencoder and model.settings.num_bits == 4 and model.hparams["val_num_samples"] == 2
    with pytest.raises(EarlyRefusal, match=r"model\.num_bitz: .*bits\.yaml has no such key; did you mean model\.num_bits\?"):
        check_hydra(["--config-dir", str(tmp_path), "model=bits", "model.num_bitz=3"])


GLOBAL = "# @package _global_\n"


def test_a_config_of_ones_own_whose_class_does_not_import_names_the_class_not_an_interpolation(tmp_path):
    """Its package not on the path: the class is named with where Python looks, not the optimizer's ${model.lr},
    which a class whose defaults are unknown leaves unresolved."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text(f"{GLOBAL}defaults:\n  - /model_defaults@model: MyVAE\n  - _self_\n"
                                                  "model:\n  _target_: nopkg.mymodel.MyVAE\n")
    with pytest.raises(EarlyRefusal) as error:
        check_hydra(["--config-dir", str(tmp_path), "model=mine"])
    says(error.value, "model._target_=nopkg.mymodel.MyVAE", "No module named 'nopkg'", "PYTHONPATH")


@pytest.mark.parametrize("text, nested, fixed", [
    ("defaults:\n  - /model_defaults@model: VAE\n  - _self_\n_target_: models.VAE\n", "defaults entry /model_defaults@model",
     f"{GLOBAL}defaults:\n  - /model_defaults@model: VAE\n  - _self_\nmodel:\n  _target_: models.VAE\n"),
    ("model:\n  _target_: models.VAE\n  latent_dim: 8\n", "key model:", f"{GLOBAL}model:\n  _target_: models.VAE\n  latent_dim: 8\n"),
])
def test_a_config_of_ones_own_that_hydra_would_nest_under_its_group_is_one_line_naming_the_fix(text, nested, fixed, tmp_path):
    """Without `# @package _global_`, Hydra places a model/ config under model:, and its own `model:` key or
    `@model` defaults entry under model.model; the file with the line passes, as does one with no such key."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text(text)
    command = ["--config-dir", str(tmp_path), "model=mine"]
    with pytest.raises(EarlyRefusal) as error:
        check_hydra(command)
    says(error.value, str(tmp_path / "model" / "mine.yaml"), nested, "model.model", "# @package _global_")
    for right in (fixed, "_target_: models.VAE\nlatent_dim: 8\n"):  # the latter placed under model: as meant
        (tmp_path / "model" / "mine.yaml").write_text(right)
        check_hydra(command)


class NamedVAE(VAE):
    """A VAE of one's own: its runs are named by its class, not as the VAE's (no `config_name` of its own needed)."""


@pytest.mark.parametrize("target", ["models.VAE", f"{__name__}.NamedVAE"])
def test_a_class_in_place_of_another_configs_is_refused_naming_the_config_of_its_kind(target):
    """model._target_=X over the default model=jsa keeps configs/model/jsa.yaml's settings of JSA, which X does not
    take: the refusal names that config and the one to choose with X (its class's, or that of a class X subclasses)."""
    with pytest.raises(SettingsError) as error:
        check_composed(composed([f"model._target_={target}"]))
    says(error.value, "model.num_latents", "configs/model/jsa.yaml", f"model=vae model._target_={target}")
    check_composed(composed(["model=vae", f"model._target_={target}"]))


def test_a_class_of_ones_own_in_place_of_a_configs_names_its_runs_as_the_cli_does(tmp_path):
    """model=vae model._target_=...NamedVAE builds no VAE: its runs are named by its class, as LightningCLI names them;
    a run_name given stays the name."""
    hydra = launch.run_builder.built(launch.hydra_app.describe_run(composed(["model=vae", f"model._target_={__name__}.NamedVAE", f"log_dir={tmp_path}"])))
    cli = launch.cli_app.main([f"--model={__name__}.NamedVAE", f"--log_dir={tmp_path}"], run=False)
    assert hydra.name == cli.trainer.logger.name == "namedvae-mnist-mlp-z32"
    assert launch.run_builder.built(launch.hydra_app.describe_run(composed(["model=vae", f"log_dir={tmp_path}"]))).name == "vae-mnist-mlp-z32"
    given = composed(["model=vae", f"model._target_={__name__}.NamedVAE", "run_name=mine", f"log_dir={tmp_path}"])
    assert launch.run_builder.built(launch.hydra_app.describe_run(given)).name == "mine-mlp-z32"


def test_training_a_class_of_ones_own_says_how_its_checkpoints_are_read(tmp_path, monkeypatch, caplog):
    """A run of a class whose package LATENT_ZOO_TRUST does not list trains, and says at its start that its
    checkpoints (a resume, a test, load_from_checkpoint) are read with the package trusted; trusted, it says nothing."""
    monkeypatch.delenv("LATENT_ZOO_TRUST")
    with caplog.at_level("WARNING", logger="launch.run_builder"):
        launch.cli_app.main([f"--model={__name__}.NamedVAE", f"--log_dir={tmp_path}"], run=False)
    (said,) = [record.getMessage() for record in caplog.records if record.name == "launch.run_builder"]
    says(said, f"{__name__}.NamedVAE is a class of your own", "resume, test or load_from_checkpoint", "LATENT_ZOO_TRUST=tests")
    caplog.clear()
    monkeypatch.setenv("LATENT_ZOO_TRUST", "tests")
    with caplog.at_level("WARNING", logger="launch.run_builder"):
        launch.cli_app.main([f"--model={__name__}.NamedVAE", f"--log_dir={tmp_path}"], run=False)
    assert not [record for record in caplog.records if record.name == "launch.run_builder"]


def test_a_misspelt_class_of_ones_own_is_one_line_with_the_closest_class_of_its_module():
    with pytest.raises(SettingsError, match=rf"^model._target_={__name__}.NamedVAEE: module '{__name__}' has no attribute "
                                            rf"'NamedVAEE'; did you mean {__name__}.NamedVAE\?$"):
        check_composed(composed(["model=vae", f"model._target_={__name__}.NamedVAEE"]))


def test_a_value_of_the_wrong_kind_for_a_setting_of_ones_own_is_said_as_for_the_collections(capsys):
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", f"--model={__name__}.BitsAutoencoder", "--model.num_bits=1.5"])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], "error: --model.num_bits=1.5", "integer")


@pytest.mark.parametrize("option, named", [
    ("--replicas.seeds=x", ["--replicas.seeds='x'", "list", "[a,b,...]"]),
    ("--replicas.seeds=[0,a]", ["--replicas.seeds='a'", "integer"]),
    ("--replicas.arms=[1]", ["--replicas.arms=1", "mapping", "{key: value, ...}"]),
])
def test_a_value_of_the_wrong_kind_for_a_list_option_says_what_it_takes(option, named, capsys):
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", option])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], "error:", *named)


def test_run_test_with_an_untrusted_class_of_ones_own_is_refused_before_training(tmp_path, monkeypatch, capsys):
    """run_test=true tests the checkpoint fit writes, which names the model's class: a class of one's own that
    LATENT_ZOO_TRUST does not list is refused in one line naming the variable and its package, before any training
    step; trusted, it trains and tests."""
    monkeypatch.delenv("LATENT_ZOO_TRUST")
    monkeypatch.chdir(tmp_path)
    overrides = ["model=vae", f"model._target_={__name__}.NamedVAE", "run_test=true", "trainer.max_steps=1",
                 "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "model.val_num_samples=2",
                 "model.test_num_samples=2", f"log_dir={tmp_path / 'logs'}"]
    error = refused(capsys, hydra=overrides)
    says(error, "run_test=true", f"model._target_={__name__}.NamedVAE", "LATENT_ZOO_TRUST=tests")
    assert not list((tmp_path / "logs").rglob("*.ckpt")) and not (tmp_path / "logs" / "tensorboard").exists()
    monkeypatch.setenv("LATENT_ZOO_TRUST", "tests")
    assert "test/nll" in launch.hydra_app.run(composed(overrides))


def test_a_class_path_with_a_module_typo_names_its_file_and_the_closest_module(capsys, tmp_path, monkeypatch):
    """`class_path: ownzoo.mymodl.MyVAE` in one's own -c file (the package trusted, the module misspelt): one line naming
    the file and the key, with the path of the closest module of the package that holds the class."""
    from tests.conftest import refused

    (tmp_path / "ownzoo").mkdir()
    (tmp_path / "ownzoo" / "__init__.py").write_text("")
    (tmp_path / "ownzoo" / "mymodel.py").write_text("from models import VAE\n\n\nclass MyVAE(VAE):\n    pass\n")
    (tmp_path / "my.yaml").write_text("model:\n  class_path: ownzoo.mymodl.MyVAE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LATENT_ZOO_TRUST", "ownzoo")
    line = refused(capsys, cli=["fit", "-c", str(tmp_path / "my.yaml"), f"--log_dir={tmp_path}"])
    assert line.startswith(f"error: --config={tmp_path / 'my.yaml'}: model: ownzoo.mymodl.MyVAE: "), line
    assert line.split(": ", 4)[-1].startswith("module 'ownzoo' has no attribute 'mymodl'; did you mean ownzoo.mymodel.MyVAE?"), line
