"""Every command that README.md and `python train.py --help` show runs as written.

Commands are read from README's bash blocks and train.py's USAGE. The train.py commands run in turn in one working
directory (the resume and test commands find the run an earlier one wrote); each benchmark's commands are a test of
their own. Each command gets settings that cut it to its smallest size, and a time limit. What cannot run here
(CIFAR-10, a GPU, several processes, routes another test runs: RUN_BY_ANOTHER_TEST) is composed and its model and
data built without training; `tensorboard`, `srun` and `torchrun` are left out. README's Python example runs against
a checkpoint the commands wrote. Commands run forked from a process that imported the libraries (tests/preloaded.py).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import launch.hydra_app
import launch.cli_app
import train
from tests import preloaded
from tests.launch.test_configs import composed

pytestmark = pytest.mark.slow  # end to end: run by the full suite (README), not the quick loop

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
HYDRA_FAST = ["trainer.max_steps=2", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
              "model.val_num_samples=2", "model.test_num_samples=2", "data.batch_size=16", "trainer.num_sanity_val_steps=0"]
CLI_FAST = ["--trainer.max_steps=2", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
            "--trainer.limit_test_batches=1", "--data.batch_size=16", "--trainer.num_sanity_val_steps=0"]
BENCHMARK_FAST = {"benchmarks.studies.grey_mnist": ["--steps", "2", "--val-every", "1", "--val-batches", "1", "--val-samples", "2", "--test-batches", "1",
                                           "--test-samples", "2", "--models", "vae,jsa"],
                  "benchmarks.speed.mis_speed": ["--batch-size", "8", "--mis-steps", "1", "--min-run-time", "0.02"],
                  "benchmarks.speed.jsa_gradient_cost": ["--batch-size", "8", "--num-steps", "2", "--warm-up-steps", "1", "--rounds", "1",
                                                   "--min-run-time", "0.05"],
                  "benchmarks.studies.jsa_study": ["--models", "jsa", "--ablations", "L1", "--seeds", "2", "--epochs", "1", "--short-epochs", "1",
                                           "--val-every", "1", "--val-samples", "2", "--steps-per-epoch", "2", "trainer.limit_train_batches=2",
                                           "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "model.test_num_samples=2"], "benchmarks.speed.ddp_cache_gather": ["--steps", "12", "--batch-size", "8"],
                  # one case (its quick set, a case of each kind: tests/benchmarks/robustness/test_bad_inputs.py)
                  "benchmarks.robustness.bad_inputs": ["--only", "hydra experiment=nope", "--out", "bad-inputs"],
                  "benchmarks.robustness.faults": ["--kills", "0", "--concurrent", "0", "--resumes", "0", "--out", "faults"],
                  "benchmarks.speed.eval_speed": ["--batch-size", "4", "--samples", "4", "--min-run-time", "0.02", "--test-images", "8"],
                  "benchmarks.speed.loop_overhead": ["--models", "vae", "--steps", "14", "--repeats", "1"],
                  # one of its three measured runs, each a new interpreter: `test` (one step, then the test stage)
                  "benchmarks.speed.memory": ["--models", "jsa", "--steps", "2", "--test-batches", "1", "--runs", "test"],
                  "benchmarks.studies.field.study": ["--models", "jsa,vae", "--datasets", "mnist", "--seeds", "1", "--epochs", "1", "--val-every", "1",
                                             "--val-samples", "2", "--steps-per-epoch", "2", "--is-images", "4", "--is-samples", "2,4",
                                             "--grad-batches", "1", "--grad-repeats", "2", "--cost-rounds", "1", "--cost-seconds", "0.05", "--out", "field-study", "--logs", "field-study-logs",
                                             "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
                                             "model.test_num_samples=2"],
                  "benchmarks.studies.prior_study": ["--epochs", "1", "--stage2-epochs", "1", "--seeds", "1", "--repeats", "1", "--warm-up", "0",
                                        "--only", "jsa-autoregressive-s0,vqvae-mlp-*", "trainer.limit_train_batches=2",
                                        "trainer.limit_val_batches=1", "model.val_num_samples=2"]}

# Commands whose whole route another test runs end to end, as a `python train.py` process at its smallest size:
# experiment=compare on MNIST, every model of its sweep, then its report (test_compare); joblib's worker processes
# (each a new interpreter) over experiment=compare cut to two models (test_cluster). Composed here, as a command that
# cannot run here is, so that the route is not run twice.
RUN_BY_ANOTHER_TEST = {"python train.py -m experiment=compare data=mnist":
                       "tests/benchmarks/test_compare.py::test_compare_experiment_and_report",
                       "python train.py -m experiment=compare hydra/launcher=parallel":
                       "tests/launch/test_cluster.py::test_a_parallel_comparison_lands_like_a_sequential_one"}

# experiment=compare_quick cut to two models as well: its sweep over every model is experiment=compare's, which
# test_compare runs end to end.
SWEEP_CUT = {"python train.py -m experiment=compare_quick log_dir=logs/quick-compare": ["model=jsa,vae"]}

# The committed records a study's `--report-only` reads (its default --out), where README shows no run of it.
REPORT_RECORDS = {"benchmarks.studies.cache.study": "benchmarks/results/cache-study"}
# The time limit of one command at its smallest size, the same for all, with room for a loaded machine: two cores
# shared by about 15 runnable processes (the suite's workers, what they start, other jobs).
COMMAND_LIMIT_S = 600


def documented_commands() -> list[str]:
    """`python ...` commands of README's bash blocks and of train.py's USAGE, comments stripped, first seen first."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        lines += block.splitlines()
    lines += train.USAGE.splitlines()
    commands = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        line = line.rsplit("&& ", 1)[-1]  # the set-up command's last step: python train.py model=jsa
        if line.startswith("python ") and "pytest" not in line and line not in commands and "{" not in line:
            commands.append(line)
    return commands


