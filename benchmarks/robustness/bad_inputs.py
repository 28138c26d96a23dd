"""Bad input, case by case: what the collection answers to each, in both front ends, data, checkpoints and resume.

    python -m benchmarks.robustness.bad_inputs [--quick] [--only ID,ID] [--jobs 2] [--out benchmarks/results/bad_inputs]

Every case runs `python train.py ...` (or a few lines of Python against the library) in a directory of its own,
with DATA_DIR set and the training cut to a couple of steps, and is classified:

- clear:       exit status != 0, no traceback, a message that names the option or file, nothing written
               (library calls: an exception of the collection's error types, or ValueError, naming it);
- documented:  the run goes on, and says what it does (a logged line README documents);
- traceback:   a Python traceback was printed;
- silent:      an error was expected and the run went on (or a documented behaviour was not logged);
- unclear:     it stopped without a traceback, but the message does not name the option or file;
- wrote:       it stopped with a clear message, but left files behind;
- lost:        a file of the user's (`victim/` beside the run) is gone or changed, or one was made there: a received
               file made the run remove it, or write into it or through a link to it;
- ran:         a module planted beside a received file was imported (its code ran);
- hang:        it did not end within the case's time limit.

Files from someone else (received_cases): checkpoints whose callback state names the user's files, whose
hyperparameters name a planted module, runs whose files are links, data files that are pipes, config files that
expand without bound, divergence, malformed state, run and study folders that link elsewhere or hold a FIFO, a folder
or a hard link to the user's file where a file is written (run_folder_cases); each case's family says which
(`received ...`). Checkpoints of the wrong structure, through both front ends (structure_cases,
`received structure: ...`).
Every way a config or a checkpoint's settings reach jsonargparse or Hydra (config_source_cases, `received source: ...`):
each case writes its received files into its own directory, and names strangers_module, which writes STRANGER-RAN
into the working directory of a process that imports it (outcome `ran`).

Writes table.md (a row per case: input, outcome, the message's first line) and table.json under --out.
`--only` re-runs some cases and merges them into an existing table.json. tests/benchmarks/robustness/test_bad_inputs.py runs --quick.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from launch.checks.configs import config_targets
from benchmarks.lib import markdown
from common.files import write_file

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "train.py")
HYDRA_FAST = ["trainer.max_steps=2", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
              "model.val_num_samples=2", "model.test_num_samples=2", "data.batch_size=16", "trainer.num_sanity_val_steps=0",
              "trainer.enable_progress_bar=false", "callbacks.gradient_variance.every_n_steps=0", "model.mis_steps=2"]
CLI_FAST = [f"--{a}" for a in HYDRA_FAST if not a.startswith(("callbacks.", "model.mis_steps"))]
LIBRARY_ERRORS = ("CheckpointError", "DataError", "DataNotFoundError", "DataCorruptError", "SettingsError", "ValueError")
OUTCOMES = ("clear", "documented", "traceback", "silent", "unclear", "wrote", "lost", "ran", "hang")
CASE_TIMEOUT_S = 300
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@dataclass
class Case:
    id: str
    family: str  # hydra, cli, data, checkpoint, resume, library, study (a benchmark tool, run as ["-c", code])
    args: list[str]  # train.py's arguments; or ["-c", code] for the library; {placeholders} filled in per run
    expect: str = "error"  # error | documented
    mention: str | None = None  # a clear message names this (default: the option's last key)
    documented_by: str | None = None  # for expect=documented: the line the run logs
    data: str | None = None  # another DATA_DIR prepared by `prepare` (a corrupt copy)
    copy_runs: bool = False  # copy the prepared runs (checkpoints) into the case's directory first
    quick: bool = False  # in --quick (tests/benchmarks/robustness/test_bad_inputs.py)
    fast: bool = True  # append the settings that cut the run to a couple of steps
    plant: str | None = None  # a PLANTS entry that alters the case's copy of the JSA run (copy_runs) before it runs
    files: tuple[tuple[str, str], ...] = ()  # received files written into the case's directory first (write_received)

    @property
    def input(self) -> str:
        return " ".join(self.args) if self.args[:1] != ["-c"] else self.args[1].strip().splitlines()[-1]

    @property
    def runs(self) -> tuple[str, ...]:
        """The prepared runs (`prepare`) this case reads: none for a case that names no prepared file, no corrupt
        data copy and no received file (its input alone is refused); else JSA's, whose checkpoint the prepared
        broken files and received modules come from, and the VAE's where an argument names it."""
        names = [f"{{{place}}}" for place in ("root", "jsa", "vae", "planted")]
        if not (any(name in a for name in names for a in self.args) or self.data or self.copy_runs or self.plant or self.files):
            return ()
        return ("jsa", "vae") if any("{vae}" in a for a in self.args) else ("jsa",)


def option_cases() -> list[Case]:
    """Settings of the wrong type, out of range or not among the choices: each in both front ends."""
    model_options = [  # (model, key, value, other settings it needs)
        ("jsa", "lr", "abc", []), ("jsa", "lr", "-1", []), ("jsa", "lr", "0", []), ("jsa", "mis_steps", "2.5", []),
        ("jsa", "mis_steps", "ten", []), ("jsa", "mis_steps", "0", []), ("jsa", "num_categories", "1", []),
        ("jsa", "num_categories", "abc", []), ("jsa", "num_latents", "0", []), ("jsa", "prior", "gaussian", []),
        ("jsa", "embedding", "foo", []), ("jsa", "backbone", "foo", []), ("jsa", "likelihood", "foo", []),
        ("jsa", "use_cache", "maybe", []), ("jsa", "test_num_samples", "0", []), ("jsa", "val_num_samples", "-3", []),
        ("jsa", "eval_chunk_size", "0", []), ("jsa", "code_dim", "0", []), ("jsa", "gradient_states", "all", []),
        ("jsa", "cache_start_epoch", "-1", []), ("jsa", "activation", "tanh", []), ("jsa", "sigma", "0", []),
        ("jsa", "prior_hidden", "0", ["prior=autoregressive"]), ("jsa", "hidden_channels", "0", ["backbone=conv"]),
        ("vae", "latent_dim", "0", []), ("vqvae", "beta", "-1", []), ("vqvae", "decay", "2", []),
        ("vqvae", "num_categories", "1", []), ("dvae", "temperature_min", "0", []), ("dvae", "num_samples", "0", []),
        ("dvae", "baseline_decay", "1.5", []), ("rws", "num_samples", "0", []), ("vimco", "num_samples", "1", []),
    ]
    classes = {name: target.rsplit(".", 1)[-1] for name, target in config_targets("model").items()}  # jsa -> JSA: --model=JSA
    data_options = [("batch_size", "0"), ("batch_size", "100000"), ("batch_size", "abc"), ("val_size", "-1"),
                    ("val_size", "1000000000"), ("binarize", "foo"), ("num_workers", "-1"), ("eval_batch_size", "0"), ("data_dir", "/etc/passwd")]
    trainer_options = [("max_epochs", "abc"), ("max_steps", "-5"), ("devices", "0"), ("accelerator", "gpu"),
                       ("precision", "foo"), ("accumulate_grad_batches", "0"), ("limit_train_batches", "abc"),
                       ("gradient_clip_val", "abc"), ("check_val_every_n_epoch", "0"), ("val_check_interval", "0"),
                       ("strategy", "nonsense"), ("num_nodes", "0")]
    cases = []
    for model, key, value, needs in model_options:
        name = f"{model}.{key}={value}"
        cases.append(Case(f"hydra model {name}", "hydra", [f"model={model}", f"model.{key}={value}", *[f"model.{n}" for n in needs]],
                          mention=key, quick=key == "prior"))
        cases.append(Case(f"cli model {name}", "cli", ["fit", f"--model={classes[model]}", f"--model.{key}={value}",
                                                       *[f"--model.{n}" for n in needs]], mention=key, quick=key == "mis_steps" and value == "ten"))
    for key, value in data_options:
        cases.append(Case(f"hydra data.{key}={value}", "hydra", [f"data.{key}={value}"], mention=key))
        cases.append(Case(f"cli data.{key}={value}", "cli", ["fit", f"--data.{key}={value}"], mention=key))
    # settings refused together, once the model meets its data (models/base.py: setup)
    cases.append(Case("hydra model.likelihood=bernoulli data.binarize=none", "hydra",
                      ["model.likelihood=bernoulli", "data.binarize=none"], mention="binarize"))
    cases.append(Case("cli model.likelihood=bernoulli data.binarize=none", "cli",
                      ["fit", "--model.likelihood=bernoulli", "--data.binarize=none"], mention="binarize"))
    for key, value in trainer_options:
        cases.append(Case(f"hydra trainer.{key}={value}", "hydra", [f"trainer.{key}={value}"], mention=key))
        cases.append(Case(f"cli trainer.{key}={value}", "cli", ["fit", f"--trainer.{key}={value}"], mention=key))
    return cases


