"""The data of R replicas trained in one process (models/replicas.py): each replica's batches are those a single run
with its seed sees (its own data order and binarization draws, datamodules/resumable.py), stacked along a leading
dimension; validation and test are the same images for every replica."""

from __future__ import annotations

import copy
from typing import Any, Iterator, Sequence

import lightning as L
import torch
from torch import Tensor

from common.private_api import own_hyperparameters
from datamodules.base import ImageDataModule, InMemoryImageDataset
from datamodules.resumable import ResumableDataLoader


def replica_datamodule(datamodule: ImageDataModule, seed: int) -> ImageDataModule:
    """The data module a single run with `seed` would have, sharing the loaded images (set up) with `datamodule`."""
    replica = copy.copy(datamodule)
    replica.seed = seed
    own_hyperparameters(replica, {**datamodule.hparams, "seed": seed})  # hparams.yaml and its checkpoint say its seed
    replica.train_set = InMemoryImageDataset(datamodule.train_set.images, datamodule.binarize, seed=seed)
    return replica


class _Samplers:
    """The replicas' samplers as one, for Lightning's `set_epoch` at every epoch's start."""

    def __init__(self, loaders: Sequence[ResumableDataLoader]) -> None:
        self.loaders = loaders

    def set_epoch(self, epoch: int) -> None:
        for loader in self.loaders:
            loader.sampler.set_epoch(epoch)


class ReplicaLoader:
    """The replicas' training loaders stepped together: each step yields (x, index) of shapes (R, B, ...) and (R, B).
    Its state is each loader's (Lightning saves it with a checkpoint and restores it on resume)."""

    def __init__(self, loaders: Sequence[ResumableDataLoader]) -> None:
        self.loaders = list(loaders)
        self.sampler = _Samplers(self.loaders)

    def __len__(self) -> int:
        return min(len(loader) for loader in self.loaders)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for batches in zip(*self.loaders):
            images, indices = zip(*batches)
            yield torch.stack(images), torch.stack(indices)

    def state_dict(self) -> dict[str, Any]:
        return {"replicas": [loader.state_dict() for loader in self.loaders]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        states = state.get("replicas") if isinstance(state, dict) else None
        if not isinstance(states, list) or len(states) != len(self.loaders):
            from checkpoints.errors import CheckpointError

            raise CheckpointError(f"the checkpoint's data-loader positions are not those of {len(self.loaders)} replicas: "
                                  "resume a replicated run with the replicas it was started with")
        for loader, loader_state in zip(self.loaders, states):
            loader.load_state_dict(loader_state)


class ReplicaData(L.LightningDataModule):
    """`datamodule` for R replicas with `seeds`: their training batches stacked, validation shared."""

    def __init__(self, datamodule: ImageDataModule, seeds: Sequence[int]) -> None:
        super().__init__()
        self.datamodule = datamodule
        self.seeds = [int(s) for s in seeds]
        self.replicas: list[ImageDataModule] = []

    def __getattr__(self, name: str) -> Any:  # num_train_examples, image_shape, binarize, ...: the wrapped module's
        if name in ("datamodule", "seeds", "replicas") or name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.datamodule, name)

    @property
    def data_class(self) -> type:
        """The replicas' data module class: the one the process's checkpoints name (checkpoints/model_class.py)."""
        return type(self.datamodule)

    def prepare_data(self) -> None:
        self.datamodule.prepare_data()

    def setup(self, stage: str | None = None) -> None:
        self.datamodule.trainer = self.trainer
        self.datamodule.setup(stage)

    def train_dataloader(self) -> ReplicaLoader:
        self.replicas = [replica_datamodule(self.datamodule, seed) for seed in self.seeds]
        return ReplicaLoader([replica.train_dataloader() for replica in self.replicas])

    def val_dataloader(self) -> Any:
        return self.datamodule.val_dataloader()

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        for replica in self.replicas:  # each counts the batches training consumed (its mid-epoch position)
            replica.on_before_batch_transfer(batch, dataloader_idx)
        return batch
