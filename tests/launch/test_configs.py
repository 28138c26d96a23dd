"""The Hydra config tree: every model x data combination composes and builds, and a conv
model trains on CIFAR-10-format data through the same `run()` that train.py uses."""

from __future__ import annotations

import math
from pathlib import Path

import hydra
import pytest
from omegaconf import DictConfig

import launch.hydra_app
import launch.checks.early
import launch.cli_app
import launch.checks.hydra_config
import launch.run_builder
import launch.runs.run_directory
import train
from common.registry import registered
from common.signatures import constructor_defaults
from launch.runs import run_directory
from launch.checks.configs import NOT_SETTINGS, config_targets
from launch.checks.settings import check_composed
from models.categorical import CategoricalLatentModel
from models.components.likelihoods import BernoulliLikelihood, DiscretizedLogisticLikelihood
from tests.conftest import quick_rows, says

MODELS = sorted(p.stem for p in (train.CONFIG_DIR / "model").glob("*.yaml"))
# vqvae_prior, the VQ-VAE's second stage, needs a stage-1 checkpoint: test_entrypoints.py trains both stages.
STANDALONE = [m for m in MODELS if m != "vqvae_prior"]
DATA = sorted(p.stem for p in (train.CONFIG_DIR / "data").glob("*.yaml"))
MODEL_CLASSES = sorted(cls.__name__ for cls in registered("model"))  # the models LightningCLI offers: DiscreteVAE, JSA, ...


def composed(overrides: list[str]) -> DictConfig:
    """The config `python train.py OVERRIDES` runs with (launch.checks.hydra_config.compose; the suite composes each
    once and gives copies: tests/conftest.py)."""
    return launch.checks.hydra_config.compose(list(overrides))


def test_default_is_jsa_on_mnist():
    cfg = composed([])
    assert cfg.model._target_ == "models.JSA" and cfg.data._target_ == "datamodules.MNISTDataModule"
    data, model = launch.hydra_app.data_and_model(cfg)
    assert launch.runs.run_directory.run_name(cfg.run_name, model, data) == "jsa-mnist-mlp-K10-L20"  # model, data and the model's key settings


@pytest.mark.parametrize("overrides, name", quick_rows([
    ([], "jsa-mnist-mlp-K10-L20"),
    (["model.q_states=fresh", "model.cache_start_epoch=3", "model.cache_refresh=0.1"], "jsa-mnist-mlp-K10-L20-qfresh-cache3-refresh0.1"),
    (["model=dvae", "model.num_samples=4"], "dvae-mnist-mlp-K10-reinforce-optimal"),  # the estimator's own default
    (["model=dvae", "model.num_samples=8"], "dvae-mnist-mlp-K10-reinforce-optimal-S8"),
    (["model=vae", "data.binarize=none"], "vae-mnist-mlp-z32-grey"),  # another NLL: grey levels, not binary pixels
    (["model=vae", "data.binarize=none", "model.likelihood=gaussian"], "vae-mnist-mlp-z32-grey-gaussian"),
    (["model=vae", "data.binarize=none", "model.likelihood=discretized_logistic"], "vae-mnist-mlp-z32-grey"),
    (["model=vae", "model.likelihood=bernoulli"], "vae-mnist-mlp-z32"),  # the data's own likelihood, given
    (["model.gradient_rows=4"], "jsa-mnist-mlp-K10-L20-rows4"),
    (["model.chain_rows=static"], "jsa-mnist-mlp-K10-L20-rowsstatic"),
    (["model.gradient_states=expected"], "jsa-mnist-mlp-K10-L20-expected"),
    (["model.use_cache=false", "model.gradient_states=chain", "model.cache_refresh=0"], "jsa-mnist-mlp-K10-L20-nocache"),
    (["model=dvae"], "dvae-mnist-mlp-K10-reinforce-optimal"),
    (["model=dvae_gumbel", "model.num_samples=1"], "dvae_gumbel-mnist-mlp-K10-tau0.5"),
    (["model=dvae_gumbel", "model.straight_through=true", "model.temperature=2"], "dvae_gumbel-mnist-mlp-K10-tau0.5-st-temp2"),
    (["model=vqvae", "model.ema=false", "model.dead_code_threshold=0"], "vqvae-mnist-conv-K512-noema-dead0"),  # the paper's
], 4))  # the quick loop's rows: a default name, settings that add to it, a default that adds nothing, one that does
def test_a_run_is_named_by_the_settings_that_change_its_estimator(overrides, name):
    """Settings that change the estimator or its cost, or what its NLL measures (the pixels, the likelihood), are in the
    run's name when not their default, so that TensorBoard's run list and benchmarks.compare tell such runs apart; a
    default run keeps the name of its key settings alone."""
    cfg = composed(overrides)
    data, model = launch.hydra_app.data_and_model(cfg)
    assert launch.runs.run_directory.run_name(cfg.run_name, model, data) == name