COMMANDS = documented_commands()


def can_run_here(args: list[str]) -> bool:
    text = " ".join(args)
    return not any(word in text for word in ("cifar10", "CIFAR10", "trainer=gpu", "trainer=ddp", "trainer=multinode", "strategy=ddp"))


def test_the_commands_are_found():
    assert "python train.py model=jsa" in COMMANDS  # the main job of the set-up command
    assert any("ckpt_path=" in c for c in COMMANDS) and any(c.startswith("python -m benchmarks.compare") for c in COMMANDS)
    assert len(COMMANDS) >= 20
    assert set(SWEEP_CUT) <= set(TRAIN_COMMANDS)
    for command, test in RUN_BY_ANOTHER_TEST.items():  # README's command, and the test that runs its route
        path, name = test.split("::")
        assert command in TRAIN_COMMANDS and f"def {name}(" in (REPO / path).read_text(), (command, test)


def command_line(command: str) -> list[str] | None:
    """The argv that runs `command` here, cut to a couple of steps; None for one that can only be composed here."""
    # USAGE's placeholder: the run `python train.py model=jsa` (or the VAE's) wrote above.
    run = "vae-mnist-mlp-z32" if "VAE" in command or "model=vae" in command else "jsa-mnist-mlp-K10-L20"
    if "model=vqvae_prior" in command:  # the second stage starts from the VQ-VAE run above
        run = "vqvae-mnist-conv-K512-pixelcnn"
    args = shlex.split(command.replace("PATH/", f"logs/tensorboard/{run}/version_0/checkpoints/"))[1:]  # after `python`
    # Run from the repository (train.py, configs/...), written here.
    args = [str(REPO / a) if a == "train.py" or a.startswith("configs/") else a for a in args]
    if args[0] == "-m":  # a benchmark or the report
        extra = BENCHMARK_FAST.get(args[1], [])
    elif "--help" in args or "--cfg" in args or "--print_config" in args:
        extra = []
    elif not can_run_here(args) or command in RUN_BY_ANOTHER_TEST:
        return None
    elif len(args) > 1 and args[1] in train.CLI_SUBCOMMANDS:  # LightningCLI
        extra = CLI_FAST if args[1] == "fit" else ["--trainer.limit_test_batches=1", "--model.test_num_samples=2"]
    else:  # an Optuna study: two trials show it works
        extra = HYDRA_FAST + (["hydra.sweeper.n_trials=2"] if "hydra/sweeper=tune" in args else [])
        extra += SWEEP_CUT.get(command, [])
    return [sys.executable, *args, *extra]


def is_benchmark(command: str) -> bool:
    """A benchmark writes under its own --out/--logs only, so it runs as a test of its own, at any time; the comparison
    report reads logs/tensorboard, which the train.py commands write, so it runs with them."""
    return command.startswith("python -m benchmarks.") and not command.startswith("python -m benchmarks.compare")


