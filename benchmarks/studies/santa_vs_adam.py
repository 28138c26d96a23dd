"""Santa against Adam on one model of the collection: the same model, data, seed and epochs, val NLL after each.

    nice -n 10 python -m benchmarks.studies.santa_vs_adam --epochs 1 --limit-train-batches 100 --limit-val-batches 8

Trains `python train.py model=<model> optimizer=adam` and `... optimizer=santa` (docs/sgmcmc.md#santa) one after the
other and writes `report.md` (per optimizer: epochs, steps, val NLL after every epoch and at the end, wall time, the
commands and the machine) and `command.txt` under --out. Santa explores for `--exploration-fraction` of the steps
and refines for the rest, so that a short run shows both; `--limit-*-batches` cut an epoch on a small machine.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.lib import arguments, markdown
from benchmarks.compare import find_runs, read_run
from common.files import write_file

TRAIN = Path(__file__).resolve().parents[2] / "train.py"
TRAIN_EXAMPLES = 55_000  # the MNIST training split of datamodules.MNISTDataModule
OPTIMIZERS = ("adam", "santa")


def machine() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
        model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name")), None)
    except (OSError, subprocess.CalledProcessError):
        model = None
    return (f"{model or platform.processor() or 'unknown CPU'} (lscpu | grep 'Model name'), {os.cpu_count()} cores, "
            f"{platform.system()}, CPU only")


def steps_per_epoch(batch_size: int, limit_train_batches: float) -> int:
    full = math.ceil(TRAIN_EXAMPLES / batch_size)
    return min(full, int(limit_train_batches)) if limit_train_batches > 1 else max(1, int(full * limit_train_batches))


def command_for(optimizer: str, args: argparse.Namespace, total_steps: int) -> list[str]:
    command = [
        sys.executable, str(TRAIN), f"model={args.model}", "data=mnist", f"optimizer={optimizer}", f"seed={args.seed}",
        f"log_dir={args.logs / optimizer}", f"trainer.max_epochs={args.epochs}", f"data.batch_size={args.batch_size}",
        f"trainer.limit_train_batches={args.limit_train_batches}", f"trainer.limit_val_batches={args.limit_val_batches}",
        f"model.val_num_samples={args.val_samples}", "trainer.enable_progress_bar=false",
    ]
    if optimizer == "santa":
        command.append(f"optimizer.exploration_steps={max(0, round(args.exploration_fraction * total_steps))}")
        command += args.santa
    else:
        command += args.adam
    return command


def santa_settings() -> str:
    """configs/optimizer/santa.yaml's settings, on one line (the run's overrides come on top)."""
    config = TRAIN.parent / "configs" / "optimizer" / "santa.yaml"
    lines = [line.strip() for line in config.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return ", ".join(line.replace(": ", "=") for line in lines if not line.startswith(("_target_", "_partial_")))


def val_nll(run_root: Path) -> tuple[list[tuple[int, float]], Path]:
    (run,) = [read_run(path, run_root) for path in find_runs([run_root])][-1:]
    return [(step, value) for _, step, value in run.scalars.get("val/nll", [])], run.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/santa"))
    parser.add_argument("--logs", type=Path, default=Path("logs/santa-vs-adam"), help="where the runs write")
    parser.add_argument("--model", choices=arguments.MODEL_CONFIGS, default="vae")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--limit-train-batches", type=arguments.number(0), default=1.0, help="per epoch: a fraction, or a count > 1")
    parser.add_argument("--limit-val-batches", type=arguments.number(0), default=1.0)
    parser.add_argument("--val-samples", type=int, default=100, help="importance samples per image for val/nll")
    parser.add_argument("--exploration-fraction", type=float, default=0.5, help="Santa's share of steps exploring")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--santa", nargs="*", default=[], help="extra Hydra overrides for the Santa run")
    parser.add_argument("--adam", nargs="*", default=[], help="extra Hydra overrides for the Adam run")
    args = parser.parse_args()
    for option in ("epochs", "batch_size", "val_samples"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    if not 0 <= args.exploration_fraction <= 1:
        parser.error(f"--exploration-fraction must be in [0, 1], got {args.exploration_fraction}")
    if args.limit_train_batches > 1:
        args.limit_train_batches = int(args.limit_train_batches)
    if args.limit_val_batches > 1:
        args.limit_val_batches = int(args.limit_val_batches)

    total_steps = args.epochs * steps_per_epoch(args.batch_size, args.limit_train_batches)
    full_epochs = args.limit_train_batches == 1.0 and args.limit_val_batches == 1.0
    rows, commands = [], []
    for optimizer in OPTIMIZERS:
        command = command_for(optimizer, args, total_steps)
        shown = "python train.py " + " ".join(shlex.quote(part) for part in command[2:])
        print("+", shown, flush=True)
        start = time.time()
        if subprocess.run(command).returncode:  # its own error line is above
            raise SystemExit(f"santa_vs_adam: the {optimizer} run failed (its message is above)")
        seconds = time.time() - start
        history, run_path = val_nll(args.logs / optimizer / "tensorboard")
        rows.append((optimizer, history, seconds, run_path))
        commands.append(shown)

    args.out.mkdir(parents=True, exist_ok=True)
    per_epoch = lambda history: ", ".join(f"{value:.2f}" for _, value in history) or "none"  # noqa: E731
    table = ["| optimizer | epochs | training steps | val NLL per epoch (nats) | final val NLL (nats) | wall time (s) |",
             "|---|---|---|---|---|---|"]
    for optimizer, history, seconds, _ in rows:
        final = f"{history[-1][1]:.2f}" if history else "n/a"
        table.append(markdown.table_row([optimizer, args.epochs, total_steps, per_epoch(history), final, f"{seconds:.0f}"]))
    budget = ("full epochs, full validation split" if full_epochs else
              f"**a short run**: {args.epochs} epoch(s) of {steps_per_epoch(args.batch_size, args.limit_train_batches)} "
              f"training batches of {args.batch_size} (trainer.limit_train_batches={args.limit_train_batches}), "
              f"val NLL on trainer.limit_val_batches={args.limit_val_batches} batches with {args.val_samples} importance "
              f"samples per image: a smoke-scale comparison, not a converged one")
    report = "\n".join([
        f"# Santa vs Adam: {args.model} on MNIST", "",
        f"Budget: {budget}. Santa explores for the first {round(args.exploration_fraction * total_steps)} of the "
        f"{total_steps} steps (annealed SG-MCMC) and refines (optimizes) for the rest. Same seed ({args.seed}), data, "
        "model and batch size for both. Santa's settings: configs/optimizer/santa.yaml "
        f"({santa_settings()}), Adam's: configs/optimizer/adam.yaml (lr = model.lr).", "",
        *table, "",
        f"Machine: {machine()}. Wall times include start-up and validation, on a machine shared with other jobs: "
        "not a speed comparison.", "",
        "Commands (run one after the other, `nice -n 10`):", "",
        *[f"    {command}" for command in commands], "",
        "Runs: " + ", ".join(f"`{path}`" for *_, path in rows) + " (not committed).", "",
    ])
    write_file(args.out / "report.md", report)
    write_file(args.out / "command.txt", "nice -n 10 python -m benchmarks.studies.santa_vs_adam " + " ".join(
        shlex.quote(arg) for arg in sys.argv[1:]) + "\n")
    print(report)


if __name__ == "__main__":
    main()
