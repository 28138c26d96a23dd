"""Every configurable class's settings and their types, as JSON, so that a command line can be checked without
importing torch.

The constructors' signatures stay the one source (`launch.settings.constructor_hints`, `constructor_defaults`):
`python -m launch.schema` reads them and writes `settings_schema.json` beside this file, each class with the
fingerprint of what it was read from (the project's source files, or the version of torch or Lightning).
`launch.precheck` uses a class's entry only while its fingerprint still matches; otherwise it checks nothing of that
class and the full checks after the imports do all the work, so a stale file never refuses a valid setting.
tests/test_precheck.py fails when the committed file is stale.

A type is stored as a spec: "int", "float", "bool", "str", "any", {"choices": [...]} (a Literal),
{"class": NAME} (any other class) or {"any_of": [specs], "null": bool} (a Union). `expected(spec, value)` is the
check both the pre-check and `launch.settings.check_settings` apply.
"""

from __future__ import annotations

import hashlib
import json
import sys
import types
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

REPO = Path(__file__).resolve().parents[1]
SCHEMA_FILE = Path(__file__).with_name("settings_schema.json")
CONFIGS = REPO / "configs"
# Where the configurable classes are defined: a change to any of these files may change a signature.
SOURCES = ("models", "datamodules", "samplers")
# Constructor arguments that are not settings: the front ends pass them (registered defaults leave them out).
NOT_SETTINGS = {"model": ("data_shape", "optimizer"), "trainer": ("logger", "callbacks", "plugins")}
GROUPS = ("model", "data", "optimizer", "trainer")  # the config groups whose choices name one class


def type_spec(hint: Any) -> Any:
    """A type hint as a JSON-able spec (see the module docstring)."""
    origin = get_origin(hint)
    if origin is Literal:
        return {"choices": list(get_args(hint))}
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        return {"any_of": [type_spec(o) for o in options if o is not type(None)], "null": type(None) in options}
    if hint in (bool, int, float, str):
        return hint.__name__
    if isinstance(hint, type) and origin is None:
        return {"class": hint.__name__}
    return "any"  # sequences, callables, nested configs: left to the constructor


def expected(spec: Any, value: Any) -> str | None:
    """None if `value` fits `spec`, else what was expected (checks Literal, int, float, bool, str, None)."""
    if isinstance(spec, dict) and "choices" in spec:
        return None if value in spec["choices"] else "one of " + ", ".join(map(repr, spec["choices"]))
    if isinstance(spec, dict) and "any_of" in spec:
        if value is None and spec["null"]:
            return None
        failures = [expected(option, value) for option in spec["any_of"]]
        if any(f is None for f in failures):
            return None
        return " or ".join(f for f in failures if f) + (" or null" if spec["null"] else "")
    if spec == "bool":
        return None if isinstance(value, bool) else "true or false"
    if spec == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if spec == "float":
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if spec == "str":
        return None if isinstance(value, str) else "a string"
    if isinstance(spec, dict) and "class" in spec and isinstance(value, (str, int, float, bool)):
        builtin = {"dict": dict, "list": list, "tuple": tuple}.get(spec["class"])  # a plain value is never a Tensor, ...
        return None if builtin is not None and isinstance(value, builtin) else f"a {spec['class']}"
    return None


def fingerprint(target: str, project: str | None = None) -> str:
    """What the settings of class `target` were read from: the installed version of the package that defines it
    (torch.optim.Adam, lightning.Trainer), or a hash of the project's source files (`project`, if already computed)."""
    package = target.split(".", 1)[0]
    if package not in SOURCES:
        return f"{package}=={metadata.version(package)}"
    return project if project is not None else project_fingerprint()


