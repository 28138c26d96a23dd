"""The callback that makes every trainer a model is fitted or tested with write and read checkpoints through
`AtomicCheckpointIO`, whichever script builds the Trainer, and check what a checkpoint restores into it."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

from checkpoints.trainer.io_plugin import AtomicCheckpointIO
from checkpoints.trainer.restored_paths import drop_paths_outside
from checkpoints.trainer.restored_state import check_loop_state, check_optimizer_groups, check_optimizer_states


class AtomicCheckpoints(L.Callback):
    """Makes the trainer write and read checkpoints through `AtomicCheckpointIO`. Added by every model
    (`LatentVariableModel.configure_callbacks`): the guarantee holds whichever script builds the Trainer.
    A checkpoint I/O plugin the user gave is kept."""

    _saved_groups: list[list[int]] | None = None  # the parameters of each group of each optimizer the checkpoint restores

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # setup runs before Lightning restores a checkpoint, so resuming reads through the plugin too.
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO):
            trainer.strategy.checkpoint_io.removable_in = lambda: [c.dirpath for c in trainer.checkpoint_callbacks
                                                                   if getattr(c, "dirpath", None)]

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The optimizers are built by now, and their states not yet restored (torch's restore refuses other groups
        # with a traceback, and Lightning's restores none of a checkpoint that holds none).
        if trainer.ckpt_path and self._saved_groups is not None:
            check_optimizer_groups(self._saved_groups, trainer)
        self._saved_groups = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.ckpt_path:  # the optimizers' state is restored before training starts (once per fit: one host sync)
            check_optimizer_states(trainer, pl_module)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Called before the callbacks' own states are loaded: what reaches ModelCheckpoint names only its directory.
        check_loop_state(checkpoint, trainer)
        self._saved_groups = [[len(group["params"]) for group in state["param_groups"]]
                              for state in checkpoint["optimizer_states"]] if "optimizer_states" in checkpoint else None
        states = checkpoint.get("callbacks") or {}  # mappings (checkpoints/structure.py)
        for callback in trainer.checkpoint_callbacks:
            state = states.get(callback.state_key)
            if isinstance(callback, ModelCheckpoint) and state is not None and callback.dirpath:
                drop_paths_outside(state, callback.dirpath, trainer.ckpt_path)