def front_end_cases() -> list[Case]:
    return [
        Case("hydra seed=abc", "hydra", ["seed=abc"]),
        Case("hydra seed=-1", "hydra", ["seed=-1"]),
        Case("hydra run_test=maybe", "hydra", ["run_test=maybe"]),
        Case("hydra +foo=1 (a key nothing reads)", "hydra", ["+foo=1"], mention="foo"),
        Case("hydra =1 (no key before the =)", "hydra", ["=1"], mention="KEY=VALUE"),
        Case("hydra ~=1 (no key to delete)", "hydra", ["~=1"], mention="KEY=VALUE"),
        Case("hydra +ckpt_pth= (a typo)", "hydra", ["+ckpt_pth=x.ckpt"], mention="ckpt_pth", quick=True),
        Case("hydra ddp_timeout_s=abc", "hydra", ["ddp_timeout_s=abc"]),
        Case("hydra ddp_timeout_s=0", "hydra", ["ddp_timeout_s=0"]),
        Case("hydra log_dir is a file", "hydra", ["log_dir=afile"], mention="afile"),
        Case("hydra model=nope", "hydra", ["model=nope"], mention="nope", fast=False),
        Case("hydra data=nope", "hydra", ["data=nope"], mention="nope", fast=False),
        Case("hydra trainer=nope", "hydra", ["trainer=nope"], mention="nope", fast=False),
        Case("hydra experiment=nope", "hydra", ["experiment=nope"], mention="nope", fast=False, quick=True),
        Case("hydra optimizer=nope", "hydra", ["optimizer=nope"], mention="nope", fast=False),
        Case("hydra optimizer.lr=abc", "hydra", ["optimizer.lr=abc"], mention="lr"),
        Case("hydra model.foo=1 (not a setting)", "hydra", ["model.foo=1"], mention="foo", fast=False),
        Case("hydra callbacks.model_checkpoint.monitor=val/nope", "hydra", ["callbacks.model_checkpoint.monitor=val/nope"],
             mention="val/nope"),
        Case("hydra monitor=val/nlll (refused at the sanity check)", "hydra", ["callbacks.model_checkpoint.monitor=val/nlll",
             "trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"], mention="val/nll?", fast=False),
        Case("cli --checkpoint.monitor=val/nlll (refused at the sanity check)", "cli", ["fit", "--checkpoint.monitor=val/nlll",
             "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"], mention="val/nll?",
             fast=False),
        Case("hydra callbacks.model_checkpoint.monitr=val/nll (a typo)", "hydra", ["callbacks.model_checkpoint.monitr=val/nll"],
             mention="monitor"),
        Case("hydra callbacks.gradient_variance.every_n_steps=abc", "hydra", ["callbacks.gradient_variance.every_n_steps=abc"],
             mention="every_n_steps"),
        Case("hydra logger.name=mine (the run's name is run_name)", "hydra", ["logger.name=mine"], mention="run_name"),
        Case("hydra trainer=multinode without a launcher", "hydra", ["trainer=multinode"], mention="torchrun"),
        Case("cli --model=Nope", "cli", ["fit", "--model=Nope"], mention="Nope"),
        Case("cli --data=Nope", "cli", ["fit", "--data=Nope"], mention="Nope"),
        Case("cli --seed_everything=abc", "cli", ["fit", "--seed_everything=abc"]),
        Case("cli --foo=1", "cli", ["fit", "--foo=1"], mention="foo"),
        Case("cli --model.foo=1", "cli", ["fit", "--model.foo=1"], mention="foo"),
        Case("cli --trainer.num_nodes=2 without a launcher", "cli", ["fit", "--trainer.strategy=ddp", "--trainer.num_nodes=2"],
             mention="torchrun"),
        # what a new user tries: Lightning 1's option, a CLI option without its subcommand, Hydra's + on a
        # key that has a value, a scheduler LightningCLI would ignore, testing untrained weights
        Case("hydra trainer.gpus=1 (Lightning 1)", "hydra", ["trainer.gpus=1"], mention="trainer.devices"),
        Case("cli --trainer.gpus=1 (Lightning 1)", "cli", ["fit", "--trainer.gpus=1"], mention="--trainer.devices"),
        Case("hydra --print_config (LightningCLI's) without fit", "hydra", ["--print_config"], mention="fit --print_config",
             fast=False),
        Case("hydra trainer.logger=false (a group of its own)", "hydra", ["trainer.logger=false"], mention="logger=none"),
        # settings another setting makes moot, or without the class that takes them: refused, not ignored
        Case("hydra +scheduler.gamma=0.5 over scheduler=none", "hydra", ["+scheduler.gamma=0.5"], mention="scheduler=step"),
        Case("hydra +callbacks.posterior_samples.burn_in=5 without callbacks=sgmcmc", "hydra",
             ["+callbacks.posterior_samples.burn_in=5"], mention="callbacks=sgmcmc"),
        Case("hydra logger=none with replicas", "hydra", ["logger=none", "replicas.seeds=[0,1]"], mention="logger=tensorboard"),
        Case("cli --trainer.logger=false with replicas", "cli", ["fit", "--trainer.logger=false", "--replicas.seeds=[0,1]"],
             mention="--trainer.logger"),
        Case("hydra model.lr with optimizer=sgld", "hydra", ["optimizer=sgld", "model.lr=0.5"], mention="optimizer.lr=0.5"),
        Case("cli --model.optimizer beside --optimizer", "cli", ["fit", "--optimizer=SGD", "--model.optimizer=samplers.SGLD"],
             mention="--model.optimizer"),
        Case("hydra model.likelihood=gaussian on binarized MNIST", "hydra", ["model=vae", "model.likelihood=gaussian"],
             mention="data.binarize=none"),
        Case("cli --model.likelihood=gaussian on binarized MNIST", "cli", ["fit", "--model=VAE", "--model.likelihood=gaussian"],
             mention="--data.binarize=none"),
        Case("hydra model.learn_sigma=true under the data's Bernoulli", "hydra", ["model=vae", "model.learn_sigma=true"],
             mention="likelihood=gaussian"),
        Case("hydra model=dvae model.temperature=3 (REINFORCE)", "hydra", ["model=dvae", "model.temperature=3"],
             mention="estimator=gumbel"),
        # numbers that pass a range check written `x < 0` (NaN) or fail only at the first step (inf)
        Case("hydra model.beta=nan (VQ-VAE)", "hydra", ["model=vqvae", "model.beta=nan"], mention="model.beta=nan"),
        Case("cli --model.beta=nan (VQ-VAE)", "cli", ["fit", "--model=VQVAE", "--model.beta=nan"], mention="--model.beta=nan"),
        Case("hydra model.lr an integer beyond every float", "hydra", ["model=vae", "model.lr=1" + "0" * 400], mention="finite number"),
        Case("cli --model.lr an integer beyond every float", "cli", ["fit", "--model=VAE", "--model.lr=1" + "0" * 400],
             mention="finite number"),
        Case("hydra model=vqvae_prior model.autoencoder_checkpoint missing", "hydra",
             ["model=vqvae_prior", "model.autoencoder_checkpoint=/nonexistent/last.ckpt"], mention="model.autoencoder_checkpoint"),
        Case("cli --model.autoencoder_checkpoint missing", "cli", ["fit", "--model=VQVAE", "--model.prior=pixelcnn",
             "--model.autoencoder_epochs=0", "--model.autoencoder_checkpoint=/nonexistent/last.ckpt"],
             mention="--model.autoencoder_checkpoint"),
        Case("hydra model.cache_refresh without model.cache_start_epoch", "hydra", ["model.cache_refresh=0.5"],
             mention="cache_start_epoch"),
        Case("cli --model.cache_refresh without --model.cache_start_epoch", "cli", ["fit", "--model.cache_refresh=0.5"],
             mention="cache_start_epoch"),
        Case("hydra optimizer=sgld optimizer.temperature=inf", "hydra", ["model=vae", "optimizer=sgld", "optimizer.temperature=inf"],
             mention="optimizer.temperature=inf"),
        Case("hydra model.decay=2 without EMA (VQ-VAE's code usage)", "hydra", ["model=vqvae", "model.ema=false", "model.decay=2"],
             mention="model.decay"),
        Case("hydra trainer.max_time negative", "hydra", ["trainer.max_time={{minutes:-1}}"], mention="max_time"),
        Case("hydra ckpt_path= (empty)", "hydra", ["ckpt_path="], mention="ckpt_path"),
        Case("hydra +per_model.jas (no such model)", "hydra", ["+per_model.jas.mis_steps=3"], mention="per_model.jas"),
        Case("hydra +per_model.vae.latent_dm (a model's setting misspelt)", "hydra",
             ["experiment=jsa_paper", "+per_model.vae.latent_dm=3"], mention="per_model.vae.latent_dim"),
        Case("hydra +discrete_latent.num_categorie (misspelt)", "hydra",
             ["experiment=compare", "model=jsa", "+discrete_latent.num_categorie=3"], mention="discrete_latent.num_categories"),
        Case("hydra scheduler=cosine trainer.max_epochs=null (T_max from it)", "hydra",
             ["scheduler=cosine", "trainer.max_epochs=null", "trainer.max_steps=2"], mention="scheduler.T_max=VALUE", fast=False),
        Case("hydra optimizer.temperature over a sweep of adam and sgld", "hydra",
             ["-m", "optimizer=adam,sgld", "optimizer.temperature=2"], mention="not every optimizer"),
        Case("hydra trainer.barebones=true", "hydra", ["trainer.barebones=true"], mention="trainer.barebones"),
        Case("cli --trainer.barebones=true", "cli", ["fit", "--trainer.barebones=true"], mention="--trainer.barebones"),
        Case("cli --optimizer=SGLD without its lr", "cli", ["fit", "--optimizer=SGLD"], mention="--optimizer.lr"),
        Case("hydra a second ModelCheckpoint on val/nll", "hydra", ["+callbacks.ck2._target_=lightning.pytorch.callbacks.ModelCheckpoint",
                                                                   "+callbacks.ck2.monitor=val/nll"], mention="another monitor"),
        Case("cli a second ModelCheckpoint on val/nll", "cli", ["fit", "--trainer.callbacks+=ModelCheckpoint",
                                                               "--trainer.callbacks.monitor=val/nll"], mention="--checkpoint.monitor"),
        Case("cli --trainer.callbacks+= a default's class", "cli", ["fit", "--trainer.callbacks+=ImageGrids",
                                                                    "--trainer.callbacks.num_images=4"], mention="ImageGrids twice"),
        Case("hydra -m hydra/launcher=slurm without SLURM", "hydra", ["-m", "model=vae", "hydra/launcher=slurm"],
             mention="slurm_local"),
        Case("hydra seed with replicas.seeds (each replica's its own)", "hydra", ["seed=5", "replicas.seeds=[0,1]"],
             mention="leave seed out"),
        Case("cli --seed_everything with --replicas.seeds", "cli", ["fit", "--seed_everything=5", "--replicas.seeds=[0,1]"],
             mention="leave --seed_everything out"),
        Case("hydra replicas.arms without replicas.seeds", "hydra", ["replicas.arms=[{{cache_start_epoch:1}}]"],
             mention="replicas.seeds"),
        Case("cli --replicas.arms without --replicas.seeds", "cli", ["fit", "--replicas.arms=[{{cache_start_epoch: 1}}]"],
             mention="--replicas.seeds"),
        Case("cli --model.lr beside --optimizer", "cli", ["fit", "--optimizer=SGD", "--optimizer.lr=0.1", "--model.lr=0.5"],
             mention="--optimizer.lr=0.5"),
        Case("cli a typo with --print_config", "cli", ["fit", "--model=VAE", "--model.latnt_dim=8", "--print_config"],
             mention="--model.latent_dim", fast=False),
        Case("cli --seed (Hydra's name)", "cli", ["fit", "--seed=3"], mention="--seed_everything"),
        Case("cli --checkpoint.mode=maxx", "cli", ["fit", "--checkpoint.mode=maxx"], mention="--checkpoint.mode"),
        Case("hydra trainer.max_epochs=-5", "hydra", ["trainer.max_epochs=-5"], mention="trainer.max_epochs"),
        Case("cli -m after fit (Hydra's)", "cli", ["fit", "-m", "model=vae,jsa"], mention="python train.py -m"),
        Case("hydra data.binarize=dinamic (a choice misspelt)", "hydra", ["data.binarize=dinamic"], mention="'dynamic'"),
        Case("hydra callbacks={}", "hydra", ["callbacks={{}}"], mention="~callbacks"),
        Case("hydra checkpoint setting with enable_checkpointing=false", "hydra",
             ["trainer.enable_checkpointing=false", "callbacks.model_checkpoint.save_top_k=3"], mention="enable_checkpointing"),
        Case("cli --log_dir with a logger's save_dir", "cli", ["fit", "--log_dir=mine", "--trainer.logger=TensorBoardLogger",
                                                               "--trainer.logger.save_dir=tb"], mention="--log_dir"),
        Case("hydra +trainer.callbacks=[] (a group of its own)", "hydra", ["+trainer.callbacks=[]"], mention="callbacks=NAME"),
        Case("hydra +trainer.max_epochs=1 (a key that has a value)", "hydra", ["+trainer.max_epochs=1"], mention="drop the +"),
        Case("cli --lr_scheduler=StepLR without --optimizer", "cli", ["fit", "--lr_scheduler=StepLR"], mention="--optimizer"),
        Case("cli --lr_scheduler.T_max=0 (divides by zero at the epoch's end)", "cli",
             ["fit", "--optimizer=Adam", "--lr_scheduler=CosineAnnealingLR", "--lr_scheduler.T_max=0"],
             mention="--lr_scheduler.T_max=0"),
        Case("cli CyclicLR over SGLD (no momentum to cycle)", "cli",
             ["fit", "--optimizer=SGLD", "--optimizer.lr=1e-7", "--lr_scheduler=CyclicLR", "--lr_scheduler.base_lr=1e-8",
              "--lr_scheduler.max_lr=1e-6"], mention="--lr_scheduler (CyclicLR)"),
        Case("cli --model.mis_steps without a value", "cli", ["fit", "--model.mis_steps"], mention="--model.mis_steps"),
        Case("hydra optimizer.lr=-1", "hydra", ["optimizer.lr=-1"], mention="optimizer (Adam)"),
        Case("hydra scheduler=step scheduler.step_size=0", "hydra", ["scheduler=step", "scheduler.step_size=0"],
             mention="scheduler.step_size=0"),
        Case("cli test without --ckpt_path", "cli", ["test"], mention="--ckpt_path"),
        Case("cli --max_steps=3 (the Trainer's without its group)", "cli", ["fit", "--max_steps=3"], mention="--trainer.max_steps"),
        Case("cli --optimizer=Adamw (a class misspelt)", "cli", ["fit", "--optimizer=Adamw"], mention="AdamW"),
        Case("cli --model.optimizer.weight_decay=0.1 without its class", "cli", ["fit", "--model.optimizer.weight_decay=0.1"],
             mention="--model.optimizer=CLASS"),
        Case("cli test --weights_only=false", "cli", ["test", "--weights_only=false"], mention="LATENT_ZOO_TRUST"),
        Case("hydra -cd DIR that does not exist", "hydra", ["-cd", "nodir"], mention="--config-dir"),
        Case("hydra -cn NAME that does not exist", "hydra", ["-cn", "trian"], mention="did you mean train"),
        Case("hydra ckpt_path=epoch=0-step=3.ckpt (an unquoted =)", "hydra", ["ckpt_path=runs/epoch=0-step=3.ckpt"],
             mention="quote"),
        Case("hydra trainer.default_root_dir with a logger", "hydra", ["trainer.default_root_dir=runs"], mention="log_dir=runs"),
        Case("cli --trainer.default_root_dir with a logger", "cli", ["fit", "--trainer.default_root_dir=runs"],
             mention="--log_dir=runs"),
        # replicas: the seeds, the arms, what cannot be replicated
        Case("hydra replicas.seeds=3", "hydra", ["replicas.seeds=3"], mention="replicas.seeds"),
        Case("hydra replicas.seeds with a seed repeated", "hydra", ["replicas.seeds=[0,0]"], mention="repeated"),
        Case("hydra replicas.seed=[0] (misspelt)", "hydra", ["replicas.seed=[0]"], mention="replicas.seeds"),
        Case("hydra replicas.arms set a non-gating setting", "hydra", ["replicas.seeds=[0,1]", "replicas.arms=[{{mis_steps:3}}]"],
             mention="mis_steps"),
        Case("hydra replicas of VQ-VAE", "hydra", ["model=vqvae", "replicas.seeds=[0,1]"], mention="VQVAE"),
        Case("hydra replicas with chain_rows=distinct", "hydra", ["replicas.seeds=[0,1]", "model.chain_rows=distinct"],
             mention="chain_rows"),
        Case("cli --replicas.seeds=x", "cli", ["fit", "--replicas.seeds=x"], mention="--replicas.seeds"),
        Case("cli --replicas.arms={key:value} without a space", "cli", ["fit", "--replicas.seeds=[0,1]",
             "--replicas.arms=[{{cache_start_epoch:3}}]"], mention="space after the colon"),
        Case("cli test with --replicas.seeds", "cli", ["test", "--replicas.seeds=[0,1]", "--fresh_weights=true"],
             mention="--replicas.seeds"),
    ]


