"""Every configurable class's settings and their types, as JSON, so that a command line can be checked without
importing torch.

The constructors' signatures stay the one source (`launch.checks.settings.constructor_hints`, `constructor_defaults`):
`python -m launch.checks.schema` reads them and writes `settings_schema.json` beside this file, each class with the
fingerprint of what it was read from: for a project class, the code of the files that define it and its project base
classes and of the project modules these import, where its settings' choices live (their syntax trees without
docstrings, so that a comment or a docstring edit keeps the entry); for torch's
or Lightning's, the package's version.
`launch.checks.precheck` uses a class's entry only while its fingerprint still matches; otherwise it checks nothing of that
class and the full checks after the imports do all the work, so a stale file never refuses a valid setting.
tests/launch/checks/test_precheck.py fails when the committed file is stale.

A type is stored as a spec: "int", "float", "bool", "str", "any", {"choices": [...]} (a Literal),
{"class": NAME} (any other class) or {"any_of": [specs], "null": bool} (a Union). `expected(spec, value)` is the
check both the pre-check and `launch.checks.settings.check_settings` apply. A number the constructor bounds (`if mis_steps
< 1: raise ValueError(...)`, read from its source by `constructor_bounds`) is stored as {"of": spec, "ge": 1} (also
"gt", "le", "lt"), so that the pre-check refuses `model.mis_steps=-1` before the imports, as the constructor would after.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import sys
import textwrap
import types
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = Path(__file__).with_name("settings_schema.json")
CONFIGS = REPO / "configs"
# Where the configurable classes are defined: a change to any of these files may change a signature.
SOURCES = ("models", "datamodules", "samplers")
# Constructor arguments that are not settings: the front ends pass them (registered defaults leave them out).
NOT_SETTINGS = {"model": ("data_shape", "optimizer", "scheduler"), "trainer": ("logger", "callbacks", "plugins")}
GROUPS = ("model", "data", "optimizer", "scheduler", "trainer")  # the config groups whose choices name one class


def default_choices() -> dict[str, str]:
    """group -> the default choice of configs/train.yaml's defaults list (`- model: jsa`)."""
    import re

    choices = {}
    for line in (CONFIGS / "train.yaml").read_text().splitlines():
        match = re.match(r"\s*-\s*(\w+)\s*:\s*([\w.]+)", line)
        if match:
            choices[match[1]] = match[2]
    return choices


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
    if isinstance(spec, dict) and "of" in spec:
        return _bounded(spec, value)
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


BOUND_WORDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _within(spec: dict[str, Any], value: float) -> bool:
    return all({"ge": value >= bound, "gt": value > bound, "le": value <= bound, "lt": value < bound}[key]
               for key, bound in spec.items() if key in BOUND_WORDS)


def _bounded(spec: dict[str, Any], value: Any) -> str | None:
    """expected() for {"of": spec, "ge": ...}: the type first, then the bounds (a number: None passes as its type says)."""
    kind = expected(spec["of"], value)
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is None and (not numeric or _within(spec, value)):
        return None
    described = expected(spec["of"], object())  # "an integer", "an integer or null": what any wrong type gets
    bounds = " and ".join(f"{BOUND_WORDS[key]} {bound:g}" for key, bound in spec.items() if key in BOUND_WORDS)
    null = described.endswith(" or null")
    return f"{described.removesuffix(' or null')} {bounds}{' or null' if null else ''}"


def fingerprint(target: str, sources: list[str] | None = None) -> str:
    """What the settings of class `target` were read from: the installed version of the package that defines it
    (torch.optim.Adam, lightning.Trainer), or the code of the project files `sources` (`code_fingerprint`)."""
    package = target.split(".", 1)[0]
    if package not in SOURCES:
        return f"{package}=={metadata.version(package)}"
    return code_fingerprint(sources or [])


def source_files(cls: type) -> list[str]:
    """The project files a class's settings come from: its module and those of its project base classes (a subclass
    passes **kwargs up to them), and the project modules these import, where a setting's choices are defined (a
    prior added to `models.components.priors.PRIORS`, a likelihood to `LikelihoodName`), relative to the repository.
    A change to any of them retires the class's entry until the file is written again: never a refusal of a choice
    the code has gained."""
    files = {inspect.getsourcefile(base) for base in cls.__mro__ if base.__module__.split(".", 1)[0] in SOURCES}
    files = {Path(f).resolve() for f in files if f}
    files |= {imported for f in list(files) for imported in imported_project_files(f)}
    return sorted(str(f.relative_to(REPO)) for f in files)


