"""What a new user meets first, checked without training: both front ends build the same model and data
from the same defaults, the likelihood follows the data, integer batch limits are counts, one inference
API for every model, evaluation binarization that does not depend on batching, plain progress lines; a run
that ends (or is stopped with Ctrl-C) says where it is and how to resume it, in the project's words only. The tests
that run through a front end are marked slow (README: the entry-point tests are the full suite's)."""

from __future__ import annotations

import contextlib
import os
import logging
import re
import signal
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from checkpoints.loader import load_checkpoint_file
from checkpoints.trainer import SafeCheckpoints

import launch.hydra_app
import launch.cli_app
import launch.errors
import launch.run_builder
from callbacks import LineProgressBar
from common.signatures import settings_of
from datamodules import MNISTDataModule
from models import JSA, RWS, VAE, VQVAE, DiscreteVAE
from tests.conftest import mnist_slice, says
from tests.launch.test_configs import composed

# The rules are written once (launch/run_builder.py); two pairs check that both front ends apply them.
PAIRS = [("jsa", "JSA", "mnist", "MNISTDataModule"), ("dvae_gumbel", "DiscreteVAE --model.estimator=gumbel", "cifar10", "CIFAR10DataModule")]


@pytest.mark.parametrize("model,model_cls,data,data_cls", PAIRS)
def test_both_front_ends_build_the_same_model_and_data(model, model_cls, data, data_cls, tmp_path):
    """`python train.py model=M data=D` and `python train.py fit --model=C --data=E` resolve to the same
    settings (the class signatures are the one source of defaults; the likelihood follows the data)."""
    _, hydra_model = launch.hydra_app.data_and_model(composed([f"model={model}", f"data={data}"]))
    hydra_data, _ = launch.hydra_app.data_and_model(composed([f"model={model}", f"data={data}"]))
    cli = launch.cli_app.main([*f"--model={model_cls}".split(" "), f"--data={data_cls}", f"--log_dir={tmp_path}"], run=False)
    without_optimizer = lambda settings: {k: v for k, v in settings.items() if k != "optimizer"}  # Hydra: Adam(model.lr), CLI: None -> the same Adam
    assert without_optimizer(settings_of(cli.model)) == without_optimizer(settings_of(hydra_model))
    assert settings_of(cli.datamodule) == settings_of(hydra_data)
    assert cli.model.hparams["likelihood"] == ("bernoulli" if data == "mnist" else "discretized_logistic")
    if data == "cifar10":  # colour images get the conv networks in both front ends, unless told otherwise
        assert cli.model.backbone == hydra_model.backbone == "conv"


def test_cli_defaults_to_jsa_on_binarized_mnist(tmp_path):
    cli = launch.cli_app.main([f"--log_dir={tmp_path}"], run=False)
    assert type(cli.model) is JSA and type(cli.datamodule) is MNISTDataModule and cli.datamodule.binarize == "dynamic"
    # Off a terminal (as here), plain progress lines, not Lightning's default bar.
    assert any(isinstance(c, LineProgressBar) for c in cli.trainer.callbacks)
    seeded = launch.cli_app.main(["--seed_everything=7", f"--log_dir={tmp_path}"], run=False)
    assert seeded.datamodule.seed == seeded.model.test_seed == 7  # as seed=7 in Hydra
    given = launch.cli_app.main(["--seed_everything=7", "--data.seed=3", f"--log_dir={tmp_path}"], run=False)
    assert (given.datamodule.seed, given.model.test_seed) == (3, 7)  # a seeded setting given on the command line stays
    # the same from a -c config file; a data.seed set beside it (on the command line or in the file) stays
    config = tmp_path / "seeded.yaml"
    config.write_text("seed_everything: 7\n")
    from_file = launch.cli_app.main(["--model=JSA", "--data=MNISTDataModule", "-c", str(config), f"--log_dir={tmp_path}"], run=False)
    assert from_file.datamodule.seed == from_file.model.test_seed == 7
    config.write_text("seed_everything: 7\ndata:\n  init_args:\n    seed: 3\n")
    own_seed = launch.cli_app.main(["--model=JSA", "--data=MNISTDataModule", "-c", str(config), f"--log_dir={tmp_path}"], run=False)
    assert (own_seed.datamodule.seed, own_seed.model.test_seed) == (3, 7)
    grey = launch.cli_app.main(["--data.binarize=none", f"--log_dir={tmp_path}"], run=False)
    assert grey.model.hparams["likelihood"] == "discretized_logistic"  # follows the data: 8-bit grey pixels


@pytest.mark.parametrize("choice", [["-c", "my.yaml"], ["-c", "{model: VQVAE, data: CIFAR10DataModule}"],
                                    ["--model.class_path=VQVAE", "--data", "CIFAR10DataModule"]])
def test_a_class_chosen_anywhere_takes_its_own_defaults_not_the_default_classes(choice, tmp_path, monkeypatch):
    """A class a config file (or an inline config, or --model.class_path) chooses is built with its own defaults:
    jsonargparse would carry the default JSA's and MNIST's over (num_categories=10, binarize=dynamic)."""
    from common.signatures import constructor_defaults
    from datamodules import CIFAR10DataModule
    from models import VQVAE

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.yaml").write_text("model: VQVAE\ndata:\n  class_path: CIFAR10DataModule\n")
    cli = launch.cli_app.main([*choice, f"--log_dir={tmp_path}"], run=False)
    assert type(cli.model) is VQVAE and type(cli.datamodule) is CIFAR10DataModule
    assert cli.model.hparams["num_categories"] == constructor_defaults(VQVAE)["num_categories"] != 10
    assert cli.datamodule.binarize == constructor_defaults(CIFAR10DataModule)["binarize"] == "none"