@pytest.mark.parametrize("model", STANDALONE)
def test_every_estimator_setting_is_a_constructor_setting_and_a_default_run_shows_none(model):
    cfg = composed([f"model={model}"])
    _, net = launch.hydra_app.data_and_model(cfg)
    assert set(net.estimator_settings) <= set(constructor_defaults(type(net))) and net.estimator_tag == ""


def test_the_cli_names_a_run_as_hydra_does(tmp_path):
    """LightningCLI parses `--model.dead_code_threshold=0` as the float its type hint says: the same name as Hydra's."""
    cli = launch.cli_app.main(["--model=VQVAE", "--model.ema=false", "--model.dead_code_threshold=0", f"--log_dir={tmp_path}"], run=False)
    assert cli.trainer.logger.name == "vqvae-mnist-conv-K512-noema-dead0"


def test_a_setting_in_a_run_name_reads_the_same_from_either_front_end():
    """Hydra passes `model.dead_code_threshold=0` as an int, LightningCLI as the float its type hint says."""
    from models.base import setting_tag

    assert setting_tag("dead", 0) == setting_tag("dead", 0.0) == "dead0" and setting_tag("refresh", 0.25) == "refresh0.25"
    assert (setting_tag("ema", False), setting_tag("st", True), setting_tag("anneal", 1e-4)) == ("noema", "st", "anneal0.0001")


@pytest.mark.parametrize("model", MODELS)
def test_model_configs_state_only_what_differs_from_the_class(model):
    """Defaults live in the class signatures: a model config file holds _target_ and the links to the data
    and the seed; the composed config has every constructor argument, with the class's default."""
    from omegaconf import OmegaConf

    written = OmegaConf.load(train.CONFIG_DIR / "model" / f"{model}.yaml").model
    second_stage = {"prior", "autoencoder_epochs", "autoencoder_checkpoint"} if model == "vqvae_prior" else set()
    assert set(written) <= {"_target_", "estimator"} | second_stage
    cfg = composed([f"model={model}"])
    cls = hydra.utils.get_class(cfg.model._target_)
    for name, default in constructor_defaults(cls).items():
        if name not in (*NOT_SETTINGS["model"], *written):
            assert cfg.model[name] == default, name
    assert composed([f"model={model}", "model.lr=0.5"]).model.lr == 0.5  # no `+` needed


@pytest.mark.parametrize("data", quick_rows(sorted(DATA, key=lambda data: data != "mnist"), 1))  # MNIST in the quick loop
@pytest.mark.parametrize("model", STANDALONE)
def test_every_model_builds_for_every_data_set(model, data):
    """Each backbone, set as `model.backbone=...` sets it: a value of the composed config (no config file reads it)."""
    for backbone in ("mlp", "conv"):
        cfg = composed([f"model={model}", f"data={data}"])
        cfg.model.backbone = backbone
        datamodule, net = launch.hydra_app.data_and_model(cfg)
        assert net.data_shape == datamodule.image_shape and net.backbone == backbone
        expected = BernoulliLikelihood if data in ("mnist", "fashion_mnist") else DiscretizedLogisticLikelihood  # binarized by default
        assert isinstance(net.likelihood, expected)
        assert launch.runs.run_directory.run_name(cfg.run_name, net, datamodule).startswith(f"{model}-{data}-{backbone}-")


