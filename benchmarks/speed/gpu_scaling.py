"""How JSA's training step scales with the number of MIS steps L on a GPU (docs/mis.md#cost-model), and with
--estimators every estimator's step at S = L, eager and compiled whole (docs/mis.md#compiling-the-whole-step).

    python -m benchmarks.speed.gpu_scaling                      # on a CUDA machine: CIFAR-10 conv nets, batch 128
    python -m benchmarks.speed.gpu_scaling --precision bf16-mixed --compile
    python -m benchmarks.speed.gpu_scaling --tiny               # a CPU smoke run of the same code, tiny networks
    python -m benchmarks.speed.gpu_scaling --estimators --out benchmarks/results/speed/gpu_estimators_h100.txt
    python -m benchmarks.speed.gpu_scaling --estimators --quick # its CPU smoke run

What each line times: benchmarks/results/speed/README.md#how-each-benchmark-measures."""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.lib import arguments
from benchmarks.speed.mis_speed import PRECISIONS, autocast, train_step_fn
from benchmarks.lib.timing import median_seconds, paired
from models import JSA, RWS, VAE, VIMCO
from samplers import index_cached_mis
from common.files import write_file

ROUNDS = 3  # alternating rounds of the JSA and the VAE step for each L
TINY = dict(device="cpu", batch_size=8, hidden_channels=8, mis_steps=[1, 4], min_run_time=0.05)
# --estimators --quick: a CPU smoke run of the estimator table (inductor compiles on the CPU take a minute a model)
QUICK = dict(device="cpu", batch_size=8, hidden_channels=8, particles=3, min_run_time=0.05, rounds=1, backbones=["mlp"],
             compiled=["jsa-chain", "rws", "vae"], budget_minutes=60)
ESTIMATORS = ("jsa-chain", "jsa-chain-distinct", "jsa-rows2", "jsa-rows4", "jsa-expected", "jsa-final", "rws", "vimco", "vae")
# The order of the compilations: the goals first (JSA's chain step against RWS's, compiled JSA against the
# compiled VAE), so that a run whose --budget-minutes is spent before the last has measured those.
COMPILE_ORDER = ("jsa-chain", "jsa-rows4", "rws", "vae", "jsa-rows2", "vimco", "jsa-expected", "jsa-final")
EAGER_ONLY = {"jsa-chain-distinct"}  # its nonzero makes a data-dependent shape: it does not compile whole


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
    parser.add_argument("--estimators", action="store_true",
                        help="the estimator table instead of the L sweep: JSA, RWS, VIMCO at S = L = --particles, the VAE; "
                             "mlp and conv; eager and compiled whole (model.compile=step)")
    parser.add_argument("--particles", type=arguments.integer(2), default=20, help="--estimators: S = L (default 20)")
    parser.add_argument("--backbones", nargs="+", choices=["mlp", "conv"], default=["mlp", "conv"], help="--estimators: backbones")
    parser.add_argument("--compiled", nargs="*", choices=ESTIMATORS, default=[e for e in ESTIMATORS if e not in EAGER_ONLY],
                        help="--estimators: the estimators also measured compiled (default: all that compile whole)")
    parser.add_argument("--rounds", type=arguments.integer(1), default=3, help="--estimators: alternating rounds (default 3)")
    parser.add_argument("--fused-adam", action="store_true", help="--estimators: every step's Adam with fused=True (CUDA)")
    parser.add_argument("--budget-minutes", type=arguments.number(0), default=6.5,
                        help="--estimators: no compilation starts that, at the longest one's pace so far, would end the "
                             "run after this many minutes from its start; a skipped one is named in the table (default 6.5)")
    parser.add_argument("--quick", action="store_true",
                        help="--estimators CPU smoke run: batch 8, 8 channels, S = L = 3, mlp only, 0.05 s a timing, one "
                             "round, three estimators compiled (overrides those options)")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.is_dir():  # found before the measurement, not after it
        parser.error(f"--out {args.out}: a directory; expected the file to write the table to")
    if args.tiny:
        vars(args).update(TINY)
    if args.quick:
        vars(args).update(QUICK, estimators=True)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"error: --device {args.device}: no CUDA device on this machine; run it on a GPU machine, "
                 "or use --tiny (a CPU smoke run) or --device cpu")
    device = torch.device(args.device)
    dtype = PRECISIONS[args.precision]
    if args.estimators:
        estimator_table(args, device, dtype)
        return
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
        # The JSA and VAE steps in alternating rounds (benchmarks/lib/timing.py): a drift of the machine falls on both.
        jsa_ms, vae_ms, ratio = paired(train_step_fn(jsa, x, index, dtype), vae_step,
                                       lambda fn: median_ms(fn, args.min_run_time / ROUNDS), ROUNDS)
        # The step's extra time per added candidate row, from the previous L: ~0 while the device has room.
        per_row = "" if previous is None else f"{1e3 * (jsa_ms - previous[1]) / (rows - previous[0]):>8.2f}"
        emit(f"{num_steps:>4} {rows:>12} {mis_ms:>12.2f} {jsa_ms:>12.2f} {vae_ms:>12.2f} {ratio:>7.2f}x "
                     f"{1 + (num_steps + 1) / 6:>19.2f}x {per_row:>8}")
        previous = (rows, jsa_ms)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_file(args.out, "\n".join(lines) + "\n")



