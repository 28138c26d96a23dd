"""A checkpoint's structure, checked once where it is read (checkpoints/loader.py): each section of another kind,
each tensor that is not dense real or integer numbers, each tensor holding another kind of number than the model's,
and JSA's cache codes outside the codebook in a replicated process's checkpoint, refused in one line naming the
checkpoint and the key. Each file is a real tiny run's checkpoint altered with torch.save, the rest of it intact.
(The same damage through both front ends as real processes: benchmarks/robustness/bad_inputs.py, `received structure`.)"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch

from checkpoints.errors import CheckpointError
from checkpoints.trainer import SafeCheckpoints
from checkpoints.loader import load_checkpoint_file
from datamodules import MNISTDataModule
from models import JSA
from models.replicas import Replicas

SETTINGS = dict(num_latents=6, num_categories=4, code_dim=4, mis_steps=2, val_num_samples=2)


@pytest.fixture(scope="module")
def good(tmp_path_factory, mnist_dir) -> dict:
    """The checkpoint of a one-step JSA run (its cache, Adam's moments, ModelCheckpoint's state), as read back."""
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    root = tmp_path_factory.mktemp("run")
    trainer = L.Trainer(default_root_dir=root, max_steps=1, limit_val_batches=0, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[SafeCheckpoints()])
    trainer.fit(JSA(**SETTINGS), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16, val_size=59800))
    trainer.save_checkpoint(root / "good.ckpt")
    return torch.load(root / "good.ckpt", weights_only=True)


def altered(good: dict, folder: Path, alter) -> Path:
    checkpoint = copy.deepcopy(good)
    alter(checkpoint)
    path = folder / "received.ckpt"
    torch.save(checkpoint, path)
    return path


def nested(depth: int) -> list:
    value = torch.ones(1)
    for _ in range(depth):
        value = [value]
    return value


def model_checkpoint(checkpoint: dict) -> str:
    return next(key for key in checkpoint["callbacks"] if key.startswith("ModelCheckpoint"))


def adam(checkpoint: dict) -> dict:
    return checkpoint["optimizer_states"][0]["state"][0]


SECTIONS = {  # what is altered -> the key the line names
    "hyper_parameters a list": (lambda c: c.update(hyper_parameters=[1, 2, 3]), "hyper_parameters is a list"),
    "hyper_parameters a string": (lambda c: c.update(hyper_parameters="lr=0.1"), "hyper_parameters is a str"),
    "datamodule_hyper_parameters a list": (lambda c: c.update(datamodule_hyper_parameters=[1]),
                                           "datamodule_hyper_parameters is a list"),
    "callbacks a list": (lambda c: c.update(callbacks=list(c["callbacks"].values())), "callbacks is a list"),
    "ModelCheckpoint's state a string": (lambda c: c["callbacks"].update({model_checkpoint(c): "garbage"}),
                                         "callbacks[\"ModelCheckpoint{"),
    "loops a list": (lambda c: c.update(loops=[1]), "loops is a list"),
    "the fit loop's state a string": (lambda c: c["loops"].update(fit_loop="garbage"), "loops['fit_loop'] is a str"),
    "optimizer_states a mapping": (lambda c: c.update(optimizer_states=c["optimizer_states"][0]), "optimizer_states is a dict"),
    "optimizer_states a list of strings": (lambda c: c.update(optimizer_states=["garbage"]), "optimizer_states[0] is a str"),
    "an optimizer's state a list": (lambda c: c["optimizer_states"][0].update(state=[1]), "optimizer_states[0] is not"),
    "an optimizer's param_groups a mapping": (lambda c: c["optimizer_states"][0].update(param_groups={}),
                                              "optimizer_states[0] is not"),
    "an optimizer's param group without params": (lambda c: c["optimizer_states"][0].update(param_groups=[{"lr": 0.1}]),
                                                  "optimizer_states[0] is not"),
    "an Adam step a string": (lambda c: adam(c).update(step="x"), "optimizer_states[0] is not"),
    "an Adam state under a name, not a parameter id": (lambda c: c["optimizer_states"][0]["state"].update(x=adam(c)),
                                                       "optimizer_states[0] is not"),
    "lr_schedulers a mapping": (lambda c: c.update(lr_schedulers={"a": 1}), "lr_schedulers is a dict"),
    "lr_schedulers a list of strings": (lambda c: c.update(lr_schedulers=["x"]), "lr_schedulers[0] is a str"),
    "a random state of floats": (lambda c: c.update(rng_states=[{"cpu": torch.zeros(7)}]), "rng_states are not"),
    "a random state of another size": (lambda c: c.update(rng_states=[{"cpu": torch.zeros(7, dtype=torch.uint8)}]),
                                       "rng_states are not"),
    "a CUDA random state of floats": (lambda c: c["rng_states"][0].update(cuda=torch.zeros(16)), "rng_states are not"),
}


def refused_at_read(good, tmp_path, alter, named: str) -> None:
    """The good checkpoint, altered, is refused when read, in one line naming the checkpoint and the key."""
    path = altered(good, tmp_path, alter)
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint_file(path)
    assert str(refused.value).startswith(f"checkpoint {path}: {named}") and "\n" not in str(refused.value)


@pytest.mark.parametrize("what", SECTIONS)
def test_a_section_of_another_kind_is_refused_in_one_line_naming_it(what, good, tmp_path):
    refused_at_read(good, tmp_path, *SECTIONS[what])


def meta(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(tensor, device="meta")


TENSORS = {
    "a sparse weight": (lambda c: c["state_dict"].update({"encoder.net.0.bias": c["state_dict"]["encoder.net.0.bias"].to_sparse()}),
                        "state_dict.encoder.net.0.bias is a sparse_coo tensor"),
    "a meta weight": (lambda c: c["state_dict"].update({"encoder.net.0.bias": meta(c["state_dict"]["encoder.net.0.bias"])}),
                      "state_dict.encoder.net.0.bias is a meta tensor"),
    "meta cache codes": (lambda c: c["state_dict"].update({"cache.codes": meta(c["state_dict"]["cache.codes"])}),
                         "state_dict.cache.codes is a meta tensor"),
    "a sparse Adam moment": (lambda c: adam(c).update(exp_avg=adam(c)["exp_avg"].to_sparse()),
                             "optimizer_states[0].state.0.exp_avg is a sparse_coo tensor"),
    "a meta Adam moment": (lambda c: adam(c).update(exp_avg=meta(adam(c)["exp_avg"])),
                           "optimizer_states[0].state.0.exp_avg is a meta tensor"),
    "a complex weight": (lambda c: c["state_dict"].update({"encoder.net.0.bias": c["state_dict"]["encoder.net.0.bias"].to(torch.complex64)}),
                         "state_dict.encoder.net.0.bias is a tensor of torch.complex64"),
    "a tensor nested 40 levels deep": (lambda c: c.update(extra=nested(40)),
                                       "extra[0]"),
}


@pytest.mark.parametrize("what", TENSORS)
def test_a_tensor_that_is_not_dense_real_numbers_is_refused_in_one_line_naming_it(what, good, tmp_path):
    refused_at_read(good, tmp_path, *TENSORS[what])


KINDS = {  # a tensor of another kind of number than the model's own: torch's copy would cast it without a word
    "an integer weight": ("encoder.net.0.bias", torch.int64, "holds integers (torch.int64), the model's floats"),
    "float cache codes": ("cache.codes", torch.float32, "holds floats (torch.float32), the model's integers"),
    "cache codes of truth values": ("cache.codes", torch.bool, "holds truth values (torch.bool), the model's integers"),
    "a float changed_epoch": ("cache.changed_epoch", torch.float64, "holds floats (torch.float64), the model's integers"),
}


@pytest.mark.parametrize("what", KINDS)
def test_a_tensor_of_another_kind_of_number_than_the_models_is_refused_on_load(what, good, tmp_path):
    name, dtype, expected = KINDS[what]
    path = altered(good, tmp_path, lambda c: c["state_dict"].update({name: c["state_dict"][name].to(dtype)}))
    with pytest.raises(CheckpointError) as refused:
        JSA.load_from_checkpoint(path)
    assert str(refused.value).startswith(f"the checkpoint: state_dict.{name} {expected}")


@pytest.mark.parametrize("groups", [[], [0, 0]], ids=["no optimizer state", "a parameter group twice"])
def test_an_optimizer_state_of_other_parameter_groups_is_refused_before_it_is_restored(groups, good, tmp_path, mnist_dir):
    """Lightning restores no optimizer state from a checkpoint that holds none (Adam's moments would restart from zero),
    and torch's restore refuses other groups with a traceback: each is one line naming the checkpoint and the key."""
    path = altered(good, tmp_path, lambda c: c.update(optimizer_states=[{**c["optimizer_states"][0], "param_groups": [
        c["optimizer_states"][0]["param_groups"][i] for i in groups]}] if groups else []))
    trainer = L.Trainer(default_root_dir=tmp_path, max_steps=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[SafeCheckpoints()])
    with pytest.raises(CheckpointError) as refused:
        trainer.fit(JSA(**SETTINGS), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16, val_size=59800),
                    ckpt_path=path)
    assert str(refused.value).startswith(f"checkpoint {path}: its optimizer_states hold {[[13] * len(groups)] if groups else []} ")


