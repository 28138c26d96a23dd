"""benchmarks/studies/verdict_sizing.py: the verdict's commands sized from lease 1's replica tables."""

import pytest

from benchmarks.studies import verdict_sizing


def tables(tmp_path, step_ms, validation_s_per_replica, compile_s=30.0):
    """replica_throughput's compiled and eager lines (its own format) with these figures at R = 1, 4, 8, 16, 32."""
    compiled, eager = [], []
    for model in ("jsa", "rws"):
        for r in (1, 4, 8, 16, 32):
            t = step_ms(r)
            compiled.append(f"{model} compiled (model.compile=step): R = {r:2d}: {t:.2f} ms/step, {r / t * 1000:.1f} "
                            f"replica-steps/s, 1.00x R = 1, first step {compile_s:.1f} s")
            v = validation_s_per_replica * r
            eager.append(f"{model} validation: R = {r:2d}: {v:.2f} s for 5000 images at 1000 samples ({v / r:.3f} s per replica)")
    (tmp_path / "compiled.txt").write_text("\n".join(compiled) + "\n")
    (tmp_path / "eager.txt").write_text("\n".join(eager) + "\n")
    return [str(tmp_path / "eager.txt"), str(tmp_path / "compiled.txt")]


def test_interpolation_is_linear_between_the_measured_replica_counts_and_beyond_them():
    points = {1: 2.0, 4: 2.0, 8: 4.0, 16: 8.0}
    assert verdict_sizing.interpolate(points, 4) == 2.0
    assert verdict_sizing.interpolate(points, 6) == 3.0
    assert verdict_sizing.interpolate(points, 24) == 12.0
    assert verdict_sizing.interpolate({1: 5.0}, 9) == 5.0


def test_launch_bound_steps_put_every_seed_in_two_commands_jsa_and_rws_apart(tmp_path, capsys):
    # 2 ms a step at every R, 0.1 s a replica's validation, 30 s a compilation: JSA's 5 seeds take 468 s with the setup
    # (82,500 x 2 ms + 60 x 0.5 s + 30 s, then 55,000 x 2 ms + 42 x 1.5 s + 30 s, + 40 s), RWS's 396 s: apart they fit.
    verdict_sizing.main(tables(tmp_path, lambda r: 2.0, 0.1))
    out = capsys.readouterr().out
    assert "2 commands" in out
    assert "verdict.sh 5 0 jsa   # about 7.8 min to the end of training, 8.8 min with the measures" in out
    assert "verdict.sh 5 0 rws" in out


def test_steps_that_grow_with_r_split_the_seeds_into_groups(tmp_path, capsys):
    verdict_sizing.main(tables(tmp_path, lambda r: 2.0 + 0.5 * r, 0.1))
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if "verdict.sh" in line]
    assert len(commands) > 2 and all(" 5 0" not in line for line in commands)


def test_a_jsa_group_too_long_for_one_command_trains_its_trunks_and_its_arms_in_two(tmp_path, capsys):
    # 2.7 ms a step: one JSA seed whole takes 490 s with the setup (82,500 + 55,000 steps, 102 validations, two
    # compilations), over 470 s; its trunk alone 322 s and its arms 281 s with all five seeds; RWS fits two seeds a command.
    verdict_sizing.main(tables(tmp_path, lambda r: 2.7, 0.1))
    commands = [line.split("verdict.sh ")[1].split("   #")[0] for line in capsys.readouterr().out.splitlines() if "verdict.sh" in line]
    assert commands == ["5 0 jsa-trunk", "5 0 jsa-arms", "2 0 rws", "2 1 rws", "2 2 rws"]


def test_no_plan_fits_when_a_single_seed_is_too_slow(tmp_path):
    with pytest.raises(SystemExit, match="no plan fits 470 s of training"):
        verdict_sizing.main(tables(tmp_path, lambda r: 4.0, 0.1))


def test_tables_without_the_validation_lines_are_refused_in_one_line(tmp_path):
    paths = tables(tmp_path, lambda r: 2.0, 0.1)
    with pytest.raises(SystemExit, match="no v_jsa, v_rws lines"):
        verdict_sizing.main(paths[1:])


def test_a_validation_timed_at_other_sizes_is_scaled_to_the_studys(tmp_path):
    (tmp_path / "t.txt").write_text(
        "jsa compiled (model.compile=step): R =  1: 2.00 ms/step, 500.0 replica-steps/s, 1.00x R = 1, first step 9.0 s\n"
        "rws compiled (model.compile=step): R =  1: 1.00 ms/step, 1000.0 replica-steps/s, 1.00x R = 1, first step 5.0 s\n"
        "jsa validation: R =  1: 0.10 s for 500 images at 4 samples (0.100 s per replica)\n"
        "rws validation: R =  1: 0.20 s for 5000 images at 1000 samples (0.200 s per replica)\n")
    figures = verdict_sizing.read_tables(tmp_path / "t.txt")
    assert figures["v_jsa"] == {1: pytest.approx(0.1 * 10 * 250)} and figures["v_rws"] == {1: 0.2}
    assert figures["t_jsa"] == {1: 0.002} and figures["c_rws"] == {1: 5.0}


def test_the_sizing_reads_the_lines_replica_throughput_writes(tmp_path, monkeypatch):
    # replica_throughput's own output, its steps and their timing stubbed (each step called once, 2 ms a call): the
    # compiled lines (the only mode --compiled-only measures) and the eager block's validation lines are what the
    # sizing parses.
    from benchmarks.speed import replica_throughput

    calls = []
    monkeypatch.setattr(replica_throughput, "build", lambda model, r, compile, *_: (
        (lambda: calls.append((model, r, compile))), (lambda: None), (lambda: None)))
    monkeypatch.setattr(replica_throughput, "measure", lambda fn, device, seconds: fn() or 0.002)
    replica_throughput.main(["--quick", "--compiled-only", "--replicas", "1,3", "--out", str(tmp_path / "compiled.txt")])
    replica_throughput.main(["--quick", "--replicas", "1,3", "--out", str(tmp_path / "eager.txt")])
    assert {compile for *_, compile in calls} == {True, False}
    assert not any("eager" in line for line in (tmp_path / "compiled.txt").read_text().splitlines()[1:])
    figures = verdict_sizing.read_tables(tmp_path / "eager.txt", tmp_path / "compiled.txt")
    assert {name: sorted(points) for name, points in figures.items()} == {
        f"{kind}_{model}": [1, 3] for kind in "tcv" for model in ("jsa", "rws")}
