"""What makes a checkpoint whole and safe to read, whichever script builds the Trainer.

* `errors`: `CheckpointError`, free of Lightning and torch (samplers/ and datamodules/ raise it);
* `files`: the file format: atomic, checksummed writes, the directory lock, the one safe loader (weights only, the
  registered classes only), the checks of a restored loop and optimizer state, and `AtomicCheckpoints`, the callback
  that routes the trainer's reads and writes through them;
* `random_state`: every rank's random state in the checkpoint (`RandomStateCheckpoint`), for an exact resume;
* `resume_settings`: a resumed run with settings other than the checkpoint's: one line naming them, this run's
  optimizer settings applied (`ResumeSettings`);
* `resume_command`: the command a message gives to resume a run.

Every model adds the three callbacks itself (`LatentVariableModel.configure_callbacks`), since an exact resume cannot
work without them; callbacks/ holds the optional ones. Nothing here imports models/ or callbacks/ at import time.
"""
