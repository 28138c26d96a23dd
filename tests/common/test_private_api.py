"""The private Lightning, torch and jsonargparse attributes the collection relies on are all behind the adapters of
common/private_api.py, and each is still there in the installed versions: an upgrade that removes one fails here,
naming it, not in the middle of a run (or, for an overridden method, by silently never calling the override)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.strategies import DDPStrategy

from common import private_api
from models import VAE

REPO = Path(__file__).resolve().parents[2]
PRIVATE_USES = re.compile(r"\._trainer\b|_ddp_params_and_buffers_to_ignore|_ddp_kwargs|_get_file_writer|cloud_io"
                          r"|_dynamo\.config|self\._get\(|\._instantiate_trainer\(|\._parser\(|\._every_n_train_steps|_batches_that_stepped|hydra\._internal"
                          r"|_get_closed_form_lr|\._last_lr|_loaders_dumpers")


@pytest.mark.parametrize("class_path, methods", private_api.OVERRIDDEN.items())
def test_every_overridden_private_method_still_exists(class_path, methods):
    module, name = class_path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    missing = [m for m in methods if not callable(getattr(cls, m, None))]
    assert not missing, f"{class_path} no longer has {missing}: the collection's override is never called (common/private_api.py)"


def test_the_adapters_work_on_the_installed_versions(tmp_path):
    model = VAE(latent_dim=2)
    assert private_api.attached_trainer(model) is None  # no trainer attached, no error
    private_api.ignore_in_ddp(model, ["encoder.net.0.weight"])
    from lightning.pytorch.callbacks import ModelCheckpoint

    assert private_api.checkpoint_every_n_train_steps(ModelCheckpoint(every_n_train_steps=7)) == 7
    assert private_api.metrics_step(L.Trainer(logger=False, enable_checkpointing=False)) == 0
    import copy

    twin = copy.copy(model)
    private_api.own_hyperparameters(twin, {**model.hparams, "latent_dim": 3})
    assert (twin.hparams["latent_dim"], twin.hparams_initial["latent_dim"], model.hparams["latent_dim"]) == (3, 3, 2)
    from torch.nn.parallel import DistributedDataParallel  # reads the attribute: the name must be torch's

    assert "_ddp_params_and_buffers_to_ignore" in inspect.getsource(DistributedDataParallel)
    assert private_api.finds_unused_parameters(DDPStrategy(find_unused_parameters=True))
    assert not private_api.finds_unused_parameters(DDPStrategy())
    limit = torch._dynamo.config.recompile_limit
    try:
        private_api.raise_recompile_limit(limit + 3)
        assert torch._dynamo.config.recompile_limit == limit + 3
    finally:
        torch._dynamo.config.recompile_limit = limit
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    assert hasattr(private_api.file_writer(writer), "add_summary")
    writer.close()
    from lightning.pytorch.trainer.connectors.signal_connector import _HandlersCompose, _SignalConnector

    assert hasattr(_HandlersCompose([]), "signal_handlers") and hasattr(_SignalConnector, "_sigterm_notifier_fn")
    assert private_api.basic_sweeper_jobs(["model=jsa,vae", "seed=1,2"]) == [
        ["model=jsa", "seed=1"], ["model=jsa", "seed=2"], ["model=vae", "seed=1"], ["model=vae", "seed=2"]]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=2)
    cosine.step()
    assert private_api.closed_form_rates(cosine) == pytest.approx([0.5])
    assert private_api.closed_form_rates(torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)) is None
    private_api.set_scheduler_rates(cosine, [0.25])
    assert cosine.get_last_lr() == [0.25] and optimizer.param_groups[0]["lr"] == 0.25
    assert private_api.read_as_lightningcli("[0.9, 1e-3]") == [0.9, 0.001]
    torch.save({"x": torch.ones(2)}, tmp_path / "f.pt")
    assert torch.equal(private_api.lightning_load(tmp_path / "f.pt", map_location="cpu", weights_only=True)["x"], torch.ones(2))


def test_no_private_attribute_is_used_outside_the_adapters():
    sources = [p for folder in ("models", "callbacks", "checkpoints", "datamodules", "samplers", "launch", "common") for p in (REPO / folder).rglob("*.py")]
    found = [f"{p.relative_to(REPO)}:{n}" for p in [*sources, REPO / "train.py"] if p.name != "private_api.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if PRIVATE_USES.search(line.split("#", 1)[0])]
    assert not found, f"private attributes used outside common/private_api.py: {found}"
