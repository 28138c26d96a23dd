"""One JSA training step of two source trees of the collection (e.g. main before a change and the branch after it),
timed in alternating rounds, each round a fresh process per tree (a tree is imported through PYTHONPATH).

    git archive main | tar -x -C /tmp/before
    python -m benchmarks.speed.source_trees /tmp/before . --rounds 6

`--jsa-only` times each tree's `JSA` class in one process instead, `--rounds` rounds of `--seconds` each: for a change
confined to models/jsa.py it pairs far more tightly.
The step and the rule: benchmarks/results/speed/README.md#how-each-benchmark-measures.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.lib import arguments

# Run in the child, with the tree on PYTHONPATH: prints the median step time in ms.
CHILD = """
import torch
torch.set_num_threads(1)
from benchmarks.lib.timing import median_seconds
from models import JSA
torch.manual_seed(0)
model = JSA(backbone="mlp", activation="leaky_relu", num_latents=20, num_categories=10, code_dim=10, lr=3e-4,
            mis_steps={steps}, cache_size={batch}, gradient_states="chain")
x = torch.bernoulli(torch.full(({batch}, 1, 28, 28), 0.13), generator=torch.Generator().manual_seed(0))
index = torch.arange({batch})
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
def step():
    loss = model.training_loss(x, index)["loss"]
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print(1e3 * median_seconds(step, {seconds}, warm_up=5))
"""


def time_tree(tree: Path, batch: int, steps: int, seconds: float) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "OMP_NUM_THREADS": "1"}
    code = CHILD.format(batch=batch, steps=steps, seconds=seconds)
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def jsa_class(tree: Path) -> type:
    """The JSA class of `tree`'s models/jsa.py, loaded under a name of its own (its imports from this tree)."""
    name = f"jsa_of_{abs(hash(str(tree.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, tree / "models" / "jsa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.JSA


def same_process(args: argparse.Namespace) -> None:
    import torch

    from benchmarks.lib.timing import median_seconds

    torch.set_num_threads(1)
    x = torch.bernoulli(torch.full((args.batch_size, 1, 28, 28), 0.13), generator=torch.Generator().manual_seed(0))
    index = torch.arange(args.batch_size)
    steps = {}
    for name in ("before", "after"):
        torch.manual_seed(0)
        model = jsa_class(getattr(args, name))(backbone="mlp", activation="leaky_relu", num_latents=20, num_categories=10,
                                               code_dim=10, lr=3e-4, mis_steps=args.mis_steps, cache_size=args.batch_size,
                                               gradient_states="chain")
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)

        def step(model=model, optimizer=optimizer) -> None:
            loss = model.training_loss(x, index)["loss"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        steps[name] = step
    rounds = []
    for round_ in range(args.rounds):  # as benchmarks.lib.timing.alternating, keeping each round's ratio; neither always first
        order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
        rounds.append({name: median_seconds(steps[name], args.seconds, warm_up=3) for name in order})
    ratios = [r["after"] / r["before"] for r in rounds]
    before, after = (statistics.median(r[name] for r in rounds) for name in ("before", "after"))
    print(f"JSA chain step, models/jsa.py of each tree in one process (batch {args.batch_size}, L={args.mis_steps}, one "
          f"thread, {args.rounds} alternating rounds of {args.seconds:g} s): before {1e3 * before:.1f} ms, after "
          f"{1e3 * after:.1f} ms (medians); after/before: median of the rounds' ratios {statistics.median(ratios):.3f}, "
          f"rounds {min(ratios):.3f}-{max(ratios):.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="the first source tree (the reference of the ratio)")
    parser.add_argument("after", type=Path, help="the second source tree")
    parser.add_argument("--rounds", type=arguments.integer(1), default=6)
    parser.add_argument("--batch-size", type=arguments.integer(1), default=200)
    parser.add_argument("--mis-steps", type=arguments.integer(1), default=20)
    parser.add_argument("--seconds", type=arguments.number(0), default=5.0, help="seconds each tree's steps are timed per round")
    parser.add_argument("--jsa-only", action="store_true", help="one process, the two trees' models/jsa.py (see above)")
    args = parser.parse_args(argv)
    if args.jsa_only:
        same_process(args)
        return
    times: dict[str, list[float]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        order = ("before", "after") if round_ % 2 == 0 else ("after", "before")  # neither always goes first
        for name in order:
            times[name].append(time_tree(getattr(args, name), args.batch_size, args.mis_steps, args.seconds))
        print(f"round {round_ + 1}: before {times['before'][-1]:.1f} ms, after {times['after'][-1]:.1f} ms", flush=True)
    ratios = [a / b for a, b in zip(times["after"], times["before"])]
    print(f"JSA chain step (batch {args.batch_size}, L={args.mis_steps}, one thread): before {statistics.median(times['before']):.1f} ms, "
          f"after {statistics.median(times['after']):.1f} ms (medians of {args.rounds} rounds); after/before: median "
          f"{statistics.median(ratios):.3f}, rounds {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
