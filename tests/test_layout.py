"""Where code lives (CONTRIBUTING.md "Where things go"): callbacks/ holds Lightning callbacks only, and models/ imports
none of them (checkpoints/ holds what a checkpoint needs); what models,
callbacks, data modules and samplers are made of imports nothing from the launch package (the way runs are
started); train.py only dispatches to the two front ends; every file a comment, config or document names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import lightning as L
import pytest

REPO = Path(__file__).resolve().parents[1]
BELOW_LAUNCH = ("models", "callbacks", "checkpoints", "datamodules", "samplers", "common")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


CALLBACK_MODULES = sorted(p.relative_to(REPO) for p in (REPO / "callbacks").rglob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", CALLBACK_MODULES, ids=lambda p: str(p.relative_to("callbacks")))
def test_every_module_in_callbacks_holds_a_callback(path):
    """Sub-packages (callbacks/guards/) included."""
    import importlib

    module = importlib.import_module(".".join(path.with_suffix("").parts))
    own = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    assert any(issubclass(cls, L.Callback) for cls in own), f"{path} defines no Lightning callback"


def test_nothing_below_the_launch_package_imports_it():
    found = [f"{p.relative_to(REPO)}: {name}" for folder in BELOW_LAUNCH for p in sorted((REPO / folder).rglob("*.py"))
             for name in imported_modules(p) if name == "launch" or name.startswith(("launch.", "train"))]
    assert not found, f"imports of the launch side from below it: {found}"


def test_models_import_no_callbacks_module():
    """A model needs what makes its checkpoints whole (checkpoints/), never an optional callback (callbacks/)."""
    found = [f"{p.relative_to(REPO)}: {name}" for p in sorted((REPO / "models").rglob("*.py"))
             for name in imported_modules(p) if name == "callbacks" or name.startswith("callbacks.")]
    assert not found, f"models/ imports callbacks/: {found}"


def test_train_py_only_dispatches():
    assert len((REPO / "train.py").read_text().splitlines()) <= 150


PACKAGES = ("train.py", "launch", "models", "checkpoints", "callbacks", "datamodules", "samplers", "common", "benchmarks", "tests")


def project_modules() -> dict[str, Path]:
    """module name -> file, for every Python file of the project's packages (train.py included)."""
    found = {"train": REPO / "train.py"}
    for package in PACKAGES[1:]:
        for path in sorted((REPO / package).rglob("*.py")):
            if "results" in path.relative_to(REPO).parts:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MAX_FLAT_MODULES = 10


def test_no_folder_holds_more_than_10_flat_modules():
    """A room that says what it holds: past ten modules (__init__.py not counted), a folder is split into sub-packages
    named for what each holds."""
    counts = {}
    for path in project_modules().values():
        if path.name != "__init__.py":
            counts[path.parent.relative_to(REPO)] = counts.get(path.parent.relative_to(REPO), 0) + 1
    crowded = {str(folder): n for folder, n in counts.items() if n > MAX_FLAT_MODULES and str(folder) != "."}
    assert not crowded, f"folders with more than {MAX_FLAT_MODULES} modules: {crowded}"


def test_the_imports_form_no_circle():
    """Module A imports B (at the top or inside a function) and B imports A, directly or through others: a circle,
    which the layout should not need. Found as a strongly connected component of the import graph."""
    modules = project_modules()

    def imports_of(name: str, path: Path) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                # the longest project module the import names: `from benchmarks.lib import runner` -> benchmarks.lib.runner
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):  # a package's own __init__: not a circle
                    found.add(target)
        return found

    graph = {name: imports_of(name, path) for name, path in modules.items()}
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for name in graph:
        if name not in index:
            connect(name)
    assert not circles, f"import circles: {circles}"