@pytest.mark.slow  # a run through the Hydra front end
@pytest.mark.parametrize("model", STANDALONE)
def test_conv_model_trains_on_cifar10_format_data(model, cifar10_dir: Path, tmp_path: Path):
    cfg = composed([
        f"model={model}", "data=cifar10", "model.backbone=conv", "model.hidden_channels=16", "model.val_num_samples=2",
        f"data.data_dir={cifar10_dir}", "data._target_=tests.conftest.TinyCIFAR10DataModule", "data.val_size=20",
        "data.batch_size=16", "trainer.max_steps=2", "trainer.limit_train_batches=2", "trainer.accelerator=cpu", "trainer.limit_val_batches=1",
        "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false", f"log_dir={tmp_path}",
    ])
    metrics = launch.hydra_app.run(cfg)
    assert {"train/loss", "val/nll", "val/bpd"} <= set(metrics)
    assert all(v == v for v in metrics.values())  # finite, no NaN
    (run_dir,) = (tmp_path / "tensorboard").glob(f"{model}-cifar10-conv-*/version_0")
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow  # every model's config composed and built: the full suite runs it, the quick loop leaves it out
@pytest.mark.parametrize("data,backbone", [("mnist", "mlp"), ("fashion_mnist", "mlp"), ("cifar10", "conv")])
def test_compare_experiment_matches_networks_and_latents(data, backbone):
    """experiment=compare: every model on the data's backbone, one seed/optimizer/budget, the discrete
    VAEs on JSA's model, and the VQ-VAE on JSA's discrete latent (K codes of JSA's embedding size)."""
    built = {}
    for model in ("vae", "vqvae", "jsa", "dvae", "dvae_gumbel"):
        cfg = composed(["experiment=compare", f"model={model}", f"data={data}"])
        assert cfg.model.backbone == backbone and cfg.trainer.max_epochs == 10 and cfg.run_test
        assert cfg.model.lr == 1e-3 and cfg.seed == 0 and cfg.model.test_num_samples == 1000
        _, built[model] = launch.hydra_app.data_and_model(cfg)
        assert built[model].test_seed == 0
    jsa, vqvae = built["jsa"], built["vqvae"]
    assert (vqvae.num_categories, vqvae.code_dim, vqvae.num_latents) == (jsa.num_categories, jsa.code_dim, jsa.num_latents) == (10, 16, jsa.num_latents)
    assert built["vqvae"].point_mass_posterior  # its bound is evaluated with one sample, whatever test_num_samples says
    # ... with a learned prior over its codes, fit alongside: MADE over the flat codes, a PixelCNN over the grid
    assert vqvae.prior_name == {"mlp": "autoregressive", "conv": "pixelcnn"}[backbone] and vqvae.autoencoder_epochs is None
    assert jsa.prior_name == "uniform"  # the other models keep theirs
    flat_on_cifar = launch.hydra_app.model_settings(composed(["experiment=compare", "model=vqvae", "data=cifar10", "model.backbone=mlp"]))
    assert flat_on_cifar["prior"] == "autoregressive"  # the prior follows the layout, not the data set
    for dvae in (built["dvae"], built["dvae_gumbel"]):  # exactly JSA's categorical model
        assert {k: v.shape for k, v in dvae.state_dict().items() if k != "baseline_mean"} == {k: v.shape for k, v in jsa.state_dict().items() if not k.startswith(("cache", "class_used"))}
    assert (built["dvae"].estimator, built["dvae_gumbel"].estimator) == ("reinforce", "gumbel")
    # The same encoder and decoder networks up to the layers that read or emit the latent.
    for part in ("encoder", "decoder"):
        assert [type(m) for m in getattr(vqvae, part).modules()] == [type(m) for m in getattr(jsa, part).modules()]
    # The experiment's sweep covers every model of the collection (test_the_comparison_sweeps_every_model); a
    # command-line setting overrides it.
    assert set(composed(["experiment=compare"]).compare_backbone) == {"mnist", "fashion_mnist", "cifar10"}  # the map holds backbones only
    assert composed(["experiment=compare", "model.hidden_channels=16"]).model.hidden_channels == 16
    assert launch.hydra_app.model_settings(composed(["experiment=compare", "model=vqvae", "discrete_latent.num_categories=64"]))["num_categories"] == 64
    assert launch.hydra_app.model_settings(composed(["experiment=compare", "model=jsa", "model.num_categories=4"]))["num_categories"] == 4
    assert "num_categories" not in launch.hydra_app.model_settings(composed(["experiment=compare", "model=vae"]))  # no discrete latent


