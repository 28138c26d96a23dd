"""The command-line checks (launch/checks/precheck.py): typos and wrong values are one `error:` line with the closest
valid name, exit 2, in both front ends, a model's and a data module's before torch is imported; nothing valid is
refused."""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import models  # noqa: F401  (registers the model classes)
from common.registry import registered
from launch.checks import configs as schema
from launch.checks.early import refuse_early
from tests import preloaded
from tests.conftest import quick_rows, says

REPO = Path(__file__).resolve().parents[3]
MODEL_CONFIGS = ", ".join(sorted(schema.config_targets("model")))  # dvae, dvae_gumbel, jsa, ...
MODEL_CLASSES = ", ".join(sorted(cls.__name__ for cls in registered("model")))  # DiscreteVAE, JSA, ...: the registry, which the configs must match


# Each mistake's refusal names what the user must see: the option or value as given, and the fix or the expected values.
# One case of each kind: the quick loop's.
MISTAKES = [
    ("trainer.max_epoch=1", ["trainer.max_epoch", "Trainer", "trainer.max_epochs?"]),
    ("modle=jsa", ["modle", "did you mean model?"]),  # a config group's name
    ("+ckpt_pth=x.ckpt", ["ckpt_pth", "seed, ckpt_path,"]),
    ("model.mis_step=3", ["model.mis_step", "JSA", "model.mis_steps?"]),
    ("model=nope", ["model=nope", "configs/model/", MODEL_CONFIGS]),
    ("logger=null", ["logger=null", "csv, none, tensorboard", "logger=none"]),
    ("callbacks=null", ["callbacks=null", "default, sgmcmc", "~callbacks"]),
    ("data=mnsit", ["data=mnsit", "mnist?"]),
    ("model=VAE", ["model=VAE", "did you mean vae?"]),  # a name in another case
    ("=1", ["=1", "not a setting", "KEY=VALUE"]),  # no key before the '='
    ("~=1", ["~=1", "not a setting", "KEY=VALUE"]),
    ("fitt", ["fitt", "fit, validate, test (", "did you mean fit?"]),  # a subcommand misspelt: those that run
    ("fit --model=jsa", ["--model=jsa", "did you mean JSA?"]),
    ("seed=abc", ["seed='abc'", "integer"]),
    ("fit --trainer.max_epoch=1", ["--trainer.max_epoch", "Trainer", "--trainer.max_epochs?"]),
    ("fit --model=Nope", ["--model=Nope", MODEL_CLASSES]),
    ("fit --model=VAE --model.mis_steps=3", ["--model.mis_steps", "VAE", "JSA (--model=JSA)"]),
    ("fit --model.mis_steps ten", ["--model.mis_steps='ten'", "integer"]),
    ("fit --data.batch_sise=3", ["--data.batch_sise", "--data.batch_size?"]),
    ("callbacks.model_checkpoint.monitr=val/nll", ["callbacks.model_checkpoint.monitr", "configs/callbacks/default.yaml",
                                                   "callbacks.model_checkpoint.monitor?",
                                                   "+callbacks.model_checkpoint.monitr=val/nll"]),
    # a name cut short gets the name it begins, not one a few letters away (max_steps)
    ("fit --trainer.max_ep=1", ["--trainer.max_ep", "--trainer.max_epochs?"]),
    # a value out of its declared range, or settings that cannot go together (configs/settings.py)
    ("model.mis_steps=-1", ["model.mis_steps", ">= 1", "-1"]),
    ("fit --model.mis_steps=-1", ["--model.mis_steps", ">= 1", "-1"]),
    ("fit --model=DiscreteVAE --model.baseline_decay=1", ["--model.baseline_decay", "[0, 1)", "got 1"]),
    ("model=dvae model.temperature_min=2", ["model", "temperature_min <= temperature", "2"]),
    ("fit --model.use_cache=false --model.cache_start_epoch=3", ["--model.cache_start_epoch", "use_cache=false"]),
    # a setting the line names further on, spelled as the front end takes it
    ("fit --model=VQVAE --model.prior=pixelcnn --model.autoencoder_epochs=0", ["--model.autoencoder_epochs=0",
                                                                                "as --model.autoencoder_checkpoint=PATH"]),
    # files and directories the run would meet only after the imports
    ("ckpt_path=no/such.ckpt", ["ckpt_path=no/such.ckpt", "no such file", ".ckpt file"]),
    ("test --ckpt_path=no/such.ckpt", ["--ckpt_path=no/such.ckpt", "no such file"]),
    (f"fit --trainer.default_root_dir={REPO / 'README.md'}", ["--trainer.default_root_dir", "not a directory"]),
    (f"fit --log_dir={REPO / 'README.md'}", [f"--log_dir={REPO / 'README.md'}", "not a directory"]),
    # Lightning 1's trainer options, LightningCLI's options without a subcommand, Hydra's + on a key that has a value,
    # a scheduler without the optimizer LightningCLI would schedule
    ("trainer.gpus=1", ["trainer.gpus", "trainer.accelerator=gpu trainer.devices=1"]),
    ("fit --trainer.gpus=2", ["--trainer.gpus", "--trainer.accelerator=gpu --trainer.devices=2"]),
    ("--print_config", ["--print_config", "python train.py fit --print_config", "python train.py --cfg job"]),
    ("model=vae --model.latent_dim=8", ["--model.latent_dim", "python train.py fit --model.latent_dim=8"]),
    ("+seed=1", ["+seed=1", "configs/train.yaml", "seed=1"]),
    # a setting of one swept model and not of another: Hydra would refuse that model's job once the jobs before it ran
    ("-m model=vae,jsa model.latent_dim=4", ["model.latent_dim", "JSA", "model=vae,jsa", "VAE (model=vae)"]),
    # several values without -m; a group override Hydra refuses in several lines, or with a traceback
    ("model=vae,jsa", ["model=vae,jsa", "add -m"]),
    ("train", ["train", "KEY=VALUE", "fit"]),  # a word Hydra's grammar refuses in several lines
    ("-c my.yaml", ["-c my.yaml", "fit --config=my.yaml"]),
    # a config folder or primary config that does not exist (Hydra's answer: several lines, exit status 1)
    ("-cd nodir model=vae", ["--config-dir nodir: no such directory"]),
    ("-cn trian", ["--config-name trian: no such config in configs/", "did you mean train?"]),
    ("model=binary_ae", ["model=binary_ae: no such config in configs/model/", "a config of your own: --config-dir DIR with DIR/model/binary_ae.yaml"]),
    # a sweep of choices, in either of Hydra's spellings; letters swapped
    ("-m model=choice(jsa,vea)", ["model=vea: no such config in configs/model/", "did you mean vae?"]),
    ("-m model=jsa,vea", ["model=vea: no such config in configs/model/", "did you mean vae?"]),
    # a value holding '=' (Lightning's checkpoint names): how to quote it for Hydra and for the shell
    ("ckpt_path=runs/epoch=0-step=3.ckpt", ["ckpt_path=runs/epoch=0-step=3.ckpt", """'ckpt_path="runs/epoch=0-step=3.ckpt"'"""]),  # Hydra's -c is --cfg; a config file is LightningCLI's
    ("model@model=vae", ["model@model", "+model@model=vae"]),
    ("experiment=null", ["experiment=null", "~experiment"]),
    # two of Hydra's modes, which Hydra answers with a traceback
    ("-m experiment=compare --cfg job", ["--cfg and --multirun", "leave out -m"]),
    ("--m model=vae,rws --cfg job", ["--cfg and --multirun", "leave out -m"]),  # --m: argparse's abbreviation of --multirun
    # an experiment that sweeps (its hydra.sweeper.params) without -m: Hydra would run its first job alone
    ("experiment=compare_quick", ["experiment=compare_quick sweeps model=", "add -m", "python train.py -m experiment=compare_quick",
                                  "model=NAME"]),
    # Lightning's weights_only=false, which the train.py commands never honour: the ways a trusted file loads
    ("test --ckpt_path=x.ckpt --weights_only=false", ["--weights_only=false", "LATENT_ZOO_TRUST", "weights_only=False"]),
    # LightningCLI's predict, which no model implements: what to use instead
    ("predict --ckpt_path=x.ckpt", ["predict", "load_from_checkpoint", "test --ckpt_path"]),
]
# More cases of the kinds above, each refused once Hydra has composed the config: the full suite's.
MORE_MISTAKES = [
    ("max_epochs=3", ["max_epochs", "trainer.max_epochs?"]),
    ("model=vae model.mis_steps=3", ["model.mis_steps", "VAE", "JSA (model=jsa)"]),
    ("trainer.max_epochs=abc", ["trainer.max_epochs='abc'", "integer or null"]),
    ("-m model=vae,jsa model.lr=1e-3,abc", ["model.lr='abc'", "number"]),
    ("optimizer=sgld optimizer.integrator=splitting", ["optimizer.integrator", "sgld.yaml", "+optimizer.integrator=splitting",
                                                      "if SGLD takes it"]),  # its settings known once imported
    ("fit --model=VAE --model.latnt_dim=8 --print_config", ["--model.latnt_dim", "--model.latent_dim?"]),  # printed checked
    ("-m optimizer=adam,sgld optimizer.temperature=2", ["optimizer.temperature", "adam.yaml", "optimizer=adam,sgld",
                                                          "multirun of those that"]),  # not the + that Adam refuses
    ("seed=01", ["seed='01'", "integer"]),  # Hydra reads 01 as a string
    ("-m 'seed=1, x'", ["seed='x'", "integer"]),
    ("callbacks.nope.x=1", ["callbacks.nope", "configs/callbacks/default.yaml", "callbacks.model_checkpoint"]),
    ("callbacks=sgmcmc callbacks.posterior_samples.thn=5", ["callbacks.posterior_samples.thn", "configs/callbacks/sgmcmc.yaml",
                                                            "callbacks.posterior_samples.thin?"]),  # sgmcmc.yaml extends default.yaml
    ("logger.default_hp_metrc=true", ["logger.default_hp_metrc", "configs/logger/tensorboard.yaml", "logger.default_hp_metric?"]),
    # the TensorBoard run's directory and name are the run's layout (launch/runs/run_directory.py): the settings that set them
    ("logger.save_dir=/tmp/runs", ["logger.save_dir=/tmp/runs", "log_dir=/tmp/runs"]),
    ("logger.name=mine", ["logger.name=mine", "run_name=mine"]),
    ("logger=csv logger.name=mine", ["logger.name=mine", "<log_dir>/csv/", "run_name=mine"]),  # the CSV run's folder
    ("--cfg jbo", ["--cfg jbo", "job"]),
    ("run_name=jsä-ü", ["run_name=jsä-ü", """'run_name="jsä-ü"'"""]),  # Hydra's grammar: a quoted value only
    (r"'hydra.sweeper.params.model\.lr=choice(1e30)'", ["hydra.sweeper.params.model", "override_grammar"]),  # Hydra's own key
    ("hydra.run.dir=a=b", ["hydra.run.dir=a=b", """'hydra.run.dir="a=b"'"""]),
    ("'model.lr=[1' seed=2", ["model.lr=[1: no viable alternative at input '[1'"]),  # the override, not only its input
    # a setting that another makes moot
    ("fit --log_dir=mine --trainer.logger=TensorBoardLogger --trainer.logger.save_dir=tb", ["--log_dir=mine",
                                                                                           "--trainer.logger.save_dir=tb", "ignored"]),
    ("fit --trainer.enable_checkpointing=false --checkpoint.save_top_k=3", ["--checkpoint.save_top_k=3", "enable_checkpointing=false"]),
    ("trainer.enable_checkpointing=false callbacks.model_checkpoint.save_top_k=3", ["callbacks.model_checkpoint.save_top_k=3",
                                                                                    "enable_checkpointing=false"]),
    ("callbacks={}", ["callbacks={}", "~callbacks"]),  # Hydra merges it: nothing would change
    ("scheduler.gamma=0.5", ["scheduler.gamma", "scheduler=none", "scheduler=step"]),  # not + on a choice of none
    # a model.lr the optimizer does not read
    ("optimizer=sgld model.lr=0.5", ["model.lr=0.5", "configs/optimizer/sgld.yaml", "optimizer.lr=0.5"]),
    ("optimizer.lr=0.01 model.lr=0.5", ["model.lr=0.5", "optimizer.lr=0.01", "one of the two"]),
    ("optimizer=sgld model.lr=0.5 model.lr=0.7", ["model.lr=0.7", "optimizer.lr=0.7"]),  # Hydra's value: the last
    # LightningCLI's --optimizer replaces the model's configure_optimizers
    ("fit --optimizer=SGD --model.optimizer=samplers.SGLD", ["--model.optimizer=samplers.SGLD", "--optimizer=SGD", "ignored"]),
    ("fit --optimizer=SGD --model.scheduler=StepLR", ["--model.scheduler=StepLR", "--optimizer=SGD", "--lr_scheduler"]),
    # Lightning's trainer settings that are groups of their own in Hydra: the group's choices
    ("trainer.logger=false", ["trainer.logger", "logger=none"]),
    ("+trainer.callbacks=[]", ["trainer.callbacks", "callbacks=NAME"]),
    # a name cut short gets the name it begins, not one a few letters away (max_steps)
    ("trainer.max_ep=1", ["trainer.max_ep", "trainer.max_epochs?"]),
    ("model=vimco model.num_samples=1", ["model.num_samples", ">= 2", "got 1"]),
    ("model.lr=0", ["model.lr", "> 0", "got 0"]),
    ("optimizer.lr=abc", ["optimizer.lr='abc'", "number"]),  # Adam's lr: float | Tensor
    ("model.cache_start_epoch=-1", ["model.cache_start_epoch", ">= 0", "-1"]),
    ("data.batch_size=0", ["data.batch_size", ">= 1", "got 0"]),
    ("model.use_cache=false model.cache_refresh=0.2", ["model.cache_refresh", "use_cache=false"]),
    ("model.cache_refresh=0.2", ["model.cache_refresh=0.2", "cache_start_epoch=null", "set cache_start_epoch", "cache_refresh=0"]),
    ("model=vqvae model.prior=pixelcnn model.autoencoder_epochs=0", ["model.autoencoder_epochs=0", "as model.autoencoder_checkpoint=PATH"]),
    (f"ckpt_path={REPO / 'docs'}", [f"ckpt_path={REPO / 'docs'}", "a directory"]),
    (f"log_dir={REPO / 'README.md'}", [f"log_dir={REPO / 'README.md'}", "not a directory"]),
    ("+trainer.max_epochs=1", ["+trainer.max_epochs=1", "configs/trainer/default.yaml", "trainer.max_epochs=1"]),
    ("+model.mis_steps=3", ["+model.mis_steps=3", "JSA", "model.mis_steps=3"]),
    # an optimizer's config holds only the keys its file sets (not the class's defaults): the + that adds one
    ("optimizer.weight_decay=0.1", ["optimizer.weight_decay", "configs/optimizer/adam.yaml", "+optimizer.weight_decay=0.1"]),
    # an experiment's own sweep of the models (experiment=compare) is composed job by job too
    ("-m experiment=compare model.mis_steps=3", ["model.mis_steps", "DiscreteVAE", "not every model of the sweep", "JSA (model=jsa)"]),
    # replicas take seeds and arms alone, with or without + (nothing else reads them)
    ("replicas.sed=[0,1]", ["replicas.sed", "replicas.seeds?"]),
    ("+replicas.sed=[0,1]", ["replicas.sed", "replicas.seeds?"]),
    # a key under a setting that is null (discrete_latent): the + that adds it
    ("discrete_latent.num_categories=4", ["discrete_latent.num_categories", "+discrete_latent.num_categories=4"]),
    ("model.mis_step=1 model.cache_siz=2", ["model.mis_step", "JSA", "model.mis_steps?"]),  # two typos: the first named
    ("sed=1 model.mis_step=1", ["sed", "did you mean seed?"]),  # the top-level seed, not data.seed
    ("trainer._target_=[a,b]", ["trainer._target_=['a', 'b']", "expected string"]),  # a class's path, not a list
    # a setting of a class of one's own, which configs/model/vae.yaml does not have
    ("model=vae model._target_=mypkg.mymodel.MyVAE model.beta=0.5", ["model.beta", "configs/model/vae.yaml", "+model.beta=0.5"]),
]


