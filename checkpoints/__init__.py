"""What makes a checkpoint whole and safe to read, whichever script builds the Trainer. Without Lightning at import:
`errors` (`CheckpointError`), `file_format` (atomic writes, checksum, lock), `loader` (the one way a checkpoint is
read, and what it must hold), `registry` and `import_paths` (the classes and names a checkpoint may name),
`model_class` (which model wrote it), `replica` (a replica's checkpoint cut from a replicated process's),
`resume_command` (the command to resume).

`trainer/`: the checkpoint I/O plugin and `SafeCheckpoints`, the callback every run of train.py gets (launch/rules.py),
with the checks of what a checkpoint restores. Nothing here imports models/ or callbacks/ at import time.
"""
