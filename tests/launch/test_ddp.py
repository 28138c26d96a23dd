"""Real 2-process DDP runs on CPU (gloo) with shuffled shards: every model trains; state that every
rank keeps for itself (JSA's cache, the VQ-VAE's EMA codebook) ends identical on both ranks; metrics
are reduced across ranks, and validation under 2 processes agrees with 1 process on the same data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from tests import preloaded
from tests.launch.test_entrypoints import FAST, train

pytestmark = pytest.mark.slow  # end to end: run by the full suite (README), not the quick loop

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ddp_fit.py"


DDP_MODELS = ["jsa", "vae", "dvae", "sgld", "vqvae"]


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory, mnist_dir) -> Path:
    """Every model of DDP_MODELS trained in one 2-process run (the processes and imports are paid once)."""
    out_dir = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "DATA_DIR": str(mnist_dir)}
    # Rank 0 forked from tests/preloaded's server (its imports done); Lightning starts rank 1 as `python ddp_fit.py ...`.
    result = preloaded.run_script(SCRIPT, [",".join(DDP_MODELS), str(out_dir)], out_dir, env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out_dir


def ranks(model: str, out_dir: Path, mnist_dir: Path) -> tuple[dict, dict]:
    """What each rank saved for `model`, after the checks that hold for every model."""
    rank0, rank1 = (torch.load(out_dir / model / f"rank{r}.pt") for r in (0, 1))
    # Each rank trained on its own shard of the shuffled training split.
    seen0, seen1 = set(rank0["seen"].tolist()), set(rank1["seen"].tolist())
    assert len(seen0) == len(seen1) == 4 * 16 and not seen0 & seen1
    # ... and drew its random numbers (MIS proposals, noise) from its own seeded stream.
    assert rank0["torch_seed"] == 0 and rank1["torch_seed"] == 1
    # Validation metrics are reduced across ranks: both report the same value ...
    assert torch.equal(rank0["val_nll"], rank1["val_nll"])
    assert rank0["num_images"] == rank1["num_images"] == 128  # the images scored, summed over both shards
    # ... which is the single-process value on the same 128 images, up to importance-sampling noise.
    sys.path.insert(0, str(SCRIPT.parent))
    from ddp_fit import build, datamodule  # noqa: E402

    single = build(model)
    single.load_state_dict({k: v for k, v in rank0["model_state"].items() if not k.startswith("cache.")})  # no training here
    trainer = L.Trainer(accelerator="cpu", devices=1, limit_val_batches=8, logger=False, enable_progress_bar=False, enable_model_summary=False)
    single_nll = trainer.validate(single, datamodule=datamodule(str(mnist_dir)), verbose=False)[0]["val/nll"]
    assert trainer.callback_metrics["val/num_images"] == 128
    assert abs(rank0["validate_nll"] - single_nll) < 0.005 * single_nll, (rank0["validate_nll"], single_nll)
    return rank0, rank1


def test_jsa_cache_identical_on_both_ranks_and_holds_both_shards(ddp_runs, mnist_dir):
    rank0, rank1 = ranks("jsa", ddp_runs, mnist_dir)
    codes = rank0["state"]["cache.codes"]
    assert torch.equal(codes, rank1["state"]["cache.codes"])
    filled = set(torch.nonzero((codes != 255).all(1)).flatten().tolist())
    assert filled == set(rank0["seen"].tolist()) | set(rank1["seen"].tolist())


@pytest.mark.parametrize("model", ["vae", "dvae", "sgld"])
def test_model_trains_under_ddp_and_replicas_stay_identical(model, ddp_runs, mnist_dir):
    rank0, rank1 = ranks(model, ddp_runs, mnist_dir)
    for name, tensor in rank0["state"].items():  # sgld: the sampler's noise is drawn alike on both ranks
        assert torch.equal(tensor, rank1["state"][name]), name


def test_vqvae_ema_codebook_identical_on_both_ranks_after_restarts(ddp_runs, mnist_dir):
    rank0, rank1 = ranks("vqvae", ddp_runs, mnist_dir)
    assert rank0["restarts"] > 0 and rank0["restarts"] == rank1["restarts"]
    for name, tensor in rank0["state"].items():
        assert torch.equal(tensor, rank1["state"][name]), name


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_hydra_ddp_run_writes_one_output_directory(strategy, tmp_path, mnist_dir):
    """A known pitfall of Hydra + DDP: each re-launched rank making its own Hydra/TensorBoard directory."""
    train([f"trainer={strategy}", "trainer.accelerator=cpu", "model=vae", *FAST], tmp_path, mnist_dir)
    hydra_runs = list((tmp_path / "logs" / "hydra").glob("*/*"))
    tensorboard_runs = list((tmp_path / "logs" / "tensorboard").glob("*/*"))
    assert len(hydra_runs) == 1, hydra_runs
    assert [p.relative_to(tmp_path / "logs" / "tensorboard").as_posix() for p in tensorboard_runs] == ["vae-mnist-mlp-z32/version_0"]
    assert len(list(tensorboard_runs[0].glob("events.out.tfevents.*"))) == 1  # written by rank 0 only
    assert (tensorboard_runs[0] / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.parametrize("front_end", ["hydra", "cli"])
def test_a_setting_refused_on_every_rank_is_said_once_and_leaves_no_directory(front_end, tmp_path, mnist_dir):
    """A setting refused when the model meets its data (after the ranks have started): rank 0 alone prints the line,
    every rank exits with status 2, and no run or Hydra directory is left behind."""
    refused = {"hydra": ["trainer=ddp", "trainer.accelerator=cpu", "model.likelihood=bernoulli", "data.binarize=none", *FAST],
               "cli": ["fit", "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu",
                       "--model.likelihood=bernoulli", "--data.binarize=none", "--trainer.max_steps=1"]}[front_end]
    result = train(refused, tmp_path, mnist_dir, check=False)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(lines) == 1 and "data.binarize" in lines[0], result.stderr[-3000:]
    assert not (tmp_path / "logs").exists() or not [p for p in (tmp_path / "logs").rglob("*")], list((tmp_path / "logs").rglob("*"))


def test_two_process_resume_continues_bit_for_bit_on_both_ranks(tmp_path, mnist_dir):
    """Train 6 steps; train 3, stop, resume from last.ckpt to 6: both ranks end with the same parameters,
    optimizer state, MIS cache and random state as the uninterrupted run (each rank's own saved stream)."""
    env = {**os.environ, "DATA_DIR": str(mnist_dir)}

    def fit(out: Path, steps: int, ckpt: Path | None = None) -> list[dict]:
        out.mkdir()
        args = ["jsa", str(out), str(steps), *([str(ckpt)] if ckpt else [])]
        result = preloaded.run_script(SCRIPT, args, out, env, timeout=300)  # rank 0 forked, as in ddp_runs
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]

    uninterrupted = fit(tmp_path / "a", 6)
    fit(tmp_path / "b", 3)
    resumed = fit(tmp_path / "c", 6, tmp_path / "b" / "last.ckpt")
    for rank, (a, b) in enumerate(zip(uninterrupted, resumed)):
        for key, value in a["model_state"].items():  # parameters and the MIS cache (cache.codes)
            assert torch.equal(value, b["model_state"][key]), (rank, key)
        for state_a, state_b in zip(a["optimizer_state"]["state"].values(), b["optimizer_state"]["state"].values()):
            assert all(torch.equal(state_a[k], state_b[k]) for k in state_a), rank
        assert torch.equal(a["rng_state"], b["rng_state"]), rank
    assert not torch.equal(uninterrupted[0]["rng_state"], uninterrupted[1]["rng_state"])  # each rank its own stream



