"""README's test command where a newcomer runs it: a clone with nothing exported. The tests read the data root of
tests/conftest.py's `data_root`: $DATA_DIR, else ../shared/data beside the clone (CI's copy), else the clone's own
data/, which the session's start fills through the data modules' download; offline, the session stops with one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from torchvision.datasets import utils as tv_utils

from tests import preloaded
from tests.conftest import DATA_ROOT, REPO, data_root, fetch_test_data

# Tests that read the data root without a data_dir of their own: one through the environment (the real files the
# corruption cases copy), one through a composed config whose data.data_dir is left at its default.
LEFT_TO_THE_DEFAULT = ["tests/datamodules/test_datamodules.py::test_corrupt_idx_file_is_one_line_naming_it[mnist-truncated]",
                       "tests/models/components/test_precision.py::test_every_model_trains_and_tests_under_bf16_mixed[vae]"]
DATA_SETS = ("MNIST", "FashionMNIST")  # the folders of the real files the suite reads


def test_ci_runs_the_readme_command_with_nothing_set_that_readme_does_not_set():
    script = (REPO / ".ci" / "run").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"\bexport\b", code), "CI exports a variable README's test command does not set"
    assert "env -u DATA_DIR" in code, "CI must run the test command without a DATA_DIR, as a newcomer does"


def test_the_data_root_is_data_dir_then_shared_data_beside_the_clone_then_the_clones_own(tmp_path: Path):
    clone, shared, mine = tmp_path / "clone", tmp_path / "shared" / "data", tmp_path / "mine"
    clone.mkdir()
    assert data_root(clone, {}) == clone / "data"  # a user's machine: the clone's own folder
    assert data_root(clone, {"DATA_DIR": str(mine)}) == mine
    shared.mkdir(parents=True)
    assert data_root(clone, {}) == shared  # CI: the copy beside the clone
    assert data_root(clone, {"DATA_DIR": ""}) == shared  # set but empty: as unset
    assert data_root(clone, {"DATA_DIR": str(mine)}) == mine  # DATA_DIR first, wherever the clone lies


def link_real_files(root: Path) -> None:
    """`root` holds the suite's data sets as links to this session's files (read only: never written through)."""
    for name in DATA_SETS:
        (root / name / "raw").mkdir(parents=True)
        for file in (DATA_ROOT / name / "raw").iterdir():
            (root / name / "raw" / file.name).symlink_to(file)


def test_the_clones_data_is_downloaded_once_and_only_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    urls = []

    def archive(url: str, download_root: str, **kwargs: object) -> None:  # torchvision's download, from this session's files
        urls.append(url)
        name = kwargs["filename"].removesuffix(".gz")
        shutil.copyfile(DATA_ROOT / Path(download_root).parent.name / "raw" / name, Path(download_root) / name)

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", archive)
    root = tmp_path / "clone" / "data"
    fetch_test_data(root)
    assert len(urls) == 8 and all((root / name / "raw" / "t10k-labels-idx1-ubyte").is_file() for name in DATA_SETS)
    (root / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").unlink()
    fetch_test_data(root)
    fetch_test_data(root)
    assert len(urls) == 9 and urls[-1].endswith("train-images-idx3-ubyte.gz")


def test_the_clones_data_offline_is_one_line_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(urllib.request, "urlopen", offline)  # nothing is downloaded, even where the network is there
    root = tmp_path / "clone" / "data"
    (tmp_path / "clone").mkdir()
    with pytest.raises(pytest.UsageError) as info:
        fetch_test_data(root)
    message = str(info.value)
    assert "\n" not in message and str(root) in message and "DATA_DIR" in message and "network disabled" in message
    assert f"{root}/MNIST/raw/{{train-images-idx3-ubyte," in message  # where the IDX files go
    assert list(tmp_path.rglob("*")) == [tmp_path / "clone"]


def fresh_clone(at: Path) -> Path:
    """This checkout's files as a clone of them would hold them (tracked, and new ones not ignored), at `at`."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():  # a file deleted but not yet committed is listed, and absent
            (at / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, at / name)
    return at


def readme_test_command(clone: Path, tests: list[str]) -> subprocess.CompletedProcess:
    """README's `python -m pytest` in `clone`, with nothing exported (no DATA_DIR) and no network (a proxy that
    refuses every connection): what the clone's layout gives is what the tests read. A process of its own, forked from
    one that has torch and Lightning imported (tests/preloaded.py)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATA_DIR", "PYTHONPATH", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "NO_PROXY", "no_proxy")}
    env.update({name: "http://127.0.0.1:9" for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")})
    return preloaded.run_module("pytest", ["-q", "-n", "0", "-p", "no:cacheprovider", *tests], clone, env, timeout=600)


@pytest.mark.slow  # starts pytest
@pytest.mark.parametrize("place", ["beside the clone", "in the clone"])
def test_tests_left_to_the_default_data_root_pass_without_data_dir(tmp_path: Path, place: str):
    """A clone in a folder of its own, the data either in ../shared/data (CI) or in its own data/ (a user's machine
    after the first run's download): with DATA_DIR unset, the tests that read the default data root find it there."""
    clone = fresh_clone(tmp_path / "clone")
    link_real_files(tmp_path / "shared" / "data" if place == "beside the clone" else clone / "data")
    result = readme_test_command(clone, LEFT_TO_THE_DEFAULT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.slow  # starts pytest
def test_readme_test_command_offline_without_data_is_one_line(tmp_path: Path):
    clone = fresh_clone(tmp_path / "clone")
    result = readme_test_command(clone, ["tests/test_layout.py"])
    assert result.returncode == pytest.ExitCode.USAGE_ERROR and result.stdout == "", result.stdout[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("ERROR: the tests read MNIST and Fashion-MNIST from the clone's data/ (no DATA_DIR set, no "
                           f"../shared/data beside the clone): MNISTDataModule: no data set in {clone / 'data'}: expected ")
    assert "the download failed" in line and "Fix: point DATA_DIR" in line and not (clone / "data").exists()


def test_the_quick_loop_keeps_a_tables_first_rows_and_the_full_suite_all_of_them():
    """tests/conftest.py's quick_rows: the rows after the first `count` carry the `slow` mark (a pytest.param row keeps
    its values, marks and id); none is dropped."""
    from tests.conftest import quick_rows

    rows = quick_rows(["a", ("b", 1), pytest.param("c", id="c-row", marks=pytest.mark.xfail)], 1)
    assert rows[0] == "a" and len(rows) == 3
    assert [row.values for row in rows[1:]] == [("b", 1), ("c",)] and rows[2].id == "c-row"
    assert [[mark.name for mark in row.marks] for row in rows[1:]] == [["slow"], ["xfail", "slow"]]