def data_cases() -> list[Case]:
    cases = [Case("hydra DATA_DIR empty, no network", "data", [], data="empty", mention="MNIST"),
             Case("cli DATA_DIR empty, no network", "data", ["fit"], data="empty", mention="MNIST")]
    for variant, _ in MNIST_CORRUPTIONS:
        cases.append(Case(f"hydra MNIST {variant}", "data", [], data=variant, mention="train-images-idx3-ubyte",
                          quick=variant == "truncated train images"))
    cases.append(Case("cli MNIST truncated train images", "data", ["fit"], data="truncated train images",
                      mention="train-images-idx3-ubyte"))
    for front_end, args in (("hydra", ["data=fashion_mnist"]), ("cli", ["fit", "--data=FashionMNISTDataModule"])):
        cases.append(Case(f"{front_end} Fashion-MNIST DATA_DIR empty (no network)", "data", args, data="empty", mention="FashionMNIST"))
        cases.append(Case(f"{front_end} Fashion-MNIST truncated train images", "data", args, data="fashion truncated train images",
                          mention="FashionMNIST/raw/train-images-idx3-ubyte"))
    for variant in CIFAR_CORRUPTIONS:
        cases.append(Case(f"hydra CIFAR-10 {variant}", "data", ["data=cifar10"], data=f"cifar {variant}", mention="data_batch_1"))
    return cases


def checkpoint_cases() -> list[Case]:
    hydra = ["model=jsa"]
    return [
        Case("hydra ckpt_path missing", "checkpoint", [*hydra, "ckpt_path=nope.ckpt"], mention="nope.ckpt"),
        Case("hydra ckpt_path a directory", "checkpoint", [*hydra, "ckpt_path=adir"], mention="adir"),
        Case("hydra ckpt_path empty file", "checkpoint", [*hydra, "ckpt_path={root}/empty.ckpt"], mention="empty.ckpt"),
        Case("hydra ckpt_path garbage", "checkpoint", [*hydra, "ckpt_path={root}/garbage.ckpt"], mention="garbage.ckpt"),
        Case("hydra ckpt_path truncated", "checkpoint", [*hydra, "ckpt_path={root}/truncated.ckpt"], mention="truncated.ckpt"),
        Case("hydra ckpt_path a flipped byte", "checkpoint", [*hydra, "ckpt_path={root}/flipped.ckpt"], mention="flipped.ckpt"),
        Case("hydra ckpt_path without its .sha256 (loads)", "checkpoint", [*hydra, "ckpt_path={root}/nosidecar.ckpt",
                                                                           "trainer.max_steps=3"],
             expect="documented", documented_by="Restored all states"),
        Case("hydra a VAE checkpoint resumed as JSA", "checkpoint", [*hydra, "ckpt_path={vae}"], mention="VAE"),
        Case("cli fit --ckpt_path garbage", "checkpoint", ["fit", "--ckpt_path={root}/garbage.ckpt"], mention="garbage.ckpt"),
        Case("cli fit --ckpt_path missing", "checkpoint", ["fit", "--ckpt_path=nope.ckpt"], mention="nope.ckpt"),
        Case("cli test --model=VAE on a JSA checkpoint", "checkpoint", ["test", "--model=VAE", "--ckpt_path={jsa}"], mention="JSA",
             quick=True),
        Case("cli test on a flipped checkpoint", "checkpoint", ["test", "--ckpt_path={root}/flipped.ckpt"], mention="flipped.ckpt"),
        Case("library load_from_checkpoint(garbage)", "library",
             ["-c", "from models import JSA\nJSA.load_from_checkpoint('{root}/garbage.ckpt')"], mention="garbage.ckpt"),
        Case("library JSA.load_from_checkpoint(a VAE's)", "library",
             ["-c", "from models import JSA\nJSA.load_from_checkpoint('{vae}')"], mention="VAE"),
        Case("library MNISTDataModule(batch_size=0)", "library",
             ["-c", "from datamodules import MNISTDataModule\nMNISTDataModule(batch_size=0)"], mention="batch_size"),
    ]


def resume_cases() -> list[Case]:
    resume = ["model=jsa", "ckpt_path={jsa}", "trainer.max_steps=4"]
    return [
        Case("resume model.num_latents changed", "resume", [*resume, "model.num_latents=5"], mention="num_latents", copy_runs=True),
        Case("resume model.num_categories changed", "resume", [*resume, "model.num_categories=4"], mention="num_categories",
             copy_runs=True),
        Case("resume model.use_cache=false", "resume", [*resume, "model.use_cache=false"], mention="use_cache", copy_runs=True),
        Case("hydra a checkpoint folder holding another run's checkpoints", "resume",
             ["model=vae", "+callbacks.model_checkpoint.dirpath=ck"], mention="another run's checkpoints",
             files=(("ck/last.ckpt", "another run's"),)),
        Case("cli a checkpoint folder holding another run's checkpoints", "resume",
             ["fit", "--model=VAE", "--checkpoint.dirpath=ck"], mention="another run's checkpoints",
             files=(("ck/last.ckpt", "another run's"),)),
        Case("resume in a sweep of model.lr (one run resumed in turn)", "resume", ["-m", *resume, "model.lr=0.001,0.01"],
             mention="in a sweep", copy_runs=True),
        Case("resume data.val_size changed (cache size)", "resume", [*resume, "data.val_size=300"], mention="val_size", copy_runs=True),
        Case("resume optimizer=sgld on Adam's state", "resume", [*resume, "optimizer=sgld"], mention="SGLD", copy_runs=True),
        Case("resume model.lr changed", "resume", [*resume, "model.lr=0.0005"], expect="documented",
             documented_by="model.lr: 0.001 -> 0.0005", copy_runs=True, quick=True),
        Case("resume model.mis_steps changed", "resume", [*resume, "model.mis_steps=3"], expect="documented",
             documented_by="model.mis_steps: 2 -> 3", copy_runs=True),
        Case("resume data.batch_size changed", "resume", [*resume, "data.batch_size=8"], expect="documented",
             documented_by="data.batch_size: 16 -> 8", copy_runs=True),
        Case("cli resume --model.num_latents changed", "resume", ["fit", "--ckpt_path={jsa}", "--model.num_latents=5"],
             mention="num_latents", copy_runs=True),
        Case("cli resume --data.val_size changed", "resume", ["fit", "--ckpt_path={jsa}", "--data.val_size=300"],
             mention="val_size", copy_runs=True),
    ]


def stranger_cases() -> list[Case]:
    """Files and settings from elsewhere: checkpoints with code planted in them, of the wrong structure or diverged,
    checksum files in another form, URLs, interpolations that cannot resolve, run names that leave log_dir."""
    hydra = ["model=jsa"]
    return [
        Case("hydra ckpt_path with a planted payload", "checkpoint", [*hydra, "ckpt_path={root}/payload.ckpt"], mention="payload.ckpt"),
        Case("cli test --ckpt_path with a planted payload", "checkpoint", ["test", "--ckpt_path={root}/payload.ckpt"],
             mention="payload.ckpt"),
        Case("hydra ckpt_path a URL", "checkpoint", [*hydra, "ckpt_path=http://127.0.0.1:9/last.ckpt"], mention="URL"),
        Case("cli fit --ckpt_path a URL", "checkpoint", ["fit", "--ckpt_path=http://127.0.0.1:9/last.ckpt"], mention="URL"),
        Case("hydra ckpt_path with NaN weights", "checkpoint", [*hydra, "ckpt_path={root}/nan.ckpt"], mention="nan.ckpt"),
        Case("cli test --ckpt_path with NaN weights", "checkpoint", ["test", "--ckpt_path={root}/nan.ckpt"], mention="nan.ckpt"),
        Case("hydra ckpt_path whose state_dict is a list", "checkpoint", [*hydra, "ckpt_path={root}/liststate.ckpt"],
             mention="liststate.ckpt"),
        Case("hydra ckpt_path with a garbled .sha256", "checkpoint", [*hydra, "ckpt_path={root}/garbledsum.ckpt"],
             mention="garbledsum.ckpt.sha256"),
        Case("hydra ckpt_path with a sha256sum-style .sha256 (loads)", "checkpoint",
             [*hydra, "ckpt_path={root}/sha256sum.ckpt", "trainer.max_steps=3"], expect="documented", documented_by="Restored all states"),
        Case("hydra model.lr an interpolation that cannot resolve", "hydra", ["model.lr=${{nope}}"], mention="model.lr"),
        Case("hydra seed from an unset environment variable", "hydra", ["seed=${{oc.env:LATENT_ZOO_UNSET}}"], mention="seed"),
        Case("hydra run_name reaching outside log_dir", "hydra", ["run_name=../../outside"], mention="run_name", quick=True),
        Case("hydra log_dir an immutable directory (read-only even for root)", "hydra", ["log_dir={root}/locked/runs"],
             mention="cannot be written to"),
    ]


