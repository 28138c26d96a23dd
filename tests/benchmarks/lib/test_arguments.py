"""The benchmarks' command lines refuse a value out of range, an unknown name, a device this machine lacks or an
output path of the wrong kind in argparse's one `error:` line (exit status 2), before anything is built or run
(benchmarks/lib/arguments.py, runner.check_directory_options)."""

from __future__ import annotations

import importlib
import sys

import pytest

from benchmarks.lib import arguments
from tests.conftest import says

# Each refusal names the option and the value given, and what the option takes.
CASES = [
    ("speed.mis_speed", ["--batch-size", "0"], ["--batch-size: 0", "integer >= 1"]),
    ("speed.mis_speed", ["--mis-steps", "4", "x"], ["--mis-steps: 'x'", "integer >= 1"]),
    ("speed.mis_speed", ["--device", "nope"], ["--device: 'nope'", "torch device"]),
    ("speed.eval_speed", ["--models", "vae, nope"], ["--models", "'nope'", "vae, jsa, dvae, vqvae"]),
    ("speed.eval_speed", ["--min-run-time", "nan"], ["--min-run-time: nan", "finite number > 0"]),
    ("speed.memory", ["--models", "vea"], ["--models", "'vea'", "dvae, dvae_gumbel, jsa,"]),
    ("speed.memory", ["--runs", "test,nope"], ["--runs", "'nope'", "start, train, test"]),
    ("studies.prior_study", ["--warm-up", "-1"], ["--warm-up: -1", "integer >= 0"]),
    ("speed.loop_overhead", ["--repeats", "0"], ["--repeats: 0", "integer >= 1"]),
    ("speed.jsa_gradient_cost", ["--num-steps", "1"], ["--num-steps: 1", "integer >= 2"]),
    ("speed.ddp_cache_gather", ["--batch-size", "0"], ["--batch-size: 0", "integer >= 1"]),
    ("studies.santa_vs_adam", ["--limit-train-batches", "0"], ["--limit-train-batches: 0", "finite number > 0"]),
    ("robustness.faults", ["--concurrent", "-1"], ["--concurrent: -1", "integer >= 0"]),
    ("studies.cache.study", ["--small-l-seeds", "0"], ["--small-l-seeds: 0", "integer >= 1"]),
    ("robustness.bad_inputs", ["--table-only", "--out", "{tmp}/nowhere"], ["table.json", "FileNotFoundError"]),
    ("compare", ["{tmp}", "--out", "{tmp}/afile"], ["afile", "a directory to write in"]),
    ("studies.grey_mnist", ["--logs", "{tmp}/afile/logs"], ["afile", "a directory to write in"]),
    ("robustness.faults", ["--out", "{tmp}/afile"], ["afile", "a directory to write in"]),
    ("speed.gpu_scaling", ["--device", "cpu", "--out", "{tmp}"], ["--out", "the file to write the table to"]),
]


@pytest.mark.parametrize(("module", "argv", "named"), CASES, ids=[f"{m.rsplit('.', 1)[-1]} {' '.join(a)}" for m, a, _ in CASES])
def test_a_bad_value_is_one_error_line_before_anything_runs(module, argv, named, tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    name = module.rsplit(".", 1)[-1]
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    main = importlib.import_module(f"benchmarks.{module}").main
    with pytest.raises(SystemExit) as stop:
        main(argv) if "argv" in main.__code__.co_varnames[:main.__code__.co_argcount] else main()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"{name}.py: error: "), err[-1]
    says(err[-1], *named)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


def test_the_types_accept_what_they_should():
    assert arguments.integer(0)("0") == 0 and arguments.number(0)("1e-3") == 1e-3
    assert arguments.names(["a", "b"])("b, a") == ["b", "a"] and arguments.device("cpu") == "cpu"
    assert "vae" in arguments.MODEL_CONFIGS and "jsa" in arguments.MODEL_CONFIGS
