"""Everything between a user's command and `Trainer.fit`, both front ends; imports nothing (train.py imports it first).

- checks/: what runs before torch, Lightning and Hydra are imported, so that a mistake is one line within a second;
- hydra_app.py (with checks/hydra_config.py) and cli_app.py: the two front ends, each describing the run;
- run_builder.py: from a run's description to its trainer, by the run rules both apply, each once; errors.py: a
  user's error as one line, exit 2; runs/: where a run writes and what it is called (run_directory.py), the rest.
"""

CLI_SUBCOMMANDS = ("fit", "validate", "test", "predict")  # `python train.py fit ...`: LightningCLI; else Hydra
