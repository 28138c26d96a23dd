"""Settings checked against the constructors' type hints (launch/checks/settings.py): what LightningCLI refuses,
the Hydra front end refuses too, with the choices listed."""

from __future__ import annotations

import pytest
import torch

from launch.checks.settings import SettingsError, check_settings
from datamodules import MNISTDataModule
from models import JSA, VAE, VQVAE, DiscreteVAE
from tests.conftest import quick_rows, says


# Each refusal names the setting as given and what was expected.
@pytest.mark.parametrize("cls, settings, named", [
    (JSA, {"embedding": "foo"}, ["model.embedding='foo'", "'auto', 'per_position', 'shared'"]),
    (JSA, {"lr": "abc"}, ["model.lr='abc'", "number"]),
    (JSA, {"mis_steps": 2.5}, ["model.mis_steps=2.5", "integer"]),
    (JSA, {"mis_steps": "ten"}, ["model.mis_steps='ten'", "integer"]),
    (JSA, {"use_cache": "yes"}, ["model.use_cache='yes'", "true or false"]),
    (JSA, {"cache_size": "big"}, ["model.cache_size='big'", "integer or null"]),
    (JSA, {"gradient_states": "all"}, ["model.gradient_states='all'", "'final', 'chain'"]),
    (JSA, {"backbone": "resnet"}, ["model.backbone='resnet'", "'mlp', 'conv' or null"]),
    (DiscreteVAE, {"estimator": "gumbell"}, ["model.estimator='gumbell'", "'reinforce', 'gumbel'"]),
    (VQVAE, {"ema": "x"}, ["model.ema='x'", "true or false"]),
    (JSA, {"unknown_setting": 1}, ["model.unknown_setting", "JSA"]),
    (MNISTDataModule, {"binarize": "yes"}, ["data.binarize='yes'", "'none', 'dynamic', 'static'"]),
    (MNISTDataModule, {"batch_size": 12.5}, ["data.batch_size=12.5", "integer"]),
])
def test_a_wrong_setting_is_refused_with_what_was_expected(cls, settings, named):
    prefix = "data" if cls is MNISTDataModule else "model"
    with pytest.raises(SettingsError) as error:
        check_settings(cls, settings, prefix)
    says(error.value, *named)


def test_a_wrong_name_is_refused_with_the_closest_one():
    with pytest.raises(SettingsError) as error:
        check_settings(VQVAE, {"code_dimm": 4, "beta": "x"}, "model")
    assert "\n" not in str(error.value)
    says(error.value, "model.code_dimm", "VQVAE", "did you mean model.code_dim?")


@pytest.mark.parametrize("cls, settings", [
    (JSA, {"prior": "autoregressive", "lr": 1e-3, "mis_steps": 20, "cache_size": None, "num_latents": None,
           "likelihood": None, "_target_": "models.JSA"}),
    (JSA, {"lr": 1, "sigma": 2}),  # an integer where a number is expected
    (MNISTDataModule, {"batch_size": 64, "eval_batch_size": None, "data_dir": None}),
])
def test_right_settings_pass(cls, settings):
    check_settings(cls, settings, "model")


@pytest.mark.parametrize("cls, key", [(VQVAE, "beta"), (VQVAE, "dead_code_threshold"), (JSA, "lr")])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 10**400])
def test_a_number_that_is_not_finite_is_refused(cls, key, value):
    """NaN passes a range check written `x < 0` (beta=nan would train into a NaN loss; dead_code_threshold=nan would
    switch the restarts off in silence), inf fails only at the first step, and an integer beyond every float cannot
    be one: every float setting must be a finite number."""
    with pytest.raises(SettingsError) as error:
        check_settings(cls, {key: value}, "model")
    assert str(error.value).startswith(f"model.{key}={value}: expected a finite number"), error.value


