"""common/files.py, the one way files are written and received files read: a write replaces the target whole and never
writes into an existing file or through a link; a read opens only regular files and never waits on a FIFO; and no
module of the collection or its benchmarks opens a file for writing any other way."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.files import LeadsOutside, NotARegularFile, appending, read_regular, replacing, resolved_inside, write_file

REPO = Path(__file__).resolve().parents[2]


def test_a_hard_linked_target_is_replaced_and_the_other_name_keeps_its_bytes(tmp_path):
    users = tmp_path / "users-notes.txt"
    users.write_text("years of work")
    target = tmp_path / "run" / "config.yaml"
    target.parent.mkdir()
    os.link(users, target)
    write_file(target, "model: JSA\n")
    assert target.read_text() == "model: JSA\n"
    assert users.read_text() == "years of work"
    assert [p.name for p in target.parent.iterdir()] == ["config.yaml"]  # no temporary left


def test_a_symbolic_link_is_replaced_as_a_link_and_its_target_left_as_it_was(tmp_path):
    users = tmp_path / "report.md"
    users.write_text("the user's report")
    link = tmp_path / "out" / "report.md"
    link.parent.mkdir()
    link.symlink_to(users)
    write_file(link, b"# Comparison\n")
    assert not link.is_symlink() and link.read_bytes() == b"# Comparison\n"
    assert users.read_text() == "the user's report"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "record.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with replacing(target) as file:
            file.write(b"half of the new")
            raise RuntimeError("killed on the way")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_an_append_keeps_the_old_text_replaces_a_hard_link_and_takes_a_subprocess_output(tmp_path):
    users = tmp_path / "users.log"
    users.write_text("the user's log\n")
    log = tmp_path / "train.log"
    os.link(users, log)
    with appending(log) as file:
        file.write(b"$ python train.py\n")
        file.flush()
        subprocess.run([sys.executable, "-c", "print('epoch 1')"], stdout=file, check=True)
    assert log.read_text() == "the user's log\n$ python train.py\nepoch 1\n"
    assert users.read_text() == "the user's log\n"


@pytest.mark.parametrize("kind", ["link", "FIFO"])
def test_an_append_to_a_link_or_a_fifo_starts_afresh_in_its_place(kind, tmp_path):
    users = tmp_path / "users.log"
    users.write_text("private\n")
    log = tmp_path / "train.log"
    if kind == "link":
        log.symlink_to(users)
    else:
        os.mkfifo(log)  # opened for reading, it would wait for a writer: it is not opened
    with appending(log) as file:
        file.write(b"new\n")
    assert log.is_file() and not log.is_symlink() and log.read_text() == "new\n"
    assert users.read_text() == "private\n"


def test_a_folder_where_a_file_is_written_is_left_as_it_is_and_named(tmp_path):
    folder = tmp_path / ".owner"
    (folder / "inside").mkdir(parents=True)
    with pytest.raises(IsADirectoryError, match=f"a folder lies where this file is written, so it is not written: '{folder}'"):
        write_file(folder, "process 1")
    assert [p.name for p in tmp_path.iterdir()] == [".owner"] and (folder / "inside").is_dir()


@pytest.mark.parametrize("kind", ["folder", "device"])
def test_a_read_refuses_what_is_not_a_regular_file_naming_it(kind, tmp_path):
    path = tmp_path / "hparams.yaml"
    if kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(NotARegularFile, match=f"^{path} is a {'folder' if kind == 'folder' else 'device'}, not a regular file"):
        read_regular(path)


@pytest.mark.slow  # starts a process: a FIFO left waiting would hang this one
def test_a_fifo_is_replaced_by_a_write_and_refused_by_a_read_without_waiting(tmp_path):
    fifo = tmp_path / ".owner"
    os.mkfifo(fifo)
    probe = ("import sys\nfrom common.files import read_regular, write_file\n"
             f"try:\n    read_regular({str(fifo)!r})\nexcept OSError as error:\n    print(error)\n"
             f"write_file({str(fifo)!r}, 'process 1')\nprint(open({str(fifo)!r}).read())\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{fifo} is a FIFO (named pipe), not a regular file: it is not read", "process 1"]


def test_a_folder_a_link_leads_outside_its_root_is_refused_naming_it(tmp_path):
    elsewhere = tmp_path / "users-folder"
    elsewhere.mkdir()
    root = tmp_path / "logs" / "tensorboard"
    root.mkdir(parents=True)
    (root / "jsa").symlink_to(elsewhere)
    with pytest.raises(LeadsOutside, match=f"^{root}/jsa/version_0 leads through a symbolic link to {elsewhere}/version_0, "
                                           f"outside {root}: nothing is written through a link"):
        resolved_inside(root, root / "jsa" / "version_0")
    with pytest.raises(LeadsOutside):
        resolved_inside(root, root / ".." / "hydra")  # `..` counts as a link does
    assert list(elsewhere.iterdir()) == []


def test_a_link_inside_its_root_and_a_root_that_is_a_link_are_resolved(tmp_path):
    scratch = tmp_path / "scratch"
    (scratch / "tensorboard" / "jsa").mkdir(parents=True)
    (tmp_path / "logs").symlink_to(scratch)  # the user's own choice: their log_dir on another disk
    (scratch / "tensorboard" / "latest").symlink_to("jsa")
    assert resolved_inside(tmp_path / "logs" / "tensorboard", tmp_path / "logs" / "tensorboard" / "latest" / "version_0") \
        == scratch / "tensorboard" / "jsa" / "version_0"
    assert resolved_inside(tmp_path / "logs", tmp_path / "logs") == scratch


# ---- no other writer in the tree --------------------------------------------------------------------------------

SCANNED = ("train.py", "models", "callbacks", "checkpoints", "datamodules", "samplers", "common", "launch", "benchmarks", "scripts")
# Calls that write a file given by name (or a copy into one): each goes through common/files.py instead.
WRITING_METHODS = {"write_text", "write_bytes", "savefig", "to_csv", "savetxt", "savez", "mkfifo", "save_hparams_to_yaml"}
COPIES = {"copy", "copy2", "copyfile", "copytree"}  # of shutil (a move renames: it writes into no file)
SERIALIZERS = {"json", "yaml", "pickle", "torch", "np", "numpy"}  # whose dump/save(obj, file) writes a file
WRITING_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
# (module, call) pairs that may, with the reason.
ALLOWED = {
    ("common/files.py", "open"): "the one writer: its new temporary, opened exclusively",
    ("common/lightning_files.py", "save_hparams_to_yaml"): "Lightning's writer, handed the one writer's new temporary",
    ("benchmarks/lib/plots.py", "savefig"): "save_figure: matplotlib writes into memory, the one writer writes the file",
    ("checkpoints/file_format.py", "torch.save"): "into memory (a BytesIO), written by the one writer",
    ("launch/runs/worker_slots.py", "os.open"): "a lock file, flocked and never written",
    ("benchmarks/robustness/bad_inputs.py", "mkfifo"): "a bad input it plants for a case: a FIFO where a checkpoint should be",
    ("benchmarks/robustness/bad_inputs.py", "shutil.copytree"): "into a folder it just made, each file by the one writer",
}


def writes_in(path: Path) -> list[tuple[int, str]]:
    """(line, call) of each call in `path` that opens a file for writing other than through common/files.py."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else function.id if isinstance(function, ast.Name) else ""
        owner = function.value.id if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) else None
        if name == "open" and owner == "os":
            if {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} & WRITING_FLAGS:
                found.append((node.lineno, "os.open"))
        elif name == "open":
            modes = [*node.args[1:2], *[k.value for k in node.keywords if k.arg == "mode"]]
            if any(not isinstance(m, ast.Constant) or set(str(m.value)) & set("wax+") for m in modes):
                found.append((node.lineno, "open"))
        elif name in WRITING_METHODS:
            found.append((node.lineno, name))
        elif name in COPIES and owner == "shutil":
            found.append((node.lineno, f"shutil.{name}"))
        elif name in ("dump", "safe_dump", "save") and owner in SERIALIZERS and (
                len(node.args) >= 2 or any(k.arg in ("stream", "fp", "f", "file") for k in node.keywords)):
            found.append((node.lineno, f"{owner}.{name}"))
    return found


def test_no_module_writes_a_file_but_through_common_files():
    """Every write of the collection and its benchmarks goes through common/files.py; a new `open(path, "w")`,
    `write_text`, `savefig(path)`, `json.dump(x, file)` or `shutil.copyfile` fails here, naming it."""
    found = []
    for top in SCANNED:
        for path in sorted([REPO / top] if top.endswith(".py") else (REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            found += [f"{relative}:{line}: {call}" for line, call in writes_in(path) if (relative, call) not in ALLOWED]
    assert not found, "files written other than through common/files.py (write_file, replacing, appending):\n" + "\n".join(found)
