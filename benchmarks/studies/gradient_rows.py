"""The price of a fixed number of gradient rows in variance: JSA's gradient SNR with `gradient_rows` = k.

    python -m benchmarks.studies.gradient_rows --checkpoint PATH [--ks 1 2 4 8] [--batches 4] [--repeats 50]

At a checkpoint's parameters, every k and `all` rows draw `--repeats` independent gradient estimates on each of
`--batches` batches; per parameter group, tr Cov g and the SNR ||E g||² / tr Cov g, and how many candidates carry
weight per example (benchmarks/results/gradient-rows/README.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from benchmarks.lib import arguments, markdown
from benchmarks.lib.at_checkpoints import build, noise_and_signal
from callbacks.gradient_variance import flat_gradients
from checkpoints.loader import load_checkpoint_file
import models  # noqa: F401 (registers the model classes a checkpoint may name: common/registry.py)
from samplers import candidate_weights, index_cached_mis
from common.files import write_file

RESULTS = Path("benchmarks/results/gradient-rows")


def weighted_candidates(model, x: torch.Tensor) -> torch.Tensor:
    """(B,) the number of candidates with a non-zero weight in one fresh MIS call (`candidate_weights`)."""
    with torch.no_grad():
        sample = index_cached_mis(model.posterior(x), lambda h: model.log_joint(x, h), model.mis_steps)
        return (candidate_weights(sample, model.gradient_states) > 0).sum(1)


def measure(checkpoint: Path, gradient_states: str, k: int | None, batches: int, repeats: int) -> dict:
    rows = [f"model.gradient_rows={k}"] if k is not None else ["model.chain_rows=static"]
    datamodule, model = build(["experiment=jsa_paper", f"model.gradient_states={gradient_states}", *rows])
    state = load_checkpoint_file(checkpoint)["state_dict"]
    model.load_state_dict({key: value for key, value in state.items() if not key.startswith("cache.")})  # fresh chains: no cache
    encoder = [p for p in model.encoder_parameters() if p.requires_grad]
    ids = {id(p) for p in encoder}
    groups = {"encoder": encoder, "decoder": [p for p in model.parameters() if p.requires_grad and id(p) not in ids]}
    datamodule.setup("fit")
    torch.manual_seed(0)  # the same batches and, up to the row draws, the same chains for every k
    per_batch: dict[str, list[tuple[float, float]]] = {"encoder": [], "decoder": []}
    weighted: list[float] = []
    beyond_k: list[float] = []
    for number, (x, index) in enumerate(datamodule.train_dataloader()):
        if number == batches:
            break
        x = model.likelihood.prepare(x)
        counts = weighted_candidates(model, x)
        weighted.append(counts.float().mean().item())
        beyond_k.append((counts > k).float().mean().item() if k is not None else 0.0)
        draws = [flat_gradients({"": model.gradient_estimates(x, index)[""]}, groups) for _ in range(repeats)]
        for group in groups:
            variance, snr = noise_and_signal(torch.stack([d[f"{group}_grad_variance"] for d in draws]))
            per_batch[group].append((variance.item(), snr.item()))
    result = {group: {"variance": statistics.mean(v for v, _ in values), "snr": statistics.mean(s for _, s in values)}
              for group, values in per_batch.items()}
    result["weighted_candidates"] = statistics.mean(weighted)
    result["share_beyond_k"] = statistics.mean(beyond_k)
    return result


def table(record: dict) -> list[str]:
    lines = ["| gradient_states | rows k + 1 | decoder (θ) SNR | θ tr Cov | encoder (φ) SNR | φ tr Cov | weighted candidates "
             "per example | examples with more than k |", "|---|---|---|---|---|---|---|---|"]
    for states, by_k in record["results"].items():
        for k, r in by_k.items():
            rows = f"{int(k) + 1}" if k != "all" else f"all {record['settings']['mis_steps'] + 1}"
            share = f"{100 * r['share_beyond_k']:.0f} %" if k != "all" else "–"
            lines.append(markdown.table_row([states, rows, f"{r['decoder']['snr']:.3g}", f"{r['decoder']['variance']:.4g}",
                                             f"{r['encoder']['snr']:.3g}", f"{r['encoder']['variance']:.4g}",
                                             f"{r['weighted_candidates']:.2f}", share]))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a JSA checkpoint of experiment=jsa_paper")
    parser.add_argument("--ks", type=arguments.integer(1), nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--states", nargs="+", choices=["chain", "expected"], default=["chain", "expected"])
    parser.add_argument("--batches", type=arguments.integer(1), default=4)
    parser.add_argument("--repeats", type=arguments.integer(2), default=50)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--note", default="", help="where the checkpoint came from, for the record")
    args = parser.parse_args(argv)
    if not args.checkpoint.is_file():
        parser.error(f"--checkpoint {args.checkpoint}: no such file")
    torch.set_num_threads(1)
    saved = load_checkpoint_file(args.checkpoint)
    results: dict[str, dict] = {}
    for states in args.states:
        results[states] = {}
        for k in [*args.ks, None]:
            results[states][str(k) if k is not None else "all"] = measure(args.checkpoint, states, k, args.batches, args.repeats)
            print(f"{states} k={k}: {results[states][str(k) if k is not None else 'all']}", flush=True)
    record = {"settings": {"checkpoint_epoch": saved["epoch"], "global_step": saved["global_step"], "batches": args.batches,
                           "repeats": args.repeats, "mis_steps": saved["hyper_parameters"]["mis_steps"], "note": args.note,
                           "torch": torch.__version__},
              "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    write_file(args.out / "snr.json", json.dumps(record, indent=1) + "\n")
    print(write_report(record, args.out).read_text())


def write_report(record: dict, out: Path) -> Path:
    settings = record["settings"]
    lines = ["# JSA's gradient with k + 1 rows: SNR at shared parameters", "",
             f"`python -m benchmarks.studies.gradient_rows --checkpoint ... --batches {settings['batches']} --repeats "
             f"{settings['repeats']}` at the parameters after {settings['global_step']} steps (epoch {settings['checkpoint_epoch']}) "
             f"of experiment=jsa_paper; {settings['repeats']} estimates on each of {settings['batches']} training batches of 200, "
             f"means over the batches; torch {settings['torch']}. {settings['note']}", "",
             "The rows of one `gradient_states` with k + 1 < L + 1 rows see the same proposals and chains (the row draw takes "
             "the same random numbers whatever k), so their differences are paired; `all` (chain_rows=static) draws its own. "
             "φ's gradient does not depend on k (module docstring).", "", *table(record)]
    report = out / "snr.md"
    write_file(report, "\n".join(lines) + "\n")
    return report


if __name__ == "__main__":
    main()
