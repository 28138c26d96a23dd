"""Peak resident memory of `python train.py` runs, beside what the data and the model must hold.

    python -m benchmarks.speed.memory [--models jsa,vae] [--steps 200] [--test-batches 20] [--runs start,train,test]

Three real processes per model on MNIST (DATA_DIR), each measured alone: `start` (one step), `train` (`--steps`
steps with validation) and `test` (the test stage, memory bounded by `eval_chunk_size`), or those `--runs` names;
beside them the bytes of the data, the parameters and buffers, and Adam's moments.
How: benchmarks/results/speed/README.md#how-each-benchmark-measures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.lib import arguments

REPO = Path(__file__).resolve().parents[2]
RUNS = ("start", "train", "test")
WRAPPER = ("import json, resource, subprocess, sys; code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
           "stderr=subprocess.PIPE, text=True); print(json.dumps({'code': code.returncode, 'tail': code.stderr[-1500:], "
           "'max_rss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")


def peak_rss_mib(args: list[str], cwd: Path) -> float:
    """Peak resident memory (MiB) of `python train.py *args`, run alone under a wrapper process."""
    command = [sys.executable, "-c", WRAPPER, sys.executable, str(REPO / "train.py"), *args]
    result = json.loads(subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout)
    if result["code"] != 0:  # its error line (or traceback) last
        raise SystemExit(f"memory: python train.py {' '.join(args)} failed: {result['tail'].strip().splitlines()[-1:]}")
    return result["max_rss_kib"] / 1024


def held_bytes(model_name: str) -> dict[str, float]:
    """MiB the data module's tensors, the model's state and Adam's moments take."""
    sys.path.insert(0, str(REPO))
    from launch.checks.hydra_config import compose as composed
    import launch.hydra_app

    datamodule, model = launch.hydra_app.data_and_model(composed([f"model={model_name}"]))
    datamodule.setup(None)  # every split
    if getattr(model, "use_cache", False) and getattr(model, "cache", None) is None:  # JSA sizes it in setup
        model._allocate_cache(datamodule.num_train_examples)
    data = sum(s.images.numel() * s.images.element_size() for s in (datamodule.train_set, datamodule.val_set, datamodule.test_set))
    state = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    mib = 2 ** 20
    return {"data_mib": data / mib, "model_state_mib": state / mib, "adam_moments_mib": 2 * parameters / mib,
            "data_dtypes": sorted({str(s.images.dtype) for s in (datamodule.train_set, datamodule.val_set, datamodule.test_set)})}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=arguments.names(arguments.MODEL_CONFIGS), default=["jsa", "vae"])
    parser.add_argument("--steps", type=arguments.integer(1), default=200, help="training steps of the `train` run (default 200)")
    parser.add_argument("--test-batches", type=arguments.integer(1), default=20, help="test batches of the `test` run (default 20)")
    parser.add_argument("--runs", type=arguments.names(RUNS), default=list(RUNS), help="the runs measured (default: all)")
    args = parser.parse_args(argv)
    if "DATA_DIR" not in os.environ:
        parser.error("set DATA_DIR to the directory that holds MNIST/raw (the runs read real MNIST)")
    quiet = ["trainer.enable_progress_bar=false", "trainer.num_sanity_val_steps=0", "callbacks.gradient_variance.every_n_steps=0"]
    print(f"{'model':>6} {'start MiB':>10} {'train MiB':>10} {'test MiB':>9} {'data MiB':>9} {'model MiB':>10} {'Adam MiB':>9}  data dtype")
    for name in args.models:
        with tempfile.TemporaryDirectory() as work:
            base = [f"model={name}", f"log_dir={work}/logs", *quiet]
            runs = {"start": ["trainer.max_steps=1", "trainer.limit_val_batches=0", "run_test=false"],
                    "train": [f"trainer.max_steps={args.steps}", "trainer.limit_val_batches=4",
                              f"trainer.val_check_interval={args.steps}", "run_test=false"],
                    "test": ["trainer.max_steps=1", "trainer.limit_val_batches=0", "run_test=true",
                             f"trainer.limit_test_batches={args.test_batches}"]}
            peak = {run: f"{peak_rss_mib([*base, *runs[run]], Path(work)):.0f}" if run in args.runs else "-" for run in RUNS}
        held = held_bytes(name)
        print(f"{name:>6} {peak['start']:>10} {peak['train']:>10} {peak['test']:>9} {held['data_mib']:>9.1f} "
              f"{held['model_state_mib']:>10.1f} {held['adam_moments_mib']:>9.1f}  {','.join(held['data_dtypes'])}",
              flush=True)


if __name__ == "__main__":
    main()
