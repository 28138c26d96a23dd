"""What a model hands its Trainer so that checkpoints are written whole and restored checked: Lightning's checkpoint
I/O plugin and the three callbacks every model adds (`LatentVariableModel.configure_callbacks`), with the checks they
make of what a checkpoint restores. The file itself (format, loader) is one level up and imports no Lightning.

* `io_plugin`: `AtomicCheckpointIO`, the trainer's saves, loads and removals through checkpoints/file_format.py and
  checkpoints/loader.py;
* `atomic_checkpoints`: `AtomicCheckpoints`, the callback that installs the plugin and checks what is restored;
* `restored_state`: the restored loop counts and optimizer buffers, checked;
* `restored_paths`: the paths a restored ModelCheckpoint state names, kept inside the run;
* `random_state`: every rank's random state in the checkpoint (`RandomStateCheckpoint`), for an exact resume;
* `resume_settings`: a resumed run with settings other than the checkpoint's: one line naming them, this run's
  optimizer settings applied (`ResumeSettings`).
"""