@pytest.mark.slow  # starts a Python process (torch's import)
def test_samplers_refuse_a_bad_cache_without_importing_lightning():
    """samplers/ are plain tensors: even refusing a checkpoint's corrupt cache (CheckpointError, checkpoints/errors.py)
    imports no Lightning."""
    import subprocess
    import sys

    probe = ("import sys, torch\nfrom samplers.cache import LatentCache\nfrom checkpoints.errors import CheckpointError\n"
             "cache = LatentCache(2, (3,), 4)\n"
             "try:\n    cache.load_state_dict({'codes': torch.full((2, 3), 9), 'changed_epoch': torch.zeros(2, dtype=torch.int32)})\n"
             "except CheckpointError as error:\n    print('refused', 'lightning' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "refused False", (result.stdout, result.stderr[-2000:])


# Heavy packages the early checks must not import: train.py runs them before torch and Lightning load. (Hydra and
# OmegaConf import in a fifth of a second: the Hydra front end's check composes the command line with them.)
HEAVY = ("torch", "torchvision", "lightning", "jsonargparse", "torchmetrics")


def test_the_early_checks_import_nothing_heavy():
    """launch/checks/ (and train.py's dispatch) import no torch or Lightning, at the top or inside a
    function called on the way: importing every module of it in a fresh process loads none of them."""
    import subprocess
    import sys

    modules = sorted(name for name in project_modules() if name.startswith("launch.checks."))
    assert len(modules) >= 6, modules
    probe = (f"import sys, train\nfor name in {modules!r}: __import__(name)\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", (result.stdout, result.stderr[-2000:])


def function_imports(path: Path) -> list[str]:
    """`line: module` of every import inside a function or class of `path` (TYPE_CHECKING blocks aside)."""
    found = []
    for outer in ast.walk(ast.parse(path.read_text())):
        if isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for node in ast.walk(outer):
                if isinstance(node, ast.Import):
                    found += [f"{node.lineno}: {alias.name}" for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    found.append(f"{node.lineno}: {node.module}")
    return sorted(set(found))


def test_the_launch_side_imports_at_the_top():
    """Outside launch/checks/, nothing in launch/ runs before the imports, so every import is at the top of its
    module, where a reader sees what the module needs (train.py imports the front ends only after the checks)."""
    inside = {str(p.relative_to(REPO)): function_imports(p) for p in sorted((REPO / "launch").rglob("*.py"))
              if "checks" not in p.relative_to(REPO).parts}
    inside = {path: found for path, found in inside.items() if found}
    assert not inside, f"imports inside functions: {inside}"


MAX_MODULE_DOCSTRING_LINES = 10
DERIVATIONS = {"models.jsa", "models.components.quantizer"}  # a module docstring that carries the equations


def test_module_docstrings_are_short_unless_they_carry_a_derivation():
    """A module says what it holds in at most ten lines (CONTRIBUTING.md, first paragraph); the algorithm's derivation is
    the exception, and lives in docs/ when it grows."""
    long = {}
    for name, path in project_modules().items():
        if name.split(".")[0] in ("benchmarks",) or name in DERIVATIONS:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
        if len(docstring.strip().splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            long[name] = len(docstring.strip().splitlines())
    assert not long, f"module docstrings over {MAX_MODULE_DOCSTRING_LINES} lines: {long}"


# A repository path as the code's comments and docstrings, the configs and the documents name one: launch/runs/run_directory.py
NAMED_PATH = re.compile(r"(?<![\w./-])((?:launch|models|samplers|datamodules|callbacks|checkpoints|common|configs|benchmarks|"
                        r"docs|scripts|tests)/[\w./-]*\w\.(?:py|yaml|md|sh))")
# The product, its benchmarks and documents; benchmarks/results/ keeps records of past runs, tests/ names files it writes.
NAMING = ["README.md", "CONTRIBUTING.md", "train.py",
          *(str(p.relative_to(REPO)) for folder in (*BELOW_LAUNCH, "launch", "configs", "docs", "benchmarks", "scripts")
            for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".py", ".yaml", ".md", ".sh")
            and "results" not in p.relative_to(REPO).parts)]


def missing_paths(text: str) -> list[str]:
    """The paths `text` names that exist neither from the repository's root nor under configs/ (config_file's names)."""
    return [path for path in NAMED_PATH.findall(text)
            if not (REPO / path).exists() and not (REPO / "configs" / path).exists()]


def test_every_file_the_code_and_documents_name_exists():
    """A module moved or renamed leaves no comment, docstring, config or document pointing at where it was."""
    missing = {name: found for name in NAMING if (found := missing_paths((REPO / name).read_text(errors="replace")))}
    assert not missing, missing
    planted = "the layout (launch/run_layout.py), configs/model/jsa.yaml, callbacks/default.yaml"
    assert missing_paths(planted) == ["launch/run_layout.py"]
