"""Everything between a user's command and `Trainer.fit`, for both front ends:

- precheck.py, schema.py: a misspelt or ill-typed setting refused in one line before torch and Lightning are imported;
- hydra_app.py (with hydra_config.py, build.py) and cli_app.py: the two front ends, thin adapters that each describe
  the run (model, data, trainer settings, log directory, run name, checkpoint to start from);
- run_builder.py: the one builder that turns a run's description into its trainer;
- rules.py: the run rules both apply, each written once (defaults, run name, likelihood following the data, ...);
- settings.py, errors.py: settings checked against the constructors; a user's error as one line and exit status 2;
- run_directory.py, distributed.py, console.py: where a run writes, DDP timeouts and launchers, console output.

This module and precheck.py/schema.py import no torch or Lightning at module level (train.py imports them first).
"""

CLI_SUBCOMMANDS = ("fit", "validate", "test", "predict")  # `python train.py fit ...`: LightningCLI; else Hydra