@pytest.mark.parametrize("cls, settings, named", [
    (VAE, {"likelihood": "bernoulli", "learn_sigma": True}, "learn_sigma=True applies to likelihood=gaussian only"),
    (VAE, {"likelihood": "bernoulli", "sigma_shape": "pixel"}, "sigma_shape=pixel applies to likelihood=gaussian only"),
    (VAE, {"likelihood": "gaussian", "num_mixtures": 3}, "num_mixtures=3 applies to likelihood=discretized_logistic only"),
    (DiscreteVAE, {"temperature": 3.0}, "temperature=3.0 applies to estimator=gumbel only"),
    (DiscreteVAE, {"estimator": "gumbel", "control_variate": "none"}, "control_variate=none applies to estimator=reinforce only"),
])
def test_a_setting_the_model_would_ignore_is_refused(cls, settings, named):
    """A setting of another likelihood or estimator than the model's would train nothing differently (a Bernoulli VAE's
    learn_sigma, REINFORCE's temperature): refused, naming the choice it applies to; at that choice it is taken."""
    with pytest.raises(ValueError, match=named):
        cls(**settings)
    owner = dict(s.split("=") for s in [named.split(" applies to ")[1].split(" ")[0]])
    cls(**{**settings, **owner})


@pytest.mark.parametrize("argv, likelihood", [
    (["model=vae", "model.learn_sigma=true"], "bernoulli"),  # the data's (binarized MNIST), set before the model is built
    (["fit", "--model=VAE", "--model.learn_sigma=true"], "bernoulli"),
    (["model=vae", "data.binarize=none", "model.learn_sigma=true"], "discretized_logistic"),
    (["fit", "--model=VAE", "--data.binarize=none", "--model.learn_sigma=true"], "discretized_logistic"),
])
def test_a_setting_of_another_likelihood_than_the_datas_is_refused_before_the_imports(argv, likelihood, tmp_path):
    """A model's likelihood left out is the data's (launch/run_builder.py: apply_rules): a setting that one ignores is
    refused by the early check, in one line naming it and the likelihood it applies to. A run from a checkpoint takes
    the checkpoint's likelihood, known once the file is read: the early check leaves it."""
    from launch.checks.early import refuse_early

    cli = argv[0] == "fit"
    line = refuse_early(argv, cli)
    assert line is not None and line.startswith(f"{'--' if cli else ''}model.learn_sigma=True applies to likelihood=gaussian "
                                                f"only, and this model's likelihood is {likelihood}"), line
    assert "data.binarize=none" in line
    given = ["--model.likelihood=gaussian"] if cli else ["model.likelihood=gaussian"]
    assert refuse_early([*argv, *given, *(["--data.binarize=none"] if cli else ["data.binarize=none"])], cli) is None
    (tmp_path / "last.ckpt").write_bytes(b"checked once read")
    assert refuse_early([*argv, f"{'--' if cli else ''}ckpt_path={tmp_path / 'last.ckpt'}"], cli) is None


def test_a_sampler_hyperparameter_that_is_not_finite_is_refused():
    from samplers import SGLD, SGNHT

    parameter = torch.nn.Parameter(torch.zeros(1))
    for sampler, settings in ((SGLD, {"lr": 1e-7, "temperature": float("inf")}), (SGNHT, {"lr": 1e-7, "noise": float("nan")})):
        with pytest.raises(ValueError, match=f"{list(settings)[1]} must be a finite number"):
            sampler([parameter], **settings)


@pytest.mark.parametrize(("key", "value", "named"), [
    ("accumulate_grad_batches", 0, ["trainer.accumulate_grad_batches=0", ">= 1"]),
    ("check_val_every_n_epoch", 0, ["trainer.check_val_every_n_epoch=0", ">= 1", "null"]),
    ("val_check_interval", 0, ["trainer.val_check_interval=0", "> 0"]),
    ("val_check_interval", -0.5, ["trainer.val_check_interval=-0.5", "> 0"]),
    # refused by Lightning without naming the option, or not run by the collection
    ("precision", 8, ["trainer.precision=8", "32-true, 16-mixed or bf16-mixed"]),
    ("precision", "64-true", ["trainer.precision=64-true", "32-true, 16-mixed or bf16-mixed"]),
    ("max_time", "abc", ["trainer.max_time=abc", "DD:HH:MM:SS"]),
])
def test_trainer_values_lightning_takes_but_cannot_run_are_refused(key, value, named):
    """Each of these passes lightning.Trainer's constructor and divides by zero once training starts."""
    from launch.checks.settings import check_trainer_values

    with pytest.raises(SettingsError) as error:
        check_trainer_values({key: value}, "trainer")
    assert str(error.value).startswith(named[0]) and "\n" not in str(error.value), error.value
    says(error.value, *named)
    for fine in ({"check_val_every_n_epoch": None}, {"check_val_every_n_epoch": 2}, {"val_check_interval": 0.25},
                 {"val_check_interval": 100}, {"precision": 32}, {"precision": "bf16-mixed"}, {"max_time": "00:00:10:00"},
                 {"max_time": {"minutes": 10}}):
        check_trainer_values(fine, "trainer")


