"""The benchmarks' command lines refuse a value out of range, an unknown name, a device this machine lacks or an
output path of the wrong kind in argparse's one `error:` line (exit status 2), before anything is built or run
(benchmarks/lib/arguments.py, runner.check_directory_options)."""

from __future__ import annotations

import importlib
import sys

import pytest

from benchmarks.lib import arguments

CASES = [
    ("speed.mis_speed", ["--batch-size", "0"], "argument --batch-size: 0: expected an integer >= 1"),
    ("speed.mis_speed", ["--mis-steps", "4", "x"], "argument --mis-steps: 'x': expected an integer >= 1"),
    ("speed.mis_speed", ["--device", "nope"], "argument --device: 'nope': expected a torch device"),
    ("speed.eval_speed", ["--models", "vae, nope"], "argument --models: unknown 'nope'; choose from vae, jsa, dvae, vqvae"),
    ("speed.eval_speed", ["--min-run-time", "nan"], "argument --min-run-time: nan: expected a finite number > 0"),
    ("speed.memory", ["--models", "vea"], "argument --models: unknown 'vea'; choose from dvae, dvae_gumbel, jsa,"),
    ("speed.memory", ["--runs", "test,nope"], "argument --runs: unknown 'nope'; choose from start, train, test"),
    ("studies.prior_study", ["--warm-up", "-1"], "argument --warm-up: -1: expected an integer >= 0"),
    ("speed.loop_overhead", ["--repeats", "0"], "argument --repeats: 0: expected an integer >= 1"),
    ("speed.jsa_gradient_cost", ["--num-steps", "1"], "argument --num-steps: 1: expected an integer >= 2"),
    ("speed.ddp_cache_gather", ["--batch-size", "0"], "argument --batch-size: 0: expected an integer >= 1"),
    ("studies.santa_vs_adam", ["--limit-train-batches", "0"], "argument --limit-train-batches: 0: expected a finite number > 0"),
    ("robustness.faults", ["--concurrent", "-1"], "argument --concurrent: -1: expected an integer >= 0"),
    ("studies.cache.study", ["--small-l-seeds", "0"], "argument --small-l-seeds: 0: expected an integer >= 1"),
    ("robustness.bad_inputs", ["--table-only", "--out", "{tmp}/nowhere"], "table.json is not a readable table (FileNotFoundError)"),
    ("compare", ["{tmp}", "--out", "{tmp}/afile"], "afile is a file; expected a directory to write in"),
    ("studies.grey_mnist", ["--logs", "{tmp}/afile/logs"], "afile is a file; expected a directory to write in"),
    ("robustness.faults", ["--out", "{tmp}/afile"], "afile is a file; expected a directory to write in"),
    ("speed.gpu_scaling", ["--device", "cpu", "--out", "{tmp}"], "a directory; expected the file to write the table to"),
]


@pytest.mark.parametrize(("module", "argv", "message"), CASES, ids=[f"{m.rsplit('.', 1)[-1]} {' '.join(a)}" for m, a, _ in CASES])
def test_a_bad_value_is_one_error_line_before_anything_runs(module, argv, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    name = module.rsplit(".", 1)[-1]
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    main = importlib.import_module(f"benchmarks.{module}").main
    with pytest.raises(SystemExit) as stop:
        main(argv) if "argv" in main.__code__.co_varnames[:main.__code__.co_argcount] else main()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith(f"{name}.py: error: "), err[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


def test_the_types_accept_what_they_should():
    assert arguments.integer(0)("0") == 0 and arguments.number(0)("1e-3") == 1e-3
    assert arguments.names(["a", "b"])("b, a") == ["b", "a"] and arguments.device("cpu") == "cpu"
    assert "vae" in arguments.MODEL_CONFIGS and "jsa" in arguments.MODEL_CONFIGS
