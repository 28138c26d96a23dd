"""What makes a checkpoint whole and safe to read, whichever script builds the Trainer.

The file and what it names (no Lightning at import):

* `errors`: `CheckpointError`, free of Lightning and torch (samplers/ and datamodules/ raise it);
* `file_format`: how a checkpoint lies on disk: atomic writes, the checksum file, the directory lock, verification;
* `loader`: the one way a checkpoint is read: checked, weights only, the registered classes only;
* `registry`, `import_paths`: the classes and dotted names a checkpoint or a received config may name;
* `model_class`: which model wrote a checkpoint, and refusing to load it into another;
* `replica`: one replica's checkpoint cut from a replicated process's, and a trunk's branched into arms;
* `resume_command`: the command a message gives to resume a run.

`trainer/`: what every model hands its Trainer: the checkpoint I/O plugin and the three callbacks
(`LatentVariableModel.configure_callbacks`; an exact resume cannot work without them), with the checks of what a
checkpoint restores. callbacks/ holds the optional ones. Nothing here imports models/ or callbacks/ at import time.
"""
