"""What makes a checkpoint whole and safe to read, whichever script builds the Trainer; nothing here imports models/ or
callbacks/ at import time. Without Lightning: `errors`, `file_format` (atomic writes, checksum, lock), `loader` (the one
way a checkpoint is read, and what it must hold; the classes it may name: common/registry.py), `model_class`,
`resume_command`. `trainer`: `SafeCheckpoints`, the callback every run of train.py gets, and the checkpoint I/O plugin
it installs, which check what is restored.
"""