def test_the_comparison_sweeps_every_model():
    """experiment=compare sweeps every model config but the VQ-VAE's second stage (`${every_config:...}`), and through
    them every registered model class: a model's config joins the comparison by itself, and a model with no config
    fails here."""
    swept = composed(["experiment=compare"]).hydra.sweeper.params.model.split(",")
    assert swept == STANDALONE
    assert sorted({config_targets("model")[name].rsplit(".", 1)[-1] for name in swept}) == MODEL_CLASSES
    assert composed(["experiment=compare_quick"]).hydra.sweeper.params.model.split(",") == STANDALONE


def test_every_registered_data_module_has_a_config():
    """`data=NAME` and `--data=Class` offer the same data sets (the early checks read the CLI's from configs/data/)."""
    from datamodules import ImageDataModule

    configured = sorted(target.rsplit(".", 1)[-1] for target in config_targets("data").values())
    assert configured == sorted(cls.__name__ for cls in registered("data") if cls is not ImageDataModule)


def test_cifar10_vqvae_paper_experiment_builds_the_paper_setting():
    """experiment=cifar10_vqvae_paper: conv networks with 256 hidden units, K=512, Adam 2e-4, batch 128, 250k steps."""
    for model in ("vqvae", "vae", "jsa"):
        cfg = composed(["experiment=cifar10_vqvae_paper", f"model={model}"])
        assert cfg.data._target_ == "datamodules.CIFAR10DataModule" and cfg.data.batch_size == 128
        assert cfg.trainer.max_steps == 250_000 and cfg.run_test
        datamodule, net = launch.hydra_app.data_and_model(cfg)
        assert net.backbone == "conv" and net.hparams.hidden_channels == 256 and net.lr == 2e-4
        assert type(net.likelihood).__name__ == "DiscretizedLogisticLikelihood"
        if model != "vae":
            assert net.num_categories == 512 and net.num_latents == 64  # the 8x8 grid
    assert composed(["experiment=cifar10_vqvae_paper"]).hydra.sweeper.params == {"model": "vqvae,vae,jsa"}


@pytest.mark.slow  # a run through the Hydra front end
@pytest.mark.parametrize("model", ["vqvae", "vae", "jsa"])
def test_cifar10_vqvae_paper_experiment_runs_tiny_on_cpu(model, cifar10_dir, tmp_path):
    cfg = composed([
        "experiment=cifar10_vqvae_paper", f"model={model}", "model.hidden_channels=8", "discrete_latent.num_categories=16",
        "discrete_latent.code_dim=4", f"data.data_dir={cifar10_dir}", "data._target_=tests.conftest.TinyCIFAR10DataModule",
        "data.val_size=20", "data.batch_size=8", "trainer.max_steps=2", "trainer.accelerator=cpu", "trainer.check_val_every_n_epoch=1",
        "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "model.val_num_samples=2",
        "model.test_num_samples=2", "trainer.enable_progress_bar=false", f"log_dir={tmp_path}",
    ])
    metrics = launch.hydra_app.run(cfg)
    assert 0 < metrics["test/bpd"] < 20 and math.isfinite(metrics["test/nll"])  # exact bits/dim of 8-bit data


@pytest.mark.slow  # every model's config composed and built: the full suite runs it, the quick loop leaves it out
@pytest.mark.parametrize("model", STANDALONE)
def test_jsa_paper_gives_every_model_the_papers_settings(model):
    cfg = composed(["experiment=jsa_paper", f"model={model}"])
    assert (cfg.data.binarize, cfg.data.batch_size, cfg.data.val_size) == ("static", 200, 5000)
    assert (cfg.trainer.max_epochs, cfg.trainer.check_val_every_n_epoch, cfg.run_test) == (500, 5, True)
    _, built = launch.hydra_app.data_and_model(cfg)
    assert built.lr == 3e-4 and built.eval_num_samples == {"val": 1000, "test": 1000}
    assert built.activation == "leaky_relu" and any(type(m).__name__ == "LeakyReLU" for m in built.encoder.modules())
    if built.has_discrete_latent:
        assert (built.num_latents, built.num_categories, built.code_dim) == (20, 10, 10)
    expected = {"jsa": {"mis_steps": 20, "gradient_states": "chain", "cache_start_epoch": 300, "use_cache": True},
                "rws": {"num_samples": 20}, "vimco": {"num_samples": 20}, "dvae": {"num_samples": 20}, "vae": {"latent_dim": 20}}
    for name, value in expected.get(model, {}).items():
        assert getattr(built, name) == value, name
    if isinstance(built, CategoricalLatentModel):
        assert not built.prior.logits.requires_grad  # the paper's prior is uniform and never trained