def all_cases() -> list[Case]:
    return (option_cases() + front_end_cases() + data_cases() + checkpoint_cases() + resume_cases() + stranger_cases()
            + received_cases() + structure_cases() + config_source_cases() + run_folder_cases())


def received_cases() -> list[Case]:
    """The received-file families: what a colleague's checkpoint, run, config or data file must never do here (remove the
    user's files, import a planted module, write through a link, hang, crash with a traceback)."""
    resume = ["model=jsa", "ckpt_path={planted}", "trainer.max_steps=4"]
    cli_fast = ["--trainer.limit_test_batches=1", "--model.test_num_samples=2"]
    outside = "outside this run's checkpoint directory"
    cases = []
    for plant in ("last_model_path via ..", "last_model_path absolute", "kth_best_model_path", "best_k_models",
                  "best_model_path", "last_model_path the working directory", "last_model_path a number",
                  "last_model_path a link to the user's file"):
        cases.append(Case(f"received delete: resume; ModelCheckpoint {plant} outside the run (victim)", "resume", resume,
                          expect="documented", documented_by=outside, copy_runs=True, plant=f"callback {plant}"))
    cases.append(Case("received delete: cli fit --ckpt_path; last_model_path outside the run (victim)", "resume",
                      ["fit", "--ckpt_path={planted}", "--trainer.max_steps=4"], expect="documented", documented_by=outside,
                      copy_runs=True, plant="callback last_model_path absolute"))
    for where in ("optimizer.class_path", "prior.init_args.class_path", "_instantiator", "likelihood._target_",
                  "_class_path", "datamodule class_path"):
        cases.append(Case(f"received import: cli test; hyper_parameters {where} a planted module (payload)", "checkpoint",
                          ["test", "--ckpt_path={planted}", *cli_fast], mention="planted_module", copy_runs=True,
                          plant=f"import {where}"))
    cases.append(Case("received import: hydra resume; hyper_parameters optimizer.class_path (payload)", "checkpoint", resume,
                      mention="planted_module", copy_runs=True, plant="import optimizer.class_path"))
    for where in ("optimizer.class_path", "_instantiator"):
        cases.append(Case(f"received import: library load_from_checkpoint; {where} (payload)", "library",
                          ["-c", "from models import JSA\nJSA.load_from_checkpoint('{planted}')"], mention="planted_module",
                          copy_runs=True, plant=f"import {where}"))
    for name, text in (("trainer.callbacks", "trainer:\n  callbacks:\n    - class_path: planted_module.Thing\n"),
                       ("model class_path", "model:\n  class_path: planted_module.Thing\n"),
                       ("trainer.logger", "trainer:\n  logger:\n    class_path: planted_module.Thing\n"),
                       ("model.init_args nested", "model:\n  class_path: models.JSA\n  init_args:\n    x:\n"
                                                  "      class_path: planted_module.Thing\n")):
        cases.append(Case(f"received import: cli fit -c a config naming {name} (payload)", "cli",
                          ["fit", "-c", f"{{root}}/configs/{name.replace(' ', '_')}.yaml"], mention="planted_module"))
    for link in ("hparams.yaml", "hparams.yaml dangling", ".owner", "hydra_job.yaml"):
        cases.append(Case(f"received link: hydra resume; the run's {link} a link (victim)", "resume", resume,
                          mention="as a link", copy_runs=True, plant=f"link {link}"))
    cases.append(Case("received link: cli fit resume; the run's config.yaml a link (victim)", "resume",
                      ["fit", "--ckpt_path={planted}", "--trainer.max_steps=4"], mention="as a link", copy_runs=True,
                      plant="link config.yaml"))
    cases.append(Case("received link: cli test; the run's config_test.yaml a link (victim)", "resume",
                      ["test", "--ckpt_path={planted}", *cli_fast], mention="as a link", copy_runs=True,
                      plant="link config_test.yaml"))
    for variant in RECEIVED_DATA:
        cases.append(Case(f"received input: hydra MNIST {variant}", "data", [], data=variant, mention="not a regular file"))
    cases.append(Case("received input: cli MNIST train images a named pipe", "data", ["fit"], data=RECEIVED_DATA[0],
                      mention="not a regular file"))
    for name, mention in (("alias bomb", "aliases expand"), ("deep", "nested too deeply"), ("large", "bytes, more than"),
                          ("pipe", "not a regular file")):
        cases.append(Case(f"received input: cli fit -c a config file; {name}", "cli",
                          ["fit", "-c", f"{{root}}/configs/{name.replace(' ', '_')}.yaml"], mention=mention))
    cases.append(Case("received input: hydra -cd experiment=bomb (alias bomb)", "hydra",
                      ["-cd", "{root}/hydra-configs", "experiment=bomb"], mention="aliases expand", fast=False))
    cases.append(Case("received input: hydra hydra.searchpath experiment=bomb (alias bomb)", "hydra",
                      ["hydra.searchpath=[file://{root}/hydra-configs]", "experiment=bomb"], mention="aliases expand", fast=False))
    cases.append(Case("received input: hydra ckpt_path declaring a compressed 512 MB tensor", "checkpoint",
                      ["model=jsa", "ckpt_path={root}/declared.ckpt"], mention="declares"))
    cases.append(Case("received input: cli test --ckpt_path declaring a compressed 512 MB tensor", "checkpoint",
                      ["test", "--ckpt_path={root}/declared.ckpt", *cli_fast], mention="declares"))
    cases.append(Case("received input: hydra ckpt_path a named pipe", "checkpoint", ["model=jsa", "ckpt_path={root}/pipe.ckpt"],
                      mention="not a regular file"))
    cases.append(Case("received input: hydra ckpt_path with a 10 MB .sha256 of no digest", "checkpoint",
                      ["model=jsa", "ckpt_path={root}/bigsum.ckpt"], mention="bigsum.ckpt.sha256"))
    for value in ("inf", "nan"):
        cases.append(Case(f"received diverge: hydra model.lr={value}", "hydra", ["model=jsa", f"model.lr={value}"], mention="lr"))
    cases.append(Case("received diverge: cli --model.lr=inf", "cli", ["fit", "--model.lr=inf"], mention="lr"))
    for model in ("jsa", "rws", "vimco", "dvae"):
        cases.append(Case(f"received diverge: hydra {model} model.lr=1e308 (NaN weights after one step)", "hydra",
                          [f"model={model}", "model.lr=1e308", "trainer.max_steps=4", "trainer.limit_train_batches=4"],
                          expect="stopped", mention="became NaN or inf"))
    for damage in ("NaN", "shape"):
        cases.append(Case(f"received diverge: resume; optimizer state {damage}", "resume", resume, mention="the optimizer's",
                          copy_runs=True, plant=f"optimizer {damage}"))
    for front_end, prefix, args in (("hydra", "", []), ("cli", "--", ["fit"])):
        for key, value, mention in (("gradient_clip_val", "-1", "gradient_clip_val"), ("precision", "64-true", "precision"),
                                    ("val_check_interval", "100000", "val_check_interval")):
            cases.append(Case(f"received settings: {front_end} trainer.{key}={value}", front_end,
                              [*args, f"{prefix}trainer.{key}={value}"], mention=mention))
    for value in ("-1", str(2**64)):
        cases.append(Case(f"received settings: cli --seed_everything={value}", "cli", ["fit", f"--seed_everything={value}"],
                          mention="seed_everything"))
    for damage in ("cache codes out of range", "cache codes negative", "cache codes float", "changed_epoch garbage",
                   "data-loader position past the split", "loop state garbage", "random state garbage"):
        mention = {"data-loader position past the split": "data-loader position", "loop state garbage": "epoch_progress",
                   "random state garbage": "rng_states"}.get(damage, "cache.")
        cases.append(Case(f"received state: resume; {damage}", "resume", resume, mention=mention, copy_runs=True,
                          plant=f"state {damage}"))
    cases.append(Case("received state: cli test --ckpt_path a state_dict-only file", "checkpoint",
                      ["test", "--ckpt_path={root}/weights-only.ckpt", *cli_fast], mention="weights only"))
    cases.append(Case("received state: hydra ckpt_path a state_dict-only file", "checkpoint",
                      ["model=jsa", "ckpt_path={root}/weights-only.ckpt"], mention="weights only"))
    cases.append(Case("received settings: hydra log_dir from an unset environment variable", "hydra",
                      ["log_dir=${{oc.env:LATENT_ZOO_UNSET_DIR}}"], mention="LATENT_ZOO_UNSET_DIR"))
    return cases