# ---- --estimators: the estimators at S = L particles, eager and compiled whole ------------------------------------

def estimator_models(backbone: str, args, device: torch.device) -> dict[str, torch.nn.Module]:
    """The models of the table, as `python train.py model=NAME` builds them for MNIST (mlp) or CIFAR-10 (conv)."""
    if backbone == "mlp":
        data = dict(data_shape=(1, 28, 28), backbone="mlp", likelihood="bernoulli")
    else:
        data = dict(data_shape=(3, 32, 32), backbone="conv", likelihood="discretized_logistic", hidden_channels=args.hidden_channels)
    n = args.particles
    jsa = lambda **kw: JSA(mis_steps=n, cache_size=args.batch_size, **data, **kw)  # noqa: E731
    return {
        "jsa-chain": jsa(chain_rows="static"),
        "jsa-chain-distinct": jsa(chain_rows="distinct"),
        # chain on k + 1 rows per example (docs/jsa.md#a-fixed-number-of-gradient-rows); k >= L + 1 would be static rows
        **{f"jsa-rows{k}": jsa(gradient_rows=k) for k in (2, 4) if k < n},
        "jsa-expected": jsa(gradient_states="expected"),
        "jsa-final": jsa(gradient_states="final"),
        "rws": RWS(num_samples=n, **data),
        "vimco": VIMCO(num_samples=n, **data),
        "vae": VAE(latent_dim=32 if backbone == "mlp" else 16, **data),
    }


