"""Config files as received, checked before jsonargparse or Hydra reads them (importing a module runs its code): every
source a command line gives (LightningCLI's `-c`/`--config` in each spelling, an option's value that names a file or is
YAML naming one, a file a config names as a value, at any depth; Hydra's groups in the folders the command adds) for
kind, size, YAML alias expansion and tags (a pipe would block, a "billion laughs" file would eat the memory), and each
dotted name where a parser would import it against the allowed packages and the user's own in LATENT_ZOO_TRUST
(checkpoints/import_paths.py). Read with yaml's composer only: nothing is built, no alias expanded, no tag constructs
anything. `python -m launch.checks.received_config ARGS` lists what a command would read and import.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from checkpoints.import_paths import PATH_SETTINGS, TRUST_HINT, is_allowed_import, looks_like_import_path, trusted_prefixes
from launch.checks.configs import CONFIGS

MAX_CONFIG_BYTES = 1 << 20  # far above any config here (the largest is a few KB)
MAX_EXPANDED_NODES = 100_000  # YAML nodes after alias expansion: a config file has hundreds
MAX_NESTED_FILES = 8  # a config file naming a file that names a file...: real ones nest one level, if any
MAX_RECEIVED_FILES = 500  # config files one command may have read (nested, or in Hydra's folders); configs/ has ~60
# A Hydra config's _target_ may also name the Trainer and Hydra's launchers and sweepers (configs/ do); not hydra.utils,
# whose get_class and get_method import the name they are given.
HYDRA_PREFIXES = ("lightning.Trainer", "hydra_plugins.")
GROUP_FOLDERS = ("model", "data", "optimizer", "scheduler", "trainer", "logger", "callbacks", "experiment", "hydra")
PLAIN_TAGS = {"!", *(f"tag:yaml.org,2002:{kind}" for kind in ("str", "int", "float", "bool", "null", "map", "seq",
                                                              "merge", "timestamp"))}


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
    check_file_kind(path, what)
    return composed_text(path.read_text(errors="replace"), f"{what} {path}")


def composed_text(text: str, label: str) -> Any:
    """`text`'s YAML node graph, refused (naming `label`) when it is not YAML or its aliases expand without bound."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise ConfigRefusal(f"{label} is not valid YAML ({' '.join(str(error).split())[:160]})") from None
    except RecursionError:
        raise ConfigRefusal(f"{label} is nested too deeply to be a config file") from None
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
                    raise ConfigRefusal(f"{label} holds a recursive YAML alias")
                total += size
            sizes[id(node)] = total
        return sizes[id(node)]

    try:
        too_large = node is not None and expanded(node) > MAX_EXPANDED_NODES
    except RecursionError:
        raise ConfigRefusal(f"{label} is nested too deeply to be a config file") from None
    if too_large:
        raise ConfigRefusal(f"{label}: its YAML aliases expand to more than {MAX_EXPANDED_NODES} nodes (a config "
                            "file has hundreds); refused unread")
    return node