def run_folder_cases() -> list[Case]:
    """Received runs and study folders: a folder of a run or of a study that is a link to the user's folder (victim/),
    a run's file that is a hard link to the user's file, a FIFO or a folder, a study's records folder holding JSON of
    another kind. Nothing written through a link or into the user's file, nothing removed outside, nothing waited on."""
    resume = ["model=jsa", "ckpt_path={planted}", "trainer.max_steps=4"]
    outside, restored = "leads through a symbolic link", "Restored all states"
    cases = [
        Case("received run folder: hydra; <log_dir>/tensorboard a link to the user's folder (victim)", "hydra", ["model=jsa"],
             mention=outside, files=(("logs/tensorboard", "<link:../victim>"),), quick=True),
        Case("received run folder: hydra; Hydra's <log_dir>/hydra/<run_name> a link (victim)", "hydra", ["model=jsa"],
             mention=outside, files=(("logs/hydra/jsa-mnist", "<link:../../victim>"),)),
        Case("received run folder: cli fit; the run-name folder a link (victim)", "cli", ["fit"], mention=outside,
             files=(("logs/tensorboard/jsa-mnist-mlp-K10-L20", "<link:../../victim>"),)),
        Case("received run folder: cli fit without a logger; the process folder's run name a link (victim)", "cli",
             ["fit", "--trainer.logger=false"], mention=outside, files=(("logs/cli/jsa-mnist-mlp-K10-L20", "<link:../../victim>"),)),
    ]
    for name in (".owner", "hparams.yaml"):
        for kind, what in (("hardlink", "a hard link to the user's file"), ("fifo", "a FIFO")):
            cases.append(Case(f"received run file: hydra resume; the run's {name} {what} (victim)", "resume", resume,
                              expect="documented", documented_by=restored, copy_runs=True, plant=f"{kind} {name}"))
    for kind, what in (("hardlink", "a hard link to the user's file"), ("fifo", "a FIFO")):
        cases.append(Case(f"received run file: cli fit resume; the run's config.yaml {what} (victim)", "resume",
                          ["fit", "--ckpt_path={planted}", "--trainer.max_steps=4"], expect="documented", documented_by=restored,
                          copy_runs=True, plant=f"{kind} config.yaml"))
    for name in (".owner", "hparams.yaml", "hydra_job.yaml"):
        cases.append(Case(f"received run file: hydra resume; the run's {name} a folder", "resume", resume, mention="as a folder",
                          copy_runs=True, plant=f"folder {name}"))
    compare = "from benchmarks.compare import main\nmain(['logs/tensorboard', '--out', 'report', '--all'])"
    for name in ("events", "hydra_job.yaml"):
        cases.append(Case(f"received run file: benchmarks.compare; a run's {name} a FIFO", "study", ["-c", compare],
                          expect="documented", documented_by="skipped", copy_runs=True, plant=f"fifo {name}"))
    report_only = "from benchmarks.studies.verdict_study import main\nmain(['--report-only', '--out', 'out', '--logs', 'logs'])"
    cache_run = ("from benchmarks.studies.cache.study import main\nmain(['--only', 'L20-never-s0', '--models', 'L20', '--out', "
                 "'out', '--logs', 'study-logs', 'trainer.max_steps=2', 'trainer.limit_val_batches=1', "
                 "'trainer.limit_test_batches=1', 'model.val_num_samples=2', 'model.test_num_samples=2'])")
    cases += [
        Case("received study folder: cache study; a run's folder under --logs a link to the user's folder (victim)", "study",
             ["-c", cache_run], mention=outside, files=(("study-logs/L20-never-s0", "<link:../victim>"),
                                                        ("victim/tensorboard/x/version_0/notes.txt", "years of work"))),
        Case("received study folder: verdict study --report-only; --out/runs a link to the user's folder (victim)", "study",
             ["-c", report_only], mention=outside, files=(("out/runs", "<link:../victim>"),)),
        Case("received study folder: verdict study --report-only; report.md a link to the user's file (victim)", "study",
             ["-c", report_only], expect="documented", documented_by="report:", files=(("out/report.md", "<link:../victim/notes.txt>"),)),
        Case("received study folder: verdict study --report-only; report.md a hard link to the user's file (victim)", "study",
             ["-c", report_only], expect="documented", documented_by="report:",
             files=(("out/report.md", "<hardlink:../victim/notes.txt>"),)),
        Case("received study folder: verdict study --report-only; --out/runs holding JSON of another kind", "study",
             ["-c", report_only], expect="documented", documented_by="not a run's record",
             files=(("out/runs/is-resolution.json", '{"settings": {"images": 500}, "runs": {}}'),)),
    ]
    return cases


def structure_cases() -> list[Case]:
    """A received checkpoint of the wrong structure (STRUCTURE_PLANTS: a section of another kind, a tensor that is not
    dense real numbers or not the kind of number the model holds, cache codes outside the codebook), each refused in one
    line naming the checkpoint and the key; and a resume from the best checkpoint beside a garbage last.ckpt.sha256."""
    resume = ["model=jsa", "ckpt_path={planted}", "trainer.max_steps=4"]
    commands = {"hydra resume": resume, "cli fit --ckpt_path": ["fit", "--ckpt_path={planted}", "--trainer.max_steps=4"],
                "cli test --ckpt_path": ["test", "--ckpt_path={planted}", "--trainer.limit_test_batches=1",
                                         "--model.test_num_samples=2"]}
    both = ("hyper_parameters a list", "ModelCheckpoint's state a string", "a sparse weight", "meta cache codes", "an integer weight",
            "a model setting the class does not take")
    cases = [Case(f"received structure: {command}; {what}", "resume" if command == "hydra resume" else "checkpoint",
                  args, mention=f"received.ckpt: {named}", copy_runs=True, plant=f"structure {what}")
             for what, named in STRUCTURE_PLANTS.items() for command, args in commands.items()
             if command == "hydra resume" or what in both]
    cases.append(Case("received structure: hydra resume of replicas; int64 cache codes outside the codebook", "resume",
                      ["model=jsa", "replicas.seeds=[0,1]", "ckpt_path={planted}", "trainer.max_steps=4"],
                      mention="stacked/cache/codes (JSA's cache) hold 1 value(s) outside", copy_runs=True,
                      plant="replicas cache codes 300"))
    cases.append(Case("received structure: hydra resume from the best checkpoint beside a garbage last.ckpt.sha256", "resume",
                      ["model=jsa", "ckpt_path={planted}", "trainer.max_steps=4"], expect="documented",
                      documented_by="Restored all states", copy_runs=True, plant="checksum of last.ckpt garbage"))
    return cases


BOMB = "".join(f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 9) if i else ', '.join(['x'] * 9)}]\n"
               for i in range(9))  # nine levels of nine aliases: 9**9 strings once expanded, 600 bytes on disk
# A module that a received config or checkpoint names: importing it writes STRANGER-RAN into the working directory
# of the process that imported it, so that each case sees its own (run_case: outcome "ran").
STRANGERS_MODULE = ("import os\nopen(os.path.join(os.getcwd(), 'STRANGER-RAN'), 'w').close()\n"
                    "def make(params):\n    import torch\n    return torch.optim.Adam(params)\nclass Thing:\n    pass\n")
STRANGER_MARKER = "STRANGER-RAN"


def config_source_cases() -> list[Case]:
    """Every way a config's or a checkpoint's settings reach jsonargparse or Hydra, each naming
    strangers_module (on the path, as '.' is for many users): refused before anything imports it, in one line that
    names the file and the key. The received files are written into the case's directory (`files`)."""
    def cli(name: str, args: list[str], mention: str, files: dict[str, str], quick: bool = False) -> Case:
        return Case(f"received source: {name}", "cli", args, mention=mention, files=tuple(files.items()), fast=False, quick=quick)

    def model_with(setting: str) -> str:
        return f"model:\n  class_path: models.JSA\n  init_args:\n    {setting}\n"

    optimizer = model_with("optimizer: strangers_module.make")
    thing = "model:\n  class_path: strangers_module.Thing\n"
    cases = [  # the bypasses the issue found
        cli("cli -c; a Callable option as a dotted string", ["fit", "-c", "received.yaml"], "model.init_args.optimizer",
            {"received.yaml": optimizer}, quick=True),
        cli("cli -c; a LambdaCallback hook as a dotted name", ["fit", "-c", "received.yaml"], "init_args.on_fit_start",
            {"received.yaml": "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
                              "      init_args:\n        on_fit_start: strangers_module.make\n"}),
        cli("cli -c; a callback as a plain string", ["fit", "-c", "received.yaml"], "trainer.callbacks[0]",
            {"received.yaml": "trainer:\n  callbacks:\n    - strangers_module.Thing\n"}),
        cli("cli -c; a logger as a plain string", ["fit", "-c", "received.yaml"], "trainer.logger",
            {"received.yaml": "trainer:\n  logger: strangers_module.Thing\n"}),
        cli("cli -c; model: sub.yaml (a nested file)", ["fit", "-c", "received.yaml"], "sub.yaml",
            {"received.yaml": "model: sub.yaml\n", "sub.yaml": "class_path: strangers_module.Thing\n"}),
        cli("cli -c; trainer: laughs.yaml (a nested alias bomb)", ["fit", "-c", "received.yaml"], "laughs.yaml",
            {"received.yaml": "trainer: laughs.yaml\n", "laughs.yaml": BOMB}),
        cli("cli fit --model=received_model.yaml", ["fit", "--model=received_model.yaml"], "received_model.yaml",
            {"received_model.yaml": "class_path: strangers_module.Thing\n"}),
        cli("cli -cFILE (attached short option)", ["fit", "-creceived.yaml"], "model.class_path", {"received.yaml": thing}),
        cli("cli -c a file whose name starts with {", ["fit", "-c", "{{received.yaml"], "model.class_path", {"{received.yaml": thing}),
        Case("received source: hydra -cd; an alias bomb in a sub-folder of experiment/", "hydra",
             ["-cd", "received", "experiment=sub/bomb"], mention="bomb.yaml", fast=False,
             files=(("received/experiment/sub/bomb.yaml", "# @package _global_\n" + BOMB),)),
        # further spellings
        cli("cli --config=FILE", ["fit", "--config=received.yaml"], "model.init_args.optimizer", {"received.yaml": optimizer}),
        cli("cli --config FILE", ["fit", "--config", "received.yaml"], "model.init_args.optimizer", {"received.yaml": optimizer}),
        cli("cli -c=FILE", ["fit", "-c=received.yaml"], "model.init_args.optimizer", {"received.yaml": optimizer}),
        cli("cli --conf=FILE (an abbreviation)", ["fit", "--conf=received.yaml"], "model.class_path", {"received.yaml": thing}),
        cli("cli --data=FILE", ["fit", "--data=received_data.yaml"], "received_data.yaml",
            {"received_data.yaml": "class_path: strangers_module.Thing\n"}),
        cli("cli --trainer=FILE naming a callback", ["fit", "--trainer=received_trainer.yaml"], "callbacks[0]",
            {"received_trainer.yaml": "callbacks:\n  - strangers_module.Thing\n"}),
        cli("cli --trainer.callbacks=FILE", ["fit", "--trainer.callbacks=received_callbacks.yaml"], "received_callbacks.yaml",
            {"received_callbacks.yaml": "- class_path: strangers_module.Thing\n"}),
        cli("cli -c; a YAML tag !!python/name", ["fit", "-c", "received.yaml"], "python/name",
            {"received.yaml": model_with("optimizer: !!python/name:strangers_module.make ''")}),
        cli("cli -c; a YAML tag !!python/object/apply", ["fit", "-c", "received.yaml"], "python/object/apply",
            {"received.yaml": "trainer: !!python/object/apply:strangers_module.make [[]]\n"}),
        cli("cli -c; a merge key <<: bringing in a class_path", ["fit", "-c", "received.yaml"], "class_path",
            {"received.yaml": "base: &base\n  class_path: strangers_module.Thing\nmodel:\n  <<: *base\n"}),
        cli("cli -c; a dotted key model.init_args.optimizer", ["fit", "-c", "received.yaml"], "model.init_args.optimizer",
            {"received.yaml": "model: JSA\nmodel.init_args.optimizer: strangers_module.make\n"}),
        cli("cli -c; a look-alike torch.optіm.Adam (Cyrillic і)", ["fit", "-c", "received.yaml"], "model.init_args.optimizer",
            {"received.yaml": model_with("optimizer: torch.opt\u0456m.Adam")}),
        cli("cli -c; a look-alike mоdels.JSA class_path (Cyrillic о)", ["fit", "-c", "received.yaml"], "model.class_path",
            {"received.yaml": "model:\n  class_path: m\u043edels.JSA\n"}),
        cli("cli -c; a full-width dot strangers_module．make", ["fit", "-c", "received.yaml"], "model.init_args.optimizer",
            {"received.yaml": model_with("optimizer: strangers_module\uff0emake")}),
        cli("cli -c; a dotted name with spaces and a trailing blank", ["fit", "-c", "received.yaml"], "model.init_args.optimizer",
            {"received.yaml": model_with("optimizer: 'strangers_module.make '")}),
        cli("cli -c; a class given as YAML inside a string", ["fit", "-c", "received.yaml"], "model.class_path",
            {"received.yaml": "model: '{\"class_path\": \"strangers_module.Thing\"}'\n"}),
        cli("cli -c; the optimizer as a class_path mapping", ["fit", "-c", "received.yaml"], "optimizer.class_path",
            {"received.yaml": model_with("optimizer:\n      class_path: strangers_module.Thing")}),
        cli("cli -c; trainer.plugins a plain string", ["fit", "-c", "received.yaml"], "trainer.plugins",
            {"received.yaml": "trainer:\n  plugins: strangers_module.Thing\n"}),
        cli("cli -c; trainer.profiler a plain string", ["fit", "-c", "received.yaml"], "trainer.profiler",
            {"received.yaml": "trainer:\n  profiler: strangers_module.Thing\n"}),
        cli("cli -c; a nested file in a callbacks list", ["fit", "-c", "received.yaml"], "callback.yaml",
            {"received.yaml": "trainer:\n  callbacks:\n    - callback.yaml\n", "callback.yaml": "class_path: strangers_module.Thing\n"}),
        cli("cli -c; a nested file three levels down", ["fit", "-c", "received.yaml"], "c.yaml",
            {"received.yaml": "model: a.yaml\n", "a.yaml": "class_path: models.JSA\ninit_args: b.yaml\n",
             "b.yaml": "prior: c.yaml\n", "c.yaml": "class_path: strangers_module.Thing\n"}),
        cli("cli -c; a nested file that names itself (a loop)", ["fit", "-c", "received.yaml"], "loop.yaml",
            {"received.yaml": "model: loop.yaml\n", "loop.yaml": "class_path: models.JSA\ninit_args: loop.yaml\n"}),
        cli("cli -c; a nested file that is a named pipe", ["fit", "-c", "received.yaml"], "pipe.yaml",
            {"received.yaml": "model: pipe.yaml\n", "pipe.yaml": "<fifo>"}),
        cli("cli -c; a nested file that links to /dev/zero", ["fit", "-c", "received.yaml"], "zero.yaml",
            {"received.yaml": "trainer: zero.yaml\n", "zero.yaml": "<link:/dev/zero>"}),
        cli("cli -c a link to a config naming a stranger", ["fit", "-c", "link.yaml"], "model.class_path",
            {"real.yaml": thing, "link.yaml": "<link:real.yaml>"}),
        cli("cli -c a link to /dev/zero", ["fit", "-c", "link.yaml"], "not a regular file", {"link.yaml": "<link:/dev/zero>"}),
        cli("cli -c a dangling link", ["fit", "-c", "link.yaml"], "link.yaml", {"link.yaml": "<link:gone.yaml>"}),
        cli("cli -c a named pipe", ["fit", "-c", "pipe.yaml"], "not a regular file", {"pipe.yaml": "<fifo>"}),
        cli("cli -c a directory", ["fit", "-c", "folder.yaml"], "folder.yaml", {"folder.yaml": "<dir>"}),
        cli("cli -c inline YAML naming a nested file", ["fit", "-c", '{{"model": "sub.yaml"}}'], "sub.yaml",
            {"sub.yaml": "class_path: strangers_module.Thing\n"}),
        Case("received source: hydra --config-dir=DIR; a defaults list overriding a group with a stranger's _target_",
             "hydra", ["--config-dir=received", "experiment=deep/er/x"], mention="_target_", fast=False,
             files=(("received/experiment/deep/er/x.yaml", "# @package _global_\ndefaults:\n  - override /logger: evil\n"),
                    ("received/logger/evil.yaml", "_target_: strangers_module.Thing\n"))),
        cli("cli -c; a hook that is a LightningCLI parsing a stranger's class", ["fit", "-c", "received.yaml"],
            "init_args.on_fit_start.class_path",
            {"received.yaml": "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
                              "      init_args:\n        on_fit_start:\n          class_path: lightning.pytorch.cli.LightningCLI\n"
                              "          init_args:\n            args: ['--model=strangers_module.Thing']\n"}),
        Case("received source: hydra -cd; a _target_ hydra.utils.get_class importing a stranger's module", "hydra",
             ["-cd", "received", "+experiment=getter"], mention="_target_", fast=False,
             files=(("received/experiment/getter.yaml", "# @package _global_\nfound:\n  _target_: hydra.utils.get_class\n"
                                                       "  path: strangers_module.Thing\n"),)),
        Case("received source: hydra hydra.searchpath; an alias bomb in a sub-folder", "hydra",
             ["hydra.searchpath=[file://received]", "experiment=sub/bomb"], mention="bomb.yaml", fast=False,
             files=(("received/experiment/sub/bomb.yaml", "# @package _global_\n" + BOMB),)),
    ]
    # A received checkpoint whose settings give the optimizer as a dotted string (plant: "import optimizer dotted").
    cli_fast = ["--trainer.limit_test_batches=1", "--trainer.limit_val_batches=1", "--model.test_num_samples=2",
                "--model.val_num_samples=2"]
    for where in ("", " in init_args"):
        plant = f"import optimizer dotted{where}"
        for command in ("test", "validate"):
            cases.append(Case(f"received source: cli {command} --ckpt_path; hyper_parameters optimizer a dotted string{where}",
                              "checkpoint", [command, "--ckpt_path={planted}", *cli_fast], mention="optimizer",
                              copy_runs=True, plant=plant, fast=False))
        cases.append(Case(f"received source: library load_from_checkpoint; optimizer a dotted string{where}", "library",
                          ["-c", "from models import JSA\nJSA.load_from_checkpoint('{planted}')"], mention="optimizer",
                          copy_runs=True, plant=plant))
    cases.append(Case("received source: hydra resume; hyper_parameters optimizer a dotted string", "checkpoint",
                      ["model=jsa", "ckpt_path={planted}", "trainer.max_steps=4"], mention="optimizer", copy_runs=True,
                      plant="import optimizer dotted"))
    cases.append(Case("received source: cli fit --ckpt_path; hyper_parameters optimizer a dotted string", "checkpoint",
                      ["fit", "--ckpt_path={planted}", "--trainer.max_steps=4"], mention="optimizer", copy_runs=True,
                      plant="import optimizer dotted"))
    return cases


