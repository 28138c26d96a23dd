"""The files Lightning itself writes into a run, written the collection's one way (common/files.py): replaced whole,
never written into an existing file or through a link (a received run may hold a hard link to a user's file, a
symbolic link or a FIFO under these names). `RunLogger` writes the TensorBoard run's hparams.yaml, `RunConfigFile`
LightningCLI's config.yaml; everything else of theirs is Lightning's own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import TensorBoardLogger

from common.files import replacing, write_file


class RunLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger, whose hparams.yaml (written where no regular file holds it yet, and anew with each
    checkpoint: `record_hparams`) replaces whatever lies under that name instead of opening it for writing."""

    @rank_zero_only
    def save(self) -> None:
        path = Path(self.log_dir) / self.NAME_HPARAMS_FILE
        if path.parent.is_dir() and (path.is_symlink() or not path.is_file()):
            self.record_hparams()
        super().save()  # the events flushed; hparams.yaml is there now, and Lightning leaves it as it is

    @rank_zero_only
    def record_hparams(self) -> None:
        """hparams.yaml anew, with the settings the training runs with (a resumed run's changed ones too), where `save`
        writes it once: called where a checkpoint is written, so that a test or validation of the run, or a resume that
        stops before its first checkpoint, leaves it as the checkpoints hold it."""
        with replacing(Path(self.log_dir) / self.NAME_HPARAMS_FILE) as file:
            save_hparams_to_yaml(file.name, self.hparams)


class RunConfigFile(SaveConfigCallback):
    """LightningCLI's config.yaml (or the `config_filename` it is given), replacing any file of that name: the parsed
    configuration as `parser.dump` writes it, in one file."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir:
            log_dir = trainer.log_dir  # on every rank: it broadcasts the directory
            if trainer.is_global_zero:
                os.makedirs(log_dir, exist_ok=True)
                write_file(Path(log_dir) / self.config_filename, self.parser.dump(self.config, skip_none=False))
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)
