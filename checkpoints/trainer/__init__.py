"""What a model hands its Trainer so that checkpoints are written whole and restored checked (the file itself, format
and loader, is one level up and imports no Lightning):

* `io_plugin`: `AtomicCheckpointIO`, the trainer's saves, loads and removals through checkpoints/file_format.py;
* `atomic_checkpoints`: the callback that installs it and checks what is restored (`restored_state`: loop counts and
  optimizer buffers; `restored_paths`: the paths a restored ModelCheckpoint names, kept inside the run);
* `random_state`: every rank's random state (`RandomStateCheckpoint`), for an exact resume;
* `resume_settings`: a resume with other settings: shapes refused in one line, optimizer settings applied.
"""