def estimator_batch(backbone: str, batch_size: int, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    if backbone == "mlp":  # binarized MNIST's shape and density
        return torch.bernoulli(torch.full((batch_size, 1, 28, 28), 0.13), generator=generator).to(device)
    return (torch.randint(0, 256, (batch_size, 3, 32, 32), generator=generator) / 255).to(device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def estimator_table(args, device: torch.device, dtype) -> None:
    began = time.perf_counter()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    lines: list[str] = []

    def emit(line: str) -> None:  # each line to the file as it comes: a run cut short keeps what it measured
        lines.append(line)
        print(line, flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_file(args.out, "\n".join(lines) + "\n")

    emit(f"device={name} torch={torch.__version__} precision={args.precision} batch={args.batch_size} S=L={args.particles} "
         f"hidden_channels(conv)={args.hidden_channels} rounds={args.rounds} adam={'fused' if args.fused_adam else 'default'}" + (" (--quick: a smoke run, not a measurement)" if args.quick else ""))
    emit("compiled: model.compile=step (training_loss and its backward one graph, fullgraph" +
         (', mode="reduce-overhead": CUDA graphs)' if device.type == "cuda" else "; no CUDA graphs on the CPU)") + "; Adam eager in both")
    emit(f"{'backbone':>8} {'estimator':>19} {'eager ms':>9} {'compiled ms':>12} {'eager/RWS':>10} {'compiled/RWS':>13} "
         f"{'compiled/VAE':>13} {'eager/compiled':>15} {'compile s':>10}")
    measure = lambda fn: median_ms(fn, args.min_run_time / args.rounds)  # noqa: E731
    setups = {}  # backbone -> (models, the step functions to time)
    for backbone in args.backbones:
        torch.manual_seed(0)
        x = estimator_batch(backbone, args.batch_size, device)
        index = torch.arange(args.batch_size, device=device)
        models = {key: model.to(device) for key, model in estimator_models(backbone, args, device).items()}
        setups[backbone] = (models, x, index, {f"{key} eager": train_step_fn(model, x, index, dtype, fused_adam=args.fused_adam)
                                               for key, model in models.items()})
    # The compilations in the order of COMPILE_ORDER, each on every backbone before the next, under the budget.
    compile_s: dict[tuple[str, str], float] = {}
    skipped: dict[str, list[str]] = {backbone: [] for backbone in args.backbones}
    failed: dict[str, list[str]] = {backbone: [] for backbone in args.backbones}
    measuring = 30.0 * len(args.backbones)  # the rounds of the timings that follow, generously
    for key in [k for k in COMPILE_ORDER if k in args.compiled]:
        for backbone in args.backbones:
            models, x, index, steps = setups[backbone]
            if key not in models:  # jsa-rowsK at L <= K
                continue
            longest = max(compile_s.values(), default=0.0)
            if time.perf_counter() - began + 1.5 * longest + measuring > 60 * args.budget_minutes:
                skipped[backbone].append(key)
                continue
            compiled_model = copy.deepcopy(models[key])
            compiled_model.compile_step = True
            step = train_step_fn(compiled_model, x, index, dtype, compiled_model.compiled_training_loss,  # model.compile=step
                                 fused_adam=args.fused_adam)
            start = time.perf_counter()
            try:
                for _ in range(3):  # compile, then the CUDA graph's recording and warm-up
                    step()
                synchronize(device)
            except Exception as error:  # another torch's compiler: the table says what failed and goes on
                failed[backbone].append(f"{key} ({type(error).__name__}: {str(error).strip().splitlines()[0][:160] if str(error).strip() else ''})")
                continue
            compile_s[backbone, key] = time.perf_counter() - start
            steps[f"{key} compiled"] = step
    for backbone, (models, _, _, steps) in setups.items():
        # every step of this backbone in turn, `rounds` times: a drift of the machine falls on all alike
        rounds = [{label: measure(fn) for label, fn in steps.items()} for _ in range(args.rounds)]

        def median(label: str) -> float | None:
            return statistics.median(r[label] for r in rounds) if label in rounds[0] else None

        def ratio(first: str, second: str) -> str:  # median over the rounds of the per-round ratio
            if first not in rounds[0] or second not in rounds[0]:
                return ""
            return f"{statistics.median(r[first] / r[second] for r in rounds):.2f}x"

        for key in models:
            eager, compiled = median(f"{key} eager"), median(f"{key} compiled")
            seconds = compile_s.get((backbone, key))
            emit(f"{backbone:>8} {key:>19} {eager:>9.2f} {'' if compiled is None else f'{compiled:.2f}':>12} "
                 f"{ratio(f'{key} eager', 'rws eager'):>10} {ratio(f'{key} compiled', 'rws compiled'):>13} "
                 f"{ratio(f'{key} compiled', 'vae compiled'):>13} {ratio(f'{key} eager', f'{key} compiled'):>15} "
                 f"{'' if seconds is None else f'{seconds:.1f}':>10}")
        for failure in failed[backbone]:
            emit(f"{backbone:>8} compile failed: {failure}")
        if skipped[backbone]:
            emit(f"{backbone:>8} not compiled, the budget of {args.budget_minutes:g} min spent: {', '.join(skipped[backbone])}")
    emit(f"total {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
