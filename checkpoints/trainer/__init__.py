"""What a trainer needs so that its checkpoints are written whole and restored checked (the file itself, format and
loader, is one level up and imports no Lightning): `SafeCheckpoints`, the callback every run of train.py gets
(launch/rules.py) and a script of your own adds (`Trainer(callbacks=[SafeCheckpoints()])`); `io_plugin`, the
checkpoint I/O it installs, which checks what a checkpoint restores before it is restored.
"""

from checkpoints.trainer.safe_checkpoints import SafeCheckpoints

__all__ = ["SafeCheckpoints"]
