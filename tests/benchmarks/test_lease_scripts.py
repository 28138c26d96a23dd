"""The plan of leases (benchmarks/results/verdict-study/LEASES.md) and its scripts: what a lent GPU runs without a
second try. The whole plan runs on the CPU at toy scale through lease/dry_run.sh (minutes, a virtualenv of the
device's versions): not here; these are the checks that need neither."""

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STUDY = REPO / "benchmarks/results/verdict-study"
SCRIPTS = sorted((STUDY / "lease").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_parses_and_calls_python3_and_bashs_time(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    code = "\n".join(line.split("#", 1)[0] for line in script.read_text().splitlines())  # comments aside
    assert not re.search(r"(^|[\s;&|(])python\s", code), f"{script.name}: `python` (the device vouches for python3 only)"
    assert "/usr/bin/time" not in code, f"{script.name}: /usr/bin/time (bash's time needs nothing installed)"


def test_the_plans_commands_fit_the_run_tool():
    plan = (STUDY / "LEASES.md").read_text()
    rows = [line for line in plan.splitlines() if re.match(r"^\| [\d, …]+ \| ", line)]
    assert len(rows) == 4
    for row in rows:
        lease, cell, timeout, carry, *_ = row.split(" | ")
        command = re.search(r"`(bash [^`]+)`", cell)[1]
        assert len(command) <= 2000 and int(timeout) <= 600 and carry == '`[".verdict"]`'
        script = command.split()[1]
        assert script.startswith("benchmarks/results/verdict-study/lease/") and (REPO / script).is_file(), row


def test_prepare_fetches_each_wheel_by_its_version_one_a_call_and_builds_antlr4(tmp_path):
    # prepare.sh in a checkout of its own, with a python3 that records its pip calls and writes the wheel each names.
    data = tmp_path / "data/MNIST/raw"
    data.mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (data / name).write_bytes(b"\0" * 64)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("/.verdict/\n")
    calls = tmp_path / "calls"
    fake = tmp_path / "python3"
    fake.write_text(f"""#!/bin/bash
echo "$*" >> {calls}
folder=$(echo "$*" | sed -E 's/.* (-d|-w) ([^ ]+).*/\\2/'); spec=${{@: -1}}
name=$(echo "${{spec%%==*}}" | tr - _); touch "$folder/$name-${{spec##*==}}-py3-none-any.whl"
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    done = subprocess.run(["bash", str(STUDY / "lease/prepare.sh"), str(tmp_path / "data")], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHON": str(fake)})
    assert done.returncode == 0, done.stderr
    assert re.search(r"a call sends [\d.]+ MiB of at most 64 MiB", done.stdout)
    lines = calls.read_text().splitlines()
    downloads = [line.split() for line in lines if line.startswith("-m pip download")]
    assert len(downloads) == 5 and len(lines) == 6
    for call in downloads:  # one requirement a call, pinned
        requirements = [word for word in call if "==" in word]
        assert len(requirements) == 1 and call[-1] == requirements[0], call
    assert re.fullmatch(r"-m pip wheel .*antlr4-python3-runtime==4\.9\.3", lines[-1])
    assert len(list((repo / ".verdict/whl").glob("*.whl"))) == 6
    assert len(list((repo / ".verdict/data/MNIST/raw").glob("*.gz"))) == 4