def write_received(cwd: Path, files: tuple[tuple[str, str], ...]) -> None:
    """A case's received files: text, or "<fifo>", "<dir>", "<link:TARGET>", "<hardlink:TARGET>" for a named pipe, a
    folder, a symbolic link, a hard link (TARGET relative to the file's folder)."""
    for name, text in files:
        path = cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if text == "<fifo>":
            os.mkfifo(path)
        elif text == "<dir>":
            path.mkdir()
        elif text.startswith("<link:"):
            path.symlink_to(text[len("<link:"):-1])
        elif text.startswith("<hardlink:"):
            os.link(path.parent / text[len("<hardlink:"):-1], path)
        else:
            write_file(path, text)


RECEIVED_DATA = ["train images a named pipe", "train labels a named pipe", "train images a link to /dev/zero"]
PLANTED_MODULE = "open({marker!r}, 'w').close()\nclass Thing:\n    pass\n"


STRUCTURE_PLANTS = {  # what is altered in a received checkpoint (`alter_structure`) -> the key its refusal names
    "hyper_parameters a list": "hyper_parameters is a list",
    "datamodule_hyper_parameters a string": "datamodule_hyper_parameters is a str",
    "callbacks a list": "callbacks is a list",
    "ModelCheckpoint's state a string": 'callbacks["ModelCheckpoint{',
    "the fit loop's state a string": "loops['fit_loop'] is a str",
    "optimizer_states a mapping": "optimizer_states is a dict",
    "an optimizer's state a list": "optimizer_states[0] is not an optimizer's state",
    "lr_schedulers a list of strings": "lr_schedulers[0] is a str",
    "a sparse weight": "state_dict.encoder.net.0.bias is a sparse_coo tensor",
    "a meta weight": "state_dict.encoder.net.0.bias is a meta tensor",
    "meta cache codes": "state_dict.cache.codes is a meta tensor",
    "sparse cache codes": "state_dict.cache.codes is a sparse_coo tensor",
    "a sparse Adam moment": "optimizer_states[0].state.0.exp_avg is a sparse_coo tensor",
    "a meta Adam moment": "optimizer_states[0].state.0.exp_avg is a meta tensor",
    "a complex weight": "state_dict.encoder.net.0.bias is a tensor of torch.complex64",
    "an integer weight": "state_dict.encoder.net.0.bias holds integers",
    "float cache codes": "state_dict.cache.codes holds floats",
    "a model setting the class does not take": "its model setting depth=3",
    "a data setting the class does not take": "its data setting depth=3",
}


def alter_structure(checkpoint: dict, what: str) -> None:
    """Alter `checkpoint` as STRUCTURE_PLANTS `what` says, the rest of it intact."""
    import torch

    state, adam, weight = checkpoint["state_dict"], checkpoint["optimizer_states"][0]["state"][0], "encoder.net.0.bias"
    model_checkpoint = next(key for key in checkpoint["callbacks"] if key.startswith("ModelCheckpoint"))
    changes = {
        "hyper_parameters a list": lambda: checkpoint.update(hyper_parameters=[1, 2, 3]),
        "datamodule_hyper_parameters a string": lambda: checkpoint.update(datamodule_hyper_parameters="batch_size=16"),
        "callbacks a list": lambda: checkpoint.update(callbacks=list(checkpoint["callbacks"].values())),
        "ModelCheckpoint's state a string": lambda: checkpoint["callbacks"].update({model_checkpoint: "garbage"}),
        "the fit loop's state a string": lambda: checkpoint["loops"].update(fit_loop="garbage"),
        "optimizer_states a mapping": lambda: checkpoint.update(optimizer_states=checkpoint["optimizer_states"][0]),
        "an optimizer's state a list": lambda: checkpoint["optimizer_states"][0].update(state=[1, 2]),
        "lr_schedulers a list of strings": lambda: checkpoint.update(lr_schedulers=["StepLR"]),
        "a sparse weight": lambda: state.update({weight: state[weight].to_sparse()}),
        "a meta weight": lambda: state.update({weight: torch.empty_like(state[weight], device="meta")}),
        "meta cache codes": lambda: state.update({"cache.codes": torch.empty_like(state["cache.codes"], device="meta")}),
        "sparse cache codes": lambda: state.update({"cache.codes": state["cache.codes"].to_sparse()}),
        "a sparse Adam moment": lambda: adam.update(exp_avg=adam["exp_avg"].to_sparse()),
        "a meta Adam moment": lambda: adam.update(exp_avg=torch.empty_like(adam["exp_avg"], device="meta")),
        "a complex weight": lambda: state.update({weight: state[weight].to(torch.complex64)}),
        "an integer weight": lambda: state.update({weight: state[weight].to(torch.int64)}),
        "float cache codes": lambda: state.update({"cache.codes": state["cache.codes"].float()}),
        "a model setting the class does not take": lambda: checkpoint["hyper_parameters"].update(depth=3),
        "a data setting the class does not take": lambda: checkpoint["datamodule_hyper_parameters"].update(depth=3),
    }
    changes[what]()


