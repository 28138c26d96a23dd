"""The field study's plan (benchmarks/studies/field/study.py runs it, report.py reports it): its arms,
the jobs in order, and what the report needs to read a record (the arms' names and labels, the compared pairs,
the decoder rows a step costs)."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.lib import runner


LABELS = {"jsa": "JSA", "rws": "RWS", "vimco": "VIMCO", "dvae": "REINFORCE+B*", "dvae_gumbel": "ST Gumbel-softmax",
          "vae": "Gaussian VAE"}


PRIOR_LABELS = {"uniform": "uniform", "autoregressive": "MADE", None: "N(0, I)"}


# (model, prior): the estimators JSA is judged against, each with the prior the paper uses and the learned one
# where the estimator takes it (Gumbel's closed-form KL needs a factorized prior; the VAE has a Gaussian latent).
MNIST_ARMS = [("jsa", "uniform"), ("rws", "uniform"), ("vimco", "uniform"), ("jsa", "autoregressive"),
              ("rws", "autoregressive"), ("vimco", "autoregressive"), ("dvae", "uniform"), ("dvae_gumbel", "uniform"),
              ("vae", None)]


FASHION_ARMS = MNIST_ARMS + [("dvae", "autoregressive")]


DATASETS = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}


REFERENCE = "mnist-jsa-uniform-s0"  # the run whose parameters every estimator's gradient is measured at


# After these epochs (its checkpoints are written with each validation, every 5 epochs under jsa_paper).
REFERENCE_EPOCHS = (5, 10, 30)


PARTICLES = 20  # configs/experiment/jsa_paper.yaml: JSA's mis_steps, the others' num_samples


TWENTY_PARTICLES = ("jsa", "rws", "vimco", "dvae", "dvae_gumbel")


CLOSE = 1.0  # nats: two Fashion-MNIST arms closer than this at seed 0 get three seeds each


@dataclass

class Job:
    name: str
    kind: str  # train | step_cost | equal_time | is_resolution | gradients
    data: str = "mnist"
    model: str = ""
    prior: str | None = None
    seed: int = 0
    epochs: int = 30
    overrides: list[str] = field(default_factory=list)


def arm_name(data: str, model: str, prior: str | None) -> str:
    return f"{data}-{model}" + (f"-{prior}" if prior else "")


def seed0_mnist_runs(args: argparse.Namespace, models: tuple[str, ...] | None = None) -> list[str]:
    """The seed-0 MNIST training runs of the plan (of `models` only, if given): what the later jobs read."""
    return [f"{arm_name('mnist', m, p)}-s0" for m, p in MNIST_ARMS if m in args.models and (models is None or m in models)]


def compared_pairs(data: str) -> list[tuple[str, str]]:
    """The arms the report sets side by side: each arm against JSA with the same prior, each estimator's MADE prior
    against its uniform one, and the VAE against JSA with either prior."""
    pairs = [(arm_name(data, m, p), arm_name(data, "jsa", p)) for m in LABELS for p in ("uniform", "autoregressive") if m != "jsa"]
    pairs += [(arm_name(data, m, "autoregressive"), arm_name(data, m, "uniform")) for m in LABELS]
    return pairs + [(arm_name(data, "vae", None), arm_name(data, "jsa", p)) for p in ("uniform", "autoregressive")]


def close_arms(records: dict[str, dict], data: str) -> set[str]:
    """The arms of `data` whose seed-0 test NLL is within CLOSE nats of an arm they are compared with."""
    nll = {name[:-3]: r["test"]["nll"] for name, r in records.items()
           if r.get("kind") == "train" and r["data"] == data and r["seed"] == 0 and "nll" in r.get("test", {})}
    return {arm for a, b in compared_pairs(data) if a in nll and b in nll and abs(nll[a] - nll[b]) < CLOSE for arm in (a, b)}


def read_records(out: Path) -> dict[str, dict]:
    return runner.read_records(out)


def plan(args: argparse.Namespace, records: dict[str, dict] | None = None) -> list[Job]:
    """The jobs in order; the Fashion-MNIST seeds beyond 0 follow from the seed-0 records (`records`, read from
    --out when not given)."""
    records = read_records(args.out) if records is None else records

    def train(data: str, model: str, prior: str | None, seed: int) -> Job:
        return Job(f"{arm_name(data, model, prior)}-s{seed}", "train", data, model, prior, seed, args.epochs)

    # Seed 0 first, and what needs only seed 0 (the step costs, equal time, the measurements) right after it; then
    # the seeds, then the second data set.
    jobs = [train("mnist", m, p, 0) for m, p in MNIST_ARMS]
    if "mnist" in args.datasets:
        jobs.append(Job(step_cost_job(args), "step_cost"))
        if "vae" in args.models and set(args.models) & set(TWENTY_PARTICLES):
            jobs.append(Job("mnist-vae-equal-time-s0", "equal_time", "mnist", "vae"))
        jobs.append(Job("measure-is-resolution", "is_resolution"))
        if "jsa" in args.models:
            jobs.append(Job("measure-gradients", "gradients"))
    jobs += [train("mnist", m, p, s) for s in range(1, args.seeds) for m, p in MNIST_ARMS]
    jobs += [train("fashion_mnist", m, p, 0) for m, p in FASHION_ARMS]
    close = close_arms(records, "fashion_mnist")
    jobs += [train("fashion_mnist", m, p, s) for s in range(1, args.seeds) for m, p in FASHION_ARMS
             if arm_name("fashion_mnist", m, p) in close]
    return [j for j in jobs if j.data in args.datasets and (not j.model or j.model in args.models)]


def step_cost_job(args: argparse.Namespace) -> str:
    """The step-cost record's name: `measure-step-cost` on the CPU (the time axis of the equal-time runs), with the
    device beside it elsewhere (`--cost-device cuda`: measure-step-cost-cuda), so that a GPU's costs are a record of
    their own and the CPU's stay."""
    device = getattr(args, "cost_device", "cpu")
    return "measure-step-cost" if device == "cpu" else f"measure-step-cost-{device.replace(':', '')}"


def decoder_rows(record: dict) -> tuple[float, float]:
    """Decoder rows per example and step: (forward, backward), at the paper protocol's PARTICLES proposals or samples.
    JSA scores its PARTICLES + 1 candidates without gradient, then re-scores with gradient the distinct states its
    chain visited, about 1 + aL at acceptance rate a (models/jsa.py, weighted_log_joint)."""
    model = record["model"]
    if model == "jsa":
        accepted = [v for _, v in record["curves"]["acceptance_rate"]]
        with_grad = 1 + PARTICLES * statistics.mean(accepted) if accepted else float("nan")
        return PARTICLES + 1 + with_grad, with_grad
    if model in TWENTY_PARTICLES:
        return float(PARTICLES), float(PARTICLES)
    return 1.0, 1.0
