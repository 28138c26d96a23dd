"""Lease 2's summary (benchmarks/results/verdict-study/lease/lease2.sh): the step time of train.py's runs and whether
their losses agree bit for bit.

    python -m benchmarks.studies.train_step_check RUNS solo a b ... eager ... --compiled 3 --train-step train_step.txt \
        --determinism determinism.txt

RUNS holds, for each NAME, NAME.out (the process's output, with Lightning's simple profiler table) and NAME/ (its
log_dir). A run's steady ms/step is the wall time between its first and last logged `train/loss` over the steps
between them: the compilation (the first step) falls before the first. The profiler's means include the first step.
Determinism: each run's logged losses, every replica at every logged step, against the first run's, the compiled runs
(the first --compiled names) and the eager ones apart; and any error a run ended with.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from benchmarks.lib.records import read_events
from common.files import write_file

PROFILED = {"batch": "run_training_batch", "training_step": r"\[Strategy\]\w+\.training_step",
            "backward": r"\[Strategy\]\w+\.backward", "data": r"\[_TrainingEpochLoop\]\.train_dataloader_next"}


def losses(run: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Each replica run's train/loss as (step, wall time, value), by the run's folder name."""
    found = {}
    for run_dir in sorted(run.glob("tensorboard/*/version_0")):
        events = read_events(run_dir, {"scalars": 0})
        if "train/loss" in events.Tags()["scalars"]:
            found[run_dir.parent.name] = [(s.step, s.wall_time, s.value) for s in events.Scalars("train/loss")]
    return found


def profiled_ms(output: str) -> dict[str, float]:
    """The simple profiler's mean of each PROFILED action, in ms."""
    means = {}
    for name, action in PROFILED.items():
        match = re.search(rf"\|\s*{action}\s*\|\s*([0-9.e+-]+)\s*\|", output)
        if match:
            means[name] = 1e3 * float(match.group(1))
    return means


def error_lines(output: str) -> list[str]:
    """The lines of a run's output that name an exception, as a traceback's last line does."""
    return [line[:300] for line in output.splitlines() if re.match(r"\w*(Error|Exception):", line)]


def step_line(name: str, series: list[tuple[int, float, float]], output: str) -> str:
    if len(series) < 2:
        error = error_lines(output)
        return f"{name:>10}: no steady rate ({len(series)} logged steps){'; ' + error[-1] if error else ''}"
    (first, start, _), (last, end, _) = series[0], series[-1]
    profiled = " ".join(f"{key} {value:.2f}" for key, value in profiled_ms(output).items())
    return f"{name:>10}: {1e3 * (end - start) / (last - first):8.2f} ms/step over steps {first}-{last}; profiler means (ms): {profiled}"


def determinism_lines(names: list[str], runs: dict[str, dict[str, list[tuple[int, float, float]]]]) -> list[str]:
    reference_name = next((name for name in names if runs[name]), None)
    if reference_name is None:
        return ["no run logged a loss"]
    reference, lines = runs[reference_name], []
    for name in names:
        if name == reference_name:
            continue
        if not runs[name]:
            lines.append(f"{name} against {reference_name}: {name} logged no loss")
            continue
        for replica, series in sorted(reference.items()):
            other = dict((step, value) for step, _, value in runs[name].get(replica, []))
            shared = [(step, value, other[step]) for step, _, value in series if step in other]
            differ = [(step, abs(a - b)) for step, a, b in shared if a != b]
            verdict = ("not compared: no logged step in common" if not shared else
                       f"identical at all {len(shared)} shared logged steps" if not differ else
                       f"differ at {len(differ)} of {len(shared)} (first at step {differ[0][0]}; largest |difference| "
                       f"{max(d for _, d in differ):.3g})")
            lines.append(f"{name} against {reference_name}, {replica}: {verdict}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the folder of the runs' outputs and log_dirs")
    parser.add_argument("names", nargs="+", help="the runs, the first compiled one the reference of determinism")
    parser.add_argument("--train-step", type=Path, required=True)
    parser.add_argument("--determinism", type=Path, required=True)
    parser.add_argument("--compiled", type=int, required=True, help="how many of the names (the first) ran compiled")
    args = parser.parse_args(argv)
    runs = {name: losses(args.runs / name) for name in args.names}
    outputs = {name: (args.runs / f"{name}.out").read_text(errors="replace") if (args.runs / f"{name}.out").exists() else ""
               for name in args.names}
    write_file(args.train_step, "".join(step_line(name, next(iter(runs[name].values()), []), outputs[name]) + "\n"
                                        for name in args.names))
    compiled, eager = args.names[: args.compiled], args.names[args.compiled :]
    lines = ["compiled:", *determinism_lines(compiled, runs), "eager:", *determinism_lines(eager, runs)]
    lines += [f"{name}: {line}" for name in args.names for line in error_lines(outputs[name])]
    write_file(args.determinism, "\n".join(lines) + "\n")
    print(args.train_step.read_text() + args.determinism.read_text())


if __name__ == "__main__":
    main()