class ReceivedFiles:
    """The config files one command line makes jsonargparse or Hydra read, each checked before either runs: the file
    itself (kind, size, alias expansion: `composed`), its YAML tags (plain values only), the dotted names it gives
    (checkpoints/import_paths.py), and, for LightningCLI, the files it names in turn (jsonargparse reads a setting
    whose value is a file's name as that file: `model: sub.yaml`), at any depth, within MAX_NESTED_FILES levels and
    MAX_RECEIVED_FILES files in all."""

    def __init__(self) -> None:
        self.read = 0
        self.files: list[str] = []  # each file read, as its label says (for `python -m launch.checks.received_config`)
        self.imports: list[str] = []  # each allowed dotted name a file gives: "<label>: <key> = <name>"

    def check_cli_file(self, path: Path, label: str, chain: tuple[Path, ...] = ()) -> None:
        """A LightningCLI config file (`-c`, a group's `--model=FILE`, or one a config file names)."""
        resolved = Path(os.path.abspath(path))
        if resolved in chain:
            raise ConfigRefusal(f"{label} names itself again through its nested config files (a loop); refused unread")
        if len(chain) >= MAX_NESTED_FILES:
            raise ConfigRefusal(f"{label}: config files name config files more than {MAX_NESTED_FILES} levels deep; refused unread")
        self.count(label)
        try:
            node = composed(path, "config file")
        except ConfigRefusal as refusal:  # a nested file's refusal says where it was named
            raise ConfigRefusal(str(refusal).replace(f"config file {path}", label, 1)) from None
        self.check_node(node, label, path.parent, (*chain, resolved), cli=True)

    def count(self, label: str) -> None:
        self.read += 1
        self.files.append(label)
        if self.read > MAX_RECEIVED_FILES:
            raise ConfigRefusal(f"{label}: the command would read more than {MAX_RECEIVED_FILES} config files; refused unread")

    def check_node(self, node: Any, label: str, base: Path, chain: tuple[Path, ...], cli: bool, names: bool = True,
                   where: str = "") -> None:
        """Walk a composed node once (a shared alias once): refuse a tag, a name that is not allowed, a named file
        that is not a sound config file. `names=False` (a value typed on the command line) checks the named files only."""
        import yaml

        seen: set[int] = set()
        stack: list[tuple[Any, str, str]] = [(node, where, where.rsplit(".", 1)[-1])]
        while stack:
            node, where, leaf = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            self.check_tag(node, label, where)
            children = []  # pushed last first, so that the file is read (and named) top to bottom
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    self.check_tag(key, label, where)
                    name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                    if key.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: the merged keys are this mapping's
                        children.append((value, where, leaf))
                    else:
                        children.append((value, f"{where}.{name}" if where else name, name.rsplit(".", 1)[-1]))
            elif isinstance(node, yaml.SequenceNode):
                children = [(item, f"{where}[{index}]", leaf) for index, item in enumerate(node.value)]
            elif isinstance(node, yaml.ScalarNode) and leaf not in PATH_SETTINGS:
                self.check_value(str(node.value), label, base, chain, cli, names, where or "the whole file", stack)
            stack += reversed(children)

    def check_value(self, value: str, label: str, base: Path, chain: tuple[Path, ...], cli: bool, names: bool, where: str,
                    stack: list[tuple[Any, str, str]]) -> None:
        if not cli:  # Hydra imports a _target_ only, and reads no file a value names
            leaf = where.rsplit(".", 1)[-1]
            if leaf in ("_target_", "class_path") and looks_like_import_path(value):
                if not is_allowed_import(value, HYDRA_PREFIXES):
                    raise ConfigRefusal(refusal_of_name(label, where, value))
                self.imports.append(f"{label}: {where} = {value}")
            return
        named = named_file(value, base)
        if named is not None:
            self.check_cli_file(named, f"config file {named} (named at {where} of {label})", chain)
        elif value.lstrip()[:1] in ("{", "["):  # jsonargparse reads such a string as YAML: its settings are this file's
            stack.append((composed_text(value, f"{label}: the value at {where}"), where, where.rsplit(".", 1)[-1]))
        elif names and looks_like_import_path(value):
            if not is_allowed_import(value):
                raise ConfigRefusal(refusal_of_name(label, where, value))
            self.imports.append(f"{label}: {where} = {value}")

    @staticmethod
    def check_tag(node: Any, label: str, where: str) -> None:
        if node.tag not in PLAIN_TAGS:  # !!python/name:..., !!python/object: nothing is constructed, nor read
            raise ConfigRefusal(f"{label}: {where or 'the whole file'} carries the YAML tag {node.tag[:80]!r}; a config "
                                "file holds plain values (strings, numbers, lists, mappings); refused unread")


