"""launch/run_builder.py: each front end describes its run, and one builder turns the description into the trainer.
The same run is driven through both front ends and what each built is compared."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback

import launch.checks.settings
import launch.cli_app
import launch.errors
import launch.hydra_app
import launch.run_builder
from common.signatures import settings_of
from tests.conftest import says
from tests.launch.test_configs import composed


@pytest.fixture
def described(monkeypatch):
    """Every RunDescription the builder builds, in order (Hydra's as built from its settings); `python train.py fit`
    builds everything and fits nothing."""
    import functools

    import lightning

    # LightningCLI reads the fit subcommand's options (--ckpt_path) from Trainer.fit's signature: kept by wraps
    monkeypatch.setattr(lightning.Trainer, "fit", functools.wraps(lightning.Trainer.fit)(lambda trainer, *args, **kwargs: None))
    seen = []
    built, build = launch.run_builder.built, launch.cli_app.build

    def hydras(run):
        seen.append(built(run))
        return seen[-1]

    def clis(run):
        seen.append(run)
        return build(run)

    monkeypatch.setattr(launch.run_builder, "built", hydras)  # each front end's run goes to the one builder
    monkeypatch.setattr(launch.cli_app, "build", clis)
    return seen


def both_front_ends(tmp_path: Path, hydra: list[str], cli: list[str]) -> tuple:
    """(Hydra's description and trainer, the CLI's) of one run given to each front end in its own words."""
    log_dir = tmp_path / "logs"
    _, _, hydra_trainer, hydra_resume = launch.hydra_app.build_run(composed([*hydra, f"log_dir={log_dir}"]))
    app = launch.cli_app.main(["fit", *cli, f"--log_dir={log_dir}"])
    return hydra_trainer, hydra_resume, app


def saved_run(tmp_path: Path, described: list) -> tuple[Path, dict]:
    """The last.ckpt of a run built through both front ends (Hydra's trainer saves it, its model connected), and what
    it holds."""
    hydra_trainer, _, _ = both_front_ends(tmp_path, [], [])
    checkpoint = Path(hydra_trainer.logger.log_dir) / "checkpoints" / "last.ckpt"
    hydra_trainer.strategy.connect(described[0].model)
    hydra_trainer.save_checkpoint(checkpoint)
    return checkpoint, torch.load(checkpoint, weights_only=True)


def test_the_same_run_through_both_front_ends_builds_the_same_run(tmp_path, described, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hydra_trainer, _, app = both_front_ends(
        tmp_path, ["model=jsa", "data=mnist", "seed=3", "trainer.max_epochs=2", "model.mis_steps=5", "model.gradient_rows=2"],
        ["--model=JSA", "--data=MNISTDataModule", "--seed_everything=3", "--trainer.max_epochs=2", "--model.mis_steps=5",
         "--model.gradient_rows=2"])
    hydra_run, cli_run = described
    assert isinstance(hydra_run.model.row_choice(torch.device("cpu")), int) and isinstance(cli_run.model.row_choice(torch.device("cpu")), int)  # JSA's k + 1 gradient rows, from both
    assert (hydra_run.name, cli_run.name) == ("jsa-mnist-mlp-K10-L5-rows2", "jsa-mnist-mlp-K10-L5-rows2")
    assert hydra_run.log_dir == cli_run.log_dir == str(tmp_path / "logs")
    without_optimizer = lambda model: {k: v for k, v in settings_of(model).items() if k != "optimizer"}
    assert without_optimizer(hydra_run.model) == without_optimizer(cli_run.model)
    assert settings_of(hydra_run.datamodule) == settings_of(cli_run.datamodule)
    for hydra_param, cli_param in zip(hydra_run.model.parameters(), cli_run.model.parameters(), strict=True):
        assert torch.equal(hydra_param, cli_param)  # the same seed before the same construction
    cli_trainer = app.trainer
    for setting in ("max_epochs", "precision", "log_every_n_steps", "num_sanity_val_steps"):
        assert getattr(hydra_trainer, setting) == getattr(cli_trainer, setting), setting
    hydra_trainer_precision = hydra_trainer.precision
    assert hydra_trainer_precision == "32-true"
    # Two TensorBoard runs of the same name under the same root (versions 0 and 1: each reserves its own).
    assert Path(hydra_trainer.logger.log_dir).parent == Path(cli_trainer.logger.log_dir).parent == tmp_path / "logs" / "tensorboard" / hydra_run.name
    kinds = lambda trainer: sorted(type(c).__name__ for c in trainer.callbacks if not isinstance(c, SaveConfigCallback))
    assert kinds(hydra_trainer) == kinds(cli_trainer)
    hydra_checkpoint, cli_checkpoint = hydra_trainer.checkpoint_callback, cli_trainer.checkpoint_callback
    assert (hydra_checkpoint.monitor, hydra_checkpoint.save_last) == (cli_checkpoint.monitor, cli_checkpoint.save_last) == ("val/nll", True)


def test_both_front_ends_leave_the_checkpoints_out_and_write_an_unlogged_run_under_log_dir_alike(tmp_path, described, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hydra_trainer, _, app = both_front_ends(
        tmp_path, ["trainer.enable_checkpointing=false", "~logger"], ["--trainer.enable_checkpointing=false", "--trainer.logger=false"])
    for trainer in (hydra_trainer, app.trainer):
        assert not any(isinstance(c, ModelCheckpoint) for c in trainer.callbacks) and trainer.logger is None
    hydra_run, cli_run = described
    assert hydra_run.tensorboard is None and cli_run.tensorboard is None
    # Hydra's run directory holds a run without a logger; the CLI's is <log_dir>/cli/<name>/<time>-<pid>, the same layout.
    assert Path(app.trainer.default_root_dir).parent == tmp_path / "logs" / "cli" / cli_run.name


@pytest.mark.slow  # runs through both front ends
def test_a_checkpoint_resumes_into_its_own_run_through_both_front_ends_and_another_models_is_refused_by_both(tmp_path, described, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    checkpoint, _ = saved_run(tmp_path, described)
    described.clear()
    hydra_trainer, hydra_resume, app = both_front_ends(tmp_path, [f"ckpt_path={checkpoint}"], [f"--ckpt_path={checkpoint}"])
    assert hydra_resume == str(checkpoint) and app.config_init.fit.ckpt_path == str(checkpoint)
    assert hydra_trainer.logger.log_dir == app.trainer.logger.log_dir == str(checkpoint.parent.parent)  # the run that wrote it
    from checkpoints.errors import CheckpointError

    with pytest.raises(CheckpointError, match="was written by models.jsa.JSA, not models.vae.VAE"):
        launch.hydra_app.build_run(composed(["model=vae", f"ckpt_path={checkpoint}", f"log_dir={tmp_path / 'logs'}"]))
    capsys.readouterr()
    with pytest.raises(SystemExit):  # the same check, before LightningCLI reads the checkpoint's hyperparameters
        launch.cli_app.main(["fit", "--model=VAE", f"--ckpt_path={checkpoint}", f"--log_dir={tmp_path / 'logs'}"])
    assert "was written by models.jsa.JSA, not models.vae.VAE: resume it with the model that wrote it" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the model named by the package's short path, as the configs name it
        launch.cli_app.main(["fit", "--model=models.VAE", f"--ckpt_path={checkpoint}", f"--log_dir={tmp_path / 'logs'}"])
    assert "was written by models.jsa.JSA, not models.vae.VAE" in capsys.readouterr().err


@pytest.mark.slow  # a run through the CLI
def test_a_checkpoint_resumes_with_its_own_seed_unless_one_is_given_in_both_front_ends(tmp_path, described, monkeypatch):
    """A run from a checkpoint (a replica's of seed 4, say) takes the seed its data module was seeded with where the
    command line gives none, so that its data order and test stage continue as they were; a seed given wins."""
    from checkpoints.file_format import save_checkpoint_file

    monkeypatch.chdir(tmp_path)
    checkpoint, saved = saved_run(tmp_path, described)
    saved["hyper_parameters"]["test_seed"], saved["datamodule_hyper_parameters"] = 4, {"seed": 4}
    save_checkpoint_file(saved, checkpoint)
    for hydra, cli, seed in (([], [], 4), (["seed=7"], ["--seed_everything=7"], 7)):
        described.clear()
        both_front_ends(tmp_path, [f"ckpt_path={checkpoint}", *hydra], [f"--ckpt_path={checkpoint}", *cli])
        for run in described:
            assert (run.datamodule.hparams["seed"], run.model.hparams["test_seed"]) == (seed, seed), run.front_end


def test_an_sgmcmc_run_resumes_with_its_own_step_size_where_the_command_line_gives_none(tmp_path, monkeypatch):
    """optimizer=sgld has a step size of its own (1e-7 in its config): a run resumed with optimizer=sgld alone takes the
    checkpoint's (the rate its model recorded), as it takes its model settings; one given on the command line wins."""
    from checkpoints.file_format import save_checkpoint_file

    checkpoint = tmp_path / "last.ckpt"
    save_checkpoint_file({"model_class": "models.vae.VAE", "hyper_parameters": {"lr": 1e-6}, "state_dict": {}}, checkpoint)
    for given, lr in ((["optimizer=sgld"], 1e-6), (["optimizer=sgld", "optimizer.lr=3e-6"], 3e-6)):
        overrides = ["model=vae", *given, f"ckpt_path={checkpoint}"]
        monkeypatch.setattr(launch.hydra_app, "command_line_overrides", lambda: dict(o.split("=", 1) for o in overrides))
        run = launch.hydra_app.describe_run(composed(overrides))
        assert run.optimizer["lr"] == lr and run.optimizer["_target_"] == "samplers.SGLD", run.optimizer


@pytest.mark.slow  # a run through the CLI
def test_a_checkpoint_setting_the_class_does_not_take_is_refused_by_both_front_ends(tmp_path, described, monkeypatch, capsys):
    """A checkpoint holding a model or data setting its class does not take (another version of the class, an edited
    file) is refused in one line naming the file and the setting, in both front ends: resuming without it would not
    resume the run it saved."""
    from checkpoints.file_format import save_checkpoint_file

    monkeypatch.chdir(tmp_path)
    checkpoint, saved = saved_run(tmp_path, described)
    for section, group in (("hyper_parameters", "model"), ("datamodule_hyper_parameters", "data")):
        edited = {**saved, section: {**(saved.get(section) or {}), "depth": 3}}
        save_checkpoint_file(edited, checkpoint)
        for run in (lambda: launch.hydra_app.run(composed([f"ckpt_path={checkpoint}", f"log_dir={tmp_path / 'logs'}"])),
                    lambda: launch.cli_app.main(["fit", f"--ckpt_path={checkpoint}", f"--log_dir={tmp_path / 'logs'}"])):
            with pytest.raises(SystemExit) as stop, launch.errors.user_errors_as_one_line():
                run()
            error = capsys.readouterr().err.strip().splitlines()[-1]
            assert stop.value.code == 2, error
            says(error, f"checkpoint {checkpoint}", f"{group} setting depth=3")


def test_a_log_dir_from_a_config_file_is_where_the_cli_writes_and_is_checked_there(tmp_path, described, monkeypatch, capsys):
    """`log_dir` set in a -c file: the run goes there, a ./logs that is a file does not matter, and a log_dir that is a
    file is one line (the early checks see the command line only)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").write_text("not a directory")
    config = tmp_path / "run.yaml"
    config.write_text("log_dir: mylogs\n")
    app = launch.cli_app.main(["fit", "--model=JSA", "--data=MNISTDataModule", "-c", str(config)])
    assert Path(app.trainer.logger.log_dir).parent.parent == (tmp_path / "mylogs" / "tensorboard").resolve()
    config.write_text("log_dir: logs\n")
    with pytest.raises(SystemExit):
        launch.cli_app.main(["fit", "--model=JSA", "--data=MNISTDataModule", "-c", str(config)])
    says(capsys.readouterr().err.strip().splitlines()[-1], "--log_dir=logs", "not a directory")


def test_a_setting_given_before_its_class_applies_to_that_class(tmp_path, described, monkeypatch):
    """`fit --model.lr=0.5 --model=VAE`: the settings are read against the class the command line chooses, wherever
    it stands (jsonargparse reads them against the class chosen before them)."""
    monkeypatch.chdir(tmp_path)
    app = launch.cli_app.main(["fit", "--model.lr=0.5", "--model.latent_dim=8", "--model.val_num_samples=2", "--model=VAE",
                               "--data.batch_size=7", "--data=FashionMNISTDataModule"])  # latent_dim: VAE's, not JSA's
    assert type(app.model).__name__ == "VAE" and app.model.lr == 0.5 and app.model.eval_num_samples["val"] == 2
    assert app.model.hparams["latent_dim"] == 8
    assert type(app.datamodule).__name__ == "FashionMNISTDataModule" and app.datamodule.batch_size == 7


@pytest.mark.parametrize("choice, kind, folder", [("tensorboard", "TensorBoardLogger", "tensorboard"), ("csv", "CSVLogger", "csv"),
                                                  ("none", None, None)])
def test_hydras_logger_group_chooses_the_logger_and_the_layout_places_it(choice, kind, folder, tmp_path, described, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, _, trainer, _ = launch.hydra_app.build_run(composed([f"logger={choice}", f"log_dir={tmp_path / 'logs'}"]))
    if kind is None:
        assert trainer.logger is None and described[0].tensorboard is None
    else:
        assert kind in [cls.__name__ for cls in type(trainer.logger).__mro__]
        assert Path(trainer.logger.log_dir).parent.resolve() == (tmp_path / "logs" / folder / described[0].name).resolve()


@pytest.mark.parametrize("overrides, named", [
    # TensorBoard's settings under another class: refused, not a TensorBoard run written in its place
    (["logger._target_=lightning.pytorch.loggers.CSVLogger"], ["logger.default_hp_metric", "CSVLogger", "logger=csv", "logger=tensorboard"]),
    (["logger=csv", "logger._target_=lightning.pytorch.loggers.MLFlowLogger"],
     ["logger._target_=lightning.pytorch.loggers.MLFlowLogger", "logger=tensorboard, logger=csv", "logger=none"]),
    (["logger=csv", "replicas.seeds=[0,1]"], ["logger=csv with replicas", "TensorBoard run of its own"]),
    (["logger=none", "replicas.seeds=[0,1]"], ["logger=none with replicas", "logger=tensorboard"]),
    (["scheduler=cosine", "replicas.seeds=[0,1]"], ["scheduler with replicas", "without a learning-rate scheduler"]),
    (["model=vae", "optimizer=sgld", "replicas.seeds=[0,1]"], ["replicas train with Adam or AdamW", "elementwise"]),
    # a second checkpoint callback on the checkpoints' monitor: Lightning's RuntimeError, a traceback
    (["+callbacks.ck2._target_=lightning.pytorch.callbacks.ModelCheckpoint", "+callbacks.ck2.monitor=val/nll"],
     ["callbacks: two ModelCheckpoint callbacks", "another monitor"]),
    (["replicas.arms=[{cache_start_epoch:1}]"], ["replicas.arms without replicas.seeds", "replicas.seeds="]),  # not a single run
    (["seed=5", "replicas.seeds=[0,1]"], ["seed with replicas.seeds", "leave seed out"]),  # each replica's seed is its own
])
def test_a_logger_scheduler_or_optimizer_the_run_cannot_take_is_refused(overrides, named, tmp_path, monkeypatch):
    from launch.checks.settings import SettingsError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError) as refused:
        launch.hydra_app.run(composed([*overrides, f"log_dir={tmp_path / 'logs'}"]))
    says(refused.value, *named)


@pytest.mark.parametrize("options, named", [
    (["--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.monitor=val/nll"],  # the --checkpoint group's monitor
     ["error: --trainer.callbacks: two", "--checkpoint.monitor"]),
    (["--replicas.arms=[{cache_start_epoch: 1}]"], ["error: --replicas.arms without --replicas.seeds", "--replicas.seeds="]),
    (["--seed_everything=5", "--replicas.seeds=[0,1]"], ["error: --seed_everything with --replicas.seeds", "leave --seed_everything"]),
])
def test_the_cli_refuses_what_the_run_builder_cannot_take_in_one_line(options, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", *options, f"--log_dir={tmp_path / 'logs'}"])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], *named)


def test_the_clis_own_optimizer_refusing_a_value_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "--optimizer=Adam", "--optimizer.lr=-1", f"--log_dir={tmp_path / 'logs'}"])
    assert stop.value.code == 2 and not (tmp_path / "logs").exists()
    says(capsys.readouterr().err.strip().splitlines()[-1], "error: --optimizer (Adam)", "learning rate", "-1")


@pytest.mark.parametrize("logger", [["--trainer.logger=false"], ["--trainer.logger=CSVLogger", "--trainer.logger.save_dir=x"]])
def test_the_cli_refuses_replicas_without_their_tensorboard_runs(logger, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "--replicas.seeds=[0,1]", *logger])  # (log_dir: logs/ of the working directory)
    assert stop.value.code == 2 and not (tmp_path / "logs").exists() and not (tmp_path / "x").exists()
    says(capsys.readouterr().err.strip().splitlines()[-1], f"error: {logger[0].split('=')[0]}", "with replicas",
         "leave --trainer.logger out")


def test_a_trainer_setting_refused_in_a_replicated_cli_run_is_named_as_the_cli_option(tmp_path, monkeypatch, capsys):
    """Replicas change the run's folder, not how its command spells its options."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "--model=VAE", "--replicas.seeds=[0,1]", "--trainer.max_epochs=-5"])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], "error: --trainer.max_epochs=-5")


def test_the_clis_own_optimizer_with_replicas_is_refused_naming_the_models_option(tmp_path, described, monkeypatch, capsys):
    """Replicas build the model's optimizer over their stacked weights: LightningCLI's --optimizer, which replaces one
    model's configure_optimizers, would be dropped; the model's --model.lr is taken."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "--model=VAE", "--optimizer=SGD", "--replicas.seeds=[0,1]", f"--log_dir={tmp_path / 'logs'}"])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], "error: --optimizer with --replicas", "--model.lr=LR")
    launch.cli_app.main(["fit", "--model=VAE", "--model.lr=0.01", "--replicas.seeds=[0,1]", f"--log_dir={tmp_path / 'logs'}"])
    optimizer = described[-1].model.configure_optimizers()
    assert type(optimizer).__name__ == "Adam" and optimizer.defaults["lr"] == 0.01
    # the model's own optimizer option, as Hydra's optimizer=adamw: an elementwise one, taken
    launch.cli_app.main(["fit", "--model=VAE", "--model.optimizer=AdamW", "--model.optimizer.lr=0.02", "--replicas.seeds=[0,1]",
                         f"--log_dir={tmp_path / 'logs'}"])
    optimizer = described[-1].model.configure_optimizers()
    assert type(optimizer).__name__ == "AdamW" and optimizer.defaults["lr"] == 0.02


@pytest.mark.parametrize("overrides", [["trainer=ddp", "trainer.accelerator=cpu"], ["trainer.devices=2"],
                                       ["trainer.strategy=ddp_spawn", "trainer.devices=1"]])
def test_replicas_under_ddp_are_refused_before_any_process_starts(overrides, tmp_path, monkeypatch):
    """Replicas are one batched process on one device (docs/replicas.md); under DDP each rank would fail on its own."""
    from launch.checks.settings import SettingsError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError) as refused:
        launch.hydra_app.build_run(composed([*overrides, "replicas.seeds=[0,1]", f"log_dir={tmp_path / 'logs'}"]))
    assert str(refused.value).startswith("replicas.seeds with trainer.strategy=")
    assert "replicas train as one process on one device" in str(refused.value)


@pytest.mark.parametrize("override, named", [
    ("data.seed=18446744073709551616", ["data.seed", "MNISTDataModule", "18446744073709551616"]),
    ("data.split_seed=-1", ["data.split_seed", "MNISTDataModule", "-1"]),
    ("model.test_seed=18446744073709551616", ["model.test_seed", "JSA", "18446744073709551616"]),
])
def test_a_constructors_refusal_names_the_group_class_and_setting_before_the_run(override, named, monkeypatch):
    from launch.checks.settings import SettingsError

    monkeypatch.setattr("sys.argv", ["train.py", override])
    with pytest.raises(SettingsError) as refused:
        launch.hydra_app.data_and_model(composed([override]))
    assert str(refused.value).startswith(named[0]), refused.value
    says(refused.value, *named, "[0, 4294967295]")


@pytest.mark.parametrize("hydra, cli, named", [
    (["model.prior=gaussian"], ["--model.prior=gaussian"], ["prior", "JSA", "'gaussian'", "uniform, factorized"]),
    (["model=vqvae", "model.beta=-1"], ["--model=VQVAE", "--model.beta=-1"], ["beta", "VQVAE", ">= 0", "-1"]),
])
def test_a_models_refusal_of_its_own_setting_names_the_option_and_the_class_in_both_front_ends(hydra, cli, named, tmp_path,
                                                                                               monkeypatch, capsys):
    """A constructor's refusal the checks before it cannot see (the priors' registry, a range configs/settings.py
    leaves to it): the option as each front end spells it, then the reason, the class after it."""
    from launch.checks.settings import SettingsError

    monkeypatch.setattr("sys.argv", ["train.py", *hydra])
    with pytest.raises(SettingsError) as refused:
        launch.hydra_app.data_and_model(composed(hydra))
    with pytest.raises(SystemExit):
        launch.cli_app.main(["fit", *cli, f"--log_dir={tmp_path}"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    for option, said in ((f"model.{named[0]}", str(refused.value)), (f"error: --model.{named[0]}", line)):
        assert said.startswith(option), said
        says(said, *named[1:])


@pytest.mark.parametrize("override, named", [
    ("callbacks.model_checkpoint.save_top_k=-5", ["callbacks.model_checkpoint", "ValidationCheckpoint", "save_top_k=-5"]),
    ("callbacks.gradient_variance.every_n_steps=-1", ["callbacks.gradient_variance.every_n_steps", ">= 0", "-1", "GradientVariance"]),
    # a class path that cannot be imported (a misspelled class; a package of one's own not on the path)
    ("+callbacks.mine._target_=callbacks.PrintEpok", ["callbacks.mine._target_=callbacks.PrintEpok", "'PrintEpok'"]),
    ("model._target_=models.VAEE", ["model._target_=models.VAEE", "'VAEE'"]),
    ("model._target_=mypkg.MyVAE", ["model._target_=mypkg.MyVAE", "'mypkg'", "train.py's folder or PYTHONPATH"]),
    # a class that is not one the run can build (a plain LightningModule, a LightningDataModule of one's own)
    ("model._target_=lightning.pytorch.demos.boring_classes.BoringModel",
     ["model._target_=lightning.pytorch.demos.boring_classes.BoringModel", "models.LatentVariableModel"]),
    ("data._target_=lightning.pytorch.demos.boring_classes.BoringDataModule",
     ["data._target_=lightning.pytorch.demos.boring_classes.BoringDataModule", "datamodules.ImageDataModule"]),
])
def test_a_refused_callback_or_class_is_one_line_naming_it_before_the_run(override, named, tmp_path, monkeypatch, caplog):
    from launch.checks.settings import SettingsError

    monkeypatch.setattr("sys.argv", ["train.py", override])
    with pytest.raises(SettingsError) as refused:
        launch.hydra_app.run(composed([override, f"log_dir={tmp_path / 'logs'}"]))
    assert str(refused.value).startswith(named[0]) and "\n" not in str(refused.value), refused.value
    says(refused.value, *named)
    assert not (tmp_path / "logs").exists() and not [r for r in caplog.records if r.levelname == "ERROR"]  # (nor logged)


@pytest.mark.parametrize("choice, cli, expected", [
    ("cosine", ["--model.scheduler=CosineAnnealingLR", "--model.scheduler.T_max=3"], ("CosineAnnealingLR", {"T_max": 3})),
    ("step", ["--model.scheduler=StepLR", "--model.scheduler.step_size=10"], ("StepLR", {"step_size": 10, "gamma": 0.1})),
    ("none", [], None),
])
def test_a_scheduler_is_built_by_the_models_configure_optimizers_in_both_front_ends(choice, cli, expected, tmp_path, described, monkeypatch):
    monkeypatch.chdir(tmp_path)
    both_front_ends(tmp_path, [f"scheduler={choice}", "trainer.max_epochs=3"], [*cli, "--trainer.max_epochs=3"])
    for run in described:
        configured = run.model.configure_optimizers()
        if expected is None:
            assert isinstance(configured, torch.optim.Adam)
            continue
        scheduler = configured["lr_scheduler"]
        assert type(scheduler).__name__ == expected[0] and scheduler.optimizer is configured["optimizer"]
        assert {key: getattr(scheduler, key) for key in expected[1]} == expected[1]


def test_the_learning_rate_recorded_is_the_one_the_optimizer_trains_with_in_both_front_ends(tmp_path, described, monkeypatch):
    """An optimizer's own learning rate (Hydra's optimizer.lr, the CLI's --model.optimizer.lr or --optimizer.lr) is the
    run's: the hyperparameters (hparams.yaml, the HPARAMS tab, the checkpoint) say it, not the unused model.lr."""
    monkeypatch.chdir(tmp_path)
    both_front_ends(tmp_path, ["optimizer.lr=3e-4"], ["--model.optimizer=Adam", "--model.optimizer.lr=3e-4"])
    # LightningCLI's own --optimizer, which replaces the model's configure_optimizers
    launch.cli_app.main(["fit", "--optimizer=SGD", "--optimizer.lr=3e-4", f"--log_dir={tmp_path / 'logs'}"])
    for run in described:
        assert run.model.configure_optimizers().defaults["lr"] == run.model.hparams["lr"] == 3e-4
        assert run.model.hparams_initial["lr"] == 3e-4  # what the logger writes to hparams.yaml
    assert type(described[-1].model.configure_optimizers()).__name__ == "SGD"


@pytest.mark.parametrize("text, model, data", [("trainer:\n  max_epochs: 1\n", "JSA", "MNISTDataModule"),
                                               ("model: VAE\n", "VAE", "MNISTDataModule"),
                                               ("model:\n  init_args:\n    mis_steps: 3\n", "JSA", "MNISTDataModule"),
                                               ("data: FashionMNISTDataModule\n", "JSA", "FashionMNISTDataModule")])
def test_a_cli_config_file_without_model_or_data_takes_the_defaults(text, model, data, tmp_path, described, monkeypatch):
    """README's defaults, --model=JSA --data=MNISTDataModule, for what a -c file leaves out; its settings still apply."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.yaml").write_text(text)
    launch.cli_app.main(["fit", "-c", "my.yaml", f"--log_dir={tmp_path / 'logs'}"])
    (run,) = described
    assert (type(run.model).__name__, type(run.datamodule).__name__) == (model, data)
    if "mis_steps" in text:
        assert run.model.hparams.mis_steps == 3


@pytest.mark.slow  # trains through the Hydra front end
def test_a_csv_logged_run_with_a_cosine_schedule_writes_its_metrics_and_schedule(tmp_path, mnist_dir, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    launch.hydra_app.run(composed(["model=vae", "logger=csv", "scheduler=cosine", "trainer.max_epochs=2", "trainer.limit_train_batches=2",
                                   "trainer.limit_val_batches=1", "log_dir=logs"]))
    (run,) = (tmp_path / "logs" / "csv").glob("*/version_0")
    assert "val/nll" in (run / "metrics.csv").read_text()
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    (schedule,) = checkpoint["lr_schedulers"]
    assert schedule["T_max"] == 2 and schedule["last_epoch"] == 2  # annealed over the run's 2 epochs: the lr is eta_min
    assert checkpoint["optimizer_states"][0]["param_groups"][0]["lr"] == 0.0
    assert not (tmp_path / "logs" / "tensorboard").exists()
    # Tested and resumed from its checkpoint, in either front end, the CSV run goes on: its rows kept, no other run
    launch.cli_app.main(["test", f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "--trainer.limit_test_batches=1",
                         "--model.test_num_samples=2", "--log_dir=logs"])
    launch.hydra_app.run(composed(["model=vae", "logger=csv", "scheduler=cosine", "trainer.max_epochs=3", "trainer.limit_train_batches=2",
                                   "trainer.limit_val_batches=1", "log_dir=logs", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"]))
    rows = (run / "metrics.csv").read_text().splitlines()
    steps = [int(row["step"]) for row in csv.DictReader(rows) if row.get("val/nll")]
    assert steps == [1, 3, 5] and any("test/nll" in line for line in rows[:1])  # 2 epochs, the test, the third epoch
    assert list((tmp_path / "logs" / "csv").glob("*/*")) == [run] and not (tmp_path / "logs" / "tensorboard").exists()


def test_a_val_check_interval_past_the_epoch_is_one_line_and_leaves_no_run(tmp_path, monkeypatch):
    """Lightning refuses it only once it knows the data, with a ValueError: the run says it as a refused setting and
    removes the TensorBoard run it had made (launch/errors.py, launch/run_builder.py `running`)."""
    from launch import run_builder
    from launch.checks.settings import SettingsError

    monkeypatch.chdir(tmp_path)
    datamodule, model, trainer, _ = launch.hydra_app.build_run(composed([
        "trainer.max_steps=1", "trainer.limit_train_batches=2", "trainer.val_check_interval=5", "trainer.limit_val_batches=1",
        f"log_dir={tmp_path / 'logs'}"]))
    with pytest.raises(SettingsError, match=r"^`val_check_interval` \(5\) must be less than or equal to"):
        with run_builder.running(trainer, print):
            trainer.fit(model, datamodule=datamodule)
    assert not list((tmp_path / "logs").rglob("version_*"))


def test_an_arm_written_without_a_space_after_its_colon_is_one_line_saying_so():
    """YAML reads {cache_start_epoch:300} as one key (LightningCLI's parser does): refused, naming the fix."""
    from launch.checks.settings import SettingsError
    from launch.runs.replicas import check_replica_request

    with pytest.raises(SettingsError, match=r"^--replicas\.arms: 'cache_start_epoch:300' is one key; write a space after the colon"):
        check_replica_request([0, 1], [{}, {"cache_start_epoch:300": None}], "--replicas")


@pytest.mark.parametrize("given, named", [
    (["--model.compile=networks"], ["--model.compile=networks", "--model.compile=step"]),
    (["--model.optimizer=samplers.SGLD", "--model.optimizer.lr=1e-7"], ["Adam or AdamW", "--model.optimizer=Adam"]),
    (["--model.chain_rows=distinct"], ["--model.chain_rows=distinct", "--model.chain_rows=auto"])])
def test_what_replicas_cannot_train_is_named_in_the_clis_spelling(given, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "--model=JSA", "--replicas.seeds=[0,1]", *given])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], *named)