@pytest.mark.parametrize("command, named", quick_rows(MISTAKES + MORE_MISTAKES, len(MISTAKES)))
def test_mistakes_are_one_line_with_the_closest_name(command, named):
    argv = shlex.split(command)
    refusal = refuse_early(argv, cli=argv[0] in ("fit", "validate", "test", "predict"))
    assert refusal is not None and "\n" not in refusal, refusal
    says(refusal, *named)


def test_after_the_imports_the_trainer_settings_are_checked_before_hydra_composes():
    """The Hydra front end's pass once Lightning is imported, before Hydra composes (whose struct mode would refuse an
    unknown key in several lines): the Trainer's, the optimizer's and the callbacks' settings, unknown before the
    imports; composed here where no early check ran in this process."""
    from launch.checks.hydra_check import check_after_imports
    from launch.checks.precheck import EarlyRefusal

    for argv, named in ((["model=vae", "trainer.max_epoch=1"], ["trainer.max_epoch", "Trainer", "trainer.max_epochs?"]),
                        (["optimizer.lr=abc"], ["optimizer.lr", "'abc'"]),
                        (["+optimizer.betas=0.9"], ["optimizer.betas=0.9", "expected a list of 2"])):
        with pytest.raises(EarlyRefusal) as refusal:
            check_after_imports(argv)
        says(str(refusal.value), *named)
    check_after_imports(["model=vae", "trainer.max_epochs=1"])


