"""Everything between a user's command and `Trainer.fit`, for both front ends, in two parts:

- checks/: what runs before torch, Lightning and Hydra are imported (argv read as the front ends read it, config files
  received from others, every setting against the schema, the paths a command names): a mistake is one line within a
  second. Nothing there imports a heavy package at module level.
- the rest, imported only once the checks passed, every import at the top of its module:
  - hydra_app.py (with hydra_config.py, hydra_run.py) and cli_app.py: the two front ends, thin adapters that each
    describe the run (model, data, trainer settings, log directory, run name, checkpoint to start from);
  - run_builder.py: the one builder that turns a run's description into its trainer;
  - run_layout.py: where a run writes and what it is called, for both;
  - rules.py: the run rules both apply, each written once (defaults, likelihood following the data, the always-on
    callbacks, ...); errors.py: a user's error as one line and exit status 2; console.py: console output;
  - runs/: a run's directory (reserved, owned, removed when refused), DDP timeouts and launchers, replicas, worker slots.

This module imports nothing (train.py imports it first).
"""

CLI_SUBCOMMANDS = ("fit", "validate", "test", "predict")  # `python train.py fit ...`: LightningCLI; else Hydra
