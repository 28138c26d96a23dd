"""The early checks, run on the command line as given before torch, Lightning or Hydra is imported, so that a
misspelt, ill-typed or unsafe setting is one line within a second (train.py calls them first):

- arguments.py: the command line read as the front ends read it (`KEY=VALUE`, `--option VALUE`), and its values;
- received_config.py: config files and Hydra folders a command names, read bounded and refused if they would import
  a stranger's module or hang;
- precheck.py: every setting checked against the schema, with "did you mean" (those of the config files it reads too);
- configs.py: what configs/ declares (each group's choices and classes, configs/settings.py's settings); settings.py:
  the settings of the other classes (the Trainer, optimizers) checked against their constructors once imported;
- defaults.py: configs/*.yaml as written, the defaults both front ends and these checks read;
- exit.py: how a refusal ends: one line on stderr and exit status 2.

Nothing here imports torch, Lightning, Hydra or OmegaConf at module level (tests/test_layout.py checks it).
"""