def test_a_job_checked_again_resolves_hydra_interpolations_against_its_own_hydra_node():
    """A multirun's jobs, checked again after the imports, each as its own: `${hydra:runtime.choices.data}` in run_name
    is the job's data set, not that of the job composed last."""
    from launch.checks.hydra_check import check_hydra, check_job

    argv = ["-m", "data=mnist,fashion_mnist"]
    checked = check_hydra(argv)
    assert [cfg.hydra.runtime.choices.data for _, cfg in checked] == ["mnist", "fashion_mnist"]
    for job, cfg in checked:
        assert check_job(job, cfg, argv, checked[0][1])
        assert cfg.run_name == f"jsa-{cfg.hydra.runtime.choices.data}"


def test_a_gpu_is_the_runs_to_find_not_the_launching_process(tmp_path, monkeypatch):
    """`-m ... trainer=gpu hydra/launcher=slurm` is launched from a login node without one: the checks before Hydra
    composes pass it, and a run on a machine without one refuses it in one line."""
    import torch

    import launch.hydra_app
    from launch.checks.hydra_check import check_after_imports
    from launch.checks.settings import SettingsError
    from tests.launch.test_configs import composed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("launch.checks.hydra_check.slurm_here", lambda: True)
    check_after_imports(["-m", "model=vae", "trainer=gpu", "hydra/launcher=slurm", "hydra.launcher.partition=gpu"])
    with pytest.raises(SettingsError) as refused:
        launch.hydra_app.run(composed(["model=vae", "trainer=gpu", f"log_dir={tmp_path / 'logs'}"]))
    says(refused.value, "trainer.accelerator=gpu", "trainer.accelerator=cpu")


