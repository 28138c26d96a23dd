"""Each cross-cutting callback alone, on a tiny VAE for a few steps: what it writes, and only that."""

from __future__ import annotations

import traceback
import types
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from callbacks import HparamsWithMetrics, ImageGrids, NonFiniteLossGuard, TrainingSpeed
from checkpoints.trainer import SafeCheckpoints
from datamodules import MNISTDataModule
from models import VAE


def fit(tmp_path: Path, mnist_dir: Path, callbacks: list, steps: int = 4, **kwargs) -> tuple[L.Trainer, EventAccumulator]:
    logger = TensorBoardLogger(tmp_path, name="run", default_hp_metric=False)
    trainer = L.Trainer(max_steps=steps, limit_train_batches=kwargs.pop("limit_train_batches", steps), limit_val_batches=1, num_sanity_val_steps=kwargs.pop("num_sanity_val_steps", 0), logger=logger,
                        callbacks=callbacks, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=1, **kwargs)
    trainer.fit(VAE(latent_dim=4, val_num_samples=2), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    return trainer, events


def test_image_grids_alone(tmp_path, mnist_dir):
    _, events = fit(tmp_path, mnist_dir, [ImageGrids(num_images=6)], num_sanity_val_steps=1)
    assert set(events.Tags()["images"]) == {"val/reconstructions", "val/prior_samples"}
    (grid,) = events.Images("val/reconstructions")  # the validation's, none of the sanity check before training
    assert grid.step == events.Scalars("val/nll")[0].step and grid.width > 28 * 2  # with its metrics; inputs beside reconstructions
    _, without = fit(tmp_path / "b", mnist_dir, [])
    assert without.Tags()["images"] == []
    _, inside = fit(tmp_path / "c", mnist_dir, [ImageGrids(num_images=6)], val_check_interval=0.5)  # validations inside an epoch
    assert [e.step for e in inside.Images("val/reconstructions")] == [e.step for e in inside.Scalars("val/nll")]


def test_hparams_with_metrics_alone(tmp_path, mnist_dir):
    _, events = fit(tmp_path, mnist_dir, [HparamsWithMetrics()])
    assert "_hparams_/experiment" in events.PluginTagToContent("hparams")  # the HPARAMS tab has the run
    (step,) = [e.step for e in events.Scalars("val/nll")]
    assert [e.step for e in events.Scalars("hp/val_nll")] == [step]  # the value after validation, no placeholder at step 0
    assert [(e.step, e.value) for e in events.Scalars("val/num_samples")] == [(step, 2.0)]  # S behind that val/nll
    assert not any(tag.startswith("hp/") for tag in fit(tmp_path / "b", mnist_dir, [])[1].Tags()["scalars"])


def test_the_samples_behind_each_nll_are_logged_at_its_step_also_inside_an_epoch(tmp_path, mnist_dir):
    """val/num_samples beside each val/nll, at the step Lightning logs it (which trails the global step at a validation
    inside an epoch): benchmarks/compare.py pairs them by step."""
    _, events = fit(tmp_path, mnist_dir, [HparamsWithMetrics()], val_check_interval=0.5)
    steps = [e.step for e in events.Scalars("val/nll")]
    assert len(steps) == 2 and [e.step for e in events.Scalars("val/num_samples")] == steps


def test_the_hparams_tab_names_the_learning_rate_scheduler(tmp_path):
    """model.scheduler is a factory (not a hyperparameter the model saves): the tab names the class it builds."""
    import functools

    from callbacks.hparams import write_hparams

    written = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("callbacks.hparams.hparams", lambda params, metrics: written.update(params) or [])
        def instantiator(instantiate, cls, *args, **settings):  # LightningCLI's factory: a function given the class
            return cls(*args, **settings)

        for scheduler, name in ((None, "none"), (functools.partial(torch.optim.lr_scheduler.StepLR, step_size=2), "StepLR"),
                                (functools.partial(instantiator, None, torch.optim.lr_scheduler.CosineAnnealingLR, T_max=3),
                                 "CosineAnnealingLR")):
            model = VAE(latent_dim=2, scheduler=scheduler)
            write_hparams(TensorBoardLogger(tmp_path), model, None, torch.optim.Adam(model.parameters()), 1, 0)
            assert written["scheduler"] == name


def test_training_speed_alone(tmp_path, mnist_dir):
    _, events = fit(tmp_path, mnist_dir, [TrainingSpeed()])
    step_times = events.Scalars("train/step_time_ms")
    assert len(step_times) == 3 and all(e.value > 0 for e in step_times)  # from the second step on
    assert events.Scalars("train/samples_per_s")[0].value > 0 and len(events.Scalars("train/epoch_time_s")) == 1


def mid_epoch_checkpoint(tmp_path: Path, mnist_dir: Path) -> Path:
    """A checkpoint saved at step 3 of a 6-batch epoch (as Ctrl-C saves one), of a tiny VAE."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    every_third_step = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="mid", every_n_train_steps=3, save_top_k=1,
                                       monitor="step", mode="min")  # keeps the first, saved inside epoch 0
    trainer = L.Trainer(max_steps=6, limit_train_batches=6, limit_val_batches=0, logger=False, callbacks=[every_third_step],
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(VAE(latent_dim=4, val_num_samples=2), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    path = tmp_path / "ckpt" / "mid.ckpt"
    assert torch.load(path, weights_only=True)["global_step"] == 3
    return path


def resume(tmp_path: Path, mnist_dir: Path, callbacks: list, **kwargs) -> L.Trainer:
    logger = TensorBoardLogger(tmp_path, name="resumed", default_hp_metric=False)
    trainer = L.Trainer(max_steps=12, limit_train_batches=6, limit_val_batches=1, num_sanity_val_steps=kwargs.pop("num_sanity_val_steps", 0), logger=logger,
                        callbacks=callbacks, enable_checkpointing=False, enable_model_summary=False, log_every_n_steps=1,
                        **kwargs)
    trainer.fit(VAE(latent_dim=4, val_num_samples=2), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16),
                ckpt_path=mid_epoch_checkpoint(tmp_path, mnist_dir))
    return trainer


def test_training_speed_after_a_mid_epoch_resume_logs_no_epoch_time_it_did_not_measure(tmp_path, mnist_dir):
    """Resumed at step 3 of a 6-batch epoch, the process never sees the epoch start: the epoch's time it could log is
    either absent or within the resumed fit's wall time (never a time since boot)."""
    import time

    start = time.perf_counter()
    trainer = resume(tmp_path, mnist_dir, [TrainingSpeed()], enable_progress_bar=False)
    wall = time.perf_counter() - start
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    epoch_times = [e.value for e in events.Scalars("train/epoch_time_s")]
    assert len(epoch_times) == 1 and 0 < epoch_times[0] < wall  # the second epoch, run whole; not the resumed first


def test_training_speed_logs_no_epoch_time_for_an_epoch_max_steps_cut_short(tmp_path, mnist_dir):
    """An epoch of 6 batches: 9 steps run the first whole and stop the second at its third batch; one epoch time."""
    logger = TensorBoardLogger(tmp_path, name="cut", default_hp_metric=False)
    trainer = L.Trainer(max_steps=9, limit_train_batches=6, limit_val_batches=0, logger=logger, callbacks=[TrainingSpeed()],
                        enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False, log_every_n_steps=1)
    trainer.fit(VAE(latent_dim=4), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    assert len(events.Scalars("train/epoch_time_s")) == 1


def test_progress_bars_after_a_mid_epoch_resume_show_the_epoch_its_length_and_no_version_fragment(tmp_path, mnist_dir, capsys):
    from callbacks.progress import LineProgressBar, LossTQDMProgressBar

    seen = []

    class Probe(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            bar = trainer.progress_bar_callback.train_progress_bar
            seen.append((bar.desc, bar.total, bar.n, bar.initial, dict(bar.postfix and [kv.split("=") for kv in bar.postfix.split(", ")] or [])))

    resume(tmp_path, mnist_dir, [LossTQDMProgressBar(), Probe()])
    desc, total, n, initial, postfix = seen[0]  # batch 4 of epoch 0, the first this process ran
    assert (desc.rstrip(": "), total, n, initial) == ("Epoch 0", 6, 4, 3)  # 3 batches ran before the resume
    assert "v_num" not in postfix and "train/loss" in postfix

    resume(tmp_path / "line", mnist_dir, [LineProgressBar(refresh_seconds=0)])
    lines = capsys.readouterr().out.splitlines()
    first = next(line for line in lines if line.startswith("epoch 1/"))
    assert first.startswith("epoch 1/? : 4/6 batches".replace(" :", ":")) and "left" in first, first
    assert "v_num" not in "".join(lines)


def test_the_epoch_line_says_when_max_steps_ended_the_epoch(mnist_dir, capsys):
    from callbacks.progress import LineProgressBar

    trainer = L.Trainer(max_epochs=5, max_steps=9, limit_train_batches=6, limit_val_batches=0, logger=False,
                        enable_checkpointing=False, enable_model_summary=False, callbacks=[LineProgressBar(refresh_seconds=0)])
    trainer.fit(VAE(latent_dim=4, val_num_samples=2), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    lines = capsys.readouterr().out.splitlines()
    ends = [line.split(",")[0] for line in lines if line.startswith("epoch ") and (" done: " in line or " ended by " in line)]
    assert ends == ["epoch 1/5 done: 6/6 batches", "epoch 2/5 ended by the trainer's max_steps=9: 3/6 batches"]


def test_random_state_checkpoint_saves_and_restores_every_rank_state():
    class FakeTrainer:
        world_size, global_rank, optimizers, lr_scheduler_configs, callbacks, datamodule = 1, 0, [], [], [], None
        strategy = types.SimpleNamespace(all_gather=lambda tensor: tensor)  # one process: Lightning's gathers nothing

    callback, module, checkpoint = SafeCheckpoints(), torch.nn.Linear(1, 1), {}
    module.device = torch.device("cpu")
    torch.manual_seed(123)
    callback.on_save_checkpoint(FakeTrainer(), module, checkpoint)
    expected = torch.rand(3)
    torch.manual_seed(0)  # a resumed process starts elsewhere
    restored = SafeCheckpoints()
    restored.on_load_checkpoint(FakeTrainer(), module, checkpoint)
    restored.on_train_start(FakeTrainer(), module)
    assert torch.equal(torch.rand(3), expected)


def test_random_state_of_another_number_of_processes_is_not_applied_and_says_so(caplog):
    """A checkpoint of one process resumed on two (or the reverse): no rank's stream is restored, and one logged line
    (not a Python warning with its source line) says the resumed run is not the uninterrupted one."""
    import logging
    import re
    import warnings

    class TwoRanks:
        world_size, global_rank, is_global_zero, optimizers, lr_scheduler_configs = 2, 0, True, [], []

    callback, module = SafeCheckpoints(), torch.nn.Linear(1, 1)
    module.device = torch.device("cpu")
    torch.manual_seed(5)
    with caplog.at_level(logging.WARNING, logger="checkpoints.trainer"), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback.on_load_checkpoint(TwoRanks(), module, {"rng_states": [{"cpu": torch.get_rng_state()}]})
    assert re.search(r"random state of 1 process\(es\), this run has 2: .* afresh from the seed", caplog.text), caplog.text
    assert not caught
    callback.on_train_start(TwoRanks(), module)  # rank 0 of 2: its own stream, seed + rank
    assert torch.initial_seed() == 5


def test_nonfinite_guard_alone_raises_and_names_the_term(tmp_path, mnist_dir):
    class NaNVAE(VAE):
        def training_loss(self, x, index):
            terms = super().training_loss(x, index)
            terms["kl"] = terms["kl"] * float("nan")
            return terms

    trainer = L.Trainer(max_steps=3, limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[NonFiniteLossGuard(check_every_n_steps=2)])
    with pytest.raises(FloatingPointError, match=r"^train/kl became NaN or inf \(at or before step 2\)"):
        trainer.fit(NaNVAE(latent_dim=4), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    with pytest.raises(ValueError, match="check_every_n_steps"):
        NonFiniteLossGuard(check_every_n_steps=0)


def test_nonfinite_guard_remembers_a_nan_step_until_the_check():
    """A term that was NaN at one step and finite again at the next is still reported at the next check."""

    class FakeTrainer:
        log_every_n_steps, world_size, global_step, checkpoint_callback = 3, 1, 2, None

    guard, nan, one = NonFiniteLossGuard(), torch.tensor(float("nan")), torch.tensor(1.0)
    for batch_idx, kl in enumerate([one, nan, one]):
        step = lambda: guard.on_train_batch_end(FakeTrainer(), None, {"loss": one, "terms": {"loss": one, "kl": kl}}, None, batch_idx)
        if batch_idx < 2:
            step()
    with pytest.raises(FloatingPointError, match=r"^train/kl became NaN or inf \(at or before step 2\)"):
        step()
    step()  # the check started afresh: finite terms pass
    shaped = {"loss": one, "kl": torch.tensor([1.0, float("nan")])}  # a term that is not 0-dim
    with pytest.raises(FloatingPointError, match=r"^train/kl became NaN"):
        guard.on_train_batch_end(FakeTrainer(), None, {"loss": one, "terms": shaped}, None, 2)


def test_nonfinite_guard_with_log_every_n_steps_0_checks_on_save():
    """trainer.log_every_n_steps=0 (Lightning then logs nothing) is no division by zero: the steps pass unchecked
    and the NaN is reported when the checkpoint is saved."""

    class FakeTrainer:
        log_every_n_steps, world_size, global_step, checkpoint_callback = 0, 1, 2, None

    guard, nan, one = NonFiniteLossGuard(), torch.tensor(float("nan")), torch.tensor(1.0)
    for batch_idx, kl in enumerate([one, nan, one]):
        guard.on_train_batch_end(FakeTrainer(), None, {"loss": one, "terms": {"loss": one, "kl": kl}}, None, batch_idx)
    with pytest.raises(FloatingPointError, match=r"^train/kl became NaN or inf"):
        guard.on_save_checkpoint(FakeTrainer(), None, {})


def test_nonfinite_guard_reports_an_infinite_term():
    """inf is caught as NaN is: a step whose KL term is inf fails at its check (every step here)."""

    class FakeTrainer:
        log_every_n_steps, world_size, global_step, checkpoint_callback = 1, 1, 0, None

    guard, one = NonFiniteLossGuard(), torch.tensor(1.0)
    terms = {"loss": one, "kl": torch.tensor(float("inf"))}
    with pytest.raises(FloatingPointError, match=r"^train/kl became NaN or inf"):
        guard.on_train_batch_end(FakeTrainer(), None, {"loss": one, "terms": terms}, None, 0)


def test_nonfinite_guard_checks_before_validation():
    """A NaN step between two checks is reported when validation starts, so a diverged state is never evaluated."""

    class FakeTrainer:
        log_every_n_steps, world_size, global_step, checkpoint_callback = 50, 1, 1, None

    guard, one = NonFiniteLossGuard(), torch.tensor(1.0)
    terms = {"loss": one, "kl": torch.tensor(float("nan"))}
    guard.on_train_batch_end(FakeTrainer(), None, {"loss": one, "terms": terms}, None, 0)  # not a checking step
    with pytest.raises(FloatingPointError, match=r"^train/kl became NaN or inf"):
        guard.on_validation_start(FakeTrainer(), None)


def test_nonfinite_guard_names_nonfinite_weights_on_a_failure():
    """A failure of a model with one infinite weight carries the guard's line naming that parameter; the guard's own
    FloatingPointError is left as it is."""

    class FakeTrainer:
        log_every_n_steps, world_size, global_step, checkpoint_callback = 1, 1, 3, None

    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    guard, failure, own = NonFiniteLossGuard(), RuntimeError(), FloatingPointError("train/kl became NaN or inf")
    guard.on_exception(FakeTrainer(), model, failure)
    assert failure.nonfinite_message.startswith("the model's weights (weight) became NaN or inf (at or before step 3)")
    assert failure.__notes__ == [failure.nonfinite_message]
    guard.on_exception(FakeTrainer(), model, own)
    assert not hasattr(own, "nonfinite_message") and not hasattr(own, "__notes__")


def test_comparison_report_labels_validation_images_of_an_untested_run(tmp_path):
    """benchmarks.compare shows an untested run's validation reconstructions as such, never as test images."""
    from torch.utils.tensorboard import SummaryWriter

    from benchmarks.compare import figure_title, panel_title, read_run

    for name, stages in (("tested", ("val", "test")), ("untested", ("val",))):
        with SummaryWriter(tmp_path / name / "version_0") as writer:
            for stage in stages:
                writer.add_image(f"{stage}/reconstructions", torch.rand(3, 8, 8), 1)
    tested, untested = (read_run(tmp_path / name / "version_0", tmp_path) for name in ("tested", "untested"))
    assert (tested.reconstructions_stage, untested.reconstructions_stage) == ("test", "val")
    assert "not tested" in panel_title(untested) and "not tested" not in panel_title(tested)
    assert figure_title([tested]).startswith("test images") and figure_title([untested]).startswith("validation images")
    assert figure_title([tested, untested]).startswith("test (validation where marked)")


def test_gradient_variance_alone_measures_without_changing_training(tmp_path, mnist_dir):
    """JSA with and without the measurement: the same parameters and MIS cache after training (the measurement
    draws from a forked random state and writes no cache), and the two tags at the measured steps only."""
    from callbacks import GradientVariance
    from models import JSA

    def run(callbacks: list, name: str):
        L.seed_everything(0)
        model = JSA(mis_steps=2, num_latents=4, val_num_samples=2)
        logger = TensorBoardLogger(tmp_path, name=name, default_hp_metric=False)
        trainer = L.Trainer(max_steps=4, limit_train_batches=4, limit_val_batches=0, logger=logger, callbacks=callbacks,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
        trainer.fit(model, datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16, binarize="dynamic"))
        events = EventAccumulator(logger.log_dir)
        events.Reload()
        return model, events

    measured, events = run([GradientVariance(every_n_steps=2, repeats=3)], "measured")
    plain, plain_events = run([], "plain")
    for p, q in zip(measured.parameters(), plain.parameters()):
        assert torch.equal(p, q)
    assert torch.equal(measured.cache.codes, plain.cache.codes)
    for tag in ("train/encoder_grad_variance", "train/decoder_grad_variance"):
        values = events.Scalars(tag)
        assert [e.step for e in values] == [1, 3] and all(e.value > 0 for e in values)
    assert not any("grad_variance" in tag for tag in plain_events.Tags()["scalars"])


def test_jsa_gradient_estimates_start_from_the_cache_and_write_nothing(monkeypatch):
    import models.jsa
    from models import JSA

    torch.manual_seed(0)
    model = JSA(mis_steps=2, num_latents=4, cache_size=8, cache_start_epoch=0)
    x, index = (torch.rand(8, 1, 28, 28) > 0.5).float(), torch.arange(8)
    model.training_loss(x, index)  # fills the cache for these examples
    cached = model.cache.codes.clone()
    starts = []
    original = models.jsa.index_cached_mis
    monkeypatch.setattr(models.jsa, "index_cached_mis", lambda *a: starts.append(a[3:5]) or original(*a))
    model.gradient_estimates(x, index)[""].backward()
    (start, has_start), = starts
    assert has_start.all() and torch.equal(start, cached)  # fresh chains from the same cached states
    assert torch.equal(model.cache.codes, cached)  # and the cache is not written


def test_trace_of_covariance_by_hand():
    from callbacks.gradient_variance import trace_of_covariance

    draws = [torch.tensor([1.0, 0.0]), torch.tensor([3.0, 0.0]), torch.tensor([2.0, 3.0])]
    # per component: var(1, 3, 2) = 1, var(0, 0, 3) = 3 (unbiased): the trace is 4
    assert trace_of_covariance(draws).item() == pytest.approx(4.0)
    with pytest.raises(ValueError, match="repeats"):
        from callbacks import GradientVariance
        GradientVariance(repeats=1)


def test_default_callbacks_read_nothing_back_from_the_device_between_logging_steps(tmp_path, mnist_dir, monkeypatch):
    """Every callback of configs/callbacks/default.yaml and a JSA step (MIS included) run a step without converting a
    tensor to a Python value (`.item()`, `.tolist()`, `float()`, `bool()`): on a GPU each is a host sync. Only
    logging steps (every trainer.log_every_n_steps) may read values back."""
    from hydra.utils import instantiate

    from models import JSA
    from tests.launch.test_configs import composed

    callbacks = [instantiate(c) for c in composed([]).callbacks.values()]
    reads: list[str] = []  # where each read happened

    class CountReads(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.counting = 2 <= batch_idx < 8  # between the first steps and the logging step (10)

    counter = CountReads()
    for name in ("item", "tolist", "__float__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            if getattr(counter, "counting", False):
                stack = "".join(traceback.format_stack(limit=8)[:-1])
                if "torch/optim/" not in stack:  # Adam's step count is a CPU tensor on every device (no sync)
                    reads.append(stack)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    trainer = L.Trainer(max_steps=9, limit_train_batches=9, limit_val_batches=0, logger=TensorBoardLogger(tmp_path, name="run"),
                        callbacks=[counter, *callbacks], log_every_n_steps=10, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(JSA(mis_steps=2), datamodule=MNISTDataModule(data_dir=str(mnist_dir), batch_size=16))
    assert trainer.global_step == 9 and len(reads) == 0, f"{len(reads)} tensors read back during steps 2..7, first at:\n{reads[:1]}"


def test_the_test_stage_says_its_cost_before_it_starts_and_tests_as_without_it(mnist_dir, capsys):
    """TestCost: `test: N images x S importance samples each (model.test_num_samples...): about T here` before the first
    batch is scored; its timing probe draws from a forked random state, so the test's numbers are the same without it."""
    from callbacks import LineProgressBar, TestCost

    def test(callbacks: list) -> dict[str, float]:
        torch.manual_seed(0)
        trainer = L.Trainer(limit_test_batches=3, logger=False, enable_model_summary=False, callbacks=callbacks)
        data = MNISTDataModule(data_dir=str(mnist_dir), batch_size=32, eval_batch_size=32)
        return trainer.test(VAE(latent_dim=4, test_num_samples=5), datamodule=data, verbose=False)[0]

    with_cost = test([TestCost(probe_work=20), LineProgressBar(refresh_seconds=0)])
    out = capsys.readouterr().out
    said = out.index("test: 96 images x 5 importance samples each (model.test_num_samples; fewer are proportionally faster): "
                     "about ")
    assert "here (timed on 4 images)" in out and said < out.index("test: 1/3 batches")
    assert with_cost == test([LineProgressBar(refresh_seconds=0)])


def test_readme_gives_the_test_stages_cost_and_the_setting_that_shortens_it():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [example] = [line for line in readme.splitlines() if line.startswith("python train.py test ")]
    assert "--model.test_num_samples=" in example and "# the first VAE run above" in example, example
    assert "**Testing\ncosts** 10,000 images × `model.test_num_samples` importance samples (default 1000): about 11 min" in readme