def run_in_order(commands: list[str], cwd: Path, env: dict) -> list[tuple[str, float, subprocess.CompletedProcess | None]]:
    """Each command in turn (a later one may read what an earlier one wrote); stops at the first failure."""
    done = []
    for command in commands:
        argv = command_line(command)
        if argv is None:
            done.append((command, 0.0, None))
            continue
        began = time.monotonic()
        # A process of its own, forked from one that has the imports done; a benchmark's own `python train.py ...`
        # runs are forked in turn.
        if argv[1] == "-m":
            result = preloaded.run_module(argv[2], argv[3:], cwd, env, timeout=COMMAND_LIMIT_S, forks_python=True)
        else:
            result = preloaded.run_script(Path(argv[1]), argv[2:], cwd, env, timeout=COMMAND_LIMIT_S)
        done.append((command, time.monotonic() - began, result))
        if result.returncode != 0:
            break
    return done


def command_env(mnist_dir: Path) -> dict:
    """The commands' environment: the suite's data, this checkout's packages, one torch thread per process (the
    suite's workers share the cores)."""
    return {**os.environ, "DATA_DIR": str(mnist_dir), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def check(done: list[tuple[str, float, subprocess.CompletedProcess | None]]) -> None:
    """Each command ran (exit 0; help and the composed config printed what they are for), or, where it cannot train
    here (CIFAR-10, a GPU, several processes), its model and data were built."""
    for command, seconds, result in done:
        print(f"{seconds:6.1f} s  {command}" if result is not None else f"composed  {command}")
        if result is None:
            compose(shlex.split(command)[2:])
        else:
            assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            if only_prints(command):
                assert "usage" in result.stdout or "model:" in result.stdout, (command, result.stdout[-2000:])


def only_prints(command: str) -> bool:
    """Help and the composed config: printed without training."""
    return command.startswith("python train.py") and any(word in shlex.split(command) for word in ("--help", "--cfg", "--print_config"))


TRAIN_COMMANDS = [c for c in COMMANDS if not is_benchmark(c)]
BENCHMARK_COMMANDS: dict[str, list[str]] = {}  # a benchmark module's commands, in README's order
for _command in (c for c in COMMANDS if is_benchmark(c)):
    BENCHMARK_COMMANDS.setdefault(_command.split()[2], []).append(_command)


def test_the_train_py_commands_run_as_written(tmp_path, mnist_dir):
    """The train.py commands and the comparison report, in order; then README's Python example on a checkpoint the
    commands wrote."""
    env = command_env(mnist_dir)
    done = run_in_order(TRAIN_COMMANDS, tmp_path, env)
    check(done)
    assert len(done) == len(TRAIN_COMMANDS) and sum(result is not None for _, _, result in done) >= 15, done

    example = re.search(r"<!-- inference-example -->\n```python\n(.*?)```", README, flags=re.S).group(1)
    (checkpoint,) = (tmp_path / "logs" / "tensorboard" / "jsa-mnist-mlp-K10-L20").glob("version_0/checkpoints/last.ckpt")
    assert "logs/tensorboard/jsa-mnist-mlp-K10-L20/version_0/checkpoints/last.ckpt" in example
    script = example.replace("num_samples=1000", "num_samples=4").replace("num_samples=100", "num_samples=4")
    script += "\nassert codes.shape == (x.shape[0], 20) and 0 <= images.min() and images.max() <= 1 and (nll > 0).all()\n"
    result = preloaded.run_code(script, [], tmp_path, env, timeout=COMMAND_LIMIT_S)  # python -c script, forked as the commands are
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("module", sorted(BENCHMARK_COMMANDS))
def test_each_benchmark_command_runs_as_written(module, tmp_path, mnist_dir):
    """A benchmark's commands in a working directory of their own (`jsa_study` and `jsa_study --report-only` write one
    report); one that README shows only as `--report-only` reads the records the repository holds, as in a checkout."""
    commands = BENCHMARK_COMMANDS[module]
    if all("--report-only" in c for c in commands):
        shutil.copytree(REPO / REPORT_RECORDS[module], tmp_path / REPORT_RECORDS[module])
    done = run_in_order(commands, tmp_path, command_env(mnist_dir))
    check(done)
    assert len(done) == len(commands), done


def compose(args: list[str]) -> None:
    """Build the model and data module of a command that cannot train here (no CIFAR-10 copy, no GPU, one process)."""
    if args and args[0] in train.CLI_SUBCOMMANDS:
        launch.cli_app.main([a for a in args[1:] if not a.startswith("--trainer.")], run=False)
        return
    overrides = [a.split("=", 1)[0] + "=" + a.split("=", 1)[1].split(",")[0] for a in args if a != "-m" and "=" in a]
    overrides = [o for o in overrides if not o.startswith(("trainer=", "trainer."))]
    launch.hydra_app.data_and_model(composed(overrides))
