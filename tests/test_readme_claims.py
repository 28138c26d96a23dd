"""What README (and `python train.py --help`) say about the command line is what a newcomer sees, and README stays
short enough to read: at most 300 lines."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import launch.cli_app
import train
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def test_readme_is_at_most_300_lines():
    assert len(README.splitlines()) <= 300


def help_text(capsys: pytest.CaptureFixture, *args: str) -> str:
    with pytest.raises(SystemExit):
        launch.cli_app.main(list(args))
    return capsys.readouterr().out


def test_what_fit_help_lists_is_what_readme_and_usage_say(capsys):
    """`fit --help` lists the trainer's options and names the model and data classes; a model's own options come from
    `fit --model.help JSA`. README and train.py's usage say so (not "every option of model, data and trainer")."""
    for text in (README, train.USAGE):
        [line] = [line for line in text.splitlines() if re.search(r"python train.py fit --help\s", line)]
        assert "every option" not in line and "fit --model.help JSA" in line, line
    fit_help = help_text(capsys, "fit", "--help")
    assert "--trainer.max_epochs" in fit_help and "--model.help" in fit_help and "--data.help" in fit_help
    assert "--model.mis_steps" not in fit_help and "--data.batch_size" not in fit_help
    assert "--model.mis_steps" in help_text(capsys, "fit", "--model.help", "JSA")
    assert "--data.batch_size" in help_text(capsys, "fit", "--data.help", "MNISTDataModule")


@pytest.mark.parametrize("subcommand, verb", [("fit", "resume"), ("validate", "validate"), ("test", "test")])
def test_ckpt_paths_help_asks_for_a_file_a_run_wrote_not_lightnings_names_of_the_trainers_run(capsys, subcommand, verb):
    """The early check refuses Lightning's names (best, last, ...): each command is a run of its own (launch/checks/paths.py)."""
    text = " ".join(help_text(capsys, subcommand, "--help").split("--ckpt_path CKPT_PATH\n", 1)[1].split("(type:")[0].split())
    assert text.startswith(f"the checkpoint to {verb}: a .ckpt file a run wrote") and "last, best, hpc and registry are refused" in text, text


def test_readmes_cli_spelling_of_the_scheduler_builds_it(tmp_path):
    """README gives `scheduler=cosine` in LightningCLI's words: those options alone build the model with its scheduler."""
    [spelling] = re.findall(r"\(CLI: `(--model\.scheduler=[^`]+)`", README)
    cli = launch.cli_app.main([*spelling.split(), f"--log_dir={tmp_path / 'logs'}"], run=False)
    assert type(cli.model.configure_optimizers()["lr_scheduler"]).__name__ == "CosineAnnealingLR"


@pytest.mark.slow  # starts a Python process (torch's import)
def test_readme_says_its_timings_are_of_an_idle_machine_and_how_to_share_a_busy_one():
    """README's timings were taken on an idle machine, and it says so; its advice for a busy one, one torch thread
    with OMP_NUM_THREADS=1, is what torch does with it."""
    assert "README's timings are of an idle machine" in README and "on an idle 2-core AMD EPYC" in README
    advice = re.search(r"cores busy, prefix `(\w+)=(\d+)`", README)
    assert advice, "README names the setting for a busy machine"
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True, text=True,
                           env={**os.environ, advice[1]: advice[2]}, timeout=120)
    assert probe.stdout.strip() == advice[2], probe.stderr[-2000:]


@pytest.mark.slow  # starts a Python process (torch's import)
def test_the_cpu_wheel_tip_checks_that_pip_kept_the_cpu_build():
    """pip takes PyPI's CUDA build where PyPI has a newer torch than the CPU index: the tip names the command that
    shows which build is installed, and it runs."""
    check = re.search(r'`(python -c "import torch; print\(torch.__version__\)")` then ends in `\+cpu`', cpu_tip())
    assert check, cpu_tip()
    shown = subprocess.run([sys.executable, *check[1].split(" ", 2)[1:2], check[1].split('"')[1]], capture_output=True,
                           text=True, timeout=120)
    assert re.fullmatch(r"\d+\.\d+\.\d+(\+\w+)?", shown.stdout.strip()), shown.stdout + shown.stderr


def cpu_tip() -> str:
    [tip] = [p for p in README.split("\n\n") if p.startswith("No GPU?")]
    return tip


def fake_wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A wheel of `name` `version` that holds only its metadata, listed in the simple index `index` (PEP 503)."""
    files = index.parent / "files"
    files.mkdir(parents=True, exist_ok=True)
    wheel = files / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                             + "".join(f"Requires-Dist: {r}\n" for r in requires))
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    page = index / name / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text((page.read_text() if page.exists() else "") + f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')


@pytest.mark.slow  # starts pip
def test_the_cpu_install_command_takes_the_cpu_torch_over_pypis(tmp_path):
    """The tip's command is the set-up command with PyTorch's CPU index as an extra index. pip then sees PyPI's
    torch X (a CUDA build, with nvidia-* dependencies) and the CPU index's X+cpu, and takes the higher: a local
    version sorts above its public one (PEP 440). Shown with pip's own resolver (`--dry-run --report`) on two local
    indexes standing for PyPI and the CPU index, each holding the torch and torchvision that pyproject.toml asks for
    (metadata-only wheels of the installed versions), pyproject's requirements of the two in place of `-e .`."""
    setup = re.search(r"```bash\n(python3 -m venv .*)\n```", README)[1]
    found = re.search(r"`(python3 -m venv [^`]*--extra-index-url[^`]*)`", cpu_tip())
    assert found, f"the tip gives no set-up command with an extra index: {cpu_tip()}"
    command = found[1]
    url = re.search(r"--extra-index-url (\S+)", command)[1]
    assert url == "https://download.pytorch.org/whl/cpu" and command == setup.replace(
        "pip install -e .", f"pip install -e . --extra-index-url {url}"), (setup, command)
    pyproject = (REPO / "pyproject.toml").read_text()
    wanted = [Requirement(r) for r in re.findall(r'"(torch(?:vision)?\b[^"]*)"', pyproject)]
    assert [r.name for r in wanted] == ["torch", "torchvision"], wanted
    pypi, cpu = tmp_path / "pypi" / "simple", tmp_path / "cpu" / "simple"
    torch, vision = (Version(importlib.metadata.version(r.name)).public for r in wanted)
    assert all(Version(v) in r.specifier for v, r in zip((torch, vision), wanted)), (torch, vision, wanted)
    fake_wheel(pypi, "torch", torch, ("nvidia-cublas",))
    fake_wheel(pypi, "nvidia-cublas", "1.0")
    fake_wheel(pypi, "torchvision", vision, (f"torch=={torch}",))
    fake_wheel(cpu, "torch", f"{torch}+cpu")
    fake_wheel(cpu, "torchvision", f"{vision}+cpu", (f"torch=={torch}",))

    [install] = [part.strip() for part in command.split("&&") if part.strip().startswith("pip install")]
    args = shlex.split(install.replace(url, cpu.as_uri()))[2:]
    args = [str(r) for r in wanted] + [a for a in args if a not in ("-e", ".")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
                             str(report), "--no-cache-dir", "--index-url", pypi.as_uri(), *args], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    chosen = {item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}
    assert chosen == {"torch": f"{torch}+cpu", "torchvision": f"{vision}+cpu"}, chosen
