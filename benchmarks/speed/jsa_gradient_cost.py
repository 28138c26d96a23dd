"""What a JSA training step costs with each `gradient_states`, beside RWS and VIMCO at the same number of particles.

    python -m benchmarks.speed.jsa_gradient_cost [--warm-up-steps 300] [--rounds 5] [--min-run-time 10]

The JSA paper's setting on real MNIST (`DATA_DIR`), from parameters trained `--warm-up-steps` steps; one step is
forward, backward and Adam on one thread, in alternating rounds, with the decoder rows each variant scores. The
variants: benchmarks/results/speed/README.md#how-each-benchmark-measures.
"""

from __future__ import annotations

import argparse
import copy
import os

import torch

from benchmarks.lib import arguments, markdown
from benchmarks.lib.timing import alternating, median_seconds
from datamodules import MNISTDataModule
from models import JSA, RWS, VIMCO
from samplers import MISSample, categorical_log_prob, index_cached_mis, visit_counts

PAPER = dict(backbone="mlp", activation="leaky_relu", num_latents=20, num_categories=10, code_dim=10, lr=3e-4)


class PathAverageJSA(JSA):
    """JSA's chain gradient as the paper's code (and this collection before) computes it: the L path states scored
    again with gradient, one decoder row per step, repeated states included."""

    def jsa_loss(self, x: torch.Tensor, log_q: torch.Tensor, sample: MISSample, has_start: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return -self.log_joint(x, sample.path).mean(), -categorical_log_prob(log_q, sample.path).mean()


def real_images(num_images: int) -> tuple[torch.Tensor, torch.Tensor]:
    dm = MNISTDataModule(data_dir=os.environ.get("DATA_DIR", "data"), binarize="static", val_size=5000)
    dm.setup("fit")
    return dm.train_set.__getitems__(list(range(num_images)))


def train_step_fn(model, x, index):
    optimizer = torch.optim.Adam(model.parameters(), lr=PAPER["lr"])

    def step() -> None:
        loss = model.training_loss(x, index)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def warm_up(images: torch.Tensor, batch_size: int, steps: int, num_steps: int) -> JSA:
    """JSA trained for `steps` steps on consecutive batches of `images` (cycled), as in an epoch of training."""
    torch.manual_seed(0)
    model = JSA(mis_steps=num_steps, cache_size=images.shape[0], gradient_states="final", **PAPER)
    optimizer = torch.optim.Adam(model.parameters(), lr=PAPER["lr"])
    batches = torch.arange(images.shape[0]).split(batch_size)
    for step in range(steps):
        index = batches[step % len(batches)]
        loss = model.training_loss(images[index], index)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model


def distinct_rows(model: JSA, x: torch.Tensor, index: torch.Tensor, draws: int = 20) -> tuple[float, float]:
    """(acceptance rate, distinct visited states per example): the chain gradient's decoder rows with gradient."""
    rates, distinct = [], []
    with torch.no_grad():
        for _ in range(draws):
            start, has_start = model.cache.read(index)
            sample = index_cached_mis(model.posterior(x), lambda h: model.log_joint(x, h), model.mis_steps, start, has_start)
            rates.append(sample.accepted.float().mean() / model.mis_steps)
            distinct.append((visit_counts(sample.path_index, model.mis_steps + 1) > 0).sum(1).float().mean())
    return float(torch.stack(rates).mean()), float(torch.stack(distinct).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=arguments.integer(1), default=200)
    parser.add_argument("--num-steps", type=arguments.integer(2), default=20, help="L for JSA and S for RWS/VIMCO, >= 2 (VIMCO's leave-one-out baseline; default 20)")
    parser.add_argument("--warm-up-steps", type=arguments.integer(0), default=300, help="training steps before timing (default 300)")
    parser.add_argument("--rounds", type=arguments.integer(1), default=5)
    parser.add_argument("--min-run-time", type=arguments.number(0), default=10.0, help="seconds per variant over all rounds (default 10)")
    parser.add_argument("--gradient-rows", type=arguments.integer(1), nargs="*", default=[2, 4, 8], help="k of the chain's k + 1-row variants (default 2 4 8)")
    args = parser.parse_args()
    images, _ = real_images(20_000)
    trained = warm_up(images, args.batch_size, args.warm_up_steps, args.num_steps)
    x, index = images[: args.batch_size], torch.arange(args.batch_size)  # a batch the cache holds chains for
    acceptance, distinct = distinct_rows(trained, x, index)
    L = args.num_steps
    variants = {}
    for name, cls, settings in (("JSA final", JSA, {"gradient_states": "final"}),
                                ("JSA chain, path average (before)", PathAverageJSA, {"gradient_states": "chain"}),
                                ("JSA chain, distinct states", JSA, {"gradient_states": "chain", "chain_rows": "distinct"}),
                                ("JSA chain, static rows", JSA, {"gradient_states": "chain", "chain_rows": "static"}),
                                *((f"JSA chain, k + 1 = {k + 1} rows", JSA, {"gradient_states": "chain", "gradient_rows": k})
                                  for k in args.gradient_rows),
                                ("JSA expected (Rao-Blackwellized)", JSA, {"gradient_states": "expected"}),
                                ("RWS", RWS, {"num_samples": L}), ("VIMCO", VIMCO, {"num_samples": L})):
        extra = {"mis_steps": L, "cache_size": images.shape[0]} if cls is not RWS and cls is not VIMCO else {}
        model = cls(**PAPER, **settings, **extra)
        model.load_state_dict(copy.deepcopy(trained.state_dict()), strict=False)  # RWS/VIMCO: no cache
        variants[name] = train_step_fn(model, x, index)
    rows = {"JSA final": f"{L + 1} + 1", "JSA chain, path average (before)": f"{L + 1} + {L}",
            "JSA chain, distinct states": f"{L + 1} + {distinct:.2f}", "JSA chain, static rows": f"0 + {L + 1}",
            **{f"JSA chain, k + 1 = {k + 1} rows": f"{L + 1} + {k + 1}" for k in args.gradient_rows},
            "JSA expected (Rao-Blackwellized)": f"0 + {L + 1}",
            "RWS": f"0 + {L}", "VIMCO": f"0 + {L}"}
    times = alternating(variants, lambda fn: median_seconds(fn, args.min_run_time / args.rounds), args.rounds, reference="JSA final")
    print(f"threads for timing: 1; batch {args.batch_size}, L = S = {L}, after {args.warm_up_steps} warm-up steps on real MNIST: "
          f"acceptance rate {acceptance:.3f}, {distinct:.2f} distinct states per chain of {L}; torch {torch.__version__}")
    print("\n| variant | ms per step | / JSA final | decoder rows per example and step (no grad + grad) |\n|---|---|---|---|")
    for name, (seconds, ratio) in times.items():
        print(markdown.table_row([name, f"{1e3 * seconds:.1f}", f"{ratio:.2f}", rows[name]]))


if __name__ == "__main__":
    main()
