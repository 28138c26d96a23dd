"""Both front ends of train.py end to end on a few steps: what a run writes (TensorBoard tags, the HPARAMS tab,
checkpoints, run names), resuming and testing into the same run, VQ-VAE's second stage, JSA's settings from either front
end, a refusal's one line and exit status, `--help`. Runs go through the front ends' own functions in this process
(train.main with sys.argv set, launch.hydra_app.run on a composed config, launch.cli_app.main; a refusal's line and
exit status through launch.errors.user_errors_as_one_line); what only a process shows, a real multirun's console, runs
`python train.py -m` as a user would (a fork of a server that has the libraries imported: tests/preloaded.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

import launch.cli_app
import launch.errors
import launch.hydra_app
import launch.run_builder
from common.signatures import constructor_defaults
from launch.checks.configs import config_targets
from tests import preloaded
from tests.conftest import says, train_main
from tests.launch.test_configs import DATA, MODELS, STANDALONE, composed

pytestmark = pytest.mark.slow  # end to end: run by the full suite (README), not the quick loop

REPO = Path(__file__).resolve().parents[2]
FAST = ["trainer.max_steps=3", "trainer.log_every_n_steps=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=1",
        "model.val_num_samples=2", "data.batch_size=16"]
CLI_FAST = ["--trainer.max_steps=3", "--trainer.log_every_n_steps=1", "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=1",
            "--model.val_num_samples=2", "--data.batch_size=16"]


def train(args: list[str], cwd: Path, mnist_dir: Path, check: bool = True) -> subprocess.CompletedProcess:
    """`python train.py ARGS` in `cwd`, a process of its own, which must succeed unless `check` is false."""
    env = {**os.environ, "DATA_DIR": str(mnist_dir)}
    result = preloaded.run_train(args, cwd, env, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def hydra_run(overrides: list[str], cwd: Path) -> dict[str, float]:
    """`python train.py OVERRIDES` started in `cwd`, run in this process (its logs under cwd/logs)."""
    return launch.hydra_app.run(composed([*overrides, f"log_dir={cwd / 'logs'}"]))


def tags(run_dir: Path) -> set[str]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    found = events.Tags()
    return set(found["scalars"]) | set(found["images"])


def hparams_tab(run_dir: Path) -> tuple[set[str], dict[str, object]]:
    """What TensorBoard's HPARAMS tab shows for a run: its metric tags and its hyperparameters."""
    events = EventAccumulator(str(run_dir))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    metrics = {info.name.tag for info in experiment.metric_infos}
    params = {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind")) for name, value in session.hparams.items()}
    return metrics, params


SHARED_TAGS = {
    "train/loss", "train/step_time_ms", "train/samples_per_s", "train/epoch_time_s",
    "val/nll", "val/bpd", "val/elbo", "val/recon_mse", "val/psnr", "val/num_images", "val/reconstructions", "val/prior_samples",
    "hp/val_nll",
}
MODEL_TAGS = {  # a model's own tags beside the shared ones (a model not listed: the shared ones only)
    "vae": {"train/recon", "train/kl"},
    "jsa": {"train/loss_p", "train/loss_q", "train/acceptance_rate", "train/cache_hit_rate", "train/perplexity", "train/classes_used"},
    "vqvae": {"train/recon_per_dim", "train/codebook", "train/commitment", "train/perplexity", "train/codes_used", "train/restarts",
              "val/perplexity", "val/codes_used"},
    "dvae": {"train/encoder_grad_variance_no_cv"},
    "dvae_gumbel": {"train/temperature"},
    "rws": {"train/iw_bound"},
    "vimco": {"train/iw_bound"},  # the S-sample bound, as RWS's
}
# The same gradient-variance tags for every model that trains by a gradient estimate (callbacks.GradientVariance).
GRADIENT_VARIANCE_TAGS = {"train/encoder_grad_variance", "train/decoder_grad_variance"}


EVERY_MODEL = STANDALONE  # every config of configs/model/ but the VQ-VAE's second stage (its own test below)


@pytest.fixture(scope="module")
def every_model_run(tmp_path_factory, mnist_dir) -> Path:
    """Each model's run, one after the other in this process as a multirun's jobs; the folder they were started in."""
    cwd = tmp_path_factory.mktemp("every-model")
    measure = ["callbacks.gradient_variance.every_n_steps=1", "callbacks.gradient_variance.repeats=2"]
    # Two steps (the step time skips the first) of 16 images; the sanity check's validation stays (no hp/ tag at step 0).
    tiny = [a for a in FAST if not a.startswith(("trainer.max_steps", "trainer.limit_train_batches"))] + \
        ["trainer.max_steps=2", "trainer.limit_train_batches=2"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATA_DIR", str(mnist_dir))
        mp.chdir(cwd)
        for model in EVERY_MODEL:
            hydra_run([f"model={model}", "data=mnist", *tiny, *measure], cwd)
    return cwd


@pytest.mark.parametrize("model", EVERY_MODEL)
def test_hydra_run_writes_tensorboard_tags_and_checkpoints(model, every_model_run):
    (run_dir,) = (every_model_run / "logs" / "tensorboard").glob(f"{model}-mnist-*/version_0")
    expected_tags = SHARED_TAGS | MODEL_TAGS.get(model, set()) | (GRADIENT_VARIANCE_TAGS if model != "vqvae" else set())
    assert expected_tags <= tags(run_dir), expected_tags - tags(run_dir)
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    metrics, params = hparams_tab(run_dir)
    assert {"hp/val_nll", "hp/test_nll", "hp/test_psnr"} <= metrics
    expected_class = config_targets("model")[model].rsplit(".", 1)[-1]  # models.JSA -> JSA
    assert params["model_class"] == expected_class and params["data_class"] == "MNISTDataModule" and params["num_params"] > 1000
    assert params["batch_size"] == 16 and params["lr"] == 1e-3  # the data module's (as given) and the model's
    assert params["optimizer"] == "Adam" and params["effective_batch_size"] == 16  # 1 device
    # Every constructor setting of the model and the data module, with the value the run used.
    import datamodules
    import models
    model_cls = getattr(models, expected_class)
    expected = set(constructor_defaults(model_cls)) | set(constructor_defaults(datamodules.MNISTDataModule))
    assert expected - {"optimizer"} <= set(params), expected - set(params)
    if model == "jsa":
        assert params["cache_size"] == 55_000
    # The hp/ tags carry the measured values only: nothing is written for them at step 0.
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert all(e.step > 0 and math.isfinite(e.value) for e in events.Scalars("hp/val_nll"))


def test_a_real_multirun_gives_each_run_its_own_directory_and_one_line_per_message(tmp_path, mnist_dir):
    """`python train.py -m`: each job a run of its own, named after the swept setting (how each job is named:
    test_a_multirun_names_each_job_after_its_swept_settings); one line per message of each job, no advertising, no
    escape codes when the output is not a terminal."""
    one_step = ["trainer.max_steps=1", "trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "model.val_num_samples=2",
                "data.batch_size=16", "trainer.num_sanity_val_steps=0"]
    result = train(["-m", "model=vae", "data=mnist", "model.lr=0.01,0.02", *one_step], tmp_path, mnist_dir)
    runs = sorted(str(p.relative_to(tmp_path / "logs" / "tensorboard")) for p in (tmp_path / "logs" / "tensorboard").glob("*/*"))
    assert runs == [f"vae-mnist-mlp-z32-lr{lr}/version_0" for lr in (0.01, 0.02)]
    output = result.stdout + result.stderr
    assert output.count("GPU available") == len(runs) and "💡" not in output and "\x1b[" not in output and "\r" not in output


@pytest.mark.parametrize("swept, names", [
    (["model=vae", "model.latent_dim=4,8"], {"vae-mnist-mlp-z4", "vae-mnist-mlp-z8"}),  # a key setting: in the tag already
    (["model=vae", "model.lr=0.01,0.02"], {"vae-mnist-mlp-z32-lr0.01", "vae-mnist-mlp-z32-lr0.02"}),  # one the tag does not show
    (["model=jsa", "model.gradient_rows=null,4"], {"jsa-mnist-mlp-K10-L20", "jsa-mnist-mlp-K10-L20-rows4"}),  # an estimator setting, once
    (["model=vae", "seed=1,2", "trainer.max_steps=3,4"], {"vae-mnist-mlp-z32-seed1", "vae-mnist-mlp-z32-seed2"}),  # a seed; no trainer setting
    (["model=vae", "data.binarize=dynamic,none"], {"vae-mnist-mlp-z32", "vae-mnist-mlp-z32-grey"}),  # the pixels, once
])
def test_a_multirun_names_each_job_after_its_swept_settings(swept, names, monkeypatch):
    """The jobs of `python train.py -m SWEPT`, each composed as Hydra composes it (the job's own values, the sweep on
    the command line): each is named after the swept settings its tag does not show already."""
    monkeypatch.setattr(sys, "argv", ["train.py", "-m", *swept])
    jobs = [[]]
    for override in swept:
        key, _, values = override.partition("=")
        jobs = [[*job, f"{key}={value}"] for job in jobs for value in values.split(",")]
    found = {launch.run_builder.built(launch.hydra_app.describe_run(composed([*job, "hydra.mode=MULTIRUN"]))).name for job in jobs}
    assert found == names


def test_resuming_continues_the_same_tensorboard_run(tmp_path, mnist_dir, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    hydra_run(["model=vae", "data=mnist", *FAST], tmp_path)
    run_dir = tmp_path / "logs" / "tensorboard" / "vae-mnist-mlp-z32" / "version_0"
    steps_more = [a for a in FAST if not a.startswith(("trainer.max_steps", "trainer.limit_train_batches"))]
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        hydra_run(["model=vae", "data=mnist", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", "trainer.max_steps=6",
                   "trainer.limit_train_batches=6", *steps_more], tmp_path)
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["version_0"]  # no new version directory
    assert not list((run_dir / "checkpoints").glob("last-v*.ckpt"))  # last.ckpt itself goes on
    assert not [w for w in warned if "exists and is not empty" in str(w.message)]
    steps = [e.step for e in _scalars(run_dir, "train/loss")]
    assert steps == sorted(steps) and max(steps) >= 5  # one curve, continued past the checkpoint


def _scalars(run_dir: Path, tag: str) -> list:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return events.Scalars(tag)


@pytest.mark.parametrize("group,valid", [("model", "vae"), ("data", "cifar10"), ("trainer", "ddp"), ("optimizer", "sgld")])
def test_hydra_rejects_an_unknown_choice_with_the_valid_ones(group, valid, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = train_main([f"{group}=nosuchthing"], monkeypatch, capsys)
    assert code == 2  # one line, before the imports (launch/checks/precheck.py)
    assert err.startswith(f"error: {group}=nosuchthing: no such config in configs/{group}/") and valid in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("front_end", ["hydra", "cli"])
def test_missing_data_is_one_line_without_traceback(front_end, tmp_path, monkeypatch, capsys):
    env_dir = tmp_path / "empty"
    env_dir.mkdir()
    monkeypatch.setenv("DATA_DIR", str(env_dir))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:  # a traceback would be another exception
        if front_end == "hydra":
            with launch.errors.user_errors_as_one_line():
                launch.hydra_app.run(composed(["data.download=false"]))
        else:
            launch.cli_app.main(["fit", "--data.download=false"])
    assert stop.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(env_dir) in errors[0] and "DATA_DIR" in errors[0]
    assert not (tmp_path / "logs" / "tensorboard").exists()  # refused before a run was made


def test_lightning_cli_fit_then_test_in_the_same_run(tmp_path, mnist_dir, monkeypatch, capsys):
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py", "fit", "--model=VAE", "--data=MNISTDataModule", *CLI_FAST])
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        launch.cli_app.main()  # LightningCLI reads the command line itself
    assert not [w for w in warned if "args parameter" in str(w.message)] and "args parameter" not in capsys.readouterr().err
    run_dir = tmp_path / "logs" / "tensorboard" / "vae-mnist-mlp-z32" / "version_0"  # named like a Hydra run
    assert {"train/loss", "val/nll"} <= tags(run_dir)
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert checkpoint.is_file()
    launch.cli_app.main(["test", "--model=VAE", f"--ckpt_path={checkpoint}", "--trainer.limit_test_batches=1",
                         "--model.test_num_samples=2"])
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["version_0"]
    assert {"test/nll", "test/reconstructions"} <= tags(run_dir)


def test_help_names_both_front_ends(monkeypatch, capsys):
    code, out, _ = train_main(["--help"], monkeypatch, capsys)
    assert code == 0
    assert "model=vae" in out and "fit --model=VAE" in out
    assert f"data={{{','.join(DATA)}}}" in out and f"model={{{','.join(MODELS)}}}" in out  # data={cifar10,fashion_mnist,mnist}


def test_vqvae_second_stage_from_the_first_stages_checkpoint(tmp_path, mnist_dir, monkeypatch):
    """model=vqvae, then model=vqvae_prior from its last.ckpt: the autoencoder is loaded and stays frozen, the prior
    trains, and the learned-prior bound, the uniform one and the prior's samples are logged; both front ends name the
    second stage's runs alike."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    flat = ["model.backbone=mlp", "model.num_categories=16", "model.code_dim=4"]
    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir()
    monkeypatch.chdir(tmp_path / "one")
    hydra_run(["model=vqvae", "data=mnist", *FAST, *flat], tmp_path / "one")
    (stage1,) = (tmp_path / "one" / "logs" / "tensorboard").glob("vqvae-mnist-*/version_0/checkpoints/last.ckpt")
    monkeypatch.chdir(tmp_path / "two")
    with pytest.raises(Exception) as missing:
        hydra_run(["model=vqvae_prior", "data=mnist", *FAST, *flat, "model.prior=autoregressive"], tmp_path / "two")
    says(missing.value, "model.autoencoder_checkpoint")
    hydra_run(["model=vqvae_prior", "data=mnist", *FAST, *flat, "model.prior=autoregressive",
               f"model.autoencoder_checkpoint={stage1}"], tmp_path / "two")
    (run_dir,) = (tmp_path / "two" / "logs" / "tensorboard").glob("vqvae_prior-mnist-mlp-K16-autoregressive/version_0")
    assert {"train/prior_nll", "val/nll", "val/nll_uniform_prior", "val/prior_samples"} <= tags(run_dir)
    # LightningCLI's second stage (README's) is a run of that name too, not a version of the joint run's vqvae-...
    launch.cli_app.main(["fit", "--model=VQVAE", "--model.backbone=mlp", "--model.num_categories=16", "--model.code_dim=4",
                         "--model.prior=autoregressive", "--model.autoencoder_epochs=0", f"--model.autoencoder_checkpoint={stage1}",
                         "--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false"])
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["version_0", "version_1"]
    first = torch.load(stage1, weights_only=True)["state_dict"]
    second = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    for name, value in first.items():
        if name.startswith(("encoder.", "decoder.", "quantizer.")):
            assert torch.equal(second[name], value), f"{name} moved in the second stage"
    assert second["prior.output.weight"].abs().sum() > 0  # the prior trained (its output layer starts at zero)
    # Resuming the second stage restores everything from its own checkpoint: stage 1's file is not needed any more.
    stage1.unlink()
    longer = [a for a in FAST if not a.startswith("trainer.max_steps")] + ["trainer.max_steps=6"]  # two epochs of 3
    hydra_run(["model=vqvae_prior", "data=mnist", *longer, *flat, "model.prior=autoregressive",
               f"model.autoencoder_checkpoint={stage1}", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"], tmp_path / "two")
    resumed = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["global_step"] == 6 and torch.equal(resumed["state_dict"]["encoder.net.0.weight"], first["encoder.net.0.weight"])


def test_jsa_rao_blackwellized_gradient_trains_from_both_front_ends(tmp_path, mnist_dir, monkeypatch):
    """`gradient_states=expected` from Hydra and from LightningCLI, with the cache read and its diagnostics logged."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    hydra_run(["model=jsa", "model.gradient_states=expected", "model.use_cache=true", "model.cache_start_epoch=0", *FAST], tmp_path)
    (run_dir,) = (tmp_path / "logs" / "tensorboard").glob("jsa-mnist-*/version_0")
    assert {"train/loss", "train/cache_stuck_rate", "train/cache_age_epochs", "train/cache_log_weight_gap"} <= tags(run_dir)
    (tmp_path / "cli").mkdir()
    monkeypatch.chdir(tmp_path / "cli")
    launch.cli_app.main(["fit", "--model=JSA", "--model.gradient_states=expected", "--data=MNISTDataModule", *CLI_FAST])
    (run_dir,) = (tmp_path / "cli" / "logs" / "tensorboard").glob("jsa-mnist-*/version_0")
    assert {"train/loss", "train/acceptance_rate", "val/nll"} <= tags(run_dir)


@pytest.mark.parametrize("front_end", ["hydra", "cli"])
def test_the_cache_remedies_train_from_both_front_ends(front_end, mnist_dir, tmp_path, monkeypatch):
    """`q_states=fresh` and `cache_refresh=0.2` reach the model from either front end (HPARAMS tab), with the cache read."""
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    monkeypatch.chdir(tmp_path)
    settings = {"q_states": "fresh", "cache_refresh": 0.2, "cache_start_epoch": 0}
    if front_end == "hydra":
        hydra_run(["model=jsa", *FAST, *(f"model.{k}={v}" for k, v in settings.items())], tmp_path)
    else:
        launch.cli_app.main(["fit", "--model=JSA", *CLI_FAST, *(f"--model.{k}={v}" for k, v in settings.items())])
    (run_dir,) = (tmp_path / "logs" / "tensorboard").glob("jsa-*/version_0")
    _, params = hparams_tab(run_dir)
    assert {k: params[k] for k in settings} == settings
    assert "train/cache_stuck_rate" in tags(run_dir)  # the cache was read