@pytest.mark.slow  # runs through the front ends
@pytest.mark.parametrize("subcommand", ["test", "validate"])
def test_evaluating_untrained_weights_is_refused_unless_asked_for(subcommand, tmp_path, monkeypatch, capsys):
    """`test`/`validate` without a checkpoint (here from a -c file, which the early checks leave to the parser) is one
    line naming --ckpt_path and --fresh_weights, with no run directory made; --fresh_weights=true evaluates."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text("model: VAE\ndata: MNISTDataModule\ntrainer: {limit_val_batches: 1, limit_test_batches: 1}\n")
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main([subcommand, "-c", "run.yaml"])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {subcommand} without --ckpt_path would {subcommand} untrained weights") and "--fresh_weights=true" in error
    assert not (tmp_path / "logs").exists()
    stage = "val" if subcommand == "validate" else "test"
    fresh = launch.cli_app.main([subcommand, "-c", "run.yaml", "--fresh_weights=true", f"--model.{stage}_num_samples=2",
                                 "--data.eval_batch_size=8"])
    assert type(fresh.model) is VAE and f"{stage}/nll" in fresh.trainer.callback_metrics


@pytest.mark.parametrize("command, named", [
    # evaluating untrained weights (hours of importance sampling for a meaningless number) asks for the flag that says so
    (["test"], ["test without --ckpt_path", "untrained weights", "--ckpt_path="]),
    (["validate", "--model=VAE", "--ckpt_path=null"], ["validate", "--fresh_weights=true"]),
    (["fit", "--lr_scheduler=StepLR"], ["--lr_scheduler=StepLR", "without --optimizer", "--optimizer=Adam"]),
    # numpy's seed range, as Hydra's seed (Lightning would raise its own ValueError, a traceback)
    (["fit", "--seed_everything=-1"], ["--seed_everything=-1", "[0, 2^32 - 1]"]),
    (["fit", f"--seed_everything={2**32}"], [f"--seed_everything={2**32}", "[0, 2^32 - 1]"]),
    (["fit", "--seed_everything=abc"], ["--seed_everything=abc", "[0, 2^32 - 1]", "true"]),
    # a Trainer's or the chosen model's setting given without its group; a class name misspelt
    (["fit", "--max_steps=3"], ["--max_steps=3", "--trainer.max_steps?", "python train.py fit --help"]),
    (["fit", "--model=VAE", "--latent_dim=3"], ["--latent_dim=3", "--model.latent_dim?"]),
    (["fit", "--seed=3"], ["--seed=3", "--seed_everything"]),  # Hydra's name of the run's seed, not --data.seed
    (["fit", "--checkpoint.mode=maxx"], ["--checkpoint.mode=maxx", "min, max"]),  # Lightning's refusal, named
    (["fit", "--trainer.callbacks+=ImageGrids", "--trainer.max_steps=1"], ["ImageGrids twice", "as a list"]),  # a default's
    (["fit", "--optimizer=Adamw"], ["--optimizer=Adamw", "AdamW?"]),
    (["fit", "--optimizer=SGLD"], ["--optimizer.lr", "SGLD", "--optimizer=SGLD"]),  # the collection's, by its short name
    (["fit", "--trainer.barebones=true"], ["--trainer.barebones=true", "leave it out"]),  # Lightning's names one setting
    (["fit", "--optimizer=SGD", "--optimizer.lr=0.1", "--model.lr=0.5", "--trainer.max_steps=1"],
     ["--model.lr=0.5", "--optimizer.lr=0.5"]),
    (["fit", "--model.optimizer.weight_decay=0.1"], ["--model.optimizer.weight_decay", "--model.optimizer=CLASS"]),
    (["fit", "--optimizer=Adam", "--optimizer.weight_decy=0.1"], ["--optimizer.weight_decy", "Adam", "--optimizer.weight_decay?"]),
    (["fit", "--trainer.callbacks+=LearningRateMonitor", "--trainer.callbacks.logging_intervl=step"],
     ["--trainer.callbacks.logging_intervl", "LearningRateMonitor", "--trainer.callbacks.logging_interval?"]),
    (["fit", "--trainer.callbacks.logging_interval=step"], ["--trainer.callbacks=CLASS", "LearningRateMonitor"]),
    (["fit", "--model=models.vae.VAEE"], ["--model=models.vae.VAEE", "models.vae.VAE?"]),
    (["fit", "--model=mypkg.MyVAE"], ["--model=mypkg.MyVAE", "'mypkg'", "train.py's folder or PYTHONPATH"]),
    (["fit", "--model.scheduler=CosineAnealingLR"], ["--model.scheduler=CosineAnealingLR", "CosineAnnealingLR?"]),
    (["fit", "--trainer.callbacks+=LearningRateMonitr"], ["--trainer.callbacks+=LearningRateMonitr", "LearningRateMonitor?"]),
    (["fit", "--model.help", "jsa"], ["--model.help=jsa", "DiscreteVAE, JSA,", "did you mean JSA?"]),  # help on a class
    # a Hydra setting after a subcommand: LightningCLI's spelling, and for fit Hydra's command
    (["fit", "model=jsa"], ["model=jsa", "--model=JSA after fit", "python train.py model=jsa"]),
    (["fit", "-m", "model=vae,jsa"], ["-m:", "Hydra's", "python train.py -m model=vae,jsa"]),
    (["test", "--model=VAE", "trainer.limit_test_batches=2"], ["trainer.limit_test_batches=2", "--trainer.limit_test_batches=2"]),
    # a refusal of the parser's ends where the options are listed
    (["test", "--foo=1"], ["--foo=1", "python train.py test --help"]),
    (["fit", "--model.mis_steps", "--trainer.max_steps=1"], ["--model.mis_steps: expected a value", "--model.mis_steps=VALUE"]),
    (["fit", "--trainer.callbacks+"], ["--trainer.callbacks+: expected a value"]),
])
def test_a_rule_of_the_command_is_one_line_before_anything_is_built(command, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(command)
    assert stop.value.code == 2 and not (tmp_path / "logs").exists()
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: "), error
    says(error, *named)


def test_a_seed_out_of_range_in_a_config_file_is_refused_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "seed.yaml").write_text("seed_everything: -5\n")
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "-c", "seed.yaml"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and error.startswith("error: --config=seed.yaml: seed_everything: -5: expected an integer"), error


def test_the_check_knows_every_option_of_the_cli_itself(tmp_path):
    """The check refuses a bare option that is a chosen class's setting (--max_steps), never one of the parser's own
    (CLI_OPTIONS)."""
    from launch.checks.cli_check import CLI_OPTIONS

    cli = launch.cli_app.main([f"--log_dir={tmp_path}"], run=False)
    assert {key.split(".")[0] for key in cli.parser.get_defaults().keys()} <= set(CLI_OPTIONS)


@pytest.mark.parametrize("front_end", ["hydra", "cli"])
@pytest.mark.parametrize("likelihood, binarize, says", [
    ("bernoulli", "none", ["the bernoulli likelihood needs binary pixels", "data.binarize=dynamic"]),
    ("gaussian", "dynamic", ["the gaussian likelihood scores 8-bit pixels", "data.binarize=none"]),  # an NLL of 256 levels
    ("discretized_logistic", "static", ["the discretized_logistic likelihood scores 8-bit pixels", "data.binarize=none"]),
])
def test_a_setting_refused_when_the_model_meets_its_data_is_one_line_and_leaves_no_run(likelihood, binarize, says, front_end,
                                                                                        tmp_path, monkeypatch, capsys):
    """A likelihood of other pixels than the data's is refused once the trainer sets the model up with its data: one
    line naming data.binarize, exit status 2, and the run made for it removed; `none` is a value of --data.binarize
    (not YAML's null) in the CLI."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        if front_end == "hydra":
            with launch.errors.user_errors_as_one_line():
                launch.hydra_app.run(composed([f"model.likelihood={likelihood}", f"data.binarize={binarize}", "trainer.max_steps=1",
                                               f"log_dir={tmp_path / 'logs'}"]))
        else:
            launch.cli_app.main(["fit", f"--model.likelihood={likelihood}", f"--data.binarize={binarize}", "--trainer.max_steps=1"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and error.startswith(f"error: {says[0]}") and says[1] in error, error
    assert not list((tmp_path / "logs").rglob("version_*"))


class TemperedRWS(RWS):
    """A subclass of one's own with a setting of its own."""

    def __init__(self, temperature: float = 0.5, **settings):
        super().__init__(**settings)
        self.temperature = temperature


def test_a_setting_the_given_class_does_not_take_is_named_with_the_closest_of_its_settings(capsys):
    """A subclass of one's own, checked once importable: its own settings and those it passes on (RWS's) are the
    candidates."""
    for typo, meant in (("num_sample", "num_samples"), ("temperatur", "temperature")):
        with pytest.raises(SystemExit) as stop:
            launch.cli_app.main(["fit", f"--model={__name__}.TemperedRWS", f"--model.{typo}=3"])
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2, line
        says(line, f"error: --model.{typo}", "TemperedRWS", f"did you mean --model.{meant}?")


def test_a_missing_interpolated_setting_says_where_to_set_it(tmp_path, monkeypatch, capsys):
    """A model config of one's own without `lr` (configs/optimizer/adam.yaml reads ${model.lr}): the line names the key
    and how to give it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop, launch.errors.user_errors_as_one_line():
        launch.hydra_app.run(composed(["~model.lr", f"log_dir={tmp_path / 'logs'}"]))
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2, error
    says(error, "error: optimizer.lr", "set model.lr", "+model.lr=VALUE")


@pytest.mark.parametrize("front_end", ["hydra", "cli"])
def test_a_default_root_dir_beside_a_logger_is_refused_naming_log_dir(front_end, tmp_path, monkeypatch, capsys):
    """With a logger, every file of a run goes under log_dir: Lightning's default_root_dir would be ignored, so it is
    refused in one line giving log_dir; without one, the run writes under it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        if front_end == "hydra":
            with launch.errors.user_errors_as_one_line():
                launch.hydra_app.run(composed(["trainer.default_root_dir=runs", "trainer.max_steps=1",
                                               f"log_dir={tmp_path / 'logs'}"]))
        else:
            launch.cli_app.main(["fit", "--trainer.default_root_dir=runs", "--trainer.max_steps=1"])
    option = "--" if front_end == "cli" else ""
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and error.startswith(f"error: {option}trainer.default_root_dir=runs:") and \
        f"give {option}log_dir=runs instead" in error, error
    assert not list((tmp_path / "logs").rglob("version_*")) and not (tmp_path / "runs").exists()
    unlogged = launch.cli_app.main(["--trainer.default_root_dir=runs", "--trainer.logger=false"], run=False)
    assert unlogged.trainer.default_root_dir == "runs"


def test_a_ctrl_c_no_one_handles_is_one_line_and_the_shells_130(capsys):
    """A second Ctrl-C aborts the save the first began (callbacks/guards/preemption.py): its KeyboardInterrupt, raised
    wherever the save was, ends the command in one line with exit status 130, not in two chained tracebacks."""
    with pytest.raises(SystemExit) as stop, launch.errors.user_errors_as_one_line():
        raise KeyboardInterrupt
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 130 and len(lines) == 1 and lines[0].startswith("error: stopped by Ctrl-C"), lines


def test_a_ctrl_c_while_train_py_imports_torch_and_lightning_is_one_line_and_the_shells_130(capsys, monkeypatch):
    """Before either front end runs (its imports take seconds), Ctrl-C ends train.py in one line with exit status 130,
    not a traceback through the imports."""
    import runpy

    import launch.checks.configs

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(launch.checks.configs, "record_library_settings", interrupted)  # right after the imports
    monkeypatch.setattr(sys, "argv", ["train.py", "trainer.max_steps=1"])
    previous = signal.getsignal(signal.SIGTERM)  # (train.py sets its own)
    try:
        with pytest.raises(SystemExit) as stop:
            runpy.run_path(str(Path(__file__).parents[2] / "train.py"), run_name="__main__")
    finally:
        signal.signal(signal.SIGTERM, previous)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 130 and len(lines) == 1 and lines[0].startswith("error: stopped by Ctrl-C"), lines


@pytest.mark.slow  # starts train.py twice
@pytest.mark.parametrize("command", [["trainer.max_steps=1"], ["fit", "--trainer.max_steps=1"]])
def test_a_ctrl_c_inside_torchs_import_of_numpy_is_one_line_and_the_shells_130(command, tmp_path):
    """A Ctrl-C that lands while torch imports numpy (tests/scripts/interrupt_at_import.py sends it there) is held until
    the imports end, then taken: one line, exit status 130. Taken where it lands, it would end in a RecursionError
    traceback through numpy's import (exit 1), or be lost while the run trains."""
    import subprocess

    repo = Path(__file__).parents[2]
    result = subprocess.run([sys.executable, str(repo / "tests" / "scripts" / "interrupt_at_import.py"), "numpy.linalg",
                             str(repo / "train.py"), *command], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(repo)})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 130 and len(lines) == 1 and lines[0].startswith("error: stopped by Ctrl-C"), result.stderr[-3000:]


def test_run_test_after_fast_dev_run_tests_its_weights_without_a_warning(tmp_path, monkeypatch, caplog):
    """fast_dev_run saves no checkpoint, by design: run_test tests the final weights and says nothing of a validation
    that did not run (one did)."""
    monkeypatch.chdir(tmp_path)
    metrics = launch.hydra_app.run(composed(["model=vae", "model.latent_dim=4", "trainer.fast_dev_run=true", "run_test=true",
                                             "model.val_num_samples=2", "model.test_num_samples=2", f"log_dir={tmp_path / 'logs'}"]))
    assert "test/nll" in metrics
    assert not [r for r in caplog.records if "no validation ran" in r.getMessage()], caplog.records


def test_run_test_of_a_fit_that_never_validated_tests_its_final_weights_and_says_so_once(tmp_path, monkeypatch, caplog):
    """Training that stops before its first validation has no best checkpoint: the checkpoint callback names the cause
    and the fix, and run_test says that it tests the final weights."""
    monkeypatch.chdir(tmp_path)
    metrics = launch.hydra_app.run(composed(["model=vae", "model.latent_dim=4", "trainer.max_steps=1", "run_test=true",
                                             "trainer.limit_test_batches=1", "trainer.num_sanity_val_steps=0",
                                             "model.test_num_samples=2", f"log_dir={tmp_path / 'logs'}"]))
    lines = [r.getMessage() for r in caplog.records]
    assert "test/nll" in metrics and "val/nll" not in metrics
    assert [line for line in lines if "before any validation" in line and "trainer.val_check_interval" in line], lines
    assert len([line for line in lines if "testing the final weights" in line]) == 1, lines


def test_callbacks_of_ones_own_replace_the_defaults_but_not_the_guards(tmp_path):
    """--trainer.callbacks=NAME (LightningCLI takes one callback as well as a list) replaces the default callbacks by it,
    beside the checkpoint callback and the guards every run keeps (the NaN guard among them); so does ~callbacks in
    Hydra; a run of the defaults has one NaN guard, configs/callbacks/default.yaml's."""
    cli = launch.cli_app.main(["--trainer.callbacks=LearningRateMonitor", f"--log_dir={tmp_path}"], run=False)
    _, _, hydra_trainer, _ = launch.hydra_app.build_run(composed(["~callbacks", f"log_dir={tmp_path / 'logs'}"]))
    _, _, default_trainer, _ = launch.hydra_app.build_run(composed([f"log_dir={tmp_path / 'logs'}"]))
    for trainer, own in ((cli.trainer, {"LearningRateMonitor", "ValidationCheckpoint"}), (hydra_trainer, set())):
        kinds = [type(c).__name__ for c in trainer.callbacks]
        assert own | {"SafeCheckpoints", "SaveOnPreemption", "NonFiniteLossGuard"} <= set(kinds) and "ImageGrids" not in kinds, kinds
    assert [type(c).__name__ for c in default_trainer.callbacks].count("NonFiniteLossGuard") == 1
    _, _, without_grids, _ = launch.hydra_app.build_run(composed(["callbacks.image_grids=null", f"log_dir={tmp_path / 'logs'}"]))
    assert None not in without_grids.callbacks and "ImageGrids" not in [type(c).__name__ for c in without_grids.callbacks]


def test_a_scheduler_without_its_optimizer_is_refused_and_works_with_it(tmp_path, monkeypatch, capsys):
    """LightningCLI applies --lr_scheduler only to an optimizer it builds from --optimizer: alone (here from a -c file)
    it would be dropped in silence; with --optimizer it schedules."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sched.yaml").write_text("lr_scheduler:\n  class_path: torch.optim.lr_scheduler.StepLR\n  init_args: {step_size: 5}\n"
                                         "trainer: {max_steps: 1, limit_val_batches: 0}\n")
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "--model=VAE", "--data=MNISTDataModule", "-c", "sched.yaml"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --lr_scheduler=StepLR without --optimizer would be ignored")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        both = launch.cli_app.main(["--optimizer=Adam", "--optimizer.lr=0.01", "--lr_scheduler=StepLR",
                                    "--lr_scheduler.step_size=5", f"--log_dir={tmp_path}"], run=False)
    assert not [w for w in caught if "configure_optimizers" in str(w.message)]  # replaced as asked: no warning says so
    (tmp_path / "both.yaml").write_text("optimizer:\n  class_path: torch.optim.Adam\n  init_args: {lr: 0.01}\n"
                                        + (tmp_path / "sched.yaml").read_text())
    in_a_file = launch.cli_app.main(["--model=VAE", "-c", "both.yaml", f"--log_dir={tmp_path}"], run=False)
    for cli in (both, in_a_file):
        [optimizer], [scheduler] = cli.model.configure_optimizers()
        assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR) and scheduler.optimizer is optimizer


def test_cli_integer_batch_limits_are_counts(tmp_path):
    """`--trainer.limit_val_batches=1` is one batch (jsonargparse alone reads it as 1.0, i.e. all of them)."""
    cli = launch.cli_app.main(["--trainer.limit_val_batches=1", "--trainer.limit_test_batches", "1", "--trainer.limit_train_batches=0.5",
                          f"--log_dir={tmp_path}"], run=False)
    assert (cli.trainer.limit_val_batches, cli.trainer.limit_test_batches, cli.trainer.limit_train_batches) == (1, 1, 0.5)
    assert isinstance(cli.trainer.limit_val_batches, int)


# ---- one inference API ---------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: VAE(latent_dim=4), lambda: JSA(), lambda: DiscreteVAE(), lambda: VQVAE(num_categories=16, code_dim=4, hidden_channels=16)])
def test_every_model_answers_the_same_questions(make, mnist_dir):
    torch.manual_seed(0)
    model = make().eval()
    x, _ = mnist_slice(mnist_dir, 8)
    with torch.no_grad():
        z = model.encode(x)
        images = [model.decode(z), model.reconstruct(x), model.sample(5)]
        torch.manual_seed(1)
        nll = model.nll(x, num_samples=4)
        torch.manual_seed(1)  # the same importance samples: their log-mean-exp bounds their mean from above
        elbo = model.elbo(x, num_samples=4)
    if isinstance(model, VAE):
        assert z.dtype == torch.float32 and z.shape == (8, 4)  # the posterior mean
    else:
        assert z.dtype == torch.long and (z >= 0).all() and (z < model.num_categories).all()  # codes
    for image in images:  # images in [0, 1]: probabilities, not logits
        assert image.shape[1:] == x.shape[1:] and image.min() >= 0 and image.max() <= 1
    assert nll.shape == elbo.shape == (8,) and (nll > 0).all() and (elbo <= -nll + 1e-3).all()  # nats per image
    torch.testing.assert_close(model.decode(z), model.reconstruct(x))


def test_inference_leaves_the_model_as_it_was(mnist_dir):
    """No gradient, and a VQ-VAE's codebook statistics do not move when its inference methods run in training mode."""
    model = VQVAE(num_categories=16, code_dim=4, hidden_channels=16).train()
    x, _ = mnist_slice(mnist_dir, 8)
    before = {k: v.clone() for k, v in model.quantizer.state_dict().items()}
    model.encode(x), model.reconstruct(x)
    nll = model.nll(x)
    assert model.training and not nll.requires_grad
    assert all(torch.equal(before[k], v) for k, v in model.quantizer.state_dict().items())


def test_bernoulli_model_refuses_grey_pixels_outside_the_trainer(mnist_dir):
    model = VAE(latent_dim=4)
    grey = torch.rand(2, 1, 28, 28)
    for method in (model.encode, model.reconstruct, model.nll, model.elbo):
        with pytest.raises(ValueError, match="binary pixels"):
            method(grey)
    with pytest.raises(ValueError, match=r"shape \(B, 1, 28, 28\)"):
        model.nll(torch.zeros(2, 3, 32, 32))


def test_the_cli_tests_a_checkpoint_a_plain_trainer_wrote(tmp_path, mnist_dir, monkeypatch):
    """README: a Trainer without SafeCheckpoints gets Lightning's plain saves, whose hyperparameters name no class;
    `test --model=VAE --ckpt_path` tests one with its settings (latent_dim 4, not the default 32)."""
    monkeypatch.chdir(tmp_path)
    trainer = L.Trainer(max_steps=1, limit_val_batches=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    trainer.fit(VAE(latent_dim=4), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    cli = launch.cli_app.main(["test", "--model=VAE", f"--ckpt_path={tmp_path / 'last.ckpt'}", "--model.test_num_samples=2",
                               "--trainer.limit_test_batches=1", "--data.eval_batch_size=4", "--trainer.logger=false",
                               f"--data.data_dir={mnist_dir}"])
    assert cli.model.latent_dim == 4 and "test/nll" in cli.trainer.callback_metrics


@pytest.mark.slow  # runs through the front ends
def test_a_checkpoint_is_resumed_and_tested_only_on_the_data_it_was_trained_on(tmp_path, mnist_dir, monkeypatch, capsys):
    """Another data module than the checkpoint's (the default MNIST for a Fashion-MNIST run) would log another data
    set's numbers into the run: refused in one line naming the choice that gives its data, in both front ends."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    launch.cli_app.main(["fit", "--model=VAE", "--data=FashionMNISTDataModule", "--trainer.max_steps=1", "--trainer.limit_val_batches=0",
                         "--data.batch_size=8", "--trainer.enable_progress_bar=false"])
    (checkpoint,) = tmp_path.glob("logs/tensorboard/*/version_0/checkpoints/last.ckpt")
    short = ["--trainer.max_steps=2", "--trainer.limit_val_batches=0", "--trainer.limit_test_batches=1", "--model.test_num_samples=2"]
    for command, choice in ((lambda: launch.cli_app.main(["test", "--model=VAE", f"--ckpt_path={checkpoint}", *short[2:]]),
                             "give --data=FashionMNISTDataModule"),
                            (lambda: launch.cli_app.main(["fit", "--model=VAE", f"--ckpt_path={checkpoint}", *short[:2]]),
                             "give --data=FashionMNISTDataModule"),
                            (lambda: launch.hydra_app.run(composed(["model=vae", f"ckpt_path={checkpoint}", "trainer.max_steps=2",
                                                                    "trainer.limit_val_batches=0"])), "give data=fashion_mnist")):
        with pytest.raises(SystemExit) as stop, launch.errors.user_errors_as_one_line():
            command()
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2 and error.startswith(f"error: checkpoint {checkpoint} was trained on datamodules.mnist.Fashion"
                                                         "MNISTDataModule, not datamodules.mnist.MNISTDataModule") and choice in error, error
    tested = launch.cli_app.main(["test", "--model=VAE", "--data=FashionMNISTDataModule", f"--ckpt_path={checkpoint}",
                                  "--trainer.limit_test_batches=1", "--model.test_num_samples=2", "--data.eval_batch_size=8"])
    assert "test/nll" in tested.trainer.callback_metrics


@pytest.mark.slow  # runs through the front ends
def test_hydra_resumes_with_the_checkpoints_settings_under_the_command_lines(tmp_path, mnist_dir, monkeypatch):
    """`model=rws ckpt_path=...` resumes a run of model.num_samples=5 with 5 (the config's default is 10), as
    LightningCLI's `fit --model=RWS --ckpt_path=...` does, and the data settings it trained on (grey pixels, not the
    default binarized ones) and its learning rate (the optimizer's ${model.lr}), but not where this machine keeps the
    data; a setting given on the command line wins, and in LightningCLI one a -c file gives."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    short = ["model=rws", "trainer.limit_val_batches=0", "trainer.enable_progress_bar=false", "data.batch_size=8",
             f"log_dir={tmp_path / 'logs'}"]
    launch.hydra_app.run(composed([*short, "model.num_samples=5", "model.test_num_samples=3", "trainer.max_steps=1",
                                   "data.binarize=none", "model.lr=0.002", "data.num_workers=1"]))
    (checkpoint,) = tmp_path.glob("logs/tensorboard/*/version_0/checkpoints/last.ckpt")
    resumed = launch.run_builder.built(launch.hydra_app.describe_run(composed([*short, f"ckpt_path={checkpoint}", "trainer.max_steps=2"])))
    assert (resumed.model.num_samples, resumed.model.hparams["test_num_samples"]) == (5, 3)
    assert (resumed.datamodule.binarize, resumed.datamodule.num_workers, resumed.model.lr) == ("none", 0, 0.002)
    given = launch.run_builder.built(launch.hydra_app.describe_run(composed([*short, f"ckpt_path={checkpoint}", "model.num_samples=7",
                                                                           "data.binarize=dynamic", "trainer.max_steps=2"])))
    assert (given.model.num_samples, given.model.hparams["test_num_samples"], given.datamodule.binarize) == (7, 3, "dynamic")
    (tmp_path / "run.yaml").write_text("model:\n  class_path: models.RWS\n  init_args: {test_num_samples: 4}\n")
    tested = launch.cli_app.main(["test", "-c", "run.yaml", f"--ckpt_path={checkpoint}", "--trainer.limit_test_batches=1",
                                  "--data.eval_batch_size=8", f"--log_dir={tmp_path / 'logs'}"])
    assert (tested.model.num_samples, tested.model.hparams["test_num_samples"]) == (5, 4)  # a -c file's wins too
    assert (tested.datamodule.binarize, tested.datamodule.num_workers) == ("none", 0)


@pytest.mark.slow  # runs through the front ends
def test_a_checkpoint_folder_holding_another_runs_checkpoints_is_refused(tmp_path, mnist_dir, monkeypatch, capsys):
    """A second run given the first's checkpoint folder would write over its last.ckpt: one line, in both front ends,
    nothing written; the run resumed from a checkpoint there is the run that wrote it."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    short = ["--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--data.batch_size=8", "--trainer.enable_progress_bar=false"]
    launch.cli_app.main(["fit", "--model=VAE", f"--checkpoint.dirpath={tmp_path / 'ck'}", *short])
    written = (tmp_path / "ck" / "last.ckpt").read_bytes()
    for command in (lambda: launch.cli_app.main(["fit", "--model=RWS", f"--checkpoint.dirpath={tmp_path / 'ck'}", *short]),
                    lambda: launch.hydra_app.run(composed(["model=rws", f"+callbacks.model_checkpoint.dirpath={tmp_path / 'ck'}",
                                                           "trainer.max_steps=1", "data.batch_size=8"]))):
        with pytest.raises(SystemExit) as stop, launch.errors.user_errors_as_one_line():
            command()
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2, error
        says(error, f"dirpath={tmp_path / 'ck'}", "another run's checkpoints (last.ckpt", "a folder of its own")
    assert (tmp_path / "ck" / "last.ckpt").read_bytes() == written
    assert [p.name for p in tmp_path.glob("logs/tensorboard/*")] == ["vae-mnist-mlp-z32"]
    launch.cli_app.main(["fit", "--model=VAE", f"--checkpoint.dirpath={tmp_path / 'ck'}",
                         f"--ckpt_path={tmp_path / 'ck' / 'last.ckpt'}", *short[1:], "--trainer.max_steps=2"])


@pytest.mark.slow  # runs through the CLI
def test_hparams_yaml_holds_the_settings_a_resumed_training_runs_with_and_a_test_leaves_it(tmp_path, mnist_dir, monkeypatch, capsys):
    """A resume with a setting changed (logged as "used and recorded") rewrites the run's hparams.yaml with it, as the
    HPARAMS tab and the checkpoint record it; testing the run with another test_num_samples leaves the file as its
    training wrote it."""
    import yaml

    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    short = ["--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false"]
    launch.cli_app.main(["fit", "--model=VAE", "--trainer.max_steps=1", "--data.batch_size=8", *short])
    (run,) = tmp_path.glob("logs/tensorboard/*/version_0")
    last = run / "checkpoints" / "last.ckpt"
    launch.cli_app.main(["fit", f"--ckpt_path={last}", "--model.lr=0.002", "--trainer.max_steps=2", *short])
    assert yaml.safe_load((run / "hparams.yaml").read_text())["lr"] == 0.002
    launch.cli_app.main(["test", f"--ckpt_path={last}", "--model.test_num_samples=2", "--trainer.limit_test_batches=1",
                         "--data.eval_batch_size=8"])
    saved = yaml.safe_load((run / "hparams.yaml").read_text())
    assert (saved["lr"], saved["test_num_samples"]) == (0.002, 1000)
    # Without --model, the --model.* options are the checkpoint's class's (VAE's latent_dim), the file read once
    reads = []
    monkeypatch.setattr(launch.cli_app, "load_checkpoint_file", lambda *args: reads.append(args) or load_checkpoint_file(*args))
    launch.cli_app.main(["test", f"--ckpt_path={last}", "--model.latent_dim=32", "--model.test_num_samples=2",
                         "--trainer.limit_test_batches=1", "--data.eval_batch_size=8"])
    assert len(reads) == 1
    with pytest.raises(SystemExit):
        launch.cli_app.main(["test", f"--ckpt_path={last}", "--model.test_num_sample=2"])
    assert "--model.test_num_sample: no such option of VAE; did you mean --model.test_num_samples?" in capsys.readouterr().err


@pytest.mark.slow  # runs through the front ends
def test_a_weights_only_checkpoint_is_tested_but_not_resumed(tmp_path, mnist_dir, monkeypatch, capsys):
    """save_weights_only leaves no optimizer, loop or callback state: fit from it is one line (Lightning's KeyError
    deep in its restore otherwise), in both front ends; test reads it."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    launch.cli_app.main(["fit", "--model=VAE", "--checkpoint.save_weights_only=true", "--trainer.max_steps=1",
                         "--trainer.limit_val_batches=0", "--data.batch_size=8", "--trainer.enable_progress_bar=false"])
    (checkpoint,) = tmp_path.glob("logs/tensorboard/*/version_0/checkpoints/last.ckpt")
    for option, command in (("--ckpt_path", lambda: launch.cli_app.main(["fit", f"--ckpt_path={checkpoint}", "--trainer.max_steps=2"])),
                            ("ckpt_path", lambda: launch.hydra_app.run(composed(["model=vae", f"ckpt_path={checkpoint}"])))):
        with pytest.raises(SystemExit) as stop, launch.errors.user_errors_as_one_line():
            command()
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2, error
        says(error, f"error: {option}={checkpoint}", "weights only", "test or validate it")
    tested = launch.cli_app.main(["test", f"--ckpt_path={checkpoint}", "--trainer.limit_test_batches=1",
                                  "--model.test_num_samples=2", "--data.eval_batch_size=8"])
    assert "test/nll" in tested.trainer.callback_metrics


@pytest.mark.slow  # runs through the front ends
def test_loading_a_checkpoint_with_the_wrong_class_says_which_class(tmp_path, mnist_dir, capsys):
    dm = MNISTDataModule(data_dir=str(mnist_dir), batch_size=16)
    trainer = L.Trainer(max_steps=1, limit_val_batches=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True), SafeCheckpoints()])
    trainer.fit(VAE(latent_dim=4, test_num_samples=7), datamodule=dm)
    with pytest.raises(ValueError, match=rf"^checkpoint {tmp_path / 'last.ckpt'} was written by models\.vae\.VAE, not "
                       r"models\.jsa\.JSA; load it with VAE"):
        JSA.load_from_checkpoint(tmp_path / "last.ckpt")
    # Resumed as the default model (JSA), as the Ctrl-C message's command would be without model=: the refusal names
    # the model to resume with, in the front end's own words.
    last = tmp_path / "last.ckpt"
    logs = tmp_path / "logs"
    with pytest.raises(ValueError, match=re.escape(f"written by models.vae.VAE, not models.jsa.JSA: resume it with the model that wrote "
                                                   f"it: python train.py model=vae data.batch_size=16 log_dir={logs} ckpt_path={last} (")):
        launch.hydra_app.run(composed(["data.batch_size=16", "model.mis_steps=2", f"log_dir={logs}", f"ckpt_path={last}"]))  # JSA's setting goes
    assert not logs.exists()  # refused before anything was written
    from hydra.core.hydra_config import HydraConfig

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HydraConfig.instance(), "cfg", None)  # no Hydra run: LightningCLI's command
        with pytest.raises(ValueError, match=re.escape(f"resume it with the model that wrote it: python train.py fit --model=VAE --ckpt_path={last} (")):
            L.Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[SafeCheckpoints()]).fit(JSA(), datamodule=dm, ckpt_path=last)
    assert isinstance(VAE.load_from_checkpoint(tmp_path / "last.ckpt"), VAE)
    import io
    assert isinstance(VAE.load_from_checkpoint(io.BytesIO((tmp_path / "last.ckpt").read_bytes())), VAE)  # a stream too
    # `test --ckpt_path`: the checkpoint's settings come back, and an option given on the command line wins over them.
    cli = launch.cli_app.main(["test", "--model=VAE", "--ckpt_path", str(tmp_path / "last.ckpt"), "--model.test_num_samples", "3",
                          "--trainer.limit_test_batches=1", "--data.eval_batch_size=4", "--trainer.logger=false",
                          f"--log_dir={tmp_path}"])
    assert cli.model.eval_num_samples["test"] == 3 and cli.model.latent_dim == 4
    # `test` with the wrong --model: the command that tests it with the right one (not one that trains it)
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp, pytest.raises(SystemExit):
        mp.setattr(HydraConfig.instance(), "cfg", None)  # as in a LightningCLI process (a Hydra run was composed above)
        launch.cli_app.main(["test", "--model=JSA", f"--ckpt_path={last}"])
    assert f"test it with the model that wrote it: python train.py test --model=VAE --ckpt_path={last} (" in capsys.readouterr().err