def plant(name: str, last: Path, cwd: Path, data_dir: Path) -> Path:
    """Alter the case's copy of the JSA run as PLANTS `name` says; returns the checkpoint the case is given."""
    import torch

    from checkpoints.file_format import save_checkpoint_file

    kind, _, what = name.partition(" ")
    if kind == "checksum":  # the best checkpoint is given; the checksum file of last.ckpt beside it holds garbage
        write_file(last.with_name(last.name + ".sha256"), "not a checksum\n")
        (best,) = last.parent.glob("epoch*.ckpt")
        return best
    if kind == "replicas":  # a replicated process's run, trained in the case's directory first
        env = {**os.environ, "DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, TRAIN, "model=jsa", "replicas.seeds=[0,1]", *HYDRA_FAST], cwd=cwd, env=env,
                       capture_output=True, check=True)
        (last,) = (cwd / "logs" / "replicas").glob("*/*/checkpoints/last.ckpt")
    checkpoint = torch.load(last, weights_only=True)
    victim = cwd / "victim"
    if kind == "structure":
        alter_structure(checkpoint, what)
    elif kind == "replicas":  # int64 codes, as a stranger writes them: 300 would wrap to 44 in the cache's uint8
        codes = checkpoint["state_dict"]["stacked/cache/codes"].long()
        codes[1, 0, 0] = int(what.rsplit(" ", 1)[-1])
        checkpoint["state_dict"]["stacked/cache/codes"] = codes
    elif kind == "callback":
        (state,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("ModelCheckpoint")]
        state.pop("dirpath")
        relative_victim = f"{last.parent.relative_to(cwd)}/../../../../../victim"
        if what == "best_k_models":
            state["best_k_models"] = {str(victim): state["kth_value"]}
        else:
            key = what.split(" ")[0]
            state[key] = {"last_model_path via ..": relative_victim, "last_model_path the working directory": str(cwd),
                          "last_model_path a number": 7}.get(what, str(victim / "notes.txt"))
            if what == "last_model_path a link to the user's file":
                (last.parent / "evil.ckpt").symlink_to(victim / "notes.txt")
                state[key] = str(last.parent / "evil.ckpt")
    elif kind == "import":
        hparams = checkpoint["hyper_parameters"]
        if what == "optimizer.class_path":
            hparams["optimizer"] = {"class_path": "planted_module.Thing"}
        elif what == "prior.init_args.class_path":
            hparams["prior"] = {"class_path": "models.JSA", "init_args": {"class_path": "planted_module.Thing"}}
        elif what == "likelihood._target_":
            hparams["likelihood"] = {"_target_": "planted_module.Thing"}
        elif what == "optimizer dotted":
            hparams["optimizer"] = "strangers_module.make"
        elif what == "optimizer dotted in init_args":  # the settings as a class_path mapping around the model's
            checkpoint["hyper_parameters"] = {"class_path": "models.JSA", "init_args": {**hparams, "optimizer": "strangers_module.make"}}
        elif what == "datamodule class_path":
            checkpoint["datamodule_hyper_parameters"] = {"_class_path": "planted_module.Thing"}
        else:
            hparams[what] = "planted_module.Thing"
            checkpoint.pop("model_class", None) if what == "_class_path" else None
    elif kind in ("link", "hardlink", "fifo", "folder"):  # a file of the run: a link, a hard link, a FIFO, a folder
        link_name, dangling = what.split(" ")[0], what.endswith("dangling")
        link = last.parents[1] / link_name
        if link_name == "events":
            (link,) = last.parents[1].glob("events.out.tfevents.*")
        link.unlink(missing_ok=True)  # safe: a file of the run this case just trained in its own temporary cwd
        if kind == "link":
            link.symlink_to(cwd / "created-outside.yaml" if dangling else victim / "notes.txt")
        elif kind == "hardlink":
            os.link(victim / "notes.txt", link)
        else:
            os.mkfifo(link) if kind == "fifo" else link.mkdir()
        return last
    elif kind == "optimizer":
        buffers = checkpoint["optimizer_states"][0]["state"][0]
        buffers["exp_avg"] = buffers["exp_avg"] * float("nan") if what == "NaN" else buffers["exp_avg"][:1]
    elif kind == "state":
        state = checkpoint["state_dict"]
        if what == "cache codes out of range":
            state["cache.codes"][0, 0] = 42
        elif what == "cache codes negative":
            state["cache.codes"] = state["cache.codes"].to(torch.int16)
            state["cache.codes"][0, 0] = -3
        elif what == "cache codes float":
            state["cache.codes"] = state["cache.codes"].float() + 0.5
        elif what == "changed_epoch garbage":
            state["cache.changed_epoch"][0] = -2**31
        elif what == "data-loader position past the split":
            checkpoint["loops"]["fit_loop"]["state_dict"] = {"combined_loader": [{"epoch": 1, "examples_done": 10**9}]}
        elif what == "loop state garbage":
            checkpoint["loops"]["fit_loop"]["epoch_progress"] = "garbage"
        else:
            checkpoint["rng_states"] = [{"cpu": torch.zeros(7)}]
    planted = last.with_name("received.ckpt")
    save_checkpoint_file(checkpoint, planted)
    return planted


def prepare_received(root: Path, data_dir: Path, jsa: Path) -> None:
    """The files received_cases need that no case alters: planted module, config files, pipes, crafted checkpoints."""
    import zipfile

    import torch

    from checkpoints.file_format import save_checkpoint_file

    write_file(root / "planted_module.py", PLANTED_MODULE.format(marker=str(root / "PAYLOAD-RAN")))
    write_file(root / "strangers_module.py", STRANGERS_MODULE)
    configs = root / "configs"
    configs.mkdir()
    bomb = "".join(f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 9) if i else ', '.join(['x'] * 9)}]\n"
                   for i in range(9))
    write_file(configs / "alias_bomb.yaml", bomb)
    write_file(configs / "deep.yaml", "a: " + "[" * 20000 + "]" * 20000 + "\n")
    write_file(configs / "large.yaml", "# padding\n" * 200_000)
    os.mkfifo(configs / "pipe.yaml")
    for name, text in (("trainer.callbacks", "trainer:\n  callbacks:\n    - class_path: planted_module.Thing\n"),
                       ("model_class_path", "model:\n  class_path: planted_module.Thing\n"),
                       ("trainer.logger", "trainer:\n  logger:\n    class_path: planted_module.Thing\n"),
                       ("model.init_args_nested", "model:\n  class_path: models.JSA\n  init_args:\n    x:\n"
                                                  "      class_path: planted_module.Thing\n")):
        write_file(configs / f"{name}.yaml", text)
    (root / "hydra-configs" / "experiment").mkdir(parents=True)
    write_file(root / "hydra-configs" / "experiment" / "bomb.yaml", "# @package _global_\n" + bomb)
    for variant in RECEIVED_DATA:
        raw = root / f"data-{variant}" / "MNIST" / "raw"
        raw.mkdir(parents=True)
        for name in MNIST_FILES:
            (raw / name).symlink_to(data_dir / "MNIST" / "raw" / name)
        target = raw / MNIST_FILES[0 if variant.startswith("train images") else 1]
        target.unlink()  # safe: the symlink this case made a line above in its own temporary data folder
        os.mkfifo(target) if "pipe" in variant else target.symlink_to("/dev/zero")
    with zipfile.ZipFile(jsa) as real, zipfile.ZipFile(root / "declared.ckpt", "w") as crafted:
        for entry in real.infolist():
            big = entry.filename.endswith("/data/0")
            crafted.writestr(entry.filename, bytes(1 << 29) if big else real.read(entry),
                             compress_type=zipfile.ZIP_DEFLATED if big else zipfile.ZIP_STORED)
    os.mkfifo(root / "pipe.ckpt")
    write_file(root / "bigsum.ckpt", jsa.read_bytes())
    write_file(root / "bigsum.ckpt.sha256", "not a digest " * 800_000)
    save_checkpoint_file({"state_dict": torch.load(jsa, weights_only=True)["state_dict"]}, root / "weights-only.ckpt")


# ---- the inputs the cases need, made once -----------------------------------------------------------

def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]


