"""The error a checkpoint that is missing, unreadable or not what it should be raises: the user's to fix, told in one
line. Its own module, free of Lightning and torch, so that samplers/ (the cache's loaded-state check) and datamodules/
(the loader position) raise it without importing the checkpoint machinery."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or not what it should be (the user's to fix)."""
