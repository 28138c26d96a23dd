"""Comparisons that fan out (configs/hydra/, pyproject's `cluster` extra): the jobs of a multirun side by side with
hydra/launcher=parallel (joblib) and as submitit jobs with hydra/launcher=slurm_local (the path of hydra/launcher=slurm,
local processes), landing where a sequential multirun's do and read by the comparison report; an Optuna study with
hydra/sweeper=tune whose best trial's settings are written to <sweep dir>/optimization_results.yaml; the SLURM job
that hydra/launcher=slurm submits; and the one-line refusals of a launcher or sweeper that is unknown, not installed
or misused (before torch is imported)."""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch.checks import hydra_check
from launch.checks.early import refuse_early
from tests.conftest import says
from tests.launch.test_entrypoints import FAST, REPO, train

TINY = [*FAST, "trainer.limit_test_batches=1", "model.test_num_samples=2", "data.batch_size=32"]
RUNS = ["jsa-mnist-mlp-K10-L20", "vae-mnist-mlp-z32"]


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ---- refusals: one line, before the imports -------------------------------------------------------------------


@pytest.mark.parametrize("command, named", [
    ("-m hydra/launcher=jobib", ["hydra/launcher=jobib", "basic, joblib, parallel, slurm, slurm_local, submitit_local, "
                                "submitit_slurm", "pip install -e '.[cluster]'", "joblib?"]),
    ("-m hydra/sweeper=optuan model=jsa", ["hydra/sweeper=optuan", "basic, optuna, tune"]),
    ("hydra/launcher=parallel model=vae", ["hydra/launcher=parallel", "multirun", "add -m"]),
    ("-m experiment=compare hydra/sweeper=tune", ["hydra/sweeper=tune", "one model per study", "model=NAME"]),
    ("-m model=vae,jsa hydra/sweeper=tune", ["hydra/sweeper=tune", "one model per study", "model=NAME"]),
    ("-m model=vae,jsa hydra/launcher=slurm", ["hydra/launcher=slurm", "no SLURM", "hydra/launcher=slurm_local"]),
])
def test_an_unknown_or_misused_launcher_or_sweeper_is_one_line(command, named, monkeypatch):
    monkeypatch.setattr(hydra_check, "slurm_here", lambda: False)  # (a machine without SLURM)
    refusal = refuse_early(shlex.split(command), cli=False)
    assert refusal is not None and "\n" not in refusal, refusal
    says(refusal, *named)


# Each launcher and sweeper with its plugin installed (the test extra pulls the cluster extra): these pass.
VALID = [
    "-m experiment=compare hydra/launcher=parallel", "-m experiment=compare hydra/launcher=parallel hydra.launcher.n_jobs=4",
    "-m experiment=compare trainer=ddp trainer.devices=4 hydra/launcher=slurm hydra.launcher.partition=gpu",
    "-m experiment=compare hydra/launcher=slurm_local", "-m experiment=compare model=jsa hydra/sweeper=tune",
    "-m model=vae hydra/sweeper=tune hydra.sweeper.n_trials=3", "-m hydra/launcher=joblib model=vae,jsa",
    "-m hydra/launcher=slurm_local model=vae,jsa", "-m model=jsa hydra/sweeper=tune",
    "-m hydra/sweeper=optuna model.lr=interval(1e-4,1e-2)", "hydra/launcher=slurm --cfg hydra", "-m hydra/launcher=basic",
]


@pytest.mark.parametrize("command", VALID)
def test_valid_launcher_and_sweeper_commands_pass(command, monkeypatch):
    monkeypatch.setattr(hydra_check, "slurm_here", lambda: True)  # (a login node: --cfg hydra passes without one)
    assert refuse_early(shlex.split(command), cli=False) is None


@pytest.mark.parametrize("command, package", [
    ("-m experiment=compare hydra/launcher=parallel", "hydra-joblib-launcher"),
    ("-m hydra/launcher=joblib model=vae,jsa", "hydra-joblib-launcher"),
    ("-m experiment=compare trainer=ddp trainer.devices=4 hydra/launcher=slurm hydra.launcher.partition=gpu", "hydra-submitit-launcher"),
    ("-m hydra/launcher=slurm_local model=vae,jsa", "hydra-submitit-launcher"),
    ("-m model=jsa hydra/sweeper=tune", "hydra-optuna-sweeper"),
])
def test_a_missing_extra_names_the_pip_install_that_provides_it(command, package, monkeypatch):
    """The same command passes with the plugin installed (VALID, test_valid_launcher_and_sweeper_commands_pass)."""
    assert command in VALID
    monkeypatch.setattr(hydra_check, "installed_plugins", lambda: [])
    refusal = refuse_early(shlex.split(command), cli=False)
    assert refusal is not None and "\n" not in refusal, refusal
    assert "plugin is not installed: pip install -e '.[cluster]'" in refusal and f"(or pip install {package})" in refusal


