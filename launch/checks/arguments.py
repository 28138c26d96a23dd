"""A command line read as the two front ends read it, before anything is imported: Hydra's `KEY=VALUE` overrides
(`overrides_of`), LightningCLI's `--option VALUE` pairs (`option_values`), and the plain values they
set (`scalar`, `values_of`, by Hydra's grammar or LightningCLI's YAML 1.1). The early checks (precheck.py) and both
front ends after them read the command line through these functions, so that they agree on what was given."""

from __future__ import annotations

import re
from typing import Any

# Options after which nothing runs (help, a printed config): no file, directory or DATA_DIR is looked at. LightningCLI's
# (its -c is --config), and Hydra's by their long names (hydra_option).
PRINTS_ONLY = ("-h", "--help", "--print_config", "--model.help", "--data.help")
HYDRA_PRINTS_ONLY = ("--help", "--info", "--hydra-help", "--shell-completion", "--cfg")

# Hydra's options (its argparse: hydra/_internal/utils.py get_args_parser), each with its short form; argparse takes an
# abbreviation of a long one that begins no other (--multi, --config-d, --m).
HYDRA_OPTIONS = {"--help": "-h", "--hydra-help": None, "--version": None, "--cfg": "-c", "--resolve": None,
                 "--package": "-p", "--run": "-r", "--multirun": "-m", "--shell-completion": "-sc", "--config-path": "-cp",
                 "--config-name": "-cn", "--config-dir": "-cd", "--experimental-rerun": None, "--info": "-i"}
# Those after which the config tree is another one, and those that take the next word as their value.
OTHER_TREE = ("--config-name", "--config-path", "--info", "--hydra-help", "--shell-completion")
TAKES_VALUE = ("--cfg", "--package", "--config-dir", "--config-name", "--config-path")


def hydra_option(arg: str) -> tuple[str | None, str | None]:
    """(the Hydra option `arg` gives, by its long name, or None for an override or an option Hydra lacks; the value
    joined to it, or None: --cfg=job, -cjob), as Hydra's argparse reads it: a long name or an abbreviation of one, a
    short form, or -c joined to its value; not -cd, -cp or -cn (the config folder, path and name)."""
    flag, equals, joined = arg.partition("=")
    if flag.startswith("-c") and flag[2:] in ("job", "hydra", "all"):
        return "--cfg", flag[2:]
    # the long names `flag` begins (no name begins another, so a whole one is found alone), or the short form it is
    names = [name for name, form in HYDRA_OPTIONS.items() if (name.startswith(flag) if flag.startswith("--") else form == flag)]
    return (names[0] if len(names) == 1 else None), (joined if equals else None)


# Hydra's grammar (hydra/grammar/OverrideLexer.g4): 007 is a string, 1_000 an int, 1_0.5 a float.
_DIGITS = r"\d(?:_?\d)*"
_INT = re.compile(r"[+-]?(?:0|[1-9](?:_?\d)*)")
_FLOAT = re.compile(rf"[+-]?(?:(?:(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\.)(?:[eE][+-]?{_DIGITS})?|{_DIGITS}[eE][+-]?{_DIGITS}|inf|nan)",
                    re.I)
_YAML_WORDS = {"~": None, "yes": True, "on": True, "no": False, "off": False}  # LightningCLI reads values as YAML 1.1


def scalar(text: str, cli: bool = False) -> tuple[bool, Any]:
    """(True, value) for a plain value as Hydra's grammar reads it (null, true/false, int, float, a quoted or bare
    string; with `cli`, as LightningCLI's YAML reads it); (False, None) for anything richer (an interpolation, a list,
    a dict, a function such as range(), an escape)."""
    text = text.strip()
    if any(mark in text for mark in ("${", "[", "]", "{", "}", "(", ")", "\\")):
        return False, None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return True, text[1:-1]
    named = {"null": None, "true": True, "false": False, **(_YAML_WORDS if cli else {})}  # `none` is a string to both
    if text.lower() in named:
        return True, named[text.lower()]
    if _INT.fullmatch(text) or (cli and re.fullmatch(rf"[+-]?{_DIGITS}", text)):
        return True, int(text.replace("_", ""))
    if _FLOAT.fullmatch(text):
        return True, float(text.replace("_", ""))
    return True, text


def values_of(text: str, cli: bool = False) -> list[Any] | None:
    """The values an override sets: one, or (Hydra) each of a simple sweep a,b,c; None if they cannot be read here."""
    if not cli and any(quote in text for quote in "'\"") and "," in text:
        return None  # a quoted value may hold commas: left to Hydra's parser
    parts = [scalar(part, cli) for part in ([text] if cli else text.split(","))]
    return [value for _, value in parts] if all(ok for ok, _ in parts) else None


def option_values(argv: list[str]) -> list[tuple[str, str | None]]:
    """(--option, value) pairs of a LightningCLI command line: --key=value, --key value, or a flag alone (a value taken
    does not start with '-', so it is never read as an option)."""
    following = [*(None if arg.startswith("-") else arg for arg in argv[1:]), None]  # the word after each, if a value
    return [tuple(arg.split("=", 1)) if "=" in arg else (arg, value) for arg, value in zip(argv, following)
            if arg.startswith("--")]


def cli_options(argv: list[str]) -> list[tuple[str, str | None]]:
    """option_values of a LightningCLI command line (`argv[0]` its subcommand), its config file in every spelling
    argparse takes (-c F, -cF, -c=F, --config F, --config=F) as --config."""
    return option_values(["--config" if arg == "-c" else f"--config={arg[2:].removeprefix('=')}" if arg.startswith("-c")
                          else arg for arg in argv[1:]])


def hydra_words(argv: list[str]) -> list[str]:
    """The words of a Hydra command line that are neither its options nor their values: its overrides, as written."""
    words, skip = [], False
    for arg in argv:
        if skip or arg.startswith("-"):
            option, joined = hydra_option(arg)
            skip = not skip and option in TAKES_VALUE and joined is None
        else:
            words.append(arg)
    return words


def overrides_of(argv: list[str]) -> list[tuple[str, str]]:
    """(key, value) of a Hydra command line's key=value overrides (+key, key@package alike)."""
    split = [word.lstrip("+").partition("=") for word in hydra_words(argv) if "=" in word and not word.startswith("~")]
    return [(key.split("@", 1)[0], value.strip()) for key, _, value in split]