def project_fingerprint() -> str:
    digest = hashlib.sha256()
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def config_targets(group: str) -> dict[str, str]:
    """choice -> the class its config builds, for configs/<group>/*.yaml (read as text: no YAML import needed)."""
    def target_of(path: Path) -> str | None:
        lines = path.read_text().splitlines()
        target = next((line.split(":", 1)[1].strip() for line in lines if line.strip().startswith("_target_:")), None)
        # A config that extends another of its group (configs/model/dvae_gumbel.yaml: defaults: [dvae, _self_]).
        names = [line.strip()[2:].split("#")[0].strip() for line in lines if line.strip().startswith("- ")]
        parents = [path.with_name(name + ".yaml") for name in names if name.isidentifier()]
        return target or next((target_of(parent) for parent in parents if parent.is_file() and parent != path), None)

    return {path.stem: target for path in sorted((CONFIGS / group).glob("*.yaml")) if (target := target_of(path))}


def build() -> dict[str, Any]:
    """The schema, read from the classes (imports torch, Lightning and the project)."""
    from hydra.utils import get_class

    from common.signatures import constructor_defaults, constructor_hints

    choices = {group: config_targets(group) for group in GROUPS}
    classes = {}
    for group, targets in choices.items():
        for target in sorted(set(targets.values())):
            cls = get_class(target)
            hints = constructor_hints(cls)
            names = [n for n in {**constructor_defaults(cls), **hints} if n not in NOT_SETTINGS.get(group, ())]
            classes[target] = {"fingerprint": fingerprint(target),
                               "settings": {name: type_spec(hints[name]) if name in hints else "any" for name in sorted(names)}}
    import datamodules
    import models

    registered = {"model": [n for n in models.__all__ if isinstance(getattr(models, n), type)
                            and issubclass(getattr(models, n), models.LatentVariableModel) and n != "LatentVariableModel"],
                  "data": [n for n in datamodules.__all__ if isinstance(getattr(datamodules, n), type)
                           and issubclass(getattr(datamodules, n), datamodules.ImageDataModule) and n != "ImageDataModule"]}
    return {"choices": choices, "classes": classes,
            "cli_classes": {group: {name: f"{package.__name__}.{name}" for name in names}
                            for (group, names), package in zip(registered.items(), (models, datamodules))}}


def load() -> dict[str, Any] | None:
    """The schema with the classes whose fingerprint matches the code and packages installed now (the others are left
    out: nothing of theirs is checked early); None without a readable file."""
    if not well_formed_file():  # damaged or edited: the full checks decide alone
        return None
    try:
        schema = json.loads(SCHEMA_FILE.read_text())
        project = project_fingerprint()
        schema["classes"] = {target: entry["settings"] for target, entry in schema["classes"].items()
                             if entry["fingerprint"] == fingerprint(target, project)}
    except (OSError, ValueError, KeyError, TypeError, metadata.PackageNotFoundError):
        return None
    priors = sys.modules.get("models.components.priors")  # imported: a prior may have been registered since the file was written
    if priors is not None:
        for settings in schema["classes"].values():
            if "prior" in settings:
                settings["prior"] = type_spec(priors.PriorName)
    return schema


def well_formed_file() -> bool:
    """Whether settings_schema.json has the shape `build` gives it, as far as the early checks read it without further
    checks (a damaged file would otherwise end every command in a traceback)."""
    try:
        schema = json.loads(SCHEMA_FILE.read_text())
    except (OSError, ValueError, RecursionError):
        return False

    def names_to_paths(value: Any) -> bool:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())

    return (isinstance(schema, dict) and isinstance(schema.get("choices"), dict)
            and all(names_to_paths(v) for v in schema["choices"].values())
            and isinstance(schema.get("cli_classes"), dict) and all(names_to_paths(schema["cli_classes"].get(group))
                                                                    for group in ("model", "data"))
            and isinstance(schema.get("classes"), dict)
            and all(isinstance(e, dict) and isinstance(e.get("settings"), dict) for e in schema["classes"].values()))


def main() -> None:
    SCHEMA_FILE.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SCHEMA_FILE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
