"""Train a model for a few steps under a real 2-process DDP run on CPU (gloo) and save, per rank,
the state that must stay identical across ranks (JSA's cache, the VQ codebook and its statistics),
the training indices that rank processed and what it logged. Run by the DDP tests as
`python tests/scripts/ddp_fit.py MODEL[,MODEL...] OUT_DIR [MAX_STEPS [CKPT_PATH]]`; Lightning re-launches this
script for rank 1. Several models are trained one after the other in the same two processes (the first
Trainer starts rank 1 and the process group, the later ones reuse them), each writing under OUT_DIR/MODEL.
With MAX_STEPS (one model), it writes `last.ckpt` into OUT_DIR every step and resumes from CKPT_PATH if
given (the multi-process resume test)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import MNISTDataModule
from callbacks.guards.process_group import ReleaseProcessGroupAtExit
from checkpoints.trainer import SafeCheckpoints
from models import JSA, VAE, VQVAE, DiscreteVAE
from samplers import SGLD


class Record(L.Callback):
    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []
        self.restarts = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append(batch[1].clone())
        self.torch_seed = torch.initial_seed()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.restarts += float(trainer.callback_metrics.get("train/restarts", 0.0))


def build(name: str) -> L.LightningModule:
    """The model under test; test_ddp.py builds the same for its single-process comparison."""
    torch.manual_seed(0)
    if name == "jsa":
        return JSA(mis_steps=3, val_num_samples=20)
    if name == "vae":
        return VAE(latent_dim=8, val_num_samples=20)
    if name == "sgld":  # a sampler as the optimizer: its injected noise must be the same on both ranks
        return VAE(latent_dim=8, val_num_samples=20, optimizer=functools.partial(SGLD, lr=1e-8))
    if name == "dvae":
        return DiscreteVAE(num_samples=2, val_num_samples=20)
    # EMA codebook with aggressive dead-code restarts, so restarts happen within a few steps.
    return VQVAE(num_categories=32, code_dim=8, hidden_channels=16, ema=True, decay=0.5, dead_code_threshold=20.0, kmeans_init=True)


def datamodule(data_dir: str | None = None) -> MNISTDataModule:
    # Static binarization: the validation images are the same in every process and run.
    return MNISTDataModule(data_dir=data_dir, binarize="static", batch_size=16)


def shared_state(model: L.LightningModule) -> dict[str, torch.Tensor]:
    if isinstance(model, JSA):
        return {"cache.codes": model.cache.codes}
    if isinstance(model, VQVAE):
        return {f"quantizer.{k}": v for k, v in model.quantizer.state_dict().items()}
    return dict(model.state_dict())  # DDP keeps parameters in sync only through identical updates


def main(name: str, out_dir: Path, max_steps: int | None = None, ckpt_path: str | None = None) -> None:
    L.seed_everything(0)
    record = Record()
    callbacks: list[L.Callback] = [record, ReleaseProcessGroupAtExit(), SafeCheckpoints()]  # as launch/run_builder.py adds them
    if max_steps is not None:  # the resume test: a checkpoint after every step
        callbacks.append(ModelCheckpoint(dirpath=out_dir, save_last=True, save_top_k=0, every_n_train_steps=1))
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=max_steps or 4, limit_train_batches=4, limit_val_batches=4,
        num_sanity_val_steps=0, logger=False, enable_checkpointing=max_steps is not None, enable_progress_bar=False,
        enable_model_summary=False, callbacks=callbacks, log_every_n_steps=1,
    )
    model = build(name)
    dm = datamodule()
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    if max_steps is not None:
        torch.save({"model_state": model.state_dict(), "optimizer_state": trainer.optimizers[0].state_dict(),
                    "rng_state": torch.get_rng_state()}, out_dir / f"rank{trainer.global_rank}.pt")
        return
    # Validation of the trained weights over both shards: 4 batches of 16 per rank = val images 0..127.
    validate_nll = trainer.validate(model, datamodule=dm, verbose=False)[0]["val/nll"]
    torch.save(
        {
            "state": shared_state(model),
            "model_state": model.state_dict(),
            "validate_nll": validate_nll,
            "seen": torch.cat(record.seen),
            "restarts": record.restarts,
            "torch_seed": record.torch_seed,
            "val_nll": trainer.callback_metrics["val/nll"],
            "num_images": trainer.callback_metrics["val/num_images"],
        },
        out_dir / f"rank{trainer.global_rank}.pt",
    )


if __name__ == "__main__":
    names, out = sys.argv[1].split(","), Path(sys.argv[2])
    if len(names) == 1:
        main(names[0], out, *([int(sys.argv[3])] if len(sys.argv) > 3 else []), *sys.argv[4:5])
    else:
        for name in names:
            (out / name).mkdir(parents=True, exist_ok=True)
            main(name, out / name)
