"""How the verdict study splits into device calls of at most 10 minutes, from lease 1's replica tables.

    python -m benchmarks.studies.verdict_sizing benchmarks/results/speed/replicas_*_h200.txt   # lease 1's tables

A verdict command (benchmarks/results/verdict-study/lease/verdict.sh N K [jsa|rws|jsa-trunk|jsa-arms]) trains the
K-th group of N seeds, then measures its finished runs at 20,000 samples. Its seconds, by PLAN.md's protocol:

    JSA: 82,500 t_J(N) + 60 v_J(N) + c_J(N)  +  55,000 t_J(3N) + 42 v_J(3N) + c_J(3N)   (trunk, then its three arms;
         jsa-trunk and jsa-arms: each part in a command of its own)
    RWS: 137,500 t_W(N) + 102 v_W(N) + c_W(N)
    the measure: 42 v(1) per run (1000 and 20,000 samples on 10,000 images: 42 validations of one run)

t: the compiled replicated step at R replicas (ms/step); v: one validation of R replicas (scaled to 5000 images at
1000 samples); c: the first compiled step; read from the tables, linear in R between (and past) the measured R. Two
processes side by side count as their sum. The plan is the one of fewest commands whose every command ends its
training by `--train-limit` and its measures by `--limit` seconds, `--setup` of them for the set-up; each is printed
with its estimate.
"""

from __future__ import annotations

import argparse
import bisect
import math
import re
import sys
from pathlib import Path

STEPS_PER_EPOCH = 275  # 55,000 / 200
TRUNK, ARMS, RUN = 300, 200, 500  # epochs: JSA's trunk, its arms after the branch, an RWS run
VAL_EVERY, TEST_VALIDATIONS = 5, 2  # the test: 10,000 images, twice a validation's 5000
MEASURE_VALIDATIONS = 42  # 1000 and 20,000 samples on 10,000 images: (1 + 20) x 2 validations of one run
SEEDS = 5
STEP = re.compile(r"^(jsa|rws) compiled \(model.compile=step\): R = +(\d+): ([\d.]+) ms/step.*first step ([\d.]+) s$")
VALIDATION = re.compile(r"^(jsa|rws) validation: R = +(\d+): ([\d.]+) s for (\d+) images at (\d+) samples")
VAL_IMAGES, VAL_SAMPLES = 5000, 1000  # a validation of the study


def interpolate(points: dict[int, float], r: int) -> float:
    """points {R: value} at R: linear between the measured R around it, along the first or last two outside them."""
    rs = sorted(points)
    if len(rs) == 1:
        return points[rs[0]]
    k = min(max(bisect.bisect_left(rs, r), 1), len(rs) - 1)
    low, high = rs[k - 1], rs[k]
    return points[low] + (points[high] - points[low]) * (r - low) / (high - low)