@pytest.mark.parametrize(("overrides", "named"), quick_rows([
    (["callbacks.gradient_variance.every_n_steps=abc"], ["callbacks.gradient_variance.every_n_steps='abc'", "integer"]),
    (["+callbacks.model_checkpoint.every_n_epoch=2"], ["callbacks.model_checkpoint.every_n_epoch", "ValidationCheckpoint"]),
    # +: past Hydra (the early checks refuse logger.save_dir=... without it, tests/launch/checks/test_precheck.py)
    (["+logger.name=mine"], ["logger.name=mine", "<log_dir>/tensorboard/<run_name>", "run_name=mine"]),
    (["+logger.save_dir=/tmp/runs"], ["logger.save_dir=/tmp/runs", "<log_dir>/tensorboard/<run_name>", "log_dir=/tmp/runs"]),
    (["callbacks.progress_bar.refresh_seconds=abc"], ["callbacks.progress_bar.refresh_seconds='abc'", "number"]),
    (["optimizer=sgld", "callbacks=sgmcmc", "callbacks.posterior_samples.keep=foo"],
     ["callbacks.posterior_samples.keep='foo'", "'mean', 'list'"]),
], 3))  # the quick loop's rows: a callback's value, a callback's name, a logger's
def test_callback_and_logger_settings_are_checked_before_the_run(overrides, named):
    """Each callback's settings against its constructor (or factory: callbacks.progress_bar), and a logger.name
    or save_dir that the run's layout sets (launch/runs/run_directory.py), refused in one line before anything is built."""
    from launch.checks.settings import check_composed
    from tests.launch.test_configs import composed

    with pytest.raises(SettingsError) as error:
        check_composed(composed(["model=vae", *overrides]))
    assert str(error.value).startswith(named[0]) and "\n" not in str(error.value), error.value
    says(error.value, *named)
    check_composed(composed(["model=vae", "optimizer=sgld", "callbacks=sgmcmc", "run_name=mine"]))  # the defaults pass


def test_a_factory_target_is_checked_by_its_signature_and_takes_any_key_with_kwargs():
    """A config's _target_ may name a function (callbacks.progress_bar): its arguments are checked like a
    constructor's, and one with **kwargs takes keys it does not name."""

    def strict(refresh_seconds: float = 30.0):
        return None

    def open_ended(refresh_seconds: float = 30.0, **kwargs):
        return None

    with pytest.raises(SettingsError, match=r"^x.leave: no such setting of strict"):
        check_settings(strict, {"refresh_seconds": 1.0, "leave": True}, "x")
    with pytest.raises(SettingsError, match=r"^x.refresh_seconds='abc': expected a finite number"):
        check_settings(open_ended, {"refresh_seconds": "abc"}, "x")
    check_settings(open_ended, {"refresh_seconds": 1.0, "leave": True}, "x")


def test_a_library_class_whose_hints_do_not_resolve_is_checked_by_its_parameter_names():
    """torch's MultiStepLR annotates `milestones` with a name its module does not import (Iterable): its settings are
    named all the same, a typo refused with the closest in both front ends, any value left to its constructor."""
    from torch.optim.lr_scheduler import MultiStepLR

    from launch.checks.cli_check import check_cli_command

    check_settings(MultiStepLR, {"milestones": [1], "gamma": 0.5}, "scheduler")
    with pytest.raises(SettingsError) as refused:
        check_settings(MultiStepLR, {"milestonez": [1]}, "scheduler")
    says(str(refused.value), "scheduler.milestonez", "MultiStepLR", "scheduler.milestones?")
    check_cli_command(["fit", "--optimizer=Adam", "--lr_scheduler=MultiStepLR", "--lr_scheduler.milestones=[1]"], False)
    with pytest.raises(SettingsError) as refused:
        check_cli_command(["fit", "--optimizer=Adam", "--lr_scheduler=MultiStepLR", "--lr_scheduler.milestonez=[1]"], False)
    says(str(refused.value), "--lr_scheduler.milestonez", "--lr_scheduler.milestones?")
