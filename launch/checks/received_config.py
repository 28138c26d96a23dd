"""Config files as received (every file a command would read: LightningCLI's configs, option values naming files, files
a config names, Hydra's YAML in added search folders), checked before jsonargparse or Hydra reads them, since
importing a module runs its code and a few lines of YAML aliases can expand past the memory. Each must be a regular
file of at most MAX_CONFIG_BYTES whose aliases expand to at most MAX_EXPANDED_NODES nodes, with no YAML tag, naming
classes or functions only in the trusted packages (common/registry.py). Files are read with yaml's composer
only (nothing constructed). `python -m launch.checks.received_config ARGS` lists what a command would read and import.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from common.registry import PATH_SETTINGS, trust_hint, is_allowed_import, looks_like_import_path, trusted_prefixes
from launch.checks.arguments import cli_options, hydra_option, overrides_of
from launch.checks.configs import CONFIGS
from launch.checks.precheck import SettingsError

MAX_CONFIG_BYTES = 1 << 20  # far above any config here (the largest is a few KB)
MAX_EXPANDED_NODES = 100_000  # YAML nodes after alias expansion: a config file has hundreds
MAX_NESTED_FILES = 8  # a config file naming a file that names a file...: real ones nest one level, if any
MAX_RECEIVED_FILES = 500  # config files one command may read (nested, or in Hydra's folders); configs/ has ~60
# A Hydra config's _target_ may also name the Trainer and Hydra's launchers and sweepers; not hydra.utils, whose
# get_class and get_method import the name they are given.
HYDRA_PREFIXES = ("lightning.Trainer", "hydra_plugins.")
MERGE = "tag:yaml.org,2002:merge"  # `<<: *defaults`: the merged keys are this mapping's
PLAIN_TAGS = {"!", MERGE, *(f"tag:yaml.org,2002:{kind}" for kind in ("str", "int", "float", "bool", "null", "map", "seq",
                                                                     "timestamp"))}


class ConfigRefusal(SettingsError):
    """A received config refused: the message is the one line the user sees."""


def composed(path: Path, label: str) -> Any:
    """The file's YAML node graph (`composed_text`), once it is known to be a regular file (a pipe or a device would
    block or never end) of at most MAX_CONFIG_BYTES; a refusal names `label` ("config file PATH")."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise ConfigRefusal(f"{label}: cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigRefusal(f"{label} is not a regular file (a pipe, a device or a directory); give a YAML file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigRefusal(f"{label} is {info.st_size} bytes, more than the {MAX_CONFIG_BYTES} a config file may have")
    return composed_text(path.read_text(errors="replace"), label)


def composed_text(text: str, label: str) -> Any:
    """`text`'s YAML node graph from yaml's composer (aliases shared, not expanded), refused naming `label` when it is
    not YAML, is nested too deeply, carries a YAML tag (plain values only), or its aliases would expand past
    MAX_EXPANDED_NODES (a "billion laughs" file of a few lines; an alias inside its own node, for ever): a walk of the
    expanded graph that stops at that many nodes."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark, problem = getattr(error, "problem_mark", None), getattr(error, "problem", None) or str(error).split("\n")[0]
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigRefusal(f"{label} is not valid YAML{where}: {problem}; fix it there (often the indentation, a missing "
                            "space after ':' or an unclosed quote or bracket)") from None
    except RecursionError:
        raise ConfigRefusal(f"{label} is nested too deeply to be a config file") from None
    stack = [root] if root is not None else []
    for _ in range(MAX_EXPANDED_NODES + 1):
        if not stack:
            return root
        node = stack.pop()
        if node.tag not in PLAIN_TAGS:  # !!python/name:..., !!python/object: nothing is constructed, nor read
            raise ConfigRefusal(f"{label}: line {node.start_mark.line + 1} carries the YAML tag {node.tag[:80]!r}; a "
                                "config file holds plain values (strings, numbers, lists, mappings); refused unread")
        stack += [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
    raise ConfigRefusal(f"{label}: its YAML aliases expand to more than {MAX_EXPANDED_NODES} nodes (a config "
                        "file has hundreds); refused unread")


def given_settings(node: Any, where: str = "") -> list[tuple[str, str | None]]:
    """(dotted key, value) for every key of a composed config file's mappings, top to bottom at any depth (`trainer:
    {max_epochs: 1}` gives trainer and trainer.max_epochs): a scalar's value as the command line would carry it (a
    quoted one in quotes), None for a mapping or a list. What the early checks (precheck.py) check a file's settings by."""
    import yaml

    found: list[tuple[str, str | None]] = []
    for key, value in node.value if isinstance(node, yaml.MappingNode) else []:
        if key.tag == MERGE:
            found += given_settings(value, where)
            continue
        name = f"{where}.{key.value}" if where else str(key.value)
        text = value.value if isinstance(value, yaml.ScalarNode) else None
        if text is not None and value.style is not None:  # quoted: a string, as a quoted value on the command line
            text = f'"{text}"' if '"' not in text and "\\" not in text else None
        found += [(name, text), *given_settings(value, name)]
    return found


class ReceivedFiles:
    """The config files one command would have jsonargparse or Hydra read (`files`, as their labels name them) and the
    allowed dotted names they give (`imports`, "<label>: <key> = <name>"), each checked as it is found."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.imports: list[str] = []

    def read(self, path: Path, label: str, cli: bool, chain: tuple[Path, ...] = ()) -> Any:
        """One config file (its node; None if read already), checked, and for LightningCLI each file it names in turn
        (`chain`: the files that led here)."""
        resolved = Path(os.path.abspath(path))
        if resolved in chain:
            raise ConfigRefusal(f"{label} names itself again through its nested config files (a loop); refused unread")
        if len(chain) >= MAX_NESTED_FILES:
            raise ConfigRefusal(f"{label}: config files name config files more than {MAX_NESTED_FILES} levels deep; "
                                "refused unread")
        if label in self.files:
            return None
        self.files.append(label)
        if len(self.files) > MAX_RECEIVED_FILES:
            raise ConfigRefusal(f"{label}: the command would read more than {MAX_RECEIVED_FILES} config files; "
                                "refused unread")
        node = composed(path, label)
        self.walk(node, label, path.parent if cli else None, (*chain, resolved))
        return node

    def walk(self, node: Any, label: str, base: Path | None, chain: tuple[Path, ...] = (), names: bool = True) -> None:
        """Each node of a composed file once (a shared alias once), top to bottom, holding every name a parser would
        import to the rule: Hydra's (`base` None) a `_target_`; LightningCLI's any dotted string (`names=False`: a
        value typed on the command line is the user's). For LightningCLI, as jsonargparse reads them, a value naming a
        file (beside this one, in `base`, or from the working directory) is read as that file, and a value that is
        YAML as part of this one."""
        import yaml

        seen, stack = set(), [(node, "")]
        while stack:
            node, where = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            leaf, value = where.rsplit(".", 1)[-1].split("[")[0], node.value
            if isinstance(node, yaml.MappingNode):
                for key, child in reversed(node.value):
                    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                    stack.append((child, where if key.tag == MERGE else f"{where}.{name}" if where else name))
            elif isinstance(node, yaml.SequenceNode):
                stack += reversed([(item, f"{where}[{index}]") for index, item in enumerate(node.value)])
            elif leaf in PATH_SETTINGS:
                continue
            elif base is not None and (named := named_file(value, base)) is not None and not named.is_dir():
                self.read(named, f"config file {named} (named at {where} of {label})", True, chain)
            elif base is not None and value.lstrip()[:1] in ("{", "["):  # jsonargparse reads it as YAML: this file's
                stack.append((composed_text(value, f"{label}: the value at {where}"), where))
            elif (names if base is not None else leaf in ("_target_", "class_path")) and looks_like_import_path(value):
                if not is_allowed_import(value, () if base is not None else HYDRA_PREFIXES):
                    raise ConfigRefusal(f"{label}: {where} names {value.strip()[:120]!r}, which is not a class or function "
                                        "of the collection, Lightning or torch.optim; it is not imported (importing runs "
                                        f"code): read the file; {trust_hint()}")
                self.imports.append(f"{label}: {where} = {value}")


def named_file(value: str, base: Path) -> Path | None:
    """The file or folder (a link, dangling too) a setting's value names, as jsonargparse finds it: beside the config
    file in `base`, or from the working directory; None when it names none."""
    return next((path for path in (base / value, Path(value)) if value and os.path.lexists(path)), None)


def cli_sources(argv: list[str]) -> list[tuple[str, str]]:
    """(option, value) for each value of a LightningCLI command line (`argv[0]` its subcommand) that jsonargparse may
    read as a config: the config file in every spelling argparse takes (cli_options; --conf=F too: each as --config),
    and any other option's value (a group's config file, --model=FILE, or YAML naming one)."""
    return [("--config" if len(option) >= 3 and "--config".startswith(option) else option, value)
            for option, value in cli_options(argv) if value is not None]


def hydra_option_values(argv: list[str], name: str) -> list[str]:
    """The values a Hydra command line gives its option `name` (--config-dir), by any spelling its argparse takes (-cd,
    --config-d), joined by '=' or not."""
    found = [(index, hydra_option(arg)) for index, arg in enumerate(argv) if arg.startswith("-")]
    return [value if value is not None else argv[index + 1] for index, (option, value) in found
            if option == name and (value is not None or index + 1 < len(argv))]


def hydra_folders(argv: list[str]) -> list[Path]:
    """The folders a Hydra command line adds to the config search path (the user's, not configs/): --config-dir,
    --config-path (and the abbreviations Hydra's argparse takes), -cd, -cp, hydra.searchpath=[file://...]."""
    folders = [Path(value) for name in ("--config-dir", "--config-path") for value in hydra_option_values(argv, name)]
    for key, value in overrides_of(argv):
        entries = [entry.strip().strip("'\"") for entry in value.strip("[]").split(",")] if key == "hydra.searchpath" else []
        folders += [Path(entry.removeprefix("file://")) for entry in entries if entry and "pkg://" not in entry]
    return folders


def defaults_groups(node: Any) -> list[str]:
    """The config groups a Hydra config's defaults list names (`- /model: x`, `- override /logger: y`)."""
    import yaml

    lists = [value.value for key, value in node.value if key.value == "defaults" and isinstance(value, yaml.SequenceNode)] \
        if isinstance(node, yaml.MappingNode) else []
    return [str(key.value).removeprefix("override ").removeprefix("optional ").split("@")[0]
            for entry in sum(lists, []) if isinstance(entry, yaml.MappingNode) for key, _ in entry.value]


def received_files(argv: list[str], cli: bool) -> ReceivedFiles:
    """Every config file `python train.py ARGV` would have jsonargparse or Hydra read from the user, checked
    (ConfigRefusal naming the first refused), with the dotted names they give. Hydra's: the files of configs/ the
    command line chooses (`experiment=X`, `model=a,b`), and in each folder the command adds, its top-level files (a
    primary config) and every file of each config group Hydra may read there (configs/'s, the command line's, those
    the files' defaults lists name), sub-folders included (a link to one is not followed)."""
    try:
        trusted_prefixes()  # a malformed LATENT_ZOO_TRUST: refused before anything is read
    except ValueError as error:
        raise ConfigRefusal(str(error)) from None
    found = ReceivedFiles()
    if cli:
        for option, value in cli_sources(argv):
            config, path = option == "--config", named_file(value, Path("."))
            if not config and option[2:].rstrip("+").rsplit(".", 1)[-1] in PATH_SETTINGS:
                continue
            if path is not None and (config or not path.is_dir()):  # -c DIR: refused as not a regular file
                found.read(path, f"config file {path}" + ("" if config else f" (given as {option})"), cli=True)
            elif path is None:  # YAML typed on the command line (-c '{...}', --model='class_path: ...'): its files
                try:
                    node = composed_text(value, f"the value of {option}")
                except ConfigRefusal:
                    if config or value.lstrip()[:1] in ("{", "["):
                        raise
                    continue  # not YAML: jsonargparse reports it
                found.walk(node, f"the value of {option}", Path("."), names=False)
        return found
    chosen = overrides_of(argv)
    for key, value in chosen:  # Hydra resolves some (log_dir) before any check, with a traceback
        for name, default in re.findall(r"\$\{oc\.env:\s*([^,}\s]+)\s*(,[^}]*)?\}", value):
            if not default and name not in os.environ:
                raise ConfigRefusal(f"{key}={value}: the environment variable {name} is not set; set it, or give a "
                                    f"default: ${{oc.env:{name},DEFAULT}}")
    for path in (CONFIGS / group / f"{choice.strip()}.yaml" for group, value in chosen for choice in value.split(",")):
        if path.is_file():  # configs/'s own, or a received file put there
            found.read(path, f"Hydra config {path}", cli=False)
    groups = ["", *sorted(path.name for path in CONFIGS.iterdir() if path.is_dir()), *(group for group, _ in chosen)]
    for folder in hydra_folders(argv):
        if (folder / "hydra.yaml").is_file() and (folder / "overrides.yaml").is_file():  # it names Hydra's own classes
            raise ConfigRefusal(f"{folder} is the record of a run (Hydra's .hydra folder), not a folder of configs; run it "
                                f"again with the overrides it lists in {folder / 'overrides.yaml'}: python train.py OVERRIDES (with the "
                                "--config-dir it ran with, if any: hydra.runtime.config_sources in its hydra.yaml)")
        pending, scanned = list(groups), set()
        while pending:
            group = pending.pop().strip("/")
            if group in scanned or ".." in group.split("/"):
                continue
            scanned.add(group)
            for directory, subfolders, names in os.walk(folder / group):  # "": the folder's own files only
                subfolders[:] = sorted(subfolders) if group else []
                for path in sorted(Path(directory) / name for name in names if name.endswith((".yaml", ".yml"))):
                    pending += defaults_groups(found.read(path, f"Hydra config {path}", cli=False))
    return found


def refuse_received_configs(argv: list[str], cli: bool) -> str | None:
    """The `error:` line for the first config a command would read that `received_files` refuses; None when all pass."""
    try:
        received_files(argv, cli)
    except ConfigRefusal as refusal:
        return str(refusal)
    return None


def main(argv: list[str]) -> int:
    """`python -m launch.checks.received_config ARGS`: what `python train.py ARGS` would read and import from its config
    files, read here without importing anything; exit status 2 with the refusal, as train.py would give it."""
    from launch import CLI_SUBCOMMANDS

    cli = bool(argv) and argv[0] in CLI_SUBCOMMANDS
    try:
        found = received_files(argv, cli)
    except ConfigRefusal as refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    print(f"python train.py {' '.join(argv)}: the config files it names, and those they name, checked (nothing refused):")
    print("\n".join(f"  {label}" for label in found.files) or "  (none: the command line only)")
    print("and the classes and functions they name (allowed packages; each still chooses what runs):")
    print("\n".join(f"  {line}" for line in found.imports) or "  (none)")
    if not cli:
        print(f"the whole composed config, configs/'s defaults included: python train.py --cfg job {' '.join(argv)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