def test_a_config_file_that_is_not_yaml_or_not_there_is_named(tmp_path):
    from launch.checks.received_config import refuse_received_configs

    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_epochs: 1\n model: x: y\n")
    for argv in (["fit", "--config", str(bad)], ["fit", f"--config={bad}"], ["fit", "-c", str(bad)]):
        refusal = refuse_received_configs(argv, cli=True)  # train.py reads every config file before the early check
        assert refusal is not None and refusal.startswith(f"config file {bad} is not valid YAML"), refusal
    for argv in (["fit", "--config", str(tmp_path / "nope.yaml")], ["fit", "-c", str(tmp_path / "nope.yaml")]):
        assert refuse_early(argv, cli=True) == f"--config={tmp_path / 'nope.yaml'}: no such file"


# The file, then the setting as the file names it, and the fix or the expected values; None: the file passes.
@pytest.mark.parametrize("front_end, text, named", [
    ("cli", "trainer:\n  max_epoch: 1\n", ["trainer.max_epoch", "Trainer", "trainer.max_epochs?"]),
    ("cli", "model:\n  class_path: models.JSA\n  init_args:\n    mis_step: 3\n",
     ["model.init_args.mis_step", "JSA", "model.init_args.mis_steps?"]),
    ("cli", "model: VAE\ndata:\n  class_path: datamodules.MNISTDataModule\n  init_args: {batch_size: 32}\n", None),
    ("cli", "model:\n  class_path: models.VAE\n  init_args: {mis_steps: 3}\n", ["model.init_args.mis_steps", "VAE", "JSA"]),
    ("cli", "model: Nope\n", ["model: Nope", "DiscreteVAE, JSA,"]),
    ("cli", "trainer:\n  max_epochs: ten\n", ["trainer.max_epochs='ten'", "integer or null"]),
    ("cli", "trainer:\n  max_epochs: '10'\n  enable_progress_bar: yes\n", None),  # read as jsonargparse reads YAML
    ("hydra", "# @package _global_\ntrainer:\n  max_epoch: 1\n", ["trainer.max_epoch", "Trainer", "trainer.max_epochs?"]),
    ("hydra", "# @package _global_\nmodel:\n  mis_stepz: 3\n", ["model.mis_stepz", "JSA", "model.mis_steps?"]),
    ("hydra", "# @package _global_\nsed: 3\n", ["sed", "seed,"]),
    ("hydra", "# @package _global_\ndefaults:\n  - override /model: vae\nmodel: {latent_dim: 8, lr: 1e-3}\n"
     "trainer: {max_epochs: 2, enable_progress_bar: yes}\nseed: 007\nper_model: {jsa: {mis_steps: 3}}\n", None),
])
def test_a_typo_in_a_config_file_is_refused_as_on_the_command_line(front_end, text, named, tmp_path):
    """LightningCLI's -c FILE and a Hydra experiment of one's own (--config-dir): the command line's line, with the file."""
    if front_end == "cli":
        (tmp_path / "my.yaml").write_text(text)
        argv, file = ["fit", "-c", str(tmp_path / "my.yaml")], f"--config={tmp_path / 'my.yaml'}"
    else:
        (tmp_path / "experiment").mkdir()
        (tmp_path / "experiment" / "mine.yaml").write_text(text)
        argv, file = ["--config-dir", str(tmp_path), "experiment=mine"], str(tmp_path / "experiment" / "mine.yaml")
    refusal = refuse_early(argv, cli=front_end == "cli")
    if named is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.startswith(f"{file}: {named[0]}") and "\n" not in refusal, refusal
        says(refusal, *named)