def test_the_process_group_is_released_at_exit_in_a_process_whose_trainer_set_up_under_it(tmp_path):
    """Left to interpreter exit, gloo's threads can abort a process whose run succeeded (exit -6, "terminate called
    without an active exception"): ReleaseProcessGroupAtExit, which both front ends add, destroys the group at exit.
    The probe is registered first, so that atexit (last in, first out) runs it after the callback's handler. The probe
    runs as `python -c` in a process of its own, forked from tests/preloaded's server, which ends with the interpreter's
    exit steps in their order (its threads joined, then the atexit functions)."""
    script = f"""
import atexit, torch.distributed as dist
from callbacks.guards.process_group import ReleaseProcessGroupAtExit
atexit.register(lambda: print("initialized at exit:", dist.is_initialized(), flush=True))
dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
ReleaseProcessGroupAtExit().setup(None, None, "fit")
print("initialized after setup:", dist.is_initialized(), flush=True)
"""
    done = preloaded.run_code(script, [], Path(__file__).resolve().parents[2], dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["initialized after setup: True", "initialized at exit: False"]


def test_both_front_ends_add_the_process_group_release():
    from callbacks.guards.process_group import ReleaseProcessGroupAtExit
    from launch import run_builder

    assert any(isinstance(c, ReleaseProcessGroupAtExit) for c in run_builder.trainer_settings({}, None, 10)["callbacks"])


def test_only_a_timeout_raised_inside_torch_distributed_counts_as_a_collective_timeout():
    """Another RuntimeError that mentions a timeout (a data loader's, say) keeps its own traceback, not the DDP
    message; test_a_frozen_ddp_peer_stops_the_run_with_a_message_after_the_timeout shows the real one."""
    from launch.errors import collective_timeout_message

    def loader():
        raise RuntimeError("DataLoader timed out after 5 seconds")

    with pytest.raises(RuntimeError) as error:
        loader()
    assert collective_timeout_message(error.value) is None
    inside = {}  # gloo's timeout, raised from a frame of torch.distributed: one line naming the collective and the fix
    exec(compile("def all_reduce():\n    raise RuntimeError('Timed out waiting 5000ms for recv operation to complete')\n",
                 "/site-packages/torch/distributed/distributed_c10d.py", "exec"), inside)
    with pytest.raises(RuntimeError) as error:
        inside["all_reduce"]()
    assert collective_timeout_message(error.value).startswith(
        "a distributed collective timed out in all_reduce (distributed/distributed_c10d.py): Timed out waiting 5000ms")