def read_tables(*paths: Path) -> dict[str, dict[int, float]]:
    """{'t_jsa': {R: s/step}, 'c_jsa': {R: s}, 'v_jsa': {R: s}, ... for rws} from replica_throughput's lines."""
    found: dict[str, dict[int, float]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if step := STEP.match(line):
                model, r = step[1], int(step[2])
                found.setdefault(f"t_{model}", {})[r] = float(step[3]) / 1000
                found.setdefault(f"c_{model}", {})[r] = float(step[4])
            elif validation := VALIDATION.match(line):  # in proportion to images x samples, if timed at others
                scale = VAL_IMAGES / int(validation[4]) * VAL_SAMPLES / int(validation[5])
                found.setdefault(f"v_{validation[1]}", {})[int(validation[2])] = float(validation[3]) * scale
    missing = [key for key in ("t_jsa", "c_jsa", "v_jsa", "t_rws", "c_rws", "v_rws") if key not in found]
    if missing:
        raise SystemExit(f"verdict_sizing: no {', '.join(missing)} lines in {', '.join(map(str, paths))}: expected "
                         "replica_throughput's compiled lines (with 'first step') and its validation lines for jsa and rws")
    return found


def trunk_seconds(f: dict[str, dict[int, float]], n: int) -> float:
    return (TRUNK * STEPS_PER_EPOCH * interpolate(f["t_jsa"], n) + TRUNK // VAL_EVERY * interpolate(f["v_jsa"], n)
            + interpolate(f["c_jsa"], n))


def arms_seconds(f: dict[str, dict[int, float]], n: int) -> float:
    return (ARMS * STEPS_PER_EPOCH * interpolate(f["t_jsa"], 3 * n)
            + (ARMS // VAL_EVERY + TEST_VALIDATIONS) * interpolate(f["v_jsa"], 3 * n) + interpolate(f["c_jsa"], 3 * n))


def jsa_seconds(f: dict[str, dict[int, float]], n: int) -> float:
    return trunk_seconds(f, n) + arms_seconds(f, n)


def rws_seconds(f: dict[str, dict[int, float]], n: int) -> float:
    return (RUN * STEPS_PER_EPOCH * interpolate(f["t_rws"], n) + (RUN // VAL_EVERY + TEST_VALIDATIONS) * interpolate(f["v_rws"], n)
            + interpolate(f["c_rws"], n))


def measure_seconds(f: dict[str, dict[int, float]], jsa_runs: int, rws_runs: int) -> float:
    return MEASURE_VALIDATIONS * (jsa_runs * interpolate(f["v_jsa"], 1) + rws_runs * interpolate(f["v_rws"], 1))


def fits(commands: list[tuple[str, float, float]], train_limit: float, limit: float) -> bool:
    return all(train <= train_limit and end <= limit for _, train, end in commands)


def plans(f: dict[str, dict[int, float]], setup: float, train_limit: float, limit: float) -> list[list[tuple[str, float, float]]]:
    """The plans whose every command fits, a plan being its commands' (verdict.sh arguments, estimated seconds to the
    end of training, to the end of the measures): groups of N seeds (N = 5, 3, 2, 1) with each group's JSA and RWS in
    one command, or JSA's groups (whole, or trunks and arms apart) and RWS's groups in commands of their own, each at
    the N of fewest commands."""
    together, jsa, rws = [], [], []
    for n in (5, 3, 2, 1):
        sizes = [min(n, SEEDS - k * n) for k in range(math.ceil(SEEDS / n))]
        both, alone_jsa, split_jsa, alone_rws = [], [], [], []
        for k, size in enumerate(sizes):
            j, r = setup + jsa_seconds(f, size), setup + rws_seconds(f, size)
            both.append((f"{n} {k}", j + r - setup, j + r - setup + measure_seconds(f, 3 * size, size)))
            alone_jsa.append((f"{n} {k} jsa", j, j + measure_seconds(f, 3 * size, 0)))
            trunk, arms = setup + trunk_seconds(f, size), setup + arms_seconds(f, size)
            split_jsa += [(f"{n} {k} jsa-trunk", trunk, trunk), (f"{n} {k} jsa-arms", arms, arms + measure_seconds(f, 3 * size, 0))]
            alone_rws.append((f"{n} {k} rws", r, r + measure_seconds(f, 0, size)))
        together += [both] if fits(both, train_limit, limit) else []
        jsa += [plan for plan in (alone_jsa, split_jsa) if fits(plan, train_limit, limit)]
        rws += [alone_rws] if fits(alone_rws, train_limit, limit) else []
    apart = [min(jsa, key=len) + min(rws, key=len)] if jsa and rws else []
    return together + apart


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", nargs="+", type=Path, help="replica_throughput's --out files of lease 1 (eager and compiled)")
    parser.add_argument("--limit", type=float, default=560, help="seconds from a command's start by which its measures end (560)")
    parser.add_argument("--train-limit", type=float, default=470, help="seconds from a command's start by which its "
                        "training ends (verdict.sh's TRAIN_LIMIT: 470)")
    parser.add_argument("--setup", type=float, default=40, help="seconds of a command's setup, starts and report (40)")
    args = parser.parse_args(argv)
    for path in args.tables:
        if not path.is_file():
            parser.error(f"{path}: no such file; give lease 1's replicas_eager.txt and replicas_compiled.txt")
    figures = read_tables(*args.tables)
    for name, points in sorted(figures.items()):
        print(f"{name}: " + ", ".join(f"R = {r}: {v:.4g}" for r, v in sorted(points.items())))
    fitting = plans(figures, args.setup, args.train_limit, args.limit)
    if not fitting:
        one = [("1 0 jsa", args.setup + jsa_seconds(figures, 1)), ("1 0 rws", args.setup + rws_seconds(figures, 1))]
        sys.exit(f"no plan fits {args.train_limit:.0f} s of training and {args.limit:.0f} s in all a command: one seed "
                 "alone trains for " + ", ".join(f"{seconds:.0f} s (verdict.sh {a})" for a, seconds in one))
    best = min(fitting, key=len)
    print(f"{len(best)} commands, each its own lease (run tool, carry ['.verdict'], timeout_s 600):")
    for arguments, train, end in best:
        print(f"  bash benchmarks/results/verdict-study/lease/verdict.sh {arguments}   "
              f"# about {train / 60:.1f} min to the end of training, {end / 60:.1f} min with the measures")


if __name__ == "__main__":
    main()