def imported_project_files(path: Path) -> set[Path]:
    """The files of the project modules (of SOURCES) that the module at `path` imports: `from models.components import
    priors`, `from models.components.priors import PRIORS`, `import samplers.mis`."""
    import importlib.util

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    files = set()
    for name in names:
        if name.split(".", 1)[0] not in SOURCES:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # `from package.module import Name`: Name is no module
            continue
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            files.add(Path(spec.origin).resolve())
    return files


def code_fingerprint(sources: list[str], root: Path = REPO) -> str:
    """A hash of the files' syntax trees with their docstrings dropped: it changes with the code, not with a comment,
    a docstring or the layout."""
    digest = hashlib.sha256()
    for name in sorted(sources):
        status = (root / name).stat()
        digest.update(name.encode() + b"\0" + _code_of(str(root / name), status.st_mtime_ns, status.st_size).encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=256)
def _code_of(path: str, mtime_ns: int, size: int) -> str:
    """The file's syntax tree without its docstrings, dumped; kept per version of the file (its time and size), since
    every early check fingerprints the same files again (0.2 s a command line)."""
    tree = ast.parse(Path(path).read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


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


def every_config(group: str, *left_out: str) -> str:
    """`${every_config:GROUP,NAME,...}` in a config (launch/hydra_config.py registers it): the choices of configs/GROUP/
    but those named, as a sweep ("a,b,c"). experiment=compare's models, so that a new model's config joins the
    comparison with no edit there (Hydra's `glob(*,exclude=...)` would too, but the Optuna sweeper refuses a glob)."""
    return ",".join(path.stem for path in sorted((CONFIGS / group).glob("*.yaml")) if path.stem not in left_out)


def cli_classes(choices: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """LightningCLI's `--model=NAME` and `--data=NAME` choices, class name -> class path: the classes the configs of
    configs/model/ and configs/data/ build (every registered model and data set has its config: CONTRIBUTING.md)."""
    return {group: {target.rsplit(".", 1)[-1]: target for target in sorted(set(choices[group].values()))}
            for group in ("model", "data")}


# Comparisons as words: `left <op> right`; the same relation read from the right (`0 >= x`: x <= 0); its complement
# (what a valid value keeps when the comparison is what refuses: `if x < 1: raise` keeps x >= 1).
_OPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_FLIPPED = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}
_COMPLEMENT = {"ge": "lt", "gt": "le", "le": "gt", "lt": "ge"}


def constructor_bounds(cls: type) -> dict[str, dict[str, float]]:
    """The bounds a class's constructors (its own and those up the hierarchy) enforce on a numeric argument, read from
    their source: an `if` whose body raises, on a condition that compares an argument with a number, possibly
    negated, chained (`not 0 <= x < 1`) or one of several `or`-ed conditions, also inside a `for` over a literal tuple
    of (name, argument, bound) rows; and a call of common/settings.py's `check_at_least` or `check_share`. A check that depends on another setting (`if ema and not 0 < decay < 1`) is not
    a bound of its own and is left to the constructor."""
    bounds: dict[str, dict[str, float]] = {}
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None or not getattr(klass, "__module__", "").startswith(SOURCES):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        except (OSError, TypeError, SyntaxError):
            continue
        arguments = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)} - {"self"}
        for name, key, bound in _refusals(tree, arguments):
            bounds.setdefault(name, {}).setdefault(key, bound)
    return bounds