def test_the_configs_of_a_config_dir_are_choices_of_their_groups(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("_target_: models.VAE\n")
    assert refuse_early(["--config-dir", str(tmp_path), "model=mine"], cli=False) is None
    refusal = refuse_early(["--config-dir", str(tmp_path), "model=mien"], cli=False)
    says(refusal, "did you mean mine?", f"configs/model/ or {tmp_path / 'model'}/")  # where it was looked for
    # a key of a config of one's own for a class of one's own (not imported here): the file it is missing from
    (tmp_path / "model" / "own.yaml").write_text("_target_: mypkg.MyModel\nnum_samples: 3\n")
    refusal = refuse_early(["--config-dir", str(tmp_path), "model=own", "model.num_sample=2"], cli=False)
    says(refusal, f"model.num_sample: {tmp_path / 'model' / 'own.yaml'} has no such key; did you mean model.num_samples?")
    # a defaults entry of one's own config that names no config: the file, the entry, the choices
    (tmp_path / "model" / "extends.yaml").write_text("# @package _global_\ndefaults:\n  - /model_defaults@model: VAEE\n"
                                                     "  - _self_\nmodel:\n  _target_: models.VAE\n")
    refusal = refuse_early(["--config-dir", str(tmp_path), "model=extends"], cli=False)
    says(refusal, f"{tmp_path / 'model' / 'extends.yaml'}: its defaults list names model_defaults/VAEE", "one of DiscreteVAE, JSA",
         "did you mean VAE?")


def test_the_classes_a_config_file_chooses_hold_where_it_stands_on_the_command_line(tmp_path):
    """What comes later wins, as in jsonargparse: a file's settings are of the class it (or what came before it) chose."""
    (tmp_path / "vae.yaml").write_text("model: VAE\n")
    (tmp_path / "jsa.yaml").write_text("model:\n  class_path: models.JSA\n  init_args: {mis_steps: 3}\n")
    vae, jsa = str(tmp_path / "vae.yaml"), str(tmp_path / "jsa.yaml")
    assert refuse_early(["fit", "-c", vae, "--model.latent_dim=8"], cli=True) is None
    assert refuse_early(["fit", "-c", jsa, "--model=VAE", "--model.latent_dim=8"], cli=True) is None
    assert refuse_early(["fit", "--model=VAE", "-c", jsa], cli=True) is None
    assert "no such option of VAE" in refuse_early(["fit", "-c", vae, "--model.mis_steps=3"], cli=True)
    assert "no such option of JSA" in refuse_early(["fit", "--model=VAE", "-c", jsa, "--model.latent_dim=8"], cli=True)


def test_a_checkpoints_model_options_are_left_to_the_check_that_knows_its_class(tmp_path):
    """`test --ckpt_path=PATH --model.latent_dim=32` names no model: the checkpoint's class takes it (read once the
    imports are done, launch/cli_app.py), so it is not held to JSA's options before; with --model=JSA it is."""
    (tmp_path / "vae.ckpt").write_bytes(b"")
    ckpt = f"--ckpt_path={tmp_path / 'vae.ckpt'}"
    assert refuse_early(["test", ckpt, "--model.latent_dim=32"], cli=True) is None
    assert "no such option of JSA" in refuse_early(["test", ckpt, "--model=JSA", "--model.latent_dim=32"], cli=True)


@pytest.mark.parametrize("data_dir, said", [("{empty}", "is an empty folder"), ("", "DATA_DIR is set but empty"),
                                            ("{empty}/nope", "does not exist")])
def test_a_data_dir_without_data_is_refused_naming_it_and_the_data(data_dir, said, tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    data_dir = data_dir.format(empty=tmp_path / "empty")
    monkeypatch.setenv("DATA_DIR", data_dir)
    for argv, cli, data, fix in ((["data=fashion_mnist"], False, "FashionMNISTDataModule", "data.data_dir=PATH"),
                                 (["fit"], True, "MNISTDataModule", "--data.data_dir=PATH")):
        refusal = refuse_early(argv, cli=cli)
        assert refusal is not None and said in refusal and data_dir in refusal and data in refusal and fix in refusal, refusal
        assert refuse_early([*argv, f"{'--' if cli else ''}data.data_dir={tmp_path}"], cli=cli) is None  # a download there


VALID = [
    # one of each kind: a setting, a sweep, an experiment, a checkpoint, a printed config, fit, test, a config file, a +
    "", "model=vae data=mnist trainer.max_epochs=5", "-m model=vae data=mnist,cifar10", "-m experiment=compare data=mnist",
    "model=vae optimizer=sgld optimizer.lr=1e-7 callbacks=sgmcmc", "ckpt_path=PATH/last.ckpt", "--cfg job",
    "experiment=jsa_paper model=rws", "fit --model=VAE --data=MNISTDataModule --trainer.max_epochs=1",
    "test --model=VAE --ckpt_path=PATH/last.ckpt", "fit --config configs/cli/jsa_paper.yaml", "+optimizer.weight_decay=0.1",
    # the full suite only from here on (QUICK_VALID)
    "-c hydra", "--info searchpath", "--config-name train",
    "experiment=compare_quick model=vae", "experiment=compare --cfg job", "model=jsa model.cache_start_epoch=null model.gradient_states=expected",
    "model=vqvae model.prior=pixelcnn model.backbone=conv data=cifar10", "trainer.devices=auto trainer.precision=bf16-mixed",
    "model.lr='${optimizer.lr}'", "+trainer.max_time=00:00:10:00", "model=dvae_gumbel model.temperature=0.5", "trainer=ddp",
    "callbacks.gradient_variance.every_n_steps=0 hydra.run.dir=x", "-m model.mis_steps=1,5,20 seed=range(3)",
    "test --fresh_weights=true", "validate --fresh_weights true", "test -c=run.yaml",
    "+model.cache_start_epoch=3", "++trainer.max_epochs=1", "fit --optimizer=Adam --lr_scheduler=StepLR --lr_scheduler.step_size=5",  # (a config file may give ckpt_path)
    "fit --help", "fit --optimizer=Adam --lr_scheduler=ReduceLROnPlateau --lr_scheduler.monitor=val/nll",  # LightningCLI's own
    "fit --trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping --trainer.callbacks.monitor=val/nll",
    "fit --model=JSA --model.init_args.mis_steps=5 --checkpoint.save_top_k=3 --seed_everything=1",
    # what a review found refused by an earlier version, each accepted by Hydra or jsonargparse
    "seed=1_000", "trainer.max_steps=250_000", "model.lr=1_0.5", "-m 'seed=1, 2'", "-m 'data.binarize=static, dynamic'",
    "'seed= 1'", "model='vae'", "trainer='cpu'", "experiment='jsa_paper'", "-m model='vae','jsa'", "run_name=007",
    "log_dir=01", "trainer._target_=lightning.pytorch.Trainer", "optimizer._partial_=true", "--cfg=job hydra/launcher=parallel",
    "-cjob hydra/launcher=parallel", "--multi hydra/launcher=parallel", "--m model=vae,rws", "model.lr=1",
    "fit --model.class_path=models.VAE --model.init_args.latent_dim=8",
    """fit '--model={"class_path":"models.VAE","init_args":{"latent_dim":8}}'""", """fit '--model.init_args={"lr":0.1}'""",
    "fit --model.help=VAE", "fit --model.help VAE", "fit -c=vae.yaml --model.latent_dim=8", "fit --data.download=no",
    "fit --data.download=off", "fit --model.lr=1_000", "fit --trainer.max_epochs=1_000", "fit --model.lr=1e-3",
    "fit --model=mypackage.MyModel --model.anything=1",
    "callbacks=sgmcmc callbacks.posterior_samples.thin=5 callbacks.model_checkpoint.save_top_k=3",
    "+callbacks.model_checkpoint.verbose=true", "experiment=jsa_paper callbacks.gradient_variance.every_n_steps=0",
    "++optimizer.weight_decay=0.1", "optimizer=sgld optimizer.temperature=2",
    "+discrete_latent.num_categories=4", "~callbacks.image_grids", "-m model=glob(*,exclude=vqvae_prior) seed=range(2)",
]
QUICK_VALID = 12  # the first rows, one of each kind, run in the quick loop


def with_files_named_by(commands: list[list[str]], root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work in `root`, where the checkpoints and config files the commands name exist (as a run made them), and
    configs/ is the repository's."""
    monkeypatch.chdir(root)
    (root / "configs").symlink_to(REPO / "configs")
    for argv in commands:
        for arg in argv:
            key, _, value = arg.partition("=")
            if key.lstrip("-+") in ("ckpt_path", "c", "config", "model.autoencoder_checkpoint") and value and not (root / value).exists():
                (root / value).parent.mkdir(parents=True, exist_ok=True)
                (root / value).write_text("model: VAE\n" if value == "vae.yaml" else "{}\n")  # the file chooses the model


def test_a_config_files_unknown_top_level_key_is_named_with_its_file_and_the_closest(tmp_path):
    (tmp_path / "b.yaml").write_text("mdoel:\n  lr: 0.1\n")
    says(refuse_early(["fit", "-c", str(tmp_path / "b.yaml")], cli=True), f"--config={tmp_path / 'b.yaml'}", "mdoel",
         "did you mean model?")
    # several: the first in the file, whatever the process's string hashing
    (tmp_path / "c.yaml").write_text("".join(f"{key}:\n  lr: 0.1\n" for key in ("mdoel", *"abcdefghij")))
    says(refuse_early(["fit", "-c", str(tmp_path / "c.yaml")], cli=True), "mdoel: no such option")


@pytest.mark.parametrize("command", quick_rows(VALID, QUICK_VALID))
def test_valid_commands_pass(command, tmp_path, monkeypatch):
    argv = shlex.split(command)
    with_files_named_by([argv], tmp_path, monkeypatch)
    assert refuse_early(argv, cli=bool(argv) and argv[0] in ("fit", "validate", "test")) is None


@pytest.mark.parametrize("given", ["+optimizer.weight_decay=0.1", "optimizer.weight_decay=0.1", "+trainer.max_epochs=3"])
def test_the_advice_on_a_plus_is_what_hydra_composes(given):
    """Where the early check refuses a key with or without +, the command it advises composes in Hydra (and passes the
    early check); where it lets one pass, Hydra composes that."""
    from launch.checks.hydra_config import compose

    refusal = refuse_early([given], cli=False)
    advised = next(word for word in reversed(refusal.split()) if "=" in word).rstrip("),") if refusal else given
    assert refuse_early([advised], cli=False) is None, advised
    key, value = advised.lstrip("+").split("=")
    group, name = key.split(".")
    assert compose([advised])[group][name] == float(value), advised


def test_an_option_without_its_value_is_left_to_the_parser():
    """`fit --log_dir` (no value): jsonargparse says "expected one argument"; the early checks must not fail on it."""
    for option in ("--log_dir", "--ckpt_path", "--trainer.default_root_dir"):
        refuse_early(["fit", option], cli=True)


def test_a_config_file_may_set_log_dir_so_the_default_is_not_checked_early(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").write_text("not a directory")
    (tmp_path / "run.yaml").write_text("log_dir: mylogs\n")
    assert refuse_early(["fit", "-c", "run.yaml"], cli=True) is None  # checked once parsed (launch/run_builder.py)
    assert "logs is a file, not a directory" in refuse_early(["fit"], cli=True)


@pytest.mark.slow  # every documented command: the full suite, as tests/test_documented_commands.py
def test_every_documented_train_command_passes(tmp_path, monkeypatch):
    """Each train.py command README.md and train.py's help show passes the early check; one that VALID or the launcher
    commands of tests/launch/test_cluster.py list is checked by their test (test_valid_commands_pass,
    test_valid_launcher_and_sweeper_commands_pass)."""
    from tests.launch.test_cluster import VALID as LAUNCHER_COMMANDS
    from tests.test_documented_commands import COMMANDS

    commands = [shlex.split(c)[2:] for c in COMMANDS if c.startswith("python train.py")]
    assert len(commands) > 10
    checked_elsewhere = [shlex.split(c) for c in (*VALID, *LAUNCHER_COMMANDS)]
    commands = [argv for argv in commands if argv not in checked_elsewhere]
    with_files_named_by(commands, tmp_path, monkeypatch)
    monkeypatch.setattr("launch.checks.hydra_check.slurm_here", lambda: True)  # README's SLURM command: on a login node
    for argv in commands:
        refusal = refuse_early(argv, cli=bool(argv) and argv[0] in ("fit", "validate", "test", "predict"))
        assert refusal is None, (argv, refusal)  # trainer=gpu too: the devices are the run's, on a GPU node under SLURM


def test_a_prior_of_ones_own_is_left_to_the_registry():
    """`prior` is any name: the registry (models/components/priors.py's PRIORS, which a user's code may extend) decides
    once the models are built, so a prior registered by one's own code is not refused before the imports."""
    assert refuse_early(["model.prior=my_prior"], cli=False) is None
    assert refuse_early(["fit", "--model.prior=my_prior"], cli=True) is None


@pytest.mark.parametrize("argv", [["model.mis_step=1"], ["fit", "--model.mis_step=1"], ["fit", "-c", "{file}"],
                                  ["--config-dir", "{folder}", "experiment=mine"]])
def test_the_refusal_comes_before_torch_is_imported(argv, tmp_path):
    """The real entry point: exit 2, one line on stderr, and torch never imported (so it is there in a second or so), a
    typo inside a config file (LightningCLI's -c, a Hydra experiment of one's own) as one on the command line."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nmodel:\n  mis_step: 1\n")
    argv = [arg.format(file=tmp_path / "experiment" / "mine.yaml", folder=tmp_path) for arg in argv]
    probe = ("import runpy, sys; sys.argv = ['train.py', *sys.argv[1:]]\n"
             "try:\n    runpy.run_path('train.py', run_name='__main__')\n"
             "except SystemExit as stop:\n    print('torch' in sys.modules, file=sys.stdout); raise\n")
    result = subprocess.run([sys.executable, "-c", probe, *argv], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout.strip() == "False", (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and "did you mean" in result.stderr
    assert not (tmp_path / "logs").exists() and not (REPO / "logs" / "hydra" / "default").exists()


@pytest.mark.slow  # starts train.py
@pytest.mark.parametrize("argv, data_dir", [(["model.mis_steps=-1"], None), (["fit", "--model.mis_steps=-1"], None),
                                            (["ckpt_path=nope.ckpt"], None), (["fit", "--ckpt_path=nope.ckpt"], None),
                                            (["model=vqvae_prior", "model.autoencoder_checkpoint=nope.ckpt"], None),
                                            (["log_dir=afile"], None), ([], "empty"), (["fit"], "empty"),
                                            (["fit", "--config", "bad.yaml"], None)])
def test_values_files_and_data_dir_are_refused_before_the_imports(argv, data_dir, tmp_path):
    """A value out of range, a missing checkpoint (to resume, or a VQ-VAE's first stage), a run directory that is a file,
    an empty DATA_DIR and a config file
    that is not YAML: one `error:` line, nothing logged before it, torch never imported (about half a second, where the
    imports alone take four)."""
    (tmp_path / "afile").write_text("")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.yaml").write_text("model: x: y\n")
    probe = ("import runpy, sys; sys.argv = ['train.py', *sys.argv[1:]]\n"
             f"try:\n    runpy.run_path({str(REPO / 'train.py')!r}, run_name='__main__')\n"
             "except SystemExit as stop:\n    print('torch' in sys.modules, file=sys.stdout); raise\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), **({"DATA_DIR": str(tmp_path / data_dir)} if data_dir else {})}
    result = subprocess.run([sys.executable, "-c", probe, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout.strip() == "False", (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "bad.yaml", "empty"]  # nothing written


def test_a_checkpoint_that_is_a_pipe_is_named_as_one_not_as_missing(tmp_path):
    pipe = tmp_path / "pipe.ckpt"
    os.mkfifo(pipe)
    for argv, cli in (([f"ckpt_path={pipe}"], False), (["fit", f"--ckpt_path={pipe}"], True)):
        refusal = str(refuse_early(argv, cli=cli))
        assert "not a regular file" in refusal and "no such file" not in refusal, refusal


@pytest.mark.slow  # a process of its own: root reads any folder unless it gives up that power (setpriv)
def test_a_data_dir_this_user_cannot_read_is_one_line_naming_it(tmp_path):
    data = tmp_path / "data"
    (data / "MNIST").mkdir(parents=True)
    data.chmod(0)
    drop = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: a folder of mode 000 cannot be made unreadable")
        drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-dac_override,-dac_read_search"]
    try:
        result = subprocess.run([*drop, sys.executable, str(REPO / "train.py")], cwd=tmp_path, capture_output=True, text=True,
                                timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), "DATA_DIR": str(data)})
    finally:
        data.chmod(0o755)
    assert result.returncode == 2 and result.stderr.startswith(f"error: DATA_DIR={data} cannot be read by this user"), result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.slow  # starts train.py
@pytest.mark.parametrize("argv, named", [
    (["trainer.max_epoch=1"], ["trainer.max_epoch", "Trainer", "trainer.max_epochs?"]),
    (["fit", "--trainer.max_epoch=1"], ["--trainer.max_epoch", "Trainer", "--trainer.max_epochs?"]),
])
def test_the_settings_of_the_trainer_are_refused_in_one_line_once_imported(argv, named, tmp_path):
    """Its settings are Lightning's, declared by its constructor: checked once Lightning is imported, with the same
    line, before anything is written."""
    result = preloaded.run_train(argv, tmp_path, {**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)  # imports done: forked
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(f"error: {named[0]}"), result.stderr[-2000:]
    says(result.stderr.strip().splitlines()[-1], *named)
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_record_is_neither_read_nor_written_where_no_cache_folder_is_known_or_a_constructor_cannot_be_read(
        tmp_path, monkeypatch):
    """No $XDG_CACHE_HOME and no home directory (a container's user without one): no record, the early checks as
    without one. A class whose constructor cannot be read is left out of the record, the others recorded."""
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    monkeypatch.setattr(schema, "library_records", functools.cache(schema.library_records.__wrapped__))
    assert schema.library_records_file() is None and schema.recorded("lightning.Trainer") is None
    schema.record_library_settings()  # nothing to write to, nothing raised
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    hints = schema.constructor_hints
    monkeypatch.setattr(schema, "constructor_hints", lambda cls: {}[0] if cls.__name__ == "Adam" else hints(cls))
    schema.record_library_settings()
    found = json.loads(schema.library_records_file().read_text())
    assert "torch.optim.Adam" not in found and "max_epochs" in found["lightning.Trainer"]


@pytest.mark.slow  # starts train.py
def test_a_command_past_the_imports_records_the_libraries_settings_for_the_next_early_check(tmp_path, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)}
    result = preloaded.run_train(["--cfg", "job"], tmp_path, env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (recorded,) = cache.glob("latent-zoo/settings-*.json")
    found = json.loads(recorded.read_text())
    assert "max_epochs" in found["lightning.Trainer"] and "weight_decay" in found["torch.optim.Adam"], found.keys()
    assert "patience" in found["lightning.pytorch.callbacks.EarlyStopping"] and "milestones" in found[
        "torch.optim.lr_scheduler.MultiStepLR"]


PROBE = """
import sys
from launch.checks import hydra_check
from launch.checks.early import refuse_early
argv = ["trainer.gradient_clip_val=1", "trainer.max_epoch=1"]
print(refuse_early(argv, cli=False), "lightning" in sys.modules)
"""


def test_before_the_imports_any_trainer_setting_passes_until_a_run_has_recorded_them(tmp_path):
    """The Trainer's settings are its constructor's, unknown before Lightning is imported until a run has recorded
    them: the early check composes them as given (a setting configs/trainer/default.yaml leaves out too)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["None", "False"], (result.stdout, result.stderr[-2000:])


@pytest.mark.parametrize("argv, named", [
    (["trainer.max_epoch=1"], ["trainer.max_epoch", "Trainer", "trainer.max_epochs?"]),
    (["fit", "--trainer.max_epoch=1"], ["--trainer.max_epoch", "Trainer", "--trainer.max_epochs?"]),
    (["fit", "--max_epochs=1"], ["--max_epochs", "--trainer.max_epochs?"]),
    (["optimizer=adam", "+optimizer.weight_decayy=0.1"], ["optimizer.weight_decayy", "Adam", "optimizer.weight_decay?"]),
    (["fit", "--optimizer=AdamW", "--optimizer.lrr=1"], ["--optimizer.lrr", "AdamW", "--optimizer.lr?"]),  # by short name
    (["fit", "--trainer.callbacks=EarlyStopping", "--trainer.callbacks.patiense=3"],
     ["--trainer.callbacks.patiense", "EarlyStopping", "--trainer.callbacks.patience?"]),
    (["logger._target_=lightning.pytorch.loggers.CSVLogger"], ["logger.default_hp_metric", "CSVLogger", "logger=csv"]),
    (["fit", "--optimizer=Adamw"], ["--optimizer=Adamw", "no such class", "AdamW?"]),  # a class by its short name
    (["fit", "--optimizer=SGLDD"], ["--optimizer=SGLDD", "no such class", "SGLD?"]),  # the collection's
    (["fit", "--trainer.callbacks+=EarlyStoping"], ["--trainer.callbacks+=EarlyStoping", "EarlyStopping?"]),
])
def test_once_a_run_has_recorded_the_libraries_settings_their_typo_is_refused_before_the_imports(argv, named, tmp_path,
                                                                                                monkeypatch):
    """A run records the setting names of the Trainer and of the libraries' optimizers, schedulers, loggers and callbacks
    once it has imported Lightning (train.py); the next command's early check refuses a typo of them before torch
    loads."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(schema, "library_records", functools.cache(schema.library_records.__wrapped__))
    schema.record_library_settings()  # as train.py does once Lightning is imported (this process has imported it)
    schema.library_records.cache_clear()
    assert "lightning.Trainer" in json.loads(schema.library_records_file().read_text())
    probe = ("import runpy, sys; sys.argv = ['train.py', *sys.argv[1:]]\n"
             "try:\n    runpy.run_path('train.py', run_name='__main__')\n"
             "except SystemExit as stop:\n    print('torch' in sys.modules, file=sys.stdout); raise\n")
    result = subprocess.run([sys.executable, "-c", probe, *argv], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout.strip() == "False", (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    says(result.stderr, *named)


def test_before_the_imports_a_short_class_name_is_left_to_the_parser_where_it_may_name_a_class(tmp_path, monkeypatch):
    """LightningCLI finds by short name any subclass imported by then: the collection's own (TrainingSpeed, SGLD),
    and one a package of one's own defines, which a dotted path on the command line or LATENT_ZOO_TRUST may import.
    Those are left to the parser; a name none of them can be is refused before the imports."""
    from launch.checks.cli_check import check_cli_command, unknown_short_name
    from launch.checks.precheck import EarlyRefusal

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(schema, "library_records", functools.cache(schema.library_records.__wrapped__))
    schema.record_library_settings()
    schema.library_records.cache_clear()
    monkeypatch.delitem(sys.modules, "lightning")  # as before the imports
    assert [unknown_short_name(name) for name in ("AdamW", "TrainingSpeed", "SGLD")] == [None, None, None]
    assert "AdamW" in unknown_short_name("Adamw")
    with pytest.raises(EarlyRefusal, match="Adamw"):
        check_cli_command(["fit", "--optimizer=Adamw"], False)
    check_cli_command(["fit", "--model=mypkg.mymodel.MyVAE", "--optimizer=Adamw"], False)
    check_cli_command(["fit", "--optimizer=Adam", "--lr_scheduler=ReduceLROnPlateau", "--lr_scheduler.monitor=val/nll"], False)
    monkeypatch.setenv("LATENT_ZOO_TRUST", "mypkg")
    check_cli_command(["fit", "--optimizer=Adamw"], False)


def test_a_list_setting_is_judged_as_the_cli_parser_reads_it():
    """LightningCLI's parser reads 1e-3 in a list as a float (PyYAML's safe loader: a string): Adam's betas given as
    [0.9,1e-3] pass the check as they pass the parser, and a number where a list is expected is refused, named."""
    from launch.checks.cli_check import check_cli_command
    from launch.checks.precheck import EarlyRefusal

    check_cli_command(["fit", "--model=VAE", "--optimizer=Adam", "--optimizer.betas=[0.9,1e-3]"], False)
    with pytest.raises(EarlyRefusal, match=r"--optimizer\.betas=0\.9: expected a list of 2"):
        check_cli_command(["fit", "--model=VAE", "--optimizer=Adam", "--optimizer.betas=0.9"], False)


@pytest.mark.slow  # a new interpreter imports Lightning
def test_once_lightning_is_imported_the_jobs_the_early_check_composed_are_checked_without_composing_again(tmp_path):
    """Checked again, not composed again; composed again where a setting refers to a Trainer default the early check
    did not have (then checked whole)."""
    probe = PROBE + """
trainer_typo = hydra_check.composed_before_imports
refers = ["model=vae", "+callbacks.x._target_=lightning.pytorch.callbacks.EarlyStopping", "+callbacks.x.monitor=val/nll",
          "+callbacks.x.patiense=${trainer.num_nodes}"]
print(refuse_early(refers, cli=False))
import lightning
for argv, composed in ((trainer_typo[0], trainer_typo), (refers, hydra_check.composed_before_imports)):
    hydra_check.composed_before_imports = composed
    if composed is trainer_typo:  # (a second composition would print this)
        composed_job, hydra_check.composed_job = hydra_check.composed_job, lambda *args: print("composed again")
    try:
        hydra_check.check_after_imports(list(argv))
    except hydra_check.EarlyRefusal as refusal:
        print(refusal)
    hydra_check.composed_job = composed_job
"""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}  # no settings recorded: the Trainer's known once imported
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    assert lines[:2] == ["None False", "None"] and len(lines) == 4, (result.stdout, result.stderr[-2000:])
    says(lines[2], "trainer.max_epoch", "Trainer", "trainer.max_epochs?")
    says(lines[3], "callbacks.x.patiense", "EarlyStopping", "callbacks.x.patience?")
