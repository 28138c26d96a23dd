"""The early checks, run on the command line as given before torch or Lightning is imported (train.py calls them
first; early.py runs them and ends a refusal in one line, exit status 2): arguments.py reads the command line as the
front ends do; received_config.py refuses config files and Hydra folders that would import a stranger's module or
hang; hydra_check.py and cli_check.py check each front end's settings through precheck.py's shared judgements, with
"did you mean"; paths.py the places a command names; configs.py reads what configs/ declares, hydra_config.py composes
it; settings.py checks a composed config, the Trainer's and the other classes' settings once imported. Nothing here
imports torch or Lightning, but for settings.py's checks once they are (tests/test_layout.py checks it).
"""
