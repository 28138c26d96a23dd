"""What both early checks share (launch/checks/hydra_check.py, cli_check.py; run by launch/checks/early.py): the
refusal (SettingsError and its kinds), a model's or data module's settings built as their constructor builds them
(configs/settings.py), and Lightning 1.x Trainer options."""

from __future__ import annotations

import contextlib
import pkgutil
import re
from typing import Any

from common.settings import did_you_mean
from configs.settings import settings_class, suited_likelihood
from launch.checks.configs import declared


class SettingsError(ValueError):
    """A user's mistake, refused in one line (the message): a setting, found by the early checks or once the classes
    are imported; its kinds below, a command line's, a path's (paths.py) and a received config's (received_config.py),
    each caught as this."""


class EarlyRefusal(SettingsError):
    """A command-line mistake found before the imports (the message is the whole `error:` line)."""


def closest_in_module(path: str) -> str:
    """'; did you mean mypkg.mymodel.MyVAE?' for a class path whose module imports but holds no such name, from the
    module's public classes, or whose package imports but holds no such module (mypkg.mymodl.MyVAE), from its
    modules; '' otherwise. Called on a package already imported (it is trusted)."""
    import importlib
    import inspect

    module, _, name = path.rpartition(".")
    package = module.rpartition(".")[0]
    with contextlib.suppress(ImportError, ValueError):  # (one that does not import, or an empty name: no advice)
        try:
            found = vars(importlib.import_module(module))
            return did_you_mean(path, [f"{module}.{n}" for n, v in found.items() if inspect.isclass(v) and not n.startswith("_")])
        except ModuleNotFoundError:  # the modules of its package, then
            modules = pkgutil.iter_modules(vars(importlib.import_module(package)).get("__path__", []))
            return did_you_mean(path, [f"{package}.{info.name}.{name}" for info in modules])
    return ""


# Trainer options of Lightning 1.x that Lightning 2 removed, which old scripts and tutorials still give: what replaces
# each ({value}: the value given).
REMOVED_TRAINER_OPTIONS = {
    "gpus": "trainer.accelerator=gpu trainer.devices={value}",
    "num_processes": "trainer.accelerator=cpu trainer.devices={value}",
    "tpu_cores": "trainer.accelerator=tpu trainer.devices={value}",
    "auto_select_gpus": "trainer.devices=auto",
    "resume_from_checkpoint": "ckpt_path={value}",
}


def removed_trainer_option(option: str, value: str | None, cli: bool) -> str:
    """'trainer.gpus: no such setting of Trainer (Lightning 2 removed it); use trainer.accelerator=gpu trainer.devices=1'."""
    use = REMOVED_TRAINER_OPTIONS[option.rsplit(".", 1)[-1]].format(value=value if value is not None else "N")
    if cli:
        use = " ".join(f"--{part}" for part in use.split())
    return f"{option}: no such {'option' if cli else 'setting'} of Trainer (Lightning 2 removed it); use {use}"


def check_combination(group: str, target: str | None, values: dict[str, Any], shown: str) -> None:
    """The settings of the class at `target` built from `values` as its constructor builds them (configs/settings.py);
    its refusal named `<shown>.<setting>` (`model.mis_steps`, `--model.mis_steps`). A value left to resolve later (an
    interpolation) is left out."""
    names = declared(target) or {}
    try:
        if names:
            settings_class(target)(**{name: value for name, value in values.items()
                                      if name in names and not (isinstance(value, str) and "${" in value)})
    except ValueError as error:
        text = str(error)
        if shown.startswith("--"):  # the settings the line names further on, in LightningCLI's spelling too
            text = re.sub(rf"(?<![\w.-]){group}\.(?=\w)", f"--{group}.", text)
        named = text.split(" ", 1)[0].split("=", 1)[0] in names
        raise EarlyRefusal(f"{shown}.{text}" if named else f"{shown}: {text}") from None


def as_built(model: dict[str, Any], data_target: str | None, data: dict[str, Any]) -> dict[str, Any]:
    """A model's settings as the run builds it from the data: a likelihood left out is the one that suits the data's
    pixels (launch/run_builder.py: apply_rules), where the data module is one of the collection's; so that a setting
    that likelihood ignores (model.learn_sigma on binarized MNIST) is refused before the imports."""
    binarize = data.get("binarize", getattr(settings_class(data_target or ""), "binarize", None))  # else its default
    if model.get("likelihood") is not None or binarize not in ("none", "dynamic", "static"):
        return model
    return {**model, "likelihood": suited_likelihood(binarize)}