def test_a_command_line_setting_wins_over_the_experiments_per_model_one():
    cfg = composed(["experiment=jsa_paper", "model=jsa", "model.mis_steps=5", "model.code_dim=4"])
    settings = launch.hydra_app.model_settings(cfg)
    assert settings["mis_steps"] == 5 and settings["code_dim"] == 4 and settings["gradient_states"] == "chain"


def test_ddp_strategies_get_the_collective_timeout():
    """The strategy's timeout covers the ranks' start (at least STARTUP_TIMEOUT_S); the callback the run adds sets
    ddp_timeout_s for the collectives after it (tests/launch/test_interruptions.py runs both)."""
    from datetime import timedelta

    from callbacks.guards.process_group import CollectiveTimeout

    for name in ("ddp", "ddp_spawn", "ddp_find_unused_parameters_true"):
        strategy = launch.run_builder.strategy_with_timeout(name, 5)
        assert strategy._timeout == timedelta(seconds=launch.run_builder.STARTUP_TIMEOUT_S), name
        assert launch.run_builder.strategy_with_timeout(name, 5000)._timeout == timedelta(seconds=5000), name
    settings = launch.run_builder.trainer_settings({"strategy": "ddp"}, None, 5)
    assert [c.seconds for c in settings["callbacks"] if isinstance(c, CollectiveTimeout)] == [5]
    assert not any(isinstance(c, CollectiveTimeout) for c in launch.run_builder.trainer_settings({"strategy": "auto"}, None, 5)["callbacks"])
    assert launch.run_builder.strategy_with_timeout("ddp_spawn", 5)._start_method == "spawn"  # the registry's own settings kept
    assert launch.run_builder.strategy_with_timeout("auto", 5) == "auto" and launch.run_builder.strategy_with_timeout(None, 5) is None