MNIST_CORRUPTIONS = [  # (variant, how the train images file is made from the real one)
    ("truncated train images", lambda data: data[: len(data) // 2]),
    ("train images with a wrong magic number", lambda data: b"\x00\x00\x08\x01" + data[4:]),
    ("train images replaced by the labels", None),  # swapped files
    ("empty train images", lambda data: b""),
    ("gzip-compressed train images", lambda data: b"\x1f\x8b" + data[2:]),
    ("train images all 0 (a valid header)", lambda data: data[:16] + bytes(len(data) - 16)),
]
FASHION_CORRUPTION = ("FashionMNIST", "fashion truncated train images", MNIST_CORRUPTIONS[0][1])  # (folder, variant, how)
CIFAR_CORRUPTIONS = ["truncated", "garbage", "wrong shape", "altered (checksum)"]


def prepare(root: Path, data_dir: Path, models: tuple[str, ...] = ("jsa", "vae")) -> None:
    """Corrupt data copies, broken checkpoints, and tiny real runs of `models` (JSA, and the VAE) to resume from;
    nothing when no model is asked for (the selected cases read none of it: `Case.runs`)."""
    if not models:
        return
    import pickle

    import numpy as np
    import torch

    (root / "data-empty").mkdir()
    for folder, variant, make in [("MNIST", variant, make) for variant, make in MNIST_CORRUPTIONS] + [FASHION_CORRUPTION]:
        real = data_dir / folder / "raw"
        raw = root / f"data-{variant}" / folder / "raw"
        raw.mkdir(parents=True)
        for name in MNIST_FILES[1:]:
            (raw / name).symlink_to(real / name)  # read only: never written through
        target = raw / MNIST_FILES[0]
        if make is None:
            write_file(target, (real / "train-labels-idx1-ubyte").read_bytes())
        else:
            write_file(target, make((real / MNIST_FILES[0]).read_bytes()))
    from datamodules.files import CifarUnpickler
    from benchmarks.robustness.fake_cifar10 import write_fake_cifar10

    for variant in CIFAR_CORRUPTIONS:
        folder_root = root / f"data-cifar {variant}"
        folder_root.mkdir()
        write_fake_cifar10(folder_root)
        batch = folder_root / "cifar-10-batches-py" / "data_batch_1"
        content = batch.read_bytes()
        if variant == "truncated":
            write_file(batch, content[: len(content) // 2])
        elif variant == "garbage":
            write_file(batch, os.urandom(len(content)))
        elif variant == "wrong shape":
            entry = CifarUnpickler(io.BytesIO(content), encoding="latin1").load()  # numpy arrays only
            entry["data"] = np.zeros((7, 100), dtype=np.uint8)
            write_file(batch, pickle.dumps(entry))
    # The tiny real runs, then broken copies of the JSA checkpoint.
    env = {**os.environ, "DATA_DIR": str(data_dir)}
    (root / "runs").mkdir()

    def train(model: str) -> subprocess.CompletedProcess:
        fast = [a for a in HYDRA_FAST if model == "jsa" or not a.startswith("model.mis_steps")]
        return subprocess.run([sys.executable, TRAIN, f"model={model}", *fast], cwd=root / "runs", env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    # Side by side (each run has its own directory), through subprocess.run: where the suite runs this module
    # (tests/benchmarks/robustness/test_bad_inputs.py), its train.py processes are forked as the cases' are.
    with ThreadPoolExecutor(max_workers=len(models)) as pool:
        runs = list(pool.map(train, models))
    for run in runs:
        if run.returncode != 0:
            raise RuntimeError(f"a run to resume from failed ({' '.join(run.args[2:4])}):\n{run.stdout[-3000:]}")
    jsa = run_checkpoint(root, "jsa")
    content = jsa.read_bytes()
    write_file(root / "empty.ckpt", b"")
    write_file(root / "garbage.ckpt", random.Random(0).randbytes(4096))
    write_file(root / "truncated.ckpt", content[: len(content) // 2])
    write_file(root / "truncated.ckpt.sha256", jsa.with_name(jsa.name + ".sha256").read_bytes())
    write_file(root / "flipped.ckpt", _flip(content))
    write_file(root / "flipped.ckpt.sha256", (jsa.with_name(jsa.name + ".sha256")).read_text().replace(jsa.name, "flipped.ckpt"))
    write_file(root / "nosidecar.ckpt", jsa.read_bytes())
    torch.load(root / "nosidecar.ckpt", weights_only=True)  # the copy itself is sound
    from checkpoints.file_format import file_digest, save_checkpoint_file

    class Planted:  # unpickling it would write a marker: the table's run checks that nothing did
        def __reduce__(self):
            return (exec, (f"open({str(root / 'PAYLOAD-RAN')!r}, 'w').close()",))

    sound = torch.load(jsa, weights_only=True)
    save_checkpoint_file({**sound, "extra": Planted()}, root / "payload.ckpt")
    first = next(k for k, v in sound["state_dict"].items() if v.is_floating_point())
    save_checkpoint_file({**sound, "state_dict": {**sound["state_dict"], first: sound["state_dict"][first] * float("nan")}},
                         root / "nan.ckpt")
    save_checkpoint_file({**sound, "state_dict": list(sound["state_dict"].values())}, root / "liststate.ckpt")
    for name, sidecar in (("garbledsum", "not a checksum\n"), ("sha256sum", f"{file_digest(jsa).upper()}  sha256sum.ckpt\n")):
        write_file(root / f"{name}.ckpt", jsa.read_bytes())
        write_file(root / f"{name}.ckpt.sha256", sidecar)
    prepare_received(root, data_dir, jsa)
    (root / "locked").mkdir()  # immutable (chattr +i) until `unlock`: not even root writes there
    subprocess.run(["chattr", "+i", str(root / "locked")], capture_output=True)  # (on ext4 and the like)


def unlock(root: Path) -> None:
    subprocess.run(["chattr", "-i", str(root / "locked")], capture_output=True)


def run_checkpoint(root: Path, model: str, runs: Path | None = None) -> Path:
    (path,) = ((runs or root / "runs") / "logs" / "tensorboard").glob(f"{model}-*/version_0/checkpoints/last.ckpt")
    return path


# ---- running and classifying ---------------------------------------------------------------------------

def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in directory.rglob("*") if p.is_file() and not p.is_symlink()}


def run_case(case: Case, root: Path, data_dir: Path) -> dict:
    cwd = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    write_file(cwd / "afile", "")
    (cwd / "adir").mkdir()
    places = {"root": str(root), **{model: str(run_checkpoint(root, model)) for model in case.runs}}
    (cwd / "victim").mkdir()  # the user's own files, beside the run: no case may remove them
    write_file(cwd / "victim" / "notes.txt", "years of work")
    if case.copy_runs:  # the case resumes its own copy: what it writes there is seen
        shutil.copytree(root / "runs" / "logs", cwd / "logs", copy_function=lambda source, target: write_file(target, Path(source).read_bytes()))
        places["jsa"] = str(run_checkpoint(root, "jsa", runs=cwd))
    if case.plant:
        places["planted"] = str(plant(case.plant, Path(places["jsa"]), cwd, data_dir))
    write_received(cwd, case.files)
    args = [a.format(**places) for a in case.args]
    if args[:1] == ["-c"]:
        argv = [sys.executable, "-c", args[1]]
    else:
        fast = (CLI_FAST if args[:1] and args[0] in ("fit", "validate", "test") else HYDRA_FAST) if case.fast else []
        given = {a.lstrip("+-").split("=", 1)[0] for a in args}
        fast = [a for a in fast if a.lstrip("-").split("=", 1)[0] not in given]  # Hydra refuses a key given twice
        if any(a.startswith("model=") and a != "model=jsa" for a in args):
            fast = [a for a in fast if not a.startswith("model.mis_steps")]  # JSA's only
        if args[:1] in (["test"], ["validate"]):
            fast = [a for a in fast if not a.startswith(("--trainer.max_steps", "--trainer.limit_train", "--data.batch_size"))]
        argv = [sys.executable, TRAIN, *args, *fast]
    # The received files' folder on the path, as '.' is for many users: a module planted there is importable.
    env = {**os.environ, "DATA_DIR": str(root / f"data-{case.data}") if case.data else str(data_dir),
           "PYTHONPATH": f"{REPO}{os.pathsep}{root}", "HYDRA_FULL_ERROR": "0"}
    before, users = snapshot(cwd), snapshot(cwd / "victim")
    began = time.monotonic()
    try:
        result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        result = None
    seconds = time.monotonic() - began
    written = sorted(k for k, v in snapshot(cwd).items() if before.get(k) != v)
    if result is None:
        outcome, message = "hang", f"still running after {CASE_TIMEOUT_S} s"
    else:
        outcome, message = classify(case, result.returncode, result.stdout, result.stderr, written)
    if (cwd / STRANGER_MARKER).exists():  # a module a received file named was imported: its code ran
        outcome, message = "ran", f"strangers_module was imported; {message}"
    if snapshot(cwd / "victim") != users or (cwd / "created-outside.yaml").exists():
        outcome, message = "lost", f"a file of the user's victim/ is gone, changed or new, or a file was made through a link; {message}"
    code = result.returncode if result is not None else None
    shutil.rmtree(cwd, ignore_errors=True)  # safe: the case's own mkdtemp working directory
    return {**asdict(case), "input": case.input, "outcome": outcome, "message": message, "exit": code,
            "written": written[:5], "seconds": round(seconds, 1)}


def classify(case: Case, code: int, stdout: str, stderr: str, written: list[str]) -> tuple[str, str]:
    output = stdout + "\n" + stderr
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if case.family == "library" and code != 0 and lines:  # Python code gets an exception: of a documented type, named
        exception, _, message = lines[-1].partition(": ")
        named = (case.mention or "") in message
        return ("clear" if exception.rsplit(".", 1)[-1] in LIBRARY_ERRORS and named else "unclear"), lines[-1][:300]
    if "Traceback (most recent call last)" in output:
        return "traceback", next((line for line in reversed(lines) if not line.startswith("Set the environment")), "")[:300]
    if case.expect == "stopped":  # a run that trained and was stopped with a line (its run directory stays)
        named = (case.mention or "") in output
        return ("documented" if code != 0 and named else "silent" if code == 0 else "unclear"), (lines[-1] if lines else "")[:300]
    if case.expect == "documented":
        if code == 0 and case.documented_by in output:
            return "documented", next(line for line in output.splitlines() if case.documented_by in line).strip()[:300]
        return ("silent" if code == 0 else "unclear"), (lines[-1] if lines else "")[:300]
    if code == 0:
        return "silent", "exit status 0"
    message = next((line for line in lines if line.startswith("error:") or "error:" in line), None)
    message = message or next((line for line in lines if not line.startswith(("[", "Set the environment"))), "")
    mention = case.mention or case.args[-1].lstrip("-+").split("=", 1)[0].rsplit(".", 1)[-1]
    if mention not in " ".join(lines):
        return "unclear", message[:300]
    if written:
        return "wrote", f"{message[:240]} (wrote {', '.join(written[:3])})"
    return "clear", message[:300]


# ---- the table ----------------------------------------------------------------------------------

def write_table(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_file(out / "table.json", json.dumps(rows, indent=1) + "\n")
    counts = {k: sum(r["outcome"] == k for r in rows) for k in OUTCOMES}
    lines = ["# Bad inputs", "", "Written by `python -m benchmarks.robustness.bad_inputs` (its docstring defines the outcomes). "
             f"{len(rows)} cases: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".", "",
             "| case | front end | input | outcome | message (first line) |", "|---|---|---|---|---|"]
    for row in rows:
        message = row["message"] if len(row["message"]) <= 200 else row["message"][:200] + " …"
        lines.append(markdown.table_row([row["id"], row["family"], f"`{row['input']}`", row["outcome"], message]))
    write_file(out / "table.md", "\n".join(lines) + "\n")


def case_ids(pieces: list[str], known: set[str]) -> list[str]:
    """--only's comma-separated ids, an id that holds a comma itself ("... DATA_DIR empty, no network") joined again."""
    ids: list[str] = []
    for piece in pieces:
        joined = f"{ids[-1]},{piece}" if ids else None
        if joined is not None and ids[-1] not in known and (joined in known or any(k.startswith(joined) for k in known)):
            ids[-1] = joined
        else:
            ids.append(piece)
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a case of each kind only (tests/benchmarks/robustness/test_bad_inputs.py)")
    parser.add_argument("--only", type=lambda text: text.split(","), help="re-run these case ids (comma-separated), merged into table.json")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at the same time (default 2)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bad_inputs")
    parser.add_argument("--table-only", action="store_true", help="rewrite table.md from table.json")
    args = parser.parse_args(argv)
    if args.table_only:
        try:
            rows = json.loads((args.out / "table.json").read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--table-only: {args.out / 'table.json'} is not a readable table ({type(error).__name__}); "
                         "run the benchmark to write it")
        write_table(rows, args.out)
        return 0
    data_dir = Path(os.environ.get("DATA_DIR") or REPO.parent / "shared" / "data")
    if not (data_dir / "MNIST" / "raw").is_dir():
        parser.error(f"no MNIST under {data_dir}: set DATA_DIR to the directory that holds MNIST/raw")
    cases = all_cases()
    known = {c.id for c in cases}
    if args.only:
        args.only = case_ids(args.only, known)
        unknown = [i for i in args.only if i not in known]
        if unknown:
            parser.error(f"--only: unknown case ids {unknown}; see table.json for the ids")
        cases = [c for c in cases if c.id in args.only]
    elif args.quick:
        cases = [c for c in cases if c.quick]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as work:
        root = Path(work)
        prepare(root, data_dir, tuple(model for model in ("jsa", "vae") if any(model in case.runs for case in cases)))
        print(f"prepared in {time.monotonic() - started:.0f} s; {len(cases)} cases", flush=True)

        def one(case: Case) -> dict:
            row = run_case(case, root, data_dir)
            print(f"{row['outcome']:>10}  {case.id}: {row['message'][:120]}", flush=True)
            return row

        try:
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                rows = list(pool.map(one, cases))
        finally:
            unlock(root)  # or the temporary directory cannot be removed
        if (root / "PAYLOAD-RAN").exists():  # a planted checkpoint's code ran somewhere: every payload row fails
            rows = [{**r, "outcome": "ran", "message": "the planted payload ran"} if "payload" in r["id"] else r for r in rows]
    if args.only and (args.out / "table.json").exists():
        fresh = {r["id"]: r for r in rows}
        rows = [fresh.get(r["id"], r) for r in json.loads((args.out / "table.json").read_text()) if r["id"] in known]
        rows += [r for r in fresh.values() if r["id"] not in {x["id"] for x in rows}]
    if not args.quick:
        write_table(rows, args.out)
    bad = [r for r in rows if r["outcome"] not in ("clear", "documented")]
    print(f"{len(rows)} cases in {time.monotonic() - started:.0f} s: "
          + ", ".join(f"{sum(r['outcome'] == k for r in rows)} {k}" for k in OUTCOMES))
    for row in bad:
        print(f"  {row['outcome']}: {row['id']}: {row['message'][:200]}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