# ---- evaluation that does not depend on how it is run ----------------------------------------------


@pytest.mark.parametrize("make, resolved", [
    (lambda: JSA(mis_steps=2, val_num_samples=2),
     {"backbone": "mlp", "num_latents": 20, "likelihood": "bernoulli", "cache_size": 55000}),  # one chain per training image
    (lambda: VQVAE(num_categories=16, code_dim=4, hidden_channels=16), {"backbone": "conv", "num_latents": 49}),
    (lambda: VAE(latent_dim=4), {"backbone": "mlp"}),
    (lambda: DiscreteVAE(), {"num_samples": 4}),  # its default estimator's
])
def test_hparams_yaml_holds_the_values_the_run_used(make, resolved, tmp_path, mnist_dir, monkeypatch):
    """A setting left at None (the model's backbone, its number of latents, JSA's cache size, the data's directory:
    DATA_DIR) is written to hparams.yaml and the checkpoint as what it resolved to, and the checkpoint loads with it."""
    import yaml
    from lightning.pytorch.loggers import TensorBoardLogger

    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    model = make()
    trainer = L.Trainer(max_steps=1, limit_val_batches=0, logger=TensorBoardLogger(tmp_path), enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    trainer.fit(model, datamodule=MNISTDataModule(batch_size=16))
    written = yaml.safe_load((Path(trainer.logger.log_dir) / "hparams.yaml").read_text())
    assert {key: written[key] for key in resolved} == resolved
    assert written["data_dir"] == str(mnist_dir.resolve())
    loaded = type(model).load_from_checkpoint(tmp_path / "last.ckpt")
    assert {key: loaded.hparams[key] for key in resolved} == resolved
    assert all(torch.equal(value, model.state_dict()[key]) for key, value in loaded.state_dict().items())


def test_eval_binarization_depends_on_the_image_alone(mnist_dir):
    """Val/test images get one binary draw each, whatever the batch size or the number of (simulated) ranks."""
    def val_images(eval_batch_size: int, ranks: int) -> torch.Tensor:
        dm = MNISTDataModule(data_dir=str(mnist_dir), eval_batch_size=eval_batch_size, val_size=600)  # batches of each size, several per rank
        dm.setup("fit")
        loaders = []
        for rank in range(ranks):  # what Lightning's DistributedSampler gives each rank: every ranks-th image
            sampler = torch.utils.data.DistributedSampler(dm.val_set, num_replicas=ranks, rank=rank, shuffle=False)
            loaders.append(torch.utils.data.DataLoader(dm.val_set, batch_size=eval_batch_size, sampler=sampler, collate_fn=lambda b: b))
        out = torch.empty(len(dm.val_set), 1, 28, 28)
        for loader in loaders:
            for x, index in (dm.val_set.__getitems__(list(i for i in batch_indices)) for batch_indices in loader.batch_sampler):
                out[index] = x
        return out

    reference = val_images(500, 1)
    assert set(reference.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(val_images(128, 1), reference)
    assert torch.equal(val_images(100, 2), reference)


# ---- progress a person can read ----------------------------------------------------------------------


def test_plain_progress_lines_with_time_left_for_the_test_stage(mnist_dir, capsys):
    dm = MNISTDataModule(data_dir=str(mnist_dir), batch_size=32, eval_batch_size=32)
    trainer = L.Trainer(limit_test_batches=3, logger=False, enable_model_summary=False, callbacks=[LineProgressBar(refresh_seconds=0)])
    trainer.test(VAE(latent_dim=4, test_num_samples=2), datamodule=dm)
    out = capsys.readouterr().out
    assert "test: 1/3 batches" in out and "left" in out and "test done: 3/3 batches" in out and "test/nll=" in out
    assert "\r" not in out and "\x1b[" not in out


# ---- the end of a run: where it is, how to resume it ----------------------------------------------------


@contextlib.contextmanager
def logged() -> Iterator[list[str]]:
    """The messages logged at INFO and above while the block runs, whichever handlers would print them (Lightning's
    own logger may not propagate to the root)."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if not any(r is record for r in records):  # once, though it reaches both loggers' handlers
                records.append(record)

    handler, root = Collect(logging.INFO), logging.getLogger()
    loggers, level = [root, logging.getLogger("lightning.pytorch"), logging.getLogger("lightning.fabric")], root.level
    root.setLevel(logging.INFO)  # as under Hydra
    for logger in loggers:
        logger.addHandler(handler)
    messages: list[str] = []
    try:
        yield messages
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        root.setLevel(level)
        messages.extend(r.getMessage() for r in records)


def test_sigterm_during_fit_starts_no_collective_inside_the_signal_handler(tmp_path, mnist_dir):
    """Lightning's SIGTERM handler broadcasts rank 0's flag from inside the handler, wherever the signal lands: under DDP
    that broadcast meets another rank's collective (JSA's cache gather) and the run dies without its checkpoint. While
    SaveOnPreemption trains, the handler only sets the flag, which the loop broadcasts at the next step boundary."""
    from unittest.mock import patch

    from callbacks.guards.preemption import SaveOnPreemption

    class Sigterm(L.Callback):
        def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
            if trainer.global_step == 2:
                with patch("torch.distributed.broadcast", side_effect=AssertionError("a collective in the handler")), \
                        patch("torch.distributed.is_initialized", return_value=True), \
                        patch.object(L.Trainer, "world_size", new=2):
                    signal.raise_signal(signal.SIGTERM)

    trainer = L.Trainer(max_steps=20, limit_val_batches=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path,
                        callbacks=[Sigterm(), ModelCheckpoint(dirpath=tmp_path, save_last=True), SaveOnPreemption()])
    with pytest.raises(SystemExit) as stop:
        trainer.fit(VAE(latent_dim=4), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    assert stop.value.code == 143 and trainer.global_step == 2


def test_ctrl_c_says_how_to_resume_in_the_projects_words_only(tmp_path, mnist_dir, monkeypatch):
    """The first Ctrl-C saves last.ckpt and exits 130 with one message that names the command to resume with;
    Lightning's "Received SIGTERM: 15" (the callback sends itself SIGTERM) and "`weights_only` was not set" are not shown."""
    from hydra.core.hydra_config import HydraConfig

    from callbacks.guards.preemption import SaveOnPreemption
    from checkpoints.resume_command import resume_command

    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # no Hydra run: LightningCLI's command

    class CtrlC(L.Callback):
        def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
            if trainer.global_step == 2:
                signal.raise_signal(signal.SIGINT)

    trainer = L.Trainer(max_steps=20, limit_val_batches=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path,
                        callbacks=[CtrlC(), ModelCheckpoint(dirpath=tmp_path, save_last=True), SaveOnPreemption()])  # launch/run_builder.py adds it
    (tmp_path / "config.yaml").write_text("data:\n  batch_size: 16\n")  # LightningCLI's record of the run's settings
    with logged() as messages, pytest.raises(SystemExit) as stop:
        trainer.fit(VAE(latent_dim=4), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    assert stop.value.code == 130
    last, config = tmp_path / "last.ckpt", tmp_path / "config.yaml"
    # The run's config.yaml: its data and trainer settings too (LightningCLI restores only the model's from a checkpoint).
    assert messages[-1] == f"SIGINT: saved a resumable checkpoint at step 2 to {last}; resume with: python train.py fit --config={config} --ckpt_path={last}"
    assert resume_command(last, "VAE") == f"python train.py fit --model=VAE --ckpt_path={last}"  # a run without one
    assert not [m for m in messages if "Received SIGTERM" in m or "weights_only" in m], messages
    # Under Hydra: the job's own overrides, with model= (the job's choice, or the model that wrote the checkpoint).
    composed(["model=vae", "model.latent_dim=4", "data.batch_size=16"])
    assert resume_command(last, "VAE") == f"python train.py model=vae model.latent_dim=4 data.batch_size=16 ckpt_path={last}"
    assert resume_command(last, "JSA", "jsa") == f"python train.py model=jsa data.batch_size=16 ckpt_path={last}"
    monkeypatch.setattr(sys, "argv", ["../my zoo/train.py", "model=vae"])  # train.py as the command named it, to run from here
    assert resume_command(last, "VAE") == f"python '../my zoo/train.py' model=vae model.latent_dim=4 data.batch_size=16 ckpt_path={last}"
    # LightningCLI's: the command's options but the model's and --ckpt_path (as Hydra keeps a job's overrides)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    monkeypatch.setattr(sys, "argv", ["train.py", "fit", "--model=JSA", "--model.mis_steps", "3", "--trainer.max_epochs", "5",
                                      "--data.batch_size=16", "--ckpt_path", "x.ckpt"])
    assert resume_command(last, "VAE") == f"python train.py fit --model=VAE --trainer.max_epochs 5 --data.batch_size=16 --ckpt_path={last}"


