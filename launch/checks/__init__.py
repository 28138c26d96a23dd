"""The early checks, run on the command line as given before torch, Lightning or Hydra is imported (train.py calls
them first): arguments.py reads the command line as the front ends do; received_config.py refuses config files and
Hydra folders that would import a stranger's module or hang; precheck.py checks every setting, with "did you mean";
configs.py reads what configs/ declares; settings.py checks the Trainer's and optimizers' settings once imported;
defaults.py reads configs/*.yaml's defaults; exit.py ends a refusal (one line, exit status 2). Nothing here imports
torch, Lightning, Hydra or OmegaConf at module level (tests/test_layout.py checks it).
"""
