"""Whether model.compile=step computes, on this device, what the eager step computes: JSA at the JSA paper's protocol
(batch 200, S = L = 20, experiment=jsa_paper's networks) as one run and as two replicas in one process, RWS as two
replicas.

    python -m benchmarks.studies.compiled_equals_eager --out compiled_equals_eager.txt   # on a GPU (lease 2)

The same weights and batch; JSA's cache filled by one step first (the step reads it). Inductor's random ops fall back
to eager's (`fallback_random`), so both draw the same numbers, and the compiled step runs without CUDA graphs, whose
captured draws eager cannot repeat; the kernels are those model.compile=step runs. `equal`: every replica's losses
within 1e-4 and every parameter's gradient within 1e-3 of the eager value's scale (the largest difference over it);
the other logged terms' largest is reported beside. An accept decision or a draw of q near a tie can flip between
the two (float rounding) and show as a small gap; a table written over by the other replica shows as a gap near 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks.speed.replica_throughput import PAPER
from common.files import write_file


def build_models(name: str, seeds: list[int], compile: bool, batch: int, device: torch.device):
    import lightning as L

    from models.jsa import JSA
    from models.rws import RWS

    built = []
    for seed in seeds:
        L.seed_everything(seed, verbose=False)
        settings = {**PAPER, "compile": "step" if compile else False}
        built.append(JSA(mis_steps=20, cache_size=batch, cache_start_epoch=0, **settings) if name == "jsa"
                     else RWS(num_samples=20, **settings))
    return [model.to(device) for model in built]


def step(model, x: torch.Tensor, index: torch.Tensor, replicated: bool) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The loss terms and every parameter's gradient of one training step, the random draws from seed 11."""
    torch.manual_seed(11)
    if replicated:
        model.set_gates()
        out = model.training_step((x, index), 0)
        loss, terms, params = out["loss"], out["terms"], dict(model.stacked_params.items())
    else:
        terms = (model.compiled_training_loss if model.compile_step else model.training_loss)(x[0], index[0])
        loss, params = terms["loss"], dict(model.named_parameters())
    model.zero_grad()
    loss.backward()
    return {k: v.detach().clone() for k, v in terms.items()}, {k: p.grad.clone() for k, p in params.items()}


def compare(name: str, replicas: int, batch: int, device: torch.device) -> str:
    import models.base
    import models.replicas
    from models.replicas import Replicas

    seeds = list(range(max(replicas, 1)))

    def build(compile: bool):
        built = build_models(name, seeds, compile, batch, device)
        return Replicas(built, seeds).to(device) if replicas else built[0]

    eager, compiled = build(False), build(True)
    compiled.load_state_dict(eager.state_dict())
    x = torch.bernoulli(torch.rand(len(seeds), batch, 1, 28, 28, generator=torch.Generator().manual_seed(1))).to(device)
    index = torch.arange(batch, device=device).expand(len(seeds), -1)
    no_graphs = lambda device: None  # noqa: E731 (the compiled step without CUDA graphs: see the module docstring)
    original = models.replicas.graph_mode, models.base.graph_mode
    models.replicas.graph_mode = models.base.graph_mode = no_graphs
    try:
        with torch._inductor.config.patch(fallback_random=True):
            results = []
            for model in (eager, compiled):
                if name == "jsa":  # fill the cache that the compared step reads
                    step(model, x, index, bool(replicas))
                results.append(step(model, x, index, bool(replicas)))
    finally:
        models.replicas.graph_mode, models.base.graph_mode = original
    (eager_terms, eager_grads), (compiled_terms, compiled_grads) = results

    def worst(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], keys) -> tuple[str, float]:
        gaps = {k: ((b[k] - a[k]).abs().max() / a[k].abs().max().clamp_min(1e-6)).item() for k in keys}
        key = max(gaps, key=gaps.get)
        return key, gaps[key]

    losses = [k for k in eager_terms if k.startswith("loss")]
    (term, term_gap), (grad, grad_gap) = worst(eager_terms, compiled_terms, losses), worst(eager_grads, compiled_grads, eager_grads)
    other, other_gap = worst(eager_terms, compiled_terms, eager_terms)
    verdict = "equal" if term_gap < 1e-4 and grad_gap < 1e-3 else "DIFFER"
    values = " ".join(f"{k} {eager_terms[k].flatten().tolist()} -> {compiled_terms[k].flatten().tolist()}" for k in losses)
    return (f"{name} {'R = %d' % replicas if replicas else 'one run'}: {verdict}; largest relative gap: losses "
            f"{term_gap:.2e} ({term}), gradients {grad_gap:.2e} ({grad}), any logged term {other_gap:.2e} ({other}); "
            f"eager -> compiled: {values}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    lines = [f"compiled against eager on {torch.cuda.get_device_name(0) if device.type == 'cuda' else 'CPU'}, "
             f"torch {torch.__version__}, batch {args.batch}"]
    for name, replicas in (("jsa", 2), ("jsa", 0), ("rws", 2)):
        try:
            lines.append(compare(name, replicas, args.batch, device))
        except Exception as error:  # a failure of one case is a finding; the others still run
            lines.append(f"{name} {'R = %d' % replicas if replicas else 'one run'}: failed: {type(error).__name__}: "
                         f"{str(error).strip()[:300]}")
        print(lines[-1], flush=True)
        if args.out:
            write_file(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
