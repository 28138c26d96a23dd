"""Reliability: a loss that turns NaN stops training with the term's name and leaves the last good
checkpoint intact; a checkpoint of another model class is refused; a seed makes a CPU run repeatable."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from checkpoints.trainer import SafeCheckpoints
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from callbacks import NonFiniteLossGuard

import launch.hydra_app
from datamodules import MNISTDataModule
from models import JSA, VAE
from tests.launch.test_configs import composed


class VAEWithNaNAfter3Steps(VAE):
    """A VAE whose KL term becomes NaN from the fourth training step on."""

    def training_loss(self, x, index):
        terms = super().training_loss(x, index)
        if self.global_step >= 3:
            terms["kl"] = terms["kl"] * float("nan")
            terms["loss"] = terms["loss"] + terms["kl"]
        return terms


def _fit(model: L.LightningModule, dm: MNISTDataModule, ckpt_dir: Path, ckpt_path: Path | None = None, **kwargs) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=6, limit_train_batches=6, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
        callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_last=True, every_n_train_steps=1), NonFiniteLossGuard(),
                   SafeCheckpoints()],
        enable_progress_bar=False, enable_model_summary=False, **kwargs,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return trainer


@pytest.fixture()
def dm(mnist_dir: Path) -> MNISTDataModule:
    return MNISTDataModule(data_dir=str(mnist_dir), binarize="dynamic", batch_size=32)


@pytest.mark.parametrize("log_every_n_steps", [1, 50])  # caught at the step, or only when a checkpoint is due
def test_nan_loss_stops_with_the_term_and_keeps_the_last_good_checkpoint(dm, tmp_path, log_every_n_steps):
    with pytest.raises(FloatingPointError, match=r"train/loss, train/kl became NaN or inf.*Last good checkpoint: .*last"):
        _fit(VAEWithNaNAfter3Steps(latent_dim=4, val_num_samples=2), dm, tmp_path, log_every_n_steps=log_every_n_steps)
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 3  # written before the NaN step, never after
    assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


def test_a_nan_before_any_checkpoint_says_to_start_again_not_to_resume():
    trainer = L.Trainer(logger=False, enable_checkpointing=False)
    message = NonFiniteLossGuard.message(trainer, "train/loss")
    assert "No checkpoint was written yet: start again with a smaller learning rate" in message and "Resume" not in message


def test_checkpoint_of_another_model_class_is_refused(dm, tmp_path):
    _fit(VAE(latent_dim=4, val_num_samples=2), dm, tmp_path, max_epochs=1)
    with pytest.raises(ValueError, match=r"written by models\.vae\.VAE, not models\.jsa\.JSA"):
        _fit(JSA(mis_steps=2, val_num_samples=2), dm, tmp_path / "jsa", ckpt_path=tmp_path / "last.ckpt")


@pytest.mark.parametrize("settings, config", [({"estimator": "gumbel"}, "dvae_gumbel"), ({}, "dvae")],
                         ids=["gumbel", "its estimator not recorded"])
def test_another_models_checkpoint_is_resumed_with_the_config_its_settings_chose(settings, config, monkeypatch):
    """DiscreteVAE's Hydra config depends on its estimator: the refusal's command names the one the checkpoint's
    settings chose (the class's default where the checkpoint records none)."""
    from hydra.core.hydra_config import HydraConfig

    from checkpoints.errors import CheckpointError
    from checkpoints.model_class import check_model_class

    monkeypatch.setattr(HydraConfig.instance(), "cfg", HydraConfig.instance().cfg)  # restored after the compose below
    composed(["model=jsa"])
    checkpoint = {"model_class": "models.dvae.DiscreteVAE", "hyper_parameters": settings}
    with pytest.raises(CheckpointError, match=f"resume it with the model that wrote it: python train.py model={config} ckpt_path=last.ckpt "):
        check_model_class(checkpoint, JSA, "last.ckpt")


def test_a_checkpoint_of_classes_of_ones_own_names_the_command_with_those_classes(monkeypatch, tmp_path):
    """A class of one's own is no config choice or short name: the refusal gives its full path, in each front end's
    spelling, the front end that runs first; in Hydra's, the config of the collection's model it extends where its
    package is trusted (else a placeholder)."""
    import re

    from hydra.core.hydra_config import HydraConfig

    from checkpoints.errors import CheckpointError
    from checkpoints.model_class import check_data_class, check_model_class

    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # LightningCLI's command first
    checkpoint = {"model_class": "mypkg.mymodel.MyVAE", "data_class": "mypkg.data.InvertedMNIST"}
    with pytest.raises(CheckpointError, match=re.escape("test it with that class, python train.py test --model=mypkg.mymodel.MyVAE "
                                                        "--ckpt_path=x.ckpt (Hydra: python train.py model=<the config of the model it "
                                                        "extends> model._target_=mypkg.mymodel.MyVAE ckpt_path=x.ckpt; ")):
        check_model_class(checkpoint, VAE, "x.ckpt", "test")
    for cli, choice in ((True, "give --data=mypkg.data.InvertedMNIST"), (False, "give data._target_=mypkg.data.InvertedMNIST")):
        with pytest.raises(CheckpointError, match=re.escape(choice)):
            check_data_class(checkpoint, MNISTDataModule(), "x.ckpt", cli=cli)

    (tmp_path / "ownpkg").mkdir()
    (tmp_path / "ownpkg" / "__init__.py").write_text("from models import DiscreteVAE\n\nclass MyDVAE(DiscreteVAE):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LATENT_ZOO_TRUST", "ownpkg")
    monkeypatch.setattr(HydraConfig.instance(), "cfg", HydraConfig.instance().cfg)  # restored after the compose below
    composed(["model=jsa"])
    own = {"model_class": "ownpkg.MyDVAE", "hyper_parameters": {"estimator": "gumbel"}}
    with pytest.raises(CheckpointError, match=re.escape("resume it with that class, python train.py model=dvae_gumbel "
                                                        "model._target_=ownpkg.MyDVAE ckpt_path=x.ckpt (LightningCLI: python "
                                                        "train.py fit --model=ownpkg.MyDVAE --ckpt_path=x.ckpt;")):
        check_model_class(own, VAE, "x.ckpt")
    (tmp_path / "strangerpkg.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\nfrom ownpkg import MyDVAE\n")
    with pytest.raises(CheckpointError, match=re.escape("model=<the config of the model it extends> model._target_=strangerpkg")):
        check_model_class({"model_class": "strangerpkg.MyDVAE"}, VAE, "x.ckpt")  # not trusted: never imported
    assert not (tmp_path / "imported").exists()


@pytest.mark.slow  # three runs through the Hydra front end
def test_a_seed_makes_a_cpu_run_repeatable(mnist_dir, tmp_path):
    def run(seed: int, name: str) -> dict[str, float]:
        cfg = composed([
            "model=jsa", f"seed={seed}", f"data.data_dir={mnist_dir}", "data.batch_size=32", "trainer.max_steps=3",
            "trainer.limit_train_batches=3", "trainer.limit_val_batches=2", "trainer.accelerator=cpu",
            "trainer.enable_progress_bar=false", "model.val_num_samples=4", f"log_dir={tmp_path / name}",
        ])
        return launch.hydra_app.run(cfg)

    first, again, other = run(0, "a"), run(0, "b"), run(1, "c")
    measured = {k: v for k, v in first.items() if "time" not in k and "per_s" not in k}  # wall-clock tags differ
    assert {k: again[k] for k in measured} == measured
    assert other["val/nll"] != first["val/nll"] and other["train/loss"] != first["train/loss"]
