"""How JSA's training step scales with the number of MIS steps L on a GPU (docs/mis.md#cost-model).

    python -m benchmarks.gpu_scaling                      # on a CUDA machine: CIFAR-10 conv nets, batch 128
    python -m benchmarks.gpu_scaling --precision bf16-mixed --compile
    python -m benchmarks.gpu_scaling --tiny               # a CPU smoke run of the same code, tiny networks

JSA's index-cached MIS scores the L+1 candidates of every example in one batched decoder pass. On a
CPU that pass costs in proportion to its B (L+1) rows, so the linear cost model predicts a JSA step of
1 + (L+1)/6 VAE steps (a forward pass ~ 1/6 of a forward+backward+Adam step). On a GPU the pass is
nearly free while the device is not saturated: the JSA/VAE ratio stays flat as L grows, until the
candidate rows fill the device; the `µs/row` column (the step's extra time per added candidate row)
shows where that happens.

For each L, measured side by side in one run (medians of torch.utils.benchmark's blocked_autorange,
which synchronizes CUDA): one MIS call (encoder, candidate pass, chain; no gradient), one JSA training
step (MIS, forward, backward, Adam) and one VAE step on the same conv backbone and batch, these two in 3
alternating rounds (benchmarks/timing.py) so that the ratio holds on a machine whose speed drifts. The networks
are those `python train.py model=jsa data=cifar10` trains (conv backbone, discretized-logistic likelihood,
K=10, D=16 codes on the 8x8 grid; the VAE with 16 latent channels per cell), on random 8-bit images
(the cost does not depend on the pixels). `--precision bf16-mixed` runs the steps under bfloat16 autocast
(log-probabilities stay float32, models/components/precision.py); `--compile` compiles the encoder and
decoder as `model.compile=true` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from benchmarks import arguments
from benchmarks.mis_speed import PRECISIONS, autocast, train_step_fn
from benchmarks.timing import median_seconds, paired
from models import JSA, VAE
from samplers import index_cached_mis

ROUNDS = 3  # alternating rounds of the JSA and the VAE step for each L
TINY = dict(device="cpu", batch_size=8, hidden_channels=8, mis_steps=[1, 4], min_run_time=0.05)


def median_ms(fn, min_run_time: float) -> float:
    return 1e3 * median_seconds(fn, min_run_time, num_threads=torch.get_num_threads(), warm_up=3)


def build(cls, args, device: torch.device, **kwargs):
    model = cls(data_shape=(3, 32, 32), backbone="conv", likelihood="discretized_logistic",
                hidden_channels=args.hidden_channels, compile=args.compile, **kwargs).to(device)
    model.configure_model()  # what a Trainer calls first: compiles the networks when `compile` is set
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--batch-size", type=arguments.integer(1), default=128)
    parser.add_argument("--hidden-channels", type=int, default=64, help="width of the conv backbone (train.py's default)")
    parser.add_argument("--mis-steps", type=arguments.integer(1), nargs="+", default=[1, 4, 16, 64], help="the values of L")
    parser.add_argument("--precision", choices=PRECISIONS, default="32-true")
    parser.add_argument("--compile", action="store_true", help="compile the encoder and decoder (model.compile=true)")
    parser.add_argument("--min-run-time", type=arguments.number(0), default=1.0, help="seconds each timing runs for; the JSA and VAE steps: over their rounds (default 1)")
    parser.add_argument("--tiny", action="store_true",
                        help="CPU smoke run: batch 8, 8 channels, L in {1, 4}, 0.05 s a timing (overrides those options)")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.is_dir():  # found before the measurement, not after it
        parser.error(f"--out {args.out}: a directory; expected the file to write the table to")
    if args.tiny:
        vars(args).update(TINY)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"error: --device {args.device}: no CUDA device on this machine; run it on a GPU machine, "
                 "or use --tiny (a CPU smoke run) or --device cpu")
    device = torch.device(args.device)
    dtype = PRECISIONS[args.precision]
    torch.manual_seed(0)
    x = (torch.randint(0, 256, (args.batch_size, 3, 32, 32)) / 255).to(device)
    index = torch.arange(args.batch_size, device=device)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    emit(f"device={name} precision={args.precision} compile={args.compile} batch={args.batch_size} "
             f"hidden_channels={args.hidden_channels} torch={torch.__version__}" + (" (--tiny: a smoke run, not a measurement)" if args.tiny else ""))
    vae_step = train_step_fn(build(VAE, args, device, latent_dim=16), x, index, dtype)
    emit(f"{'L':>4} {'rows B(L+1)':>12} {'MIS call ms':>12} {'JSA step ms':>12} {'VAE step ms':>12} {'JSA/VAE':>8} "
                 f"{'CPU model 1+(L+1)/6':>20} {'µs/row':>8}")
    previous = None
    for num_steps in args.mis_steps:
        jsa = build(JSA, args, device, mis_steps=num_steps, cache_size=args.batch_size)
        rows = args.batch_size * (num_steps + 1)

        def mis_call() -> None:
            with torch.no_grad(), autocast(x, dtype):
                index_cached_mis(jsa.posterior(x), lambda h: jsa.log_joint(x, h), num_steps)

        mis_ms = median_ms(mis_call, args.min_run_time)
        # The JSA and VAE steps in alternating rounds (benchmarks/timing.py): a drift of the machine falls on both.
        jsa_ms, vae_ms, ratio = paired(train_step_fn(jsa, x, index, dtype), vae_step,
                                       lambda fn: median_ms(fn, args.min_run_time / ROUNDS), ROUNDS)
        # The step's extra time per added candidate row, from the previous L: ~0 while the device has room.
        per_row = "" if previous is None else f"{1e3 * (jsa_ms - previous[1]) / (rows - previous[0]):>8.2f}"
        emit(f"{num_steps:>4} {rows:>12} {mis_ms:>12.2f} {jsa_ms:>12.2f} {vae_ms:>12.2f} {ratio:>7.2f}x "
                     f"{1 + (num_steps + 1) / 6:>19.2f}x {per_row:>8}")
        previous = (rows, jsa_ms)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
