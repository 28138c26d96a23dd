"""Everything between a user's command and `Trainer.fit`, for both front ends:

- checks/: what runs before torch, Lightning and Hydra are imported, so that a mistake is one line within a second;
- hydra_app.py (with hydra_config.py, hydra_run.py) and cli_app.py: the two front ends, each describing the run;
- run_builder.py: the one builder from a run's description to its trainer; run_layout.py: where a run writes and
  what it is called; rules.py: the run rules both apply, each once; errors.py: a user's error as one line, exit 2;
- runs/: a run's directory, DDP timeouts and launchers, replicas, worker slots.

This module imports nothing (train.py imports it first).
"""

CLI_SUBCOMMANDS = ("fit", "validate", "test", "predict")  # `python train.py fit ...`: LightningCLI; else Hydra
