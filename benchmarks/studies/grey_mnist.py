"""Bits/dim on grey (8-bit) MNIST with the discretized logistic likelihood, every model, a short budget.

    python -m benchmarks.studies.grey_mnist --out benchmarks/results/grey-mnist

Runs `experiment=compare` (the same networks, optimizer, batch size and seed for every model) on grey MNIST
(`data.binarize=none`: a mixture of 5 discretized logistics per pixel, exact bits/dim), one model at a time so that
an interrupted study continues, then writes the comparison report. `--steps`, `--test-samples` and `--test-batches`
cut the budget (the same test images for every model).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benchmarks.lib import runner
from common.files import write_file

MODELS = ("vae", "vqvae", "jsa", "dvae", "dvae_gumbel")
TRAIN = Path(__file__).resolve().parents[2] / "train.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/grey-mnist"))
    parser.add_argument("--logs", type=Path, default=Path("logs/grey-mnist"), help="where the runs write (resumable)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--val-every", type=int, default=100, help="validate every this many steps (<= --steps)")
    parser.add_argument("--val-batches", type=int, default=4, help="val batches of each validation")
    parser.add_argument("--val-samples", type=int, default=20, help="importance samples of the val bound")
    parser.add_argument("--test-batches", type=int, default=16)
    parser.add_argument("--test-samples", type=int, default=100)
    parser.add_argument("--models", type=lambda text: text.split(","), default=list(MODELS),
                        help=f"comma-separated subset of {','.join(MODELS)} (default: all)")
    args = parser.parse_args()
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    for option in ("steps", "val_every", "val_batches", "val_samples", "test_batches", "test_samples"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    runner.check_directory_options(parser, args, ("out", "logs"))  # before the minutes of training, not after
    for model in args.models:
        if any((args.logs / "tensorboard").glob(f"{model}-mnist-*/version_*/checkpoints/*.ckpt")):
            print(f"{model}: done earlier, skipped", flush=True)
            continue
        command = [
            sys.executable, str(TRAIN), "experiment=compare", f"model={model}", "data=mnist", "data.binarize=none",
            f"log_dir={args.logs}", f"trainer.max_steps={args.steps}", f"trainer.val_check_interval={min(args.val_every, args.steps)}",
            f"trainer.limit_val_batches={args.val_batches}", f"model.val_num_samples={args.val_samples}",
            f"trainer.limit_test_batches={args.test_batches}",
            f"model.test_num_samples={args.test_samples}",
        ]
        print("+ python train.py", " ".join(command[2:]), flush=True)
        if subprocess.run(command).returncode:  # its own error line is above
            raise SystemExit(f"grey_mnist: the {model} run failed (its message is above)")
    if subprocess.run([sys.executable, "-m", "benchmarks.compare", str(args.logs / "tensorboard"), "--out", str(args.out)]).returncode:
        raise SystemExit("grey_mnist: the comparison report failed (its message is above)")
    write_file(args.out / "command.txt", " ".join(["python -m benchmarks.studies.grey_mnist", *sys.argv[1:]]) + "\n")


if __name__ == "__main__":
    main()
