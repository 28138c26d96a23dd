"""Aggregate training throughput of R replicas in one process (models/replicas.py, docs/replicas.md) against one run.

    python -m benchmarks.speed.replica_throughput --out benchmarks/results/speed/replicas_h100.txt   # on a lent GPU
    python -m benchmarks.speed.replica_throughput --quick                                            # a CPU smoke run

For JSA and RWS at the JSA paper's protocol, eager and compiled whole, R = 1 … 32: steps/s, replica-steps/s and the
speed-up over R = 1, and a validation of the R replicas; `--mps-probe` compares processes sharing the GPU. Each line
is written as soon as it is measured. How: benchmarks/results/speed/README.md#how-each-benchmark-measures.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from common.files import write_file

REPO = Path(__file__).resolve().parents[2]
PAPER = dict(num_latents=20, num_categories=10, activation="leaky_relu")
EVAL_BATCH = 500  # experiment=jsa_paper's data.eval_batch_size


def build(name: str, replicas: int, compile: bool, device: torch.device, quick: bool, val_samples: int = 1000):
    """(one step of R replicas, one plain step of the model, the R replicas' validation of one batch of images), the
    steps training steps with Adam; the validation as Lightning runs it (no gradients), `val_samples` samples an image."""
    import lightning as L

    from models.jsa import JSA
    from models.replicas import Replicas
    from models.rws import RWS

    batch, steps = (8, 3) if quick else (200, 20)
    settings = {**PAPER, "compile": "step" if compile else False, "val_num_samples": val_samples}
    if quick:
        settings.update(num_latents=4, num_categories=4)

    def one(seed: int):
        L.seed_everything(seed, verbose=False)
        if name == "jsa":
            return JSA(mis_steps=steps, cache_size=batch, chain_rows="static", **settings)
        return RWS(num_samples=steps, **settings)

    replicated = Replicas([one(seed) for seed in range(replicas)], list(range(replicas))).to(device)
    optimizer = torch.optim.Adam(replicated.parameters(), lr=1e-3)
    x = torch.bernoulli(torch.rand(replicas, batch, 1, 28, 28, device=device))
    index = torch.arange(batch, device=device).expand(replicas, -1)

    def replicated_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        replicated.training_step((x, index), 0)["loss"].backward()
        optimizer.step()

    single = one(0).to(device)
    single_optimizer = torch.optim.Adam(single.parameters(), lr=1e-3)

    def single_step() -> None:
        single_optimizer.zero_grad(set_to_none=True)
        loss = (single.compiled_training_loss if compile else single.training_loss)(x[0], index[0])["loss"]
        loss.backward()
        single_optimizer.step()

    x_val = torch.bernoulli(torch.rand(EVAL_BATCH, 1, 28, 28, device=device))  # one eval batch, shared by the replicas
    index_val = torch.arange(EVAL_BATCH, device=device)

    def replicated_validation() -> None:
        with torch.no_grad():
            replicated.validation_step((x_val, index_val), 0)

    return replicated_step, single_step, replicated_validation


def measure(fn, device: torch.device, seconds: float) -> float:
    """Seconds per call: the median of blocked_autorange (synchronizing CUDA) after warm-up calls (compilation)."""
    from benchmarks.lib.timing import median_seconds

    return median_seconds(fn, seconds, num_threads=torch.get_num_threads(), warm_up=3)


def first_call_seconds(fn, device: torch.device) -> float:
    """Seconds of one call, synchronized: the first call of a compiled step is its compilation."""
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def mps_probe(say) -> None:
    control = shutil.which("nvidia-cuda-mps-control")
    say(f"CUDA MPS: nvidia-cuda-mps-control {'at ' + control if control else 'not on this machine'}")
    if shutil.which("pgrep") is None:
        say("CUDA MPS daemon: not looked for (no pgrep on this machine)")
        return
    running = subprocess.run(["pgrep", "-f", "nvidia-cuda-mps-server|nvidia-cuda-mps-control"], capture_output=True, text=True)
    say(f"CUDA MPS daemon: {'running' if running.stdout.strip() else 'not running (none started here)'}")


def lanes_against_replicas(lanes: int, name: str, seconds: float, say) -> None:
    """`lanes` processes of one plain run each, started together, against one process of `lanes` replicas: the
    aggregate steps/s of each way (each process times its own steps after its warm-up)."""
    code = ("import sys, torch; from benchmarks.speed.replica_throughput import build, measure; "
            f"dev = torch.device('cuda'); r, s, _ = build('{name}', {{R}}, False, dev, False); "
            f"fn = s if {{R}} == 1 else r; print(measure(fn, dev, {seconds}))")
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code.replace("{R}", "1")], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for _ in range(lanes)]
    per_step = [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    say(f"{name}: {lanes} processes at once, one run each: {sum(1 / t for t in per_step):.0f} run-steps/s "
        f"(each {1000 * sum(per_step) / lanes:.2f} ms/step; {time.perf_counter() - start:.0f} s wall)")
    replicas = subprocess.run([sys.executable, "-c", code.replace("{R}", str(lanes))], cwd=REPO, capture_output=True, text=True)
    t = float(replicas.stdout.strip().splitlines()[-1])
    say(f"{name}: one process of {lanes} replicas: {lanes / t:.0f} run-steps/s ({1000 * t:.2f} ms/step)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=lambda s: [int(r) for r in s.split(",")],
                        help="the R measured, comma-separated (default 1,4,8,16,32; --quick: 1,2)")
    parser.add_argument("--models", type=lambda s: s.split(","), default=["jsa", "rws"])
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per measurement (blocked_autorange)")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--compiled-only", action="store_true", help="compiled only (with --quick too: the CPU's compile)")
    parser.add_argument("--mps-probe", action="store_true", help="MPS's presence, then processes against replicas (CUDA)")
    parser.add_argument("--lanes", type=int, default=8, help="processes of --mps-probe")
    parser.add_argument("--val-images", type=int, default=5000, help="images of the timed validation (default 5000, "
                        "experiment=jsa_paper's val split; 0: no validation timed)")
    parser.add_argument("--val-samples", type=int, default=1000, help="importance samples an image (default 1000)")
    parser.add_argument("--quick", action="store_true", help="a CPU smoke run: tiny networks, a 500-image validation "
                        "at 4 samples, eager unless --compiled-only")
    parser.add_argument("--out", type=Path, help="also write the lines to this file")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    if args.no_compile and args.compiled_only:
        parser.error("--no-compile and --compiled-only: give one")
    if args.quick:
        args.replicas, args.val_images, args.val_samples = args.replicas or [1, 2], EVAL_BATCH, 4
        args.seconds, args.no_compile = min(args.seconds, 0.2), not args.compiled_only
    args.replicas = args.replicas or [1, 4, 8, 16, 32]
    said: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        said.append(line + "\n")
        if args.out:  # the lines so far, as every file is written (common/files.py)
            write_file(args.out, "".join(said))

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    say(f"Replica throughput on {name}, torch {torch.__version__}; batch {8 if args.quick else 200}, L = S = {3 if args.quick else 20}")
    if args.mps_probe and device.type == "cuda":
        mps_probe(say)
        lanes_against_replicas(args.lanes, "jsa", args.seconds, say)
    for model in args.models:
        for compile in ([False] if args.no_compile else [True] if args.compiled_only else [False, True]):
            mode = "compiled (model.compile=step)" if compile else "eager"
            base = None
            for r in args.replicas:
                replicated, single, validation = build(model, r, compile, device, args.quick, args.val_samples)
                if base is None:
                    t_single = measure(single, device, args.seconds)
                    say(f"{model} {mode}: the plain single-run step: {1000 * t_single:.2f} ms, {1 / t_single:.1f} steps/s")
                first = first_call_seconds(replicated, device)  # compiled: the compilation
                t = measure(replicated, device, args.seconds)
                base = base or r / t
                say(f"{model} {mode}: R = {r:2d}: {1000 * t:.2f} ms/step, {r / t:.1f} replica-steps/s, {r / t / base:.2f}x R = 1, "
                    f"first step {first:.1f} s")
                if args.val_images and not compile:
                    batches = -(-args.val_images // EVAL_BATCH)
                    v = measure(validation, device, args.seconds) * batches
                    say(f"{model} validation: R = {r:2d}: {v:.2f} s for {args.val_images} images at {args.val_samples} "
                        f"samples ({v / r:.3f} s per replica)")
                del replicated, single, validation
                if device.type == "cuda":
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
