"""The command that resumes a run from a checkpoint, in the front end that runs it: named by every message that asks
the user to resume (a preempted run, callbacks/guards/preemption.py; a checkpoint of another model, models/base.py)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def resume_command(ckpt_path: str | os.PathLike, class_name: str, config_name: str | None = None, subcommand: str = "fit",
                   config_file: str | os.PathLike | None = None) -> str:
    """The command that resumes a run from `ckpt_path` in the front end that runs it (train.py as the user named it).
    Under Hydra, this job's own overrides with `model=<config_name>` (default: this job's model choice) and `ckpt_path=`:
    `python train.py model=jsa model.mis_steps=2 ckpt_path=PATH` (another model drops the model.* ones); otherwise
    LightningCLI's `python train.py fit --config=<config_file> --ckpt_path=PATH` with the run's own config.yaml
    (its trainer and data settings too: the data order continues only with the same batch size), else
    `python train.py fit --model=<class_name> [the command's other options] --ckpt_path=PATH` (LightningCLI restores
    the model's settings alone from the checkpoint), or the `subcommand` that was refused (`test`: testing it is what
    the user asked for)."""
    from hydra.core.hydra_config import HydraConfig

    # train.py as the command that runs named it (`python ../zoo/train.py ...`), so that the command printed runs from
    # the same folder; `train.py` where the front end was called otherwise (in-process, from a test or a notebook)
    typed = sys.argv[0] if sys.argv else ""
    python = f"python {shlex.quote(typed) if Path(typed).name == 'train.py' else 'train.py'}"
    path = shlex.quote(str(ckpt_path))
    if not HydraConfig.initialized():
        if config_file is not None and Path(config_file).is_file():
            return f"{python} {subcommand} --config={shlex.quote(str(config_file))} --ckpt_path={path}"
        return " ".join([python, subcommand, f"--model={class_name}", *map(shlex.quote, cli_options_kept()), f"--ckpt_path={path}"])
    hydra = HydraConfig.get()
    current = hydra.runtime.choices.get("model")
    config_name = config_name or current
    keys = {override: override.lstrip("+~").split("=", 1)[0] for override in hydra.overrides.task}
    kept = [override for override, key in keys.items() if key not in ("model", "ckpt_path")
            and (config_name == current or not key.startswith("model."))]
    return " ".join([python, f"model={config_name}", *map(shlex.quote, kept), f"ckpt_path={path}"])


def cli_options_kept() -> list[str]:
    """The options of the LightningCLI command that runs (train.py SUBCOMMAND ...), but the model's and --ckpt_path:
    what a command for another model keeps, as the Hydra front end keeps a job's overrides; none in-process."""
    if Path(sys.argv[0] if sys.argv else "").name != "train.py":
        return []
    kept, dropping = [], False
    for arg in sys.argv[2:]:
        if arg.startswith("-"):  # else the value of the option before it (--trainer.max_epochs 3), dropped with it
            dropping = arg.split("=", 1)[0].startswith(("--model", "--ckpt_path"))
        kept += [] if dropping else [arg]
    return kept