def _refusals(tree: ast.AST, arguments: set[str]) -> list[tuple[str, str, float]]:
    """(argument, kept bound's key, bound) of every refusing `if` in `tree` (see constructor_bounds)."""
    found = []

    def number(node: ast.AST, names: dict[str, ast.AST]) -> float | None:
        node = names.get(node.id, node) if isinstance(node, ast.Name) else node
        try:
            value = ast.literal_eval(node)
        except ValueError:
            return None
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def argument(node: ast.AST, names: dict[str, ast.AST]) -> str | None:
        node = names.get(node.id, node) if isinstance(node, ast.Name) else node
        return node.id if isinstance(node, ast.Name) and node.id in arguments else None

    def kept(test: ast.AST, names: dict[str, ast.AST], negated: bool) -> list[tuple[str, str, float]]:
        """The bounds a valid value keeps when `test` (or, negated, its negation) is the refusal."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return kept(test.operand, names, not negated)
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or if not negated else ast.And):
            return [bound for value in test.values for bound in kept(value, names, negated)]  # each alone refuses
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negated:
            # `if x is not None and x < 1: raise`: null passes as the type says; the rest is the refusal
            rest = [value for value in test.values if not (isinstance(value, ast.Compare) and isinstance(value.ops[0], ast.IsNot)
                                                            and argument(value.left, names) and number(value.comparators[0], names) is None
                                                            and isinstance(value.comparators[0], ast.Constant))]
            return kept(rest[0], names, negated) if len(rest) == 1 and len(rest) < len(test.values) else []
        if not isinstance(test, ast.Compare) or not all(type(op) in _OPS for op in test.ops):
            return []
        items = [test.left, *test.comparators]
        if not negated and len(items) > 2:  # a refused interval (`if 0 < x < 1: raise`) is no single bound
            return []
        out = []
        for left, op, right in zip(items, test.ops, items[1:]):
            relation = _OPS[type(op)]
            name, bound = argument(left, names), number(right, names)
            if name is None:
                name, bound, relation = argument(right, names), number(left, names), _FLIPPED[relation]
            if name is None or bound is None:
                continue  # negated, a part not understood only keeps fewer bounds; not negated, nothing is kept
            out.append((name, relation if negated else _COMPLEMENT[relation], bound))
        return out

    def checked(call: ast.Call, names: dict[str, ast.AST]) -> list[tuple[str, str, float]]:
        """The bounds of a call of common/settings.py's `check_at_least(label, argument, least)` or
        `check_share(label, argument)`."""
        function = call.func.id if isinstance(call.func, ast.Name) else None
        name = argument(call.args[1], names) if len(call.args) > 1 else None
        if name and function == "check_at_least" and len(call.args) > 2 and number(call.args[2], names) is not None:
            return [(name, "ge", number(call.args[2], names))]
        return [(name, "ge", 0.0), (name, "le", 1.0)] if name and function == "check_share" else []

    def visit(statements: list[ast.stmt], names: dict[str, ast.AST]) -> None:
        for statement in statements:
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
                found.extend(checked(statement.value, names))
            elif isinstance(statement, ast.If):
                if statement.body and isinstance(statement.body[0], ast.Raise):
                    found.extend(kept(statement.test, names, negated=False))
                visit(statement.orelse, names)
            elif isinstance(statement, ast.For) and isinstance(statement.target, ast.Tuple) and isinstance(statement.iter, (ast.Tuple, ast.List)):
                targets = [t.id for t in statement.target.elts if isinstance(t, ast.Name)]
                for row in statement.iter.elts:
                    if isinstance(row, ast.Tuple) and len(row.elts) == len(targets) == len(statement.target.elts):
                        visit(statement.body, {**names, **dict(zip(targets, row.elts))})

    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        visit(function.body, {})
    return found


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
            bounds = constructor_bounds(cls) if isinstance(cls, type) else {}
            settings = {name: type_spec(hints[name]) if name in hints else "any" for name in sorted(names)}
            sources = source_files(cls) if target.split(".", 1)[0] in SOURCES else None
            defaults = constructor_defaults(cls)
            classes[target] = {"fingerprint": fingerprint(target, sources), **({"sources": sources} if sources else {}),
                               "settings": {name: {"of": spec, **bounds[name]} if name in bounds and _numeric(spec) else spec
                                            for name, spec in settings.items()},
                               # Hydra's `+group.NAME=V` is refused for these: the composed config already has a value
                               "set_by_default": sorted(name for name in names if defaults.get(name) is not None)}
    return {"choices": choices, "classes": classes}


def _numeric(spec: Any) -> bool:
    return spec in ("int", "float") or isinstance(spec, dict) and any(_numeric(option) for option in spec.get("any_of", []))


def load() -> dict[str, Any] | None:
    """The schema with the classes whose fingerprint matches the code and packages installed now (the others are left
    out: nothing of theirs is checked early); None without a readable file."""
    if not well_formed_file():  # damaged or edited: the full checks decide alone
        return None
    try:
        schema = json.loads(SCHEMA_FILE.read_text())
        # The choices as the configs are now, not as when the file was written: a new model or data set (its module
        # and its config) is a choice at once, its settings left to the full checks until the file is written again.
        schema["choices"] = {group: config_targets(group) for group in GROUPS}
        schema["cli_classes"] = cli_classes(schema["choices"])
        current = {target: entry for target, entry in schema["classes"].items()
                   if entry["fingerprint"] == fingerprint(target, entry.get("sources"))}
        schema["classes"] = {target: entry["settings"] for target, entry in current.items()}
        schema["set_by_default"] = {target: set(entry.get("set_by_default") or ()) for target, entry in current.items()}
    except (OSError, ValueError, KeyError, TypeError, SyntaxError, metadata.PackageNotFoundError):
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
            and isinstance(schema.get("classes"), dict)
            and all(isinstance(e, dict) and isinstance(e.get("settings"), dict) for e in schema["classes"].values()))


def main() -> None:
    from common.files import write_file

    write_file(SCHEMA_FILE, json.dumps(build(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SCHEMA_FILE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
