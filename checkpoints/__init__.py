"""What makes a checkpoint whole and safe to read, whichever script builds the Trainer. Without Lightning at import:
`errors` (`CheckpointError`), `file_format` (atomic writes, checksum, lock), `loader` (the one way a checkpoint is
read), `registry` and `import_paths` (the classes and names a checkpoint may name), `model_class` (which model wrote
it), `replica` (a replica's checkpoint cut from a replicated process's), `resume_command` (the command to resume).

`trainer/`: the checkpoint I/O plugin and the three callbacks every model adds (`configure_callbacks`), with the checks
of what a checkpoint restores. Nothing here imports models/ or callbacks/ at import time.
"""
