"""The run's configuration: Hydra's config groups (configs/<group>/*.yaml, configs/train.yaml), LightningCLI's config
files (configs/cli/), and every model's and data module's settings with their types, defaults and ranges
(configs/settings.py, torch-free)."""