def test_a_repeated_arm_is_refused_as_a_repeated_seed_is():
    """Two equal arms would train each seed twice under two names."""
    from launch.checks.settings import SettingsError
    from launch.runs.replicas import check_replica_request

    with pytest.raises(SettingsError, match=r"^replicas\.arms: \{'cache_start_epoch': 5\} is repeated"):
        check_replica_request([0, 1], [{}, {"cache_start_epoch": 5}, {"cache_start_epoch": 5}], "replicas")
    check_replica_request([0, 1], [{}, {"cache_start_epoch": 5}], "replicas")


def test_a_setting_given_beside_a_resumed_runs_own_that_cannot_go_with_it_names_where_that_one_came_from(tmp_path, monkeypatch,
                                                                                                     capsys):
    """A run from a checkpoint takes the checkpoint's model settings where the command line gives none: a setting given
    that cannot go with one of them (use_cache=false beside the run's cache_start_epoch=1) is refused in one line that
    says the other came from the checkpoint."""
    monkeypatch.chdir(tmp_path)
    _, model, trainer, _ = launch.hydra_app.build_run(composed(["model.cache_start_epoch=1", f"log_dir={tmp_path / 'logs'}"]))
    checkpoint = Path(trainer.logger.log_dir) / "checkpoints" / "last.ckpt"
    trainer.strategy.connect(model)
    trainer.save_checkpoint(checkpoint)
    with pytest.raises(launch.checks.settings.SettingsError) as refusal:
        launch.hydra_app.build_run(composed(["model.use_cache=false", f"ckpt_path={checkpoint}", f"log_dir={tmp_path / 'logs'}"]))
    says(str(refusal.value), "model.cache_start_epoch", "use_cache=false",
         "a resumed run takes its checkpoint's model settings where the command line gives none")
    assert "\n" not in str(refusal.value)
    with pytest.raises(SystemExit), launch.errors.user_errors_as_one_line():  # LightningCLI's resume says so too
        launch.cli_app.main(["fit", "--model.use_cache=false", f"--ckpt_path={checkpoint}", f"--log_dir={tmp_path / 'logs'}"])
    says(capsys.readouterr().err.strip().splitlines()[-1], "error: --model.cache_start_epoch", "use_cache",
         "a resumed run takes its checkpoint's model settings where the command line gives none")


class Refuses:
    """A class whose constructor refuses a setting, naming it as the early checks do or by its bare name."""

    def __init__(self, width: int = 1, prefixed: bool = False) -> None:
        raise ValueError(f"{'model.' if prefixed else ''}width must be >= 2, got {width}")


@pytest.mark.parametrize("prefixed", [False, True])
def test_a_constructors_refusal_names_the_groups_setting_once_and_the_class(prefixed):
    from launch.run_builder import constructed
    from launch.checks.settings import SettingsError

    with pytest.raises(SettingsError) as refused:
        constructed({"_target_": f"{__name__}.Refuses", "width": 1, "prefixed": prefixed}, "model")
    assert str(refused.value) == "model.width must be >= 2, got 1 (Refuses)"