@pytest.mark.slow  # runs through the front ends
@pytest.mark.parametrize("front_end", ["hydra", "cli"])
def test_a_run_ends_with_one_line_naming_its_directory_checkpoint_and_tensorboard(front_end, tmp_path, mnist_dir, monkeypatch, capsys):
    """The last line of a run (Hydra: after its test stage, run_test=true): the run directory, its last.ckpt and the
    TensorBoard command, paths relative to where it was started; Lightning's "callbacks returned in
    configure_callbacks will override existing callbacks" does not appear when the test stage follows the fit."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    run = "logs/tensorboard/vae-mnist-mlp-z4/version_0"
    expected = f"run: {run} · checkpoint: {run}/checkpoints/last.ckpt · tensorboard --logdir logs/tensorboard"
    if front_end == "hydra":
        with logged() as messages:
            launch.hydra_app.run(composed(["model=vae", "model.latent_dim=4", "data.batch_size=16", "trainer.max_steps=2",
                                "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
                                "model.val_num_samples=2", "model.test_num_samples=2", "run_test=true",
                                "trainer.enable_progress_bar=false"]))
        (best,) = (tmp_path / run / "checkpoints").glob("epoch*.ckpt")  # run_test's: the best on val/nll, named
        assert messages[-1] == expected.replace(" · tensorboard", f" · tested: {run}/checkpoints/{best.name} · tensorboard")
        assert not [m for m in messages if "will override existing callbacks" in m], messages
    else:
        launch.cli_app.main(["fit", "--model=VAE", "--model.latent_dim=4", "--data.batch_size=16", "--trainer.max_steps=2",
                        "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--model.val_num_samples=2",
                        "--trainer.enable_progress_bar=false"])
        assert capsys.readouterr().out.strip().splitlines()[-1:] == [expected]
        (best,) = (tmp_path / run / "checkpoints").glob("epoch*.ckpt")  # a later test of another checkpoint names it
        launch.cli_app.main(["test", f"--ckpt_path={run}/checkpoints/{best.name}", "--model.test_num_samples=2",
                             "--trainer.limit_test_batches=1", "--trainer.enable_progress_bar=false"])
        assert capsys.readouterr().out.strip().splitlines()[-1:] == [
            expected.replace(" · tensorboard", f" · tested: {run}/checkpoints/{best.name} · tensorboard")]
    assert (tmp_path / run / "checkpoints" / "last.ckpt").is_file()


def test_enable_checkpointing_false_runs_without_checkpoints_in_both_front_ends(tmp_path, mnist_dir, monkeypatch):
    """trainer.enable_checkpointing=false is done, not refused by Lightning beside the default ModelCheckpoint: Hydra
    leaves out callbacks.model_checkpoint, LightningCLI its --checkpoint callback."""
    import launch.hydra_app
    import launch.checks.hydra_config
    from lightning.pytorch.callbacks import ModelCheckpoint

    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    hydra_cfg = launch.checks.hydra_config.compose(["model=vae", "trainer.enable_checkpointing=false", f"log_dir={tmp_path}"])
    _, _, trainer, _ = launch.hydra_app.build_run(hydra_cfg)
    cli = launch.cli_app.main(["--model=VAE", "--trainer.enable_checkpointing=false", f"--log_dir={tmp_path}"],
                              run=False)
    for trainer in (trainer, cli.trainer):
        assert trainer.checkpoint_callback is None and not any(isinstance(c, ModelCheckpoint) for c in trainer.callbacks)
    assert launch.cli_app.main([f"--log_dir={tmp_path}"], run=False).trainer.checkpoint_callback is not None


@pytest.mark.slow  # runs through the front ends
def test_cli_seed_everything_given_at_test_wins_over_the_checkpoints_test_seed(tmp_path, mnist_dir, monkeypatch):
    """`test --ckpt_path=... --seed_everything=9` tests with seed 9, as Hydra's `ckpt_path=... seed=9` does, although the
    checkpoint was trained (and its test_seed recorded) with seed 5."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    quick = ["--trainer.enable_progress_bar=false", "--trainer.callbacks=[]"]
    launch.cli_app.main(["fit", "--model=VAE", "--seed_everything=5", "--trainer.max_steps=1", "--trainer.limit_train_batches=1",
                         "--trainer.limit_val_batches=1", "--trainer.num_sanity_val_steps=0", "--data.batch_size=8", *quick])
    (checkpoint,) = tmp_path.glob("logs/tensorboard/*/version_0/checkpoints/last.ckpt")
    tested = launch.cli_app.main(["test", "--model=VAE", f"--ckpt_path={checkpoint}", "--seed_everything=9",
                                  "--trainer.limit_test_batches=1", "--model.test_num_samples=2", *quick])
    assert (tested.model.test_seed, tested.datamodule.seed) == (9, 9)


