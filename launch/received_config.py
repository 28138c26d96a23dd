"""Config files as received: checked for kind, size and YAML alias expansion before any front end reads them, and a
LightningCLI config file (`-c FILE`) for the classes it names before jsonargparse imports them (importing a module
runs its code). Read with yaml's composer only: nothing is built, no alias is expanded, no tag constructs anything.

A config file is still code in the Lightning and Hydra world (a `_target_` names a function Hydra calls); this refuses
what would hang, eat the memory or import a stranger's module on reading, not what a config asks the run to do
(README, "Reliability").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Iterator

from launch.schema import CONFIGS

MAX_CONFIG_BYTES = 1 << 20  # far above any config here (the largest is a few KB)
MAX_EXPANDED_NODES = 100_000  # YAML nodes after alias expansion: a config file has hundreds
# Where a config file's class_path may point: the collection's packages, and Lightning's and torch's own classes of
# the kinds a trainer takes. Anything else would be imported by jsonargparse before it could be refused.
ALLOWED_CLASS_PREFIXES = ("models.", "datamodules.", "callbacks.", "samplers.", "torch.optim.", "lightning.pytorch.callbacks.",
                          "lightning.pytorch.loggers.", "lightning.pytorch.strategies.", "lightning.pytorch.plugins.",
                          "lightning.pytorch.profilers.", "lightning.pytorch.accelerators.", "lightning.pytorch.cli.")


class ConfigRefusal(ValueError):
    pass


def check_file_kind(path: Path, what: str, limit: int = MAX_CONFIG_BYTES) -> None:
    """A regular file of at most `limit` bytes: a pipe or a device would block or never end."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise ConfigRefusal(f"{what} {path}: cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigRefusal(f"{what} {path} is not a regular file (a pipe, a device or a directory); give a YAML file")
    if info.st_size > limit:
        raise ConfigRefusal(f"{what} {path} is {info.st_size} bytes, more than the {limit} a config file may have")


def composed(path: Path, what: str) -> Any:
    """The file's YAML node graph (aliases shared, not expanded), after the kind and size checks; refused when the
    aliases would expand past MAX_EXPANDED_NODES (a "billion laughs" file of a few lines)."""
    import yaml

    check_file_kind(path, what)
    try:
        node = yaml.compose(path.read_text(errors="replace"), Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise ConfigRefusal(f"{what} {path} is not valid YAML ({' '.join(str(error).split())[:160]})") from None
    except RecursionError:
        raise ConfigRefusal(f"{what} {path} is nested too deeply to be a config file") from None
    sizes: dict[int, int] = {}

    def expanded(node: Any) -> int:  # nodes after expansion; each shared node counted once per use, computed once
        if id(node) not in sizes:
            sizes[id(node)] = -1  # a recursive alias: refused below
            if isinstance(node, yaml.MappingNode):
                children = [part for pair in node.value for part in pair]
            elif isinstance(node, yaml.SequenceNode):
                children = node.value
            else:
                children = []
            total = 1
            for child in children:
                size = expanded(child)
                if size < 0:
                    raise ConfigRefusal(f"{what} {path} holds a recursive YAML alias")
                total += size
            sizes[id(node)] = total
        return sizes[id(node)]

    try:
        too_large = node is not None and expanded(node) > MAX_EXPANDED_NODES
    except RecursionError:
        raise ConfigRefusal(f"{what} {path} is nested too deeply to be a config file") from None
    if too_large:
        raise ConfigRefusal(f"{what} {path}: its YAML aliases expand to more than {MAX_EXPANDED_NODES} nodes (a config "
                            "file has hundreds); refused unread")
    return node


def class_paths(node: Any) -> Iterator[str]:
    """Every `class_path: X` (and Hydra `_target_: X`) value in a composed YAML node."""
    import yaml

    seen: set[int] = set()
    stack = [node]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value in ("class_path", "_target_") and isinstance(value, yaml.ScalarNode):
                    yield value.value
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def is_allowed_class(name: str) -> bool:
    return name.startswith(ALLOWED_CLASS_PREFIXES) and "__main__" not in name.split(".")


def cli_config_files(argv: list[str]) -> list[Path]:
    files = []
    for index, arg in enumerate(argv):
        if arg in ("-c", "--config") and index + 1 < len(argv):
            files.append(argv[index + 1])
        elif arg.startswith(("--config=", "-c=")):
            files.append(arg.split("=", 1)[1])
    return [Path(f) for f in files if not f.lstrip().startswith("{")]  # an inline config is the command line's own


def hydra_config_files(argv: list[str]) -> list[Path]:
    """The config files a Hydra command line picks (`experiment=X`, `model=a,b`), from configs/ and from the folders it
    adds with `--config-dir`/`-cd` or `hydra.searchpath=[file://...]`."""
    folders = [CONFIGS]
    for index, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd") and index + 1 < len(argv):
            folders.append(Path(argv[index + 1]))
        elif arg.startswith(("--config-dir=", "-cd=")):
            folders.append(Path(arg.split("=", 1)[1]))
        elif arg.lstrip("+").startswith("hydra.searchpath="):
            entries = arg.split("=", 1)[1].strip("[]").split(",")
            folders += [Path(e.strip().strip("'\"").removeprefix("file://")) for e in entries if "pkg://" not in e]
    files = [CONFIGS / "train.yaml"]
    for arg in argv:
        key, equals, value = arg.lstrip("+~").partition("=")
        if not equals or "." in key or key.startswith("-"):
            continue
        for choice in (c.strip() for c in value.split(",")):
            files += [folder / key / f"{choice}.yaml" for folder in folders
                      if choice and "/" not in choice and (folder / key / f"{choice}.yaml").exists()]
    return files


def check_environment_variables(argv: list[str]) -> None:
    """A Hydra override that reads an unset environment variable without a default (`log_dir=${oc.env:RUNS}`) is
    refused naming it: Hydra resolves some (log_dir, in its run directory) before any check, with a traceback."""
    import re

    for arg in argv:
        key, equals, value = arg.lstrip("+~").partition("=")
        for name, default in re.findall(r"\$\{oc\.env:\s*([^,}\s]+)\s*(,[^}]*)?\}", value if equals else ""):
            if not default and name not in os.environ:
                raise ConfigRefusal(f"{key}={value}: the environment variable {name} is not set; set it, or give a "
                                    f"default: ${{oc.env:{name},DEFAULT}}")


def refuse_received_configs(argv: list[str], cli: bool) -> str | None:
    """The `error:` line for a config file that is not a small YAML file, would expand without bound, or (a
    LightningCLI config) names a class outside the collection, Lightning and torch.optim; None when all are fine."""
    try:
        if not cli:
            check_environment_variables(argv)
        for path in (cli_config_files(argv) if cli else hydra_config_files(argv)):
            what = "config file" if cli else "Hydra config"
            node = composed(path, what)
            if cli:
                stranger = next((name for name in class_paths(node) if not is_allowed_class(name)), None)
                if stranger is not None:
                    raise ConfigRefusal(f"config file {path} names the class {stranger[:120]!r}, which is not one of the "
                                        "collection's, Lightning's or torch.optim's; it is not imported (importing runs "
                                        "code): read the file; a class you trust can be given on the command line (--trainer.callbacks+=CLASS)")
    except ConfigRefusal as refusal:
        return str(refusal)
    return None
