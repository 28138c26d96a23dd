"""benchmarks/studies/train_step_check.py: lease 2's summary of train.py's runs, read from their logs as train.py and
Lightning's simple profiler write them."""

from torch.utils.tensorboard import SummaryWriter

from benchmarks.studies import train_step_check

PROFILER = """FIT Profiler Report

|  Action                                       \t|  Mean duration (s)\t|  Num calls      \t|  Total time (s) \t|  Percentage %   \t|
|  run_training_batch                           \t|  0.0125         \t|  250            \t|  3.125          \t|  90.0           \t|
|  [Strategy]SingleDeviceStrategy.training_step \t|  0.004          \t|  250            \t|  1.0            \t|  30.0           \t|
|  [Strategy]SingleDeviceStrategy.backward      \t|  0.003          \t|  250            \t|  0.75           \t|  20.0           \t|
|  [_TrainingEpochLoop].train_dataloader_next   \t|  5e-05          \t|  250            \t|  0.0125         \t|  0.4            \t|
"""


def run(folder, name, losses, start=1000.0, seconds_a_step=0.02, output=PROFILER):
    """A replicated run as train.py logs it: each replica's train/loss at steps 49, 99, ..., and its output."""
    for replica, values in losses.items():
        writer = SummaryWriter(str(folder / name / "tensorboard" / replica / "version_0"))
        for i, value in enumerate(values):
            step = 49 + 50 * i
            writer.add_scalar("train/loss", value, step, walltime=start + seconds_a_step * step)
        writer.close()
    (folder / f"{name}.out").write_text(output)


def test_the_steady_step_time_the_profilers_means_and_the_bit_for_bit_comparison(tmp_path):
    run(tmp_path, "solo", {"seed0": [300.0, 290.0, 280.0], "seed1": [301.0, 291.0, 281.0]})
    run(tmp_path, "a", {"seed0": [300.0, 290.0, 280.0], "seed1": [301.0, 291.5, 281.0]}, seconds_a_step=0.1)
    run(tmp_path, "eager", {}, output="RuntimeError: unsupported operation: more than one element\n")
    train_step, determinism = tmp_path / "train_step.txt", tmp_path / "determinism.txt"
    train_step_check.main([str(tmp_path), "solo", "a", "eager", "--compiled", "2", "--train-step", str(train_step),
                           "--determinism", str(determinism)])
    lines = train_step.read_text().splitlines()
    assert lines[0].split() == ["solo:", "20.00", "ms/step", "over", "steps", "49-149;", "profiler", "means", "(ms):",
                                "batch", "12.50", "training_step", "4.00", "backward", "3.00", "data", "0.05"]
    assert lines[1].split()[1] == "100.00"
    assert lines[2] == "     eager: no steady rate (0 logged steps); RuntimeError: unsupported operation: more than one element"
    assert determinism.read_text().splitlines()[:3] == [
        "compiled:",
        "a against solo, seed0: identical at all 3 shared logged steps",
        "a against solo, seed1: differ at 1 of 3 (first at step 99; largest |difference| 0.5)"]
    assert "eager: RuntimeError: unsupported operation" in determinism.read_text()