def given_settings(node: Any, where: str = "") -> list[tuple[str, str | None]]:
    """(dotted key, value) for every key of a composed config file's mappings, top to bottom at any depth (`trainer:
    {max_epochs: 1}` gives trainer and trainer.max_epochs): a scalar's value as the command line would carry it (a
    quoted one in quotes), None for a mapping or a list. What the early checks (precheck.py) check a file's settings by."""
    import yaml

    found: list[tuple[str, str | None]] = []
    for key, value in node.value if isinstance(node, yaml.MappingNode) else []:
        if key.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: the merged keys are this mapping's
            found += given_settings(value, where)
            continue
        name = f"{where}.{key.value}" if where else str(key.value)
        text = value.value if isinstance(value, yaml.ScalarNode) else None
        if text is not None and value.style is not None:  # quoted: a string, as a quoted value on the command line
            text = f'"{text}"' if '"' not in text and "\\" not in text else None
        found += [(name, text), *given_settings(value, name)]
    return found


def refusal_of_name(label: str, where: str, value: str) -> str:
    return (f"{label}: {where} names {value.strip()[:120]!r}, which is not a class or function of the collection, Lightning "
            f"or torch.optim; it is not imported (importing runs code): read the file; {TRUST_HINT}")


def named_file(value: str, base: Path) -> Path | None:
    """The file a setting's value names, as jsonargparse finds it (beside the config file, or from the working
    directory); None for a value that names no file, or a directory (which is never read as a config)."""
    if not value or len(value) > 4096 or "\0" in value or "\n" in value:
        return None
    for candidate in dict.fromkeys((base / value, Path(value))):
        try:
            if os.path.lexists(candidate):
                return None if candidate.is_dir() else candidate
        except (OSError, ValueError):
            return None
    return None


def cli_sources(argv: list[str]) -> list[tuple[str, str]]:
    """(option, value) for each value of a LightningCLI command line that jsonargparse may read as a config: the
    config file in every spelling argparse takes (-c F, -cF, -c=F, --config F, --config=F, --conf=F), and any other
    option's value (a group's config file, --model=FILE, --trainer.callbacks=FILE, or YAML naming one)."""
    pairs, index = [], 1
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            option, equals, value = arg.partition("=")
            if not equals:
                if index >= len(argv) or argv[index].startswith("-"):
                    continue
                value, index = argv[index], index + 1
            pairs.append((option, value))
        elif arg.startswith("-c"):
            if arg == "-c":
                if index < len(argv):
                    pairs.append(("-c", argv[index]))
                    index += 1
            else:
                pairs.append(("-c", arg[2:].removeprefix("=")))
    return pairs


def is_config_option(option: str) -> bool:
    return option == "-c" or (len(option) >= 3 and "--config".startswith(option))


def check_cli_sources(argv: list[str], files: ReceivedFiles) -> None:
    for option, value in cli_sources(argv):
        leaf = option[2:].rstrip("+").rsplit(".", 1)[-1]
        if leaf in PATH_SETTINGS and not is_config_option(option):
            continue
        path = Path(value)
        exists = os.path.lexists(path) if value and "\0" not in value else False
        if exists and (is_config_option(option) or not path.is_dir()):  # -c DIR is refused by check_file_kind
            label = f"config file {path}" if is_config_option(option) else f"config file {path} (given as {option})"
            files.check_cli_file(path, label)
        elif not exists:  # YAML typed on the command line (-c '{...}', --model='class_path: ...'): the files it names
            try:
                node = composed_text(value, f"the value of {option}")
            except ConfigRefusal:
                if value.lstrip()[:1] in ("{", "[") or is_config_option(option):
                    raise
                continue  # not YAML: jsonargparse reports it
            files.check_node(node, f"the value of {option}", Path("."), (), cli=True, names=False)


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


def hydra_folders(argv: list[str]) -> list[Path]:
    """The folders a Hydra command line adds to the config search path (the user's, not configs/): --config-dir,
    --config-path (and the abbreviations Hydra's argparse takes), -cd, -cp, hydra.searchpath=[file://...]."""
    folders, index = [], 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        option, equals, value = arg.partition("=")
        if option in ("-cd", "-cp") or (len(option) > len("--config-") and ("--config-dir".startswith(option)
                                                                            or "--config-path".startswith(option))):
            if not equals and index < len(argv):
                value, index = argv[index], index + 1
            folders.append(Path(value))
        elif option.lstrip("+") == "hydra.searchpath":
            entries = value.strip("[]").split(",")
            folders += [Path(e.strip().strip("'\"").removeprefix("file://")) for e in entries if "pkg://" not in e and e.strip()]
    return folders