@pytest.mark.slow  # runs through the front ends
def test_a_resume_with_other_settings_keeps_the_runs_earlier_config_file(tmp_path, mnist_dir, monkeypatch):
    """LightningCLI's config.yaml holds the settings of the run as it goes on; a resume that changes them keeps the file
    it replaces as config-1.yaml (then config-2.yaml, ...); one with the same settings replaces nothing."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    quick = ["--model=VAE", "--model.latent_dim=4", "--data.batch_size=16", "--model.val_num_samples=2", "--trainer.max_epochs=1",
             "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--trainer.enable_progress_bar=false"]
    launch.cli_app.main(["fit", *quick, "--trainer.max_steps=1"])
    (run,) = tmp_path.glob("logs/tensorboard/*/version_0")
    first = (run / "config.yaml").read_text()
    resume = ["fit", *quick, "--trainer.max_steps=2", f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}"]
    launch.cli_app.main(resume)
    assert (run / "config-1.yaml").read_text() == first
    assert "max_steps: 2" in (run / "config.yaml").read_text()
    launch.cli_app.main(resume)  # the same settings again
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config-1.yaml", "config.yaml"]


@pytest.mark.slow  # runs through the front ends
def test_without_a_logger_nothing_is_written_outside_the_run_directory(tmp_path, mnist_dir, monkeypatch):
    """`--trainer.logger=false` / `~logger`: LightningCLI's config.yaml and the checkpoints go to a run directory under
    logs/ (logs/cli/<run>/<time>-<pid>; Hydra's own run directory), not into the working directory."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    quick = ["max_steps=1", "limit_train_batches=1", "limit_val_batches=1", "enable_progress_bar=false"]
    launch.cli_app.main(["fit", "--model=VAE", "--model.latent_dim=4", "--data.batch_size=16", "--model.val_num_samples=2",
                         "--trainer.logger=false", *[f"--trainer.{setting}" for setting in quick]])
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]
    [cli_run] = (tmp_path / "logs" / "cli" / "vae-mnist-mlp-z4").iterdir()
    assert (cli_run / "config.yaml").is_file() and (cli_run / "checkpoints" / "last.ckpt").is_file()
    launch.hydra_app.run(composed(["~logger", "model=vae", "model.latent_dim=4", "data.batch_size=16", "model.val_num_samples=2",
                                   *[f"trainer.{setting}" for setting in quick]]))
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]
    [hydra_run] = (tmp_path / "logs" / "hydra" / "vae-mnist").iterdir()
    assert (hydra_run / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow  # runs through the front ends
def test_fast_dev_run_runs_and_writes_only_under_logs_in_both_front_ends(tmp_path, mnist_dir, monkeypatch):
    """`trainer.fast_dev_run=true` swaps the logger for Lightning's DummyLogger (no directory): the run still ends
    cleanly, and its checkpoint goes to a run directory under logs/, as without a logger."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    small = ["model.latent_dim=4", "data.batch_size=16", "model.val_num_samples=2"]
    launch.cli_app.main(["fit", "--model=VAE", *(f"--{s}" for s in small), "--trainer.fast_dev_run=true", "--trainer.enable_progress_bar=false"])
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]
    assert list((tmp_path / "logs" / "cli").glob("vae-*/*/checkpoints/last.ckpt"))
    launch.hydra_app.run(composed(["model=vae", *small, "trainer.fast_dev_run=true", "trainer.enable_progress_bar=false"]))
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]


@pytest.mark.parametrize("argv, job, left", [
    (["-m", "model=jsa,vae", "seed=1,2"], 1, ["model=vae seed=1", "model=vae seed=2"]),
    (["-m", "experiment=compare_quick", "seed=3"], 4,  # the experiment's sweep: dvae, dvae_gumbel, jsa, rws, vae, ...
     ["model=vimco experiment=compare_quick seed=3", "model=vqvae experiment=compare_quick seed=3"]),
    (["-m", "model=jsa,vae"], 1, []),  # the last job: nothing left, no line
])
def test_a_multirun_stopped_by_a_signal_names_the_jobs_that_did_not_run(argv, job, left, monkeypatch, caplog):
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict

    cfg = composed([a.split(",")[0] for a in argv if a != "-m"])  # a job's config: its runtime choices and the sweeper's
    OmegaConf.set_readonly(cfg.hydra, False)
    with open_dict(cfg):
        cfg.hydra.mode, cfg.hydra.job.num = RunMode.MULTIRUN, job
    HydraConfig.instance().set_config(cfg)
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    with caplog.at_level(logging.WARNING, logger="launch.hydra_app"):
        launch.hydra_app.note_jobs_not_run()
    lines = [r.getMessage() for r in caplog.records if "multirun stopped" in r.getMessage()]
    assert lines == ([f"the multirun stopped in job #{job}: its {len(left)} later job(s) did not run: {'; '.join(left)}"]
                     if left else []), caplog.text