@pytest.mark.parametrize("overrides, named", quick_rows([
    (["+ckpt_pth=x"], ["ckpt_pth", "no such setting", "ckpt_path"]),
    (["seed=abc"], ["seed='abc'", "integer"]),
    (["trainer.precision=foo"], ["trainer.precision=foo", "32-true, 16-mixed or bf16-mixed"]),
    (["experiment=jsa_paper", "+per_model.jsa.mis_stepz=3"], ["per_model.jsa.mis_stepz", "JSA", "per_model.jsa.mis_steps?"]),
    (["seed=-1"], ["seed=-1", "[0, 2^32 - 1]"]),
    (["run_test=maybe"], ["run_test='maybe'", "true or false"]),
    (["ddp_timeout_s=0"], ["ddp_timeout_s=0", "> 0"]),
    (["trainer.max_epochs=abc"], ["trainer.max_epochs='abc'", "integer or null"]),
    (["trainer.plugins=nonsense"], ["trainer.plugins=nonsense", "_target_"]),
    (["trainer.barebones=true"], ["trainer.barebones=true", "self.log", "leave it out"]),
    (["+trainer.max_epoch=3"], ["trainer.max_epoch", "Trainer", "trainer.max_epochs?"]),
    (["model.mis_steps=abc"], ["model.mis_steps='abc'", "integer"]),
    (["data.batch_size=x"], ["data.batch_size='x'", "integer"]),
    (["data.binarize=dinamic"], ["data.binarize='dinamic'", "'static'", "did you mean 'dynamic'?"]),  # a choice misspelt
    (["model.likelihood=gauss"], ["model.likelihood='gauss'", "or null; did you mean 'gaussian'?"]),
    (["optimizer.lr=abc"], ["optimizer.lr='abc'", "number"]),
    (["scheduler=step", "scheduler.gamma=x"], ["scheduler.gamma='x'", "number"]),
    (["scheduler=cosine", "trainer.max_epochs=null"], ["scheduler.T_max=None", "${trainer.max_epochs}", "scheduler.T_max="]),
    # settings without the class that takes them, which the run would build as a plain mapping
    (["+scheduler.gamma=0.5"], ["scheduler.gamma", "scheduler=none", "scheduler=step"]),
    (["logger=none", "+logger.flush_secs=5"], ["logger.flush_secs", "logger=none", "logger=csv"]),
    (["+callbacks.posterior_samples.burn_in=5"], ["callbacks.posterior_samples", "callbacks=sgmcmc"]),
    (["+callbacks.mine.x=1"], ["callbacks.mine", "+callbacks.mine._target_=CLASS"]),
    (["trainer.max_time={minutes:-1}"], ["trainer.max_time", "at least 0"]),
    (["ckpt_path="], ["ckpt_path=", "empty"]),
    (["+per_model.jas.mis_steps=3"], ["per_model.jas", "jsa"]),  # a name nothing reads
    (["experiment=jsa_paper", "+per_model.vae.latent_dm=3"], ["per_model.vae.latent_dm", "per_model.vae.latent_dim?"]),
    (["experiment=compare", "+discrete_latent.num_categorie=3"], ["discrete_latent.num_categorie", "num_categories?"]),
    (["+model.optimizer=samplers.SGLD"], ["model.optimizer", "optimizer=NAME", "sgld"]),  # LightningCLI's option
], 4))  # the quick loop's rows: a top-level name and value, a Trainer value, a model's setting with an experiment's applied
def test_top_level_and_trainer_settings_are_checked_before_the_run(overrides, named, monkeypatch):
    from launch.checks.settings import SettingsError

    cfg = composed(overrides)
    monkeypatch.setattr("sys.argv", ["train.py", *overrides])
    with pytest.raises(SettingsError) as error:
        check_composed(cfg, launch.hydra_app.model_settings(cfg))
    says(error.value, *named)


def test_a_top_level_key_nothing_reads_is_refused_once_composed_wherever_it_came_from(monkeypatch):
    """The composed config's own keys are checked, not the command line's: a key a file adds (here through the compose
    API, which leaves sys.argv alone) is refused as one given with +."""
    from launch.checks.settings import SettingsError

    monkeypatch.setattr("sys.argv", ["train.py"])
    with pytest.raises(SettingsError, match="^sed: no such setting"):
        check_composed(cfg := composed(["+sed=3"]), launch.hydra_app.model_settings(cfg))


@pytest.mark.parametrize("override, names", [
    ("trainer.devices=0", ("devices=0",)),
    ("trainer.strategy=nonsense", ("trainer (Trainer)", "strategy='nonsense'")),  # Lightning's ValueError
    ("trainer.num_nodes=0", ("trainer.num_nodes=0:", "positive")),
    ("trainer.max_epochs=-5", ("trainer.max_epochs=-5: `max_epochs` must be",)),  # Lightning's, named by the setting
    ("replicas.seeds=[0,0]", ("replicas.seeds=[0, 0]", "repeated")),
    ("model.lr=${nope}", ("model.lr", "nope")),
])
def test_a_setting_refused_once_composed_ends_the_run_in_one_line_and_writes_nothing(override, names, tmp_path, capsys,
                                                                                      monkeypatch):
    """What the early checks cannot judge (a trainer's value, a list, an interpolation), refused by the run as train.py
    runs it: exit status 2, one line naming the setting, nothing under log_dir (a process of each path:
    benchmarks/robustness/bad_inputs.py --quick)."""
    import launch.errors

    monkeypatch.setattr("sys.argv", ["train.py", override])
    cfg = composed([override, f"log_dir={tmp_path}", "trainer.max_steps=1"])
    with pytest.raises(SystemExit) as stop, launch.errors.user_errors_as_one_line():
        launch.hydra_app.run(cfg)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    says(err, *names)
    assert not any(tmp_path.iterdir())


