"""The files Lightning itself writes into a run, written the collection's one way (common/files.py): replaced whole,
never written into an existing file or through a link (a received run may hold a hard link to a user's file, a
symbolic link or a FIFO under these names). `RunLogger` writes the TensorBoard run's hparams.yaml, `CSVRunLogger` a
CSV run's metrics.csv and hparams.yaml, `RunConfigFile` LightningCLI's config.yaml; everything else of theirs is
Lightning's own."""

from __future__ import annotations

import csv
import io
import itertools
import os
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from common.files import read_regular, replacing, write_file


class RunLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger, whose hparams.yaml (written where no regular file holds it yet, and anew with each
    checkpoint: `record_hparams`) replaces whatever lies under that name instead of opening it for writing."""

    @rank_zero_only
    def save(self) -> None:
        if no_hparams_file(self.log_dir):
            self.record_hparams()
        super().save()  # the events flushed; hparams.yaml is there now, and Lightning leaves it as it is

    @rank_zero_only
    def record_hparams(self) -> None:
        """hparams.yaml anew, with the settings the training runs with (a resumed run's changed ones too), where `save`
        writes it once: called where a checkpoint is written, so that a test or validation of the run, or a resume that
        stops before its first checkpoint, leaves it as the checkpoints hold it."""
        with replacing(Path(self.log_dir) / self.NAME_HPARAMS_FILE) as file:
            save_hparams_to_yaml(file.name, self.hparams)


class CSVRunLogger(CSVLogger):
    """Lightning's CSV logger, continuing a run's metrics.csv: a resumed, validated or tested run adds its rows to the
    run's (Lightning's writer removes them), and metrics.csv and hparams.yaml are replaced whole (as `RunLogger`'s)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ContinuedCSVWriter(self.log_dir)
        return self._experiment

    @rank_zero_only
    def save(self) -> None:
        super().save()  # the rows logged since the last save
        if no_hparams_file(self.log_dir):
            self.record_hparams()

    @rank_zero_only
    def record_hparams(self) -> None:
        """hparams.yaml anew, where a checkpoint is written (`RunLogger.record_hparams`)."""
        with replacing(Path(self.log_dir) / ExperimentWriter.NAME_HPARAMS_FILE) as file:
            save_hparams_to_yaml(file.name, self.experiment.hparams)


class ContinuedCSVWriter(ExperimentWriter):
    """metrics.csv as the rows it held (when a regular file) and the new ones, replaced whole at each save."""

    def _check_log_dir_exists(self) -> None:
        pass  # Lightning's removes metrics.csv of a run that is continued

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)  # written by CSVRunLogger, never into the file in place

    def save(self) -> None:
        if not self.metrics:
            return
        path = Path(self.metrics_file_path)
        held = read_regular(path).decode() if path.is_file() and not path.is_symlink() else ""
        rows = [*csv.DictReader(io.StringIO(held)), *self.metrics]
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=sorted(set().union(*rows)))
        writer.writeheader()
        writer.writerows(rows)
        write_file(path, text.getvalue())
        self.metrics = []


RUN_LOGGERS = (RunLogger, CSVRunLogger)  # the loggers whose hparams.yaml each checkpoint writes anew


def no_hparams_file(log_dir: str) -> bool:
    """Whether a run's directory is there and holds no regular hparams.yaml (none yet, or a link): a logger's first save
    writes one; else each checkpoint does (`record_hparams`)."""
    path = Path(log_dir) / ExperimentWriter.NAME_HPARAMS_FILE
    return path.parent.is_dir() and (path.is_symlink() or not path.is_file())


class RunConfigFile(SaveConfigCallback):
    """LightningCLI's config.yaml (or the `config_filename` it is given): the parsed configuration as `parser.dump`
    writes it, in one file. A resume (or another test) of the run with other settings keeps the file it replaces as
    config-1.yaml, config-2.yaml, ... (`keep_earlier`): the settings each part of the run ran with stay on record."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir:
            log_dir = trainer.log_dir  # on every rank: it broadcasts the directory
            if trainer.is_global_zero:
                os.makedirs(log_dir, exist_ok=True)
                text = self.parser.dump(self.config, skip_none=False)
                keep_earlier(Path(log_dir) / self.config_filename, text)
                write_file(Path(log_dir) / self.config_filename, text)
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


def keep_earlier(path: Path, text: str) -> None:
    """Move the regular file `path`, where it holds other text than `text`, to <stem>-<N><suffix> (the first N free)."""
    try:
        earlier = read_regular(path, len(text.encode()) + 1).decode(errors="replace")
    except OSError:  # none yet, or no regular file (a link, a FIFO: replaced, never read)
        return
    if earlier != text:
        kept = next(kept for n in itertools.count(1)
                    if not (kept := path.with_name(f"{path.stem}-{n}{path.suffix}")).exists() and not kept.is_symlink())
        os.rename(path, kept)