def test_cache_codes_outside_the_codebook_are_refused_in_a_replicated_processs_checkpoint():
    """A replicated process keeps its replicas' caches stacked in one buffer: its codes are held to the codebook too."""
    replicas = Replicas([JSA(**SETTINGS, cache_size=50), JSA(**SETTINGS, cache_size=50)], [0, 1])
    state = replicas.state_dict()
    codes = state["stacked/cache/codes"].long()
    codes[1, 7, 0] = 300  # int64, as a stranger writes it: 300 would wrap to 44 in the cache's uint8
    with pytest.raises(CheckpointError, match=r"stacked/cache/codes \(JSA's cache\) hold 1 value\(s\) outside the classes "
                                              r"0\.\.3 \(e\.g\. 300\)"):
        replicas.on_load_checkpoint({"state_dict": {**state, "stacked/cache/codes": codes}})
    replicas.on_load_checkpoint({"state_dict": state})  # the sound state loads


def test_a_trusted_checkpoint_may_hold_its_settings_in_any_mapping(tmp_path):
    """A file its reader trusts (weights_only=False) may pickle Hydra's DictConfig as its hyperparameters: a mapping."""
    from omegaconf import OmegaConf

    path = tmp_path / "trusted.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "hyper_parameters": OmegaConf.create({"lr": 0.1})}, path)
    assert load_checkpoint_file(path, trusted=True)["hyper_parameters"]["lr"] == 0.1


def test_a_model_checkpoint_state_whose_best_k_models_is_a_list_is_dropped_with_its_line(tmp_path, caplog):
    """Inside ModelCheckpoint's state (checkpoints/trainer.py): best_k_models of another kind is ignored
    with the line that names what was dropped, not a TypeError from hashing it."""
    from checkpoints.trainer import drop_paths_outside

    state = {"best_k_models": [[1]], "last_model_path": str(tmp_path / "last.ckpt")}
    with caplog.at_level("WARNING"):
        drop_paths_outside(state, str(tmp_path), "received.ckpt")
    assert state["best_k_models"] == {} and "checkpoint received.ckpt: its ModelCheckpoint state names [[1]]" in caplog.text