def hydra_received_files(argv: list[str]) -> dict[Path, Any]:
    """Every YAML file Hydra may read from the user's folders: their top-level files (a primary config) and every
    file, sub-folders included, of each config group (the tree's, the command line's, and those the files' defaults
    lists name), each composed (refused if it would expand without bound); symlinked sub-folders are not followed."""
    import yaml

    groups = set(GROUP_FOLDERS) | {key.lstrip("+~").split("=", 1)[0].split("@", 1)[0] for key in argv if "=" in key}
    found: dict[Path, Any] = {}
    for folder in hydra_folders(argv):
        if not folder.is_dir():
            continue
        for path in sorted(p for p in folder.glob("*.y*ml") if not p.is_dir()):
            found[path] = composed(path, "Hydra config")
        pending = sorted(groups)
        scanned: set[str] = set()
        while pending:
            group = pending.pop().strip("/")
            if not group or group in scanned or ".." in group.split("/"):
                continue
            scanned.add(group)
            for directory, subfolders, names in os.walk(folder / group):
                subfolders.sort()
                for name in sorted(n for n in names if n.endswith((".yaml", ".yml"))):
                    if len(found) >= MAX_RECEIVED_FILES:
                        raise ConfigRefusal(f"Hydra config folder {folder} holds more than {MAX_RECEIVED_FILES} YAML files "
                                            "in its config groups; give the folder that holds only the configs")
                    path = Path(directory) / name
                    found[path] = composed(path, "Hydra config")
                    pending += defaults_groups(found[path], yaml)  # - /model: x, - override /other: y are read too
    return found


def defaults_groups(node: Any, yaml: Any) -> list[str]:
    groups = []
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if getattr(key, "value", None) == "defaults" and isinstance(value, yaml.SequenceNode):
                for item in value.value:
                    if isinstance(item, yaml.MappingNode):
                        for entry, _ in item.value:
                            name = str(getattr(entry, "value", "")).removeprefix("override ").removeprefix("optional ")
                            groups.append(name.split("@", 1)[0])
    return groups


def received_files(argv: list[str], cli: bool) -> ReceivedFiles:
    """Every config file `python train.py ARGV` would have jsonargparse or Hydra read, checked (ConfigRefusal naming
    the first that is refused), with the dotted names they give."""
    try:
        trusted_prefixes()  # a malformed LATENT_ZOO_TRUST: refused before anything is read
    except ValueError as error:
        raise ConfigRefusal(str(error)) from None
    files = ReceivedFiles()
    if cli:
        check_cli_sources(argv, files)
    else:
        check_environment_variables(argv)
        for path in hydra_config_files(argv):  # configs/'s own, and the user's folders' files the choices pick
            files.count(f"Hydra config {path}")
            files.check_node(composed(path, "Hydra config"), f"Hydra config {path}", path.parent, (), cli=False)
        for path, node in hydra_received_files(argv).items():  # every file of the user's folders Hydra may read
            if f"Hydra config {path}" not in files.files:
                files.count(f"Hydra config {path}")
                files.check_node(node, f"Hydra config {path}", path.parent, (), cli=False)
    return files


def refuse_received_configs(argv: list[str], cli: bool) -> str | None:
    """The `error:` line for a config a command would read that is not a small YAML file, would expand without bound,
    carries a YAML tag, names a file that is not a sound config (LightningCLI), or names a class or function outside
    the collection, Lightning and torch.optim where a parser would import it; None when all are fine."""
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
        files = received_files(argv, cli)
    except ConfigRefusal as refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    print(f"python train.py {' '.join(argv)}: the config files it names, and those they name, checked (nothing refused):")
    print("\n".join(f"  {label}" for label in files.files) or "  (none: the command line only)")
    print("and the classes and functions they name (allowed packages; each still chooses what runs):")
    print("\n".join(f"  {line}" for line in files.imports) or "  (none)")
    if not cli:
        print(f"the whole composed config, configs/'s defaults included: python train.py --cfg job {' '.join(argv)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