def test_the_choices_of_another_installed_hydra_plugin_pass(monkeypatch):
    """A plugin the cluster extra does not install (hydra-ray-launcher: hydra_plugins/hydra_ray_launcher registers ray
    and ray_aws) is known by its folder: its choices pass, a sweeper of that name does not."""
    monkeypatch.setattr(hydra_check, "installed_plugins", lambda: ["hydra_joblib_launcher", "hydra_ray_launcher"])
    assert refuse_early(["-m", "hydra/launcher=ray"], cli=False) is None
    assert refuse_early(["-m", "hydra/launcher=ray_aws"], cli=False) is None
    assert "no such sweeper" in refuse_early(["-m", "hydra/sweeper=ray"], cli=False)


def test_the_refusal_comes_before_torch_is_imported(tmp_path):
    probe = ("import runpy, sys; sys.argv = ['train.py', *sys.argv[1:]]\n"
             "try:\n    runpy.run_path('train.py', run_name='__main__')\n"
             "except SystemExit as stop:\n    print('torch' in sys.modules, file=sys.stdout); raise\n")
    result = subprocess.run([sys.executable, "-c", probe, "-m", "model=vae,jsa", "hydra/launcher=jobib"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout.strip() == "False", (result.stdout, result.stderr)
    assert result.stderr.startswith("error: hydra/launcher=jobib: no such launcher") and result.stderr.count("\n") == 1


# ---- the configs, composed ------------------------------------------------------------------------------------


def hydra_config(overrides: list[str]):
    import launch.checks.hydra_config
    import train
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    launch.checks.hydra_config.register_defaults()
    if not OmegaConf.has_resolver("pid"):  # launch.hydra_app.main's (which replaces it)
        OmegaConf.register_new_resolver("pid", os.getpid)
    with initialize_config_dir(config_dir=str(train.CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


def test_the_slurm_launcher_submits_train_sbatch_resources_with_lightning_requeue(tmp_path, monkeypatch):
    """hydra/launcher=slurm: the sbatch script submitit writes for a DDP job of a node (trainer=ddp trainer.devices=4)
    asks for what scripts/slurm/train.sbatch asks for, and lets Lightning handle preemption as there (SIGUSR1, requeue)."""
    import submitit
    from hydra.utils import instantiate
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    cfg = hydra_config(["trainer=ddp", "trainer.devices=4", "hydra/launcher=slurm", "hydra.launcher.partition=gpu"])
    launcher = instantiate(cfg.hydra.launcher)  # as Hydra builds it: every interpolation resolved
    params = dict(launcher.params)
    assert re.fullmatch(r"logs/hydra/multirun/[\d_-]+-\d+/\.submitit/%j", params["submitit_folder"])  # in the sweep dir
    # What SlurmLauncher.launch does with its parameters, up to the sbatch call (no srun here: submitit would refuse).
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", staticmethod(lambda: 1))
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="slurm", slurm_max_num_timeout=params.pop("max_num_timeout"))
    params.pop("submitit_folder")
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = executor._executor._make_submission_file_text("python -m submitit.core._submit", "uid")
    flags = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?$", script, re.M))
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?", (REPO / "scripts/slurm/train.sbatch").read_text(), re.M))
    assert flags["gpus-per-node"] == flags["ntasks-per-node"] == "4"  # one task per GPU, as train.sbatch
    assert flags["cpus-per-task"] == sbatch["cpus-per-task"] == "8" and flags["nodes"] == "1"
    assert flags["time"] == "1440" and sbatch["time"] == "24:00:00"
    assert flags["signal"] == "USR1@90" and sbatch["signal"] == "SIGUSR1@90"  # Lightning's requeue signal, not submitit's USR2
    assert "requeue" in flags and "requeue" in sbatch and flags["partition"] == "gpu" and flags["job-name"] == "latent-zoo"


def test_each_model_gets_its_own_search_space():
    jsa = hydra_config(["model=jsa", "hydra/sweeper=tune", "trainer.max_epochs=7"]).hydra.sweeper
    vae = hydra_config(["model=vae", "hydra/sweeper=tune"]).hydra.sweeper
    assert dict(jsa.params) == {"model.lr": "tag(log, interval(1e-4, 1e-2))", "model.mis_steps": "choice(1, 5, 10, 20)",
                                "model.cache_start_epoch": "int(interval(0, 7))"}  # up to the budget: never within it
    assert dict(vae.params) == {"model.lr": "tag(log, interval(1e-4, 1e-2))"}
    assert jsa.direction == "minimize" and jsa.sampler.seed == 0 and jsa.n_trials == 20 and jsa.n_jobs == 1


# ---- real multiruns, tiny ---------------------------------------------------------------------------------------


@pytest.mark.slow  # two real multiruns of two models each
@pytest.mark.parametrize("launcher", ["parallel", "slurm_local"])
def test_a_parallel_comparison_lands_like_a_sequential_one(launcher, tmp_path, mnist_dir):
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "parallel" else []
    # Both at once: each job waits at the start of fit until the other has started too (tests/scripts/rendezvous.py).
    rendezvous = ["+callbacks.rendezvous._target_=tests.scripts.rendezvous.WaitForEveryJob",
                  f"+callbacks.rendezvous.directory={tmp_path / 'started'}"]
    train(["-m", "experiment=compare", "model=vae,jsa", f"hydra/launcher={launcher}", *extra, *rendezvous, *TINY], tmp_path, mnist_dir)
    root = tmp_path / "logs" / "tensorboard"
    assert sorted(p.name for p in root.iterdir()) == RUNS
    multiruns = list((tmp_path / "logs" / "hydra" / "multirun").iterdir())
    assert len(multiruns) == 1, multiruns  # one multirun directory for both jobs (not one per job process)
    sweep_dir = multiruns[0]
    jobs = {}
    for name in RUNS:
        run = root / name / "version_0"
        assert (run / "checkpoints" / "last.ckpt").is_file() and list(run.glob("events.out.tfevents.*"))
        job = yaml.safe_load((run / "hydra_job.yaml").read_text())
        assert Path(job["sweep_dir"]) == sweep_dir.resolve() and Path(job["output_dir"]).parent == sweep_dir.resolve()
        jobs[job["job_num"]] = Path(job["output_dir"])
    assert sorted(jobs) == [0, 1] and [p.name for _, p in sorted(jobs.items())] == ["0-vae-mnist", "1-jsa-mnist"]
    # Each job in its own process, both at once, with its share of the cores for torch's threads.
    threads = max(1, cores() // 2) if launcher == "parallel" else 1
    split = "2 CPU cores // n_jobs=2" if launcher == "parallel" and cores() == 2 else ""
    for num, output_dir in jobs.items():
        log = (output_dir / "train.log").read_text()
        assert f"parallel job {num}: torch threads {threads} (" in log and split in log, log[-2000:]
    assert len(list((tmp_path / "started").iterdir())) == 2
    from benchmarks import compare

    pids = {compare.EVENT_FILE.match(next((root / name / "version_0").glob("events.out.tfevents.*")).name)[3] for name in RUNS}
    assert len(pids) == 2 and str(os.getpid()) not in pids

    report = compare.write_report([root], tmp_path / "report").read_text()
    assert f"The runs of the latest multirun, {compare.shown(sweep_dir)} (started" in report
    for name in RUNS:
        assert f"- compared: `{name}/version_0` as **{name}**: the latest multirun" in report
    header = next(line for line in report.splitlines() if line.startswith("| run"))
    columns = [cell.strip() for cell in header.split("|")]
    rows = [line.split("|") for line in report.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    assert sorted(row[columns.index("model")].strip() for row in rows) == ["JSA", "VAE"]
    nll = columns.index("nll (nats)")
    assert all(math.isfinite(float(row[nll].strip().replace(",", ""))) for row in rows)  # tested: test/nll


@pytest.mark.slow  # three trials of JSA
def test_an_optuna_study_writes_the_best_trials_settings(tmp_path, mnist_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(["-m", "model=jsa", "hydra/sweeper=tune", "hydra.sweeper.n_trials=3", "trainer.max_epochs=2", *FAST],
          tmp_path, mnist_dir)
    (sweep_dir,) = (tmp_path / "logs" / "hydra" / "multirun").iterdir()
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())  # where README and tune.yaml say
    best = result["best_params"]
    assert set(best) == {"model.lr", "model.mis_steps", "model.cache_start_epoch"}
    assert 1e-4 <= best["model.lr"] <= 1e-2 and best["model.mis_steps"] in (1, 5, 10, 20) and 0 <= best["model.cache_start_epoch"] <= 2
    # Every trial a run of the multirun, named by its settings; the objective is each run's best val/nll.
    runs = sorted((tmp_path / "logs" / "tensorboard").iterdir())
    assert len(runs) == 3 and all((run / "version_0" / "checkpoints" / "last.ckpt").is_file() for run in runs)
    best_of = {}
    for run in runs:
        events = EventAccumulator(str(run / "version_0"))
        events.Reload()
        best_of[run.name] = min(e.value for e in events.Scalars("val/nll"))
    winner = min(best_of, key=best_of.get)
    assert result["best_value"] == pytest.approx(best_of[winner], rel=1e-6)
    assert winner == f"jsa-mnist-mlp-K10-L{best['model.mis_steps']}-cache{best['model.cache_start_epoch']}-lr{best['model.lr']!r}"

    from benchmarks import compare

    report = compare.write_report([tmp_path / "logs" / "tensorboard"], tmp_path / "report").read_text()
    tuned = report.split("## Tuned settings (Optuna)", 1)[1].split("## Runs", 1)[0]
    assert f"- jsa: best val/nll {result['best_value']:,.2f} with model.mis_steps={best['model.mis_steps']}" in tuned
    assert f"model.lr={best['model.lr']:g} (3 trials;" in tuned and "optimization_results.yaml" in tuned


def test_parallel_workers_hold_distinct_gpu_slots_and_a_finished_worker_frees_its_own(tmp_path):
    """hydra/launcher=parallel: the jobs running at one moment hold different slots (so different GPUs), a worker keeps
    its slot from job to job, and the slot of a worker that ended goes to the next one (launch/runs/worker_slots.py)."""
    script = ("import sys; from pathlib import Path; from launch.runs.worker_slots import claim_slot\n"
              f"first = claim_slot(Path({str(tmp_path)!r}), 2); print(first, claim_slot(Path({str(tmp_path)!r}), 2), flush=True)\n"
              "sys.stdin.read()")  # holds the slot until the test closes its stdin

    def worker() -> tuple[subprocess.Popen, str]:
        process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return process, process.stdout.readline().strip()

    (a, slots_a), (b, slots_b) = worker(), worker()
    assert (slots_a, slots_b) == ("0 0", "1 1")
    c, slots_c = worker()
    assert slots_c == "None None"  # both slots held by live workers
    c.communicate("")
    a.communicate("")  # worker 0 ends: its slot is free again
    d, slots_d = worker()
    assert slots_d == "0 0"
    b.communicate("")
    d.communicate("")


def test_a_worker_that_cannot_take_a_slot_gets_none_and_falls_back_to_the_job_number(tmp_path):
    from launch.runs.worker_slots import claim_slot

    (tmp_path / "a-file").write_text("")
    assert claim_slot(tmp_path / "a-file" / ".worker-slots", 2) is None  # no directory can be made there


def test_a_parallel_job_on_several_gpus_trains_on_its_worker_slots_gpu(tmp_path, monkeypatch):
    """Job 4 of a parallel multirun on 2 GPUs, in a worker that finds slot 0 held by a live worker: cuda:1 (its slot),
    not cuda:0 (4 mod 2) beside the running job."""
    import torch

    from launch.runs import worker_slots
    from launch.hydra_app import parallel_job_settings
    from launch.checks.hydra_config import compose

    holder = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; from launch.runs.worker_slots import "
                               f"claim_slot; print(claim_slot(Path({str(tmp_path / '.worker-slots')!r}), 2), flush=True); sys.stdin.read()"],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "0"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    monkeypatch.setattr(worker_slots, "_held", {})
    cfg = compose(["hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "hydra.mode=MULTIRUN", "hydra.job.num=4",
                   f"hydra.sweep.dir={tmp_path}", "trainer.accelerator=gpu"])
    try:
        assert parallel_job_settings(cfg) == {"devices": [1]}
    finally:
        for handle, _ in worker_slots._held.values():
            os.close(handle)
        holder.communicate("")


def test_a_sweep_that_would_resume_one_checkpoint_in_several_jobs_is_one_line(tmp_path, monkeypatch):
    """Its jobs would resume the same run in turn, each from the checkpoint the last one wrote, into one TensorBoard
    run; one job per checkpoint passes."""
    monkeypatch.chdir(tmp_path)
    for name in ("a.ckpt", "b.ckpt"):
        (tmp_path / name).write_bytes(b"PK")
    for command in ("-m model=vae ckpt_path=a.ckpt model.lr=0.001,0.01", "-m model=vae ckpt_path=a.ckpt,a.ckpt",
                    "-m model=vae,rws ckpt_path=a.ckpt", "-m model=vae ckpt_path=a.ckpt,b.ckpt seed=0,1"):
        refusal = refuse_early(shlex.split(command), cli=False)
        assert refusal is not None and "\n" not in refusal, (command, refusal)
        says(refusal, "ckpt_path=a.ckpt", "in a sweep", "without -m")
    assert refuse_early(shlex.split("-m model=vae ckpt_path=a.ckpt,b.ckpt"), cli=False) is None