def test_every_trainer_setting_composes_plugins_too(tmp_path, monkeypatch):
    """Each of lightning.Trainer's settings is one of trainer's (no + needed), a plugin built from its _target_."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    plugin = "{_target_:lightning.pytorch.plugins.environments.SLURMEnvironment,auto_requeue:false}"
    monkeypatch.setattr("sys.argv", ["train.py", f"trainer.plugins={plugin}"])
    _, _, trainer, _ = launch.hydra_app.build_run(composed([f"trainer.plugins={plugin}", f"log_dir={tmp_path}"]))
    environment = trainer._accelerator_connector.cluster_environment
    assert isinstance(environment, SLURMEnvironment) and not environment.auto_requeue


@pytest.mark.parametrize("experiment", [None, "compare", "jsa_paper", "cifar10_vqvae_paper"])
def test_every_shipped_config_passes_the_run_settings_check(experiment, monkeypatch):
    overrides = [f"experiment={experiment}"] if experiment else []
    monkeypatch.setattr("sys.argv", ["train.py", *overrides, "+discrete_latent.code_dim=4"])
    check_composed(cfg := composed(overrides), launch.hydra_app.model_settings(cfg))


def test_an_unknown_experiment_is_refused_with_the_choices():
    with pytest.raises(hydra.errors.MissingConfigException, match="experiment/nope"):
        composed(["experiment=nope"])


def test_an_output_directory_that_is_a_file_is_refused_before_hydra_writes(tmp_path):
    from launch.checks.early import refuse_early

    (tmp_path / "afile").write_text("")
    for key in ("log_dir", "hydra.run.dir", "hydra.sweep.dir"):
        assert f"{key}={tmp_path}/afile/runs: {tmp_path}/afile is a file, not a directory" in refuse_early([f"{key}={tmp_path}/afile/runs"], cli=False)
    assert refuse_early([f"log_dir={tmp_path}/new/dir"], cli=False) is None  # a directory still to be made is fine


def test_a_refused_run_leaves_no_hydra_directory_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "logs" / "hydra" / "jsa-mnist" / "2026-01-01_00-00-00-1"
    (run / ".hydra").mkdir(parents=True)
    (run / "train.log").write_text("")
    (tmp_path / "logs" / "hydra" / "other").mkdir()
    run_directory.remove_if_only_hydra_files(str(run))
    assert not (tmp_path / "logs" / "hydra" / "jsa-mnist").exists() and (tmp_path / "logs" / "hydra" / "other").is_dir()
    (run / "checkpoints").mkdir(parents=True)  # anything of a run's own is kept
    run_directory.remove_if_only_hydra_files(str(run))
    assert (run / "checkpoints").is_dir()
    sweep = tmp_path / "logs" / "hydra" / "multirun" / "2026-01-01_00-00-00-1"  # a multirun refused in its first job
    (sweep / "0-jsa-mnist" / ".hydra").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("")
    run_directory.remove_if_only_hydra_files(str(sweep / "0-jsa-mnist"), multirun=True)
    assert not (tmp_path / "logs" / "hydra" / "multirun").exists()


@pytest.mark.slow  # starts train.py
def test_a_run_stopped_by_a_nan_keeps_its_hydra_directory_beside_its_run(tmp_path, mnist_dir):
    from tests import preloaded

    done = preloaded.run_train(["model=vae", "model.lr=5", "trainer.max_steps=30", "trainer.limit_val_batches=1",
                                "trainer.log_every_n_steps=1", f"data.data_dir={mnist_dir}"], tmp_path)
    assert done.returncode == 2 and "became NaN or inf" in done.stderr, done.stderr[-2000:]
    assert list((tmp_path / "logs" / "tensorboard").glob("*/version_0/events.*"))  # it trained: its run is kept
    (hydra_run,) = (tmp_path / "logs" / "hydra").glob("*/*")
    assert (hydra_run / ".hydra" / "config.yaml").is_file() and "became NaN or inf" in (hydra_run / "train.log").read_text()


def test_a_tuning_trial_that_diverged_counts_as_the_worst_value_and_any_other_failure_stops(monkeypatch):
    """Under hydra/sweeper=tune, a trial stopped by a NaN loss (FloatingPointError) or by NaN weights failing the next
    step (the guard's line on the error: callbacks/guards/nonfinite.py) is val/nll = inf and the study goes on; outside
    a sweep it stops the run, and any other error stops a sweep too."""
    def raising(error: BaseException):
        def run(cfg):
            raise error
        return run

    weights = RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    weights.nonfinite_message = "the model's weights (encoder.0.weight) became NaN or inf at step 3"
    for error in (FloatingPointError("train/loss became NaN or inf"), weights):
        monkeypatch.setattr(launch.hydra_app, "run", raising(error))
        assert launch.hydra_app.run_trial(None, tuning=True) == {"val/nll": float("inf")}
        with pytest.raises(type(error)):
            launch.hydra_app.run_trial(None, tuning=False)
    monkeypatch.setattr(launch.hydra_app, "run", raising(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        launch.hydra_app.run_trial(None, tuning=True)


def test_the_cli_keeps_the_constructors_own_message_from_jsonargparses_report():
    report = ("Does not validate against any of the Union subtypes\nSubtypes: [...]\nErrors:\n"
              "  - lr must be > 0, got -1.0\n  - Expected a <class 'NoneType'>\nGiven value type: ...\nGiven value: Namespace(...)")
    assert launch.cli_app._one_line(report, []) == "lr must be > 0, got -1.0"
    named = report.replace("Namespace(...)", "Namespace(class_path='models.JSA', init_args=Namespace(lr=-1.0))")
    assert launch.cli_app._one_line(named, []) == "JSA: lr must be > 0, got -1.0"
    callback = ("Does not validate against any of the Union subtypes\nErrors:\n  - burn_in must be an integer >= 0, got -3\n"
                "  - Not a valid subclass of Callback\n    Subclass types expect one of:\n    - a class path (str)\n"
                "    - a dict with class_path entry\n    - a dict without class_path but with init_args entry\n"
                "Given value: Namespace(class_path='callbacks.posterior_samples.PosteriorSamples', init_args=...)")
    assert launch.cli_app._one_line(callback, []) == "PosteriorSamples: burn_in must be an integer >= 0, got -3"
    # a constructor's own message of several lines, not a report: all of it, on one line
    assert launch.cli_app._one_line("expected a float\n  got: ten", []) == "expected a float got: ten"


def test_the_cli_names_a_wrong_option_as_given_in_one_line():
    report = ('Parser key "model":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
              "    - Problem with given class_path 'models.JSA':\n        Parser key \"mis_steps\":\n"
              "          Expected a <class 'int'>. Got value: ten\n    - Expected a <class 'NoneType'>\n  Given value type: x")
    assert launch.cli_app._one_line(report, ["fit", "--model.mis_steps=ten"]) == "--model.mis_steps: Expected a <class 'int'>. Got value: ten"
    # an unknown class name: the early check's line, which the parser's report gives way to
    assert launch.checks.early.refuse_early(["fit", "--model=Nope"], cli=True) == (f"--model=Nope is not one of {', '.join(MODEL_CLASSES)} "
                                                                                 "(a class of your own goes by its dotted path: "
                                                                                 "mypkg.mymodule.Nope)")
    assert launch.cli_app._one_line("unrecognized arguments: --foo=1", []) == "unrecognized arguments: --foo=1"
    # the other types an option takes are no reason beside the one that is
    report = ('Parser key "trainer.logger":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
              "    - WandbLogger: Requirement 'wandb>=0.12.10' not met.\n    - Expected a <class 'collections.abc.Iterable'>\n"
              "    - Expected a <class 'bool'>\n  Given value type: x")
    said = launch.cli_app._one_line(report, ["fit", "--trainer.logger=WandbLogger"])
    assert said.endswith("WandbLogger: Requirement 'wandb>=0.12.10' not met.") and "Expected" not in said, said


def test_the_seed_seeds_the_data_order_and_the_test_stage_unless_they_are_given():
    """seed=N sets data.seed and model.test_seed (launch/run_builder.py: SEEDED_SETTINGS), as --seed_everything=N does in the
    CLI (tests/launch/test_first_hour.py); one given on the command line keeps its value."""
    for overrides, expected in ((["seed=7"], (7, 7)), (["seed=7", "data.seed=3"], (3, 7)), ([], (0, 0))):
        datamodule, model = launch.hydra_app.data_and_model(composed(overrides))
        assert (datamodule.seed, model.test_seed) == expected, overrides
