"""R runs of one configuration in one process (models/replicas.py, datamodules/replicas.py, callbacks/replica_runs.py):
a replica is the run of its seed, replicas do not interact, a replicated process resumes exactly, and each replica's
checkpoint loads and resumes alone."""

from __future__ import annotations

import copy
import logging
import os
import re
import warnings

import lightning as L
import pytest
import torch

from callbacks.replica_runs import ReplicaRuns
from checkpoints.loader import load_checkpoint_file
from checkpoints.trainer import SafeCheckpoints
from datamodules.mnist import MNISTDataModule
from datamodules.replicas import ReplicaData
from models.jsa import JSA
from models.compiled_step import compile_step
from models.replicas import Replicas
from tests.conftest import DATA_ROOT, narrow_mlps, says

DATA_DIR = str(DATA_ROOT)
SETTINGS = dict(num_latents=6, num_categories=4, code_dim=4, mis_steps=4, gradient_states="expected", val_num_samples=2, cache_size=200)


def data(seed: int) -> MNISTDataModule:
    return MNISTDataModule(data_dir=DATA_DIR, batch_size=100, binarize="dynamic", val_size=59800, seed=seed, eval_batch_size=50)


def model(seed: int, narrow: bool = True, **settings) -> JSA:
    """JSA with SETTINGS, seeded; narrow: 64-wide MLPs (conftest.narrow_mlps), unless the test loads its checkpoint
    as the class builds it."""
    L.seed_everything(seed, verbose=False)
    built = JSA(**{**SETTINGS, "test_seed": seed, **settings})
    return narrow_mlps(built) if narrow else built


def trainer(tmp_path, **settings) -> L.Trainer:
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    return L.Trainer(**{"max_steps": 4, "limit_val_batches": 1, "logger": False, "enable_progress_bar": False,
                        "enable_model_summary": False, "default_root_dir": str(tmp_path), "precision": "64-true",
                        "num_sanity_val_steps": 0, **settings,
                        "callbacks": [SafeCheckpoints(), *settings.get("callbacks", [])]})


class Record(L.Callback):
    """Each step's batch and loss terms (of every replica)."""

    def __init__(self) -> None:
        self.batches, self.losses = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.batches.append([b.clone() for b in batch])
        self.losses.append(outputs["terms"]["loss"].clone() if "terms" in outputs else outputs["loss"].detach().clone())


def fit_single(tmp_path, seed: int, **settings) -> tuple[JSA, dict, Record]:
    single, record = model(seed, **settings), Record()
    initial = copy.deepcopy(single.state_dict())
    trainer(tmp_path / f"single{seed}", callbacks=[record]).fit(single, datamodule=data(seed))
    return single, initial, record


def test_one_replica_is_the_run_of_its_seed(tmp_path):
    """A 1-replica process and the single run with its seed, in float64: the same batches, losses and final weights and
    cache over a fit with a validation, the cache read from epoch 1 (vmap with one replica draws the single run's
    random numbers)."""
    single, _, single_record = fit_single(tmp_path, 4, cache_start_epoch=1, cache_refresh=0.3)
    replicas, record = Replicas([model(4, cache_start_epoch=1, cache_refresh=0.3)], [4]), Record()
    trainer(tmp_path / "replicas", callbacks=[record]).fit(replicas, datamodule=ReplicaData(data(0), [4]))
    assert len(record.losses) == 4
    for batch, single_batch in zip(record.batches, single_record.batches):
        assert torch.equal(batch[0][0], single_batch[0]) and torch.equal(batch[1][0], single_batch[1])
    torch.testing.assert_close(torch.stack(record.losses)[:, 0], torch.stack(single_record.losses), rtol=1e-9, atol=0)
    for name, value in single.state_dict().items():
        torch.testing.assert_close(replicas.replica_state_dict(0)[name], value, rtol=1e-9, atol=1e-12, msg=name)


def test_a_replica_starts_and_sees_what_the_run_of_its_seed_does(tmp_path):
    """Replica r of a 3-replica process and the single run with its seed start from the same weights and see the same
    batches (data order and binarization), exactly; their losses over the first steps agree to within the spread of
    the MIS draws, which differ (vmap draws all replicas' numbers from one generator): within 0.5 % here."""
    seeds = [3, 4, 5]
    singles = [fit_single(tmp_path, seed) for seed in seeds]
    replicas = Replicas([model(seed) for seed in seeds], seeds)
    for r, (_, initial, _) in enumerate(singles):
        start = replicas.replica_state_dict(r)
        assert start.keys() == initial.keys()
        for name in initial:
            assert torch.equal(start[name], initial[name]), name
    record = Record()
    trainer(tmp_path / "replicas", callbacks=[record]).fit(replicas, datamodule=ReplicaData(data(0), seeds))
    for r, (_, _, single) in enumerate(singles):
        for step, (batch, single_batch) in enumerate(zip(record.batches, single.batches)):
            assert torch.equal(batch[0][r], single_batch[0]) and torch.equal(batch[1][r], single_batch[1]), (r, step)
        torch.testing.assert_close(torch.stack([losses[r] for losses in record.losses]), torch.stack(single.losses),
                                   rtol=5e-3, atol=0)


def replica_gradients(replicas: Replicas, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(11)
    replicas.set_gates()  # as at an epoch's start (epoch 0 without a trainer)
    out = replicas.training_step(batch, 0)
    replicas.zero_grad()
    out["loss"].backward()
    return out["terms"]["loss"], {name: p.grad.clone() for name, p in replicas.stacked_params.items()}


def test_replicas_do_not_interact():
    """Replica 0's weights and batch changed: every other replica's loss and gradient are exactly what they were."""
    seeds = [0, 1, 2]
    replicas = Replicas([model(seed).double() for seed in seeds], seeds).double()
    x = torch.bernoulli(torch.rand(3, 8, 1, 28, 28, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    index = torch.arange(8).expand(3, -1)
    losses, grads = replica_gradients(replicas, (x, index))
    with torch.no_grad():
        for p in replicas.stacked_params.values():
            p[0].mul_(-2.0)
    x[0] = 1 - x[0]
    changed_losses, changed_grads = replica_gradients(replicas, (x, index))
    assert changed_losses[0] != losses[0] and torch.equal(changed_losses[1:], losses[1:])
    for name in grads:
        assert not torch.equal(changed_grads[name][0], grads[name][0]) or grads[name][0].abs().sum() == 0, name
        assert torch.equal(changed_grads[name][1:], grads[name][1:]), name


def test_replicas_may_differ_in_gating_settings_only():
    with pytest.raises(ValueError, match="differs from replica 0 in mis_steps"):
        Replicas([model(0), model(1, mis_steps=5)], [0, 1])
    Replicas([model(0), model(1, cache_start_epoch=1, cache_refresh=0.2)], [0, 1])  # JSA's replica_settings


def test_a_replica_that_does_not_read_its_cache_yet_starts_every_chain_fresh_beside_one_that_does():
    """One batched step reads the cache when any replica does; the replica whose cache_start_epoch is not reached
    restarts every chain from a fresh proposal, as its single run does."""
    replicas = Replicas([model(0, cache_start_epoch=None), model(1, cache_start_epoch=0)], [0, 1])
    x = torch.bernoulli(torch.rand(2, 8, 1, 28, 28, generator=torch.Generator().manual_seed(1)))
    batch = (x, torch.arange(8).expand(2, -1))
    replicas.training_step(batch, 0)  # both caches written
    terms = replicas.training_step(batch, 1)["terms"]
    assert terms["cache_hit_rate"].tolist() == [0.0, 1.0]


def test_the_batched_step_reads_each_replicas_step_inputs_at_the_processs_step(monkeypatch):
    """What changes as training goes on (`step_inputs`) reaches the batched step as it reaches a single run's: the Gumbel
    temperature at step 5 of the process, not its initial value."""
    from models.dvae import DiscreteVAE

    models = [DiscreteVAE(estimator="gumbel", anneal_rate=0.1, num_latents=4, num_categories=3, code_dim=2) for _ in range(2)]
    replicas = Replicas(models, [0, 1])
    monkeypatch.setattr(Replicas, "global_step", property(lambda self: 5))
    x = torch.bernoulli(torch.rand(2, 4, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    terms = replicas.training_step((x, torch.arange(4).expand(2, -1)), 0)["terms"]
    assert models[0].temperature_at(5) < models[0].temperature
    torch.testing.assert_close(terms["temperature"], torch.full((2,), models[0].temperature_at(5)))


def fit_replicas(tmp_path, seeds, max_steps, ckpt_path=None, narrow=True, **settings):
    from lightning.pytorch.callbacks import ModelCheckpoint

    replicas = Replicas([model(seed, narrow, **{k: v[r] for k, v in settings.items()}) for r, seed in enumerate(seeds)], seeds)
    runs = ReplicaRuns(str(tmp_path / "tensorboard"), [f"jsa-seed{s}" for s in seeds])
    checkpoints = ModelCheckpoint(dirpath=str(tmp_path / "group"), save_last=True, every_n_train_steps=3)
    # float32: a single run's resume is exact there (under precision=64-true Lightning's resume is not, replicas or not)
    trainer(tmp_path, max_steps=max_steps, precision="32-true", callbacks=[runs, checkpoints]).fit(
        replicas, datamodule=ReplicaData(data(0), seeds), ckpt_path=ckpt_path)
    return replicas, runs


@pytest.mark.slow  # end to end: four fits, a resume from a checkpoint
def test_a_replicated_process_resumes_exactly_and_each_replica_checkpoint_loads_alone(tmp_path):
    """7 steps straight equal 3 steps, a save, and a new process resuming from it (every replica: weights, Adam, cache,
    data position, random state); the cache is read from epoch 1 by one replica only. Each replica's last.ckpt is a
    single run's: JSA.load_from_checkpoint gives its slice, and a single run resumes from it with the replica's batches."""
    seeds = [0, 1]
    gates = dict(cache_start_epoch=[None, 1], cache_refresh=[0.0, 0.5])
    straight, _ = fit_replicas(tmp_path / "straight", seeds, 7, narrow=False, **gates)
    fit_replicas(tmp_path / "interrupted", seeds, 3, narrow=False, **gates)
    resumed, runs = fit_replicas(tmp_path / "interrupted", seeds, 7, ckpt_path=str(tmp_path / "interrupted/group/last.ckpt"),
                                 narrow=False, **gates)
    for name, p in straight.state_dict().items():
        assert torch.equal(p, resumed.state_dict()[name]), (name, (p - resumed.state_dict()[name]).abs().max())
    # the same runs were continued: one version each
    assert sorted(p.name for p in (tmp_path / "interrupted/tensorboard/jsa-seed1").iterdir()) == ["version_0"]
    last = tmp_path / "interrupted/tensorboard/jsa-seed1/version_0/checkpoints/last.ckpt"
    alone = JSA.load_from_checkpoint(str(last))
    group = load_checkpoint_file(tmp_path / "interrupted/group/last.ckpt")  # saved with it, at step 6
    for name, value in alone.state_dict().items():
        assert torch.equal(value, group["state_dict"]["stacked_params." + name.replace(".", "/")][1]
                           if "stacked_params." + name.replace(".", "/") in group["state_dict"]
                           else group["state_dict"]["stacked/" + name.replace(".", "/")][1]), name
    checkpoint = load_checkpoint_file(last)
    assert checkpoint["global_step"] == 6 and checkpoint["datamodule_hyper_parameters"]["seed"] == 1
    assert checkpoint["data_class"] == "datamodules.mnist.MNISTDataModule"  # its data, as a single run's names it
    single, record = model(1, narrow=False), Record()
    trainer(tmp_path / "single", max_steps=8, precision="32-true", callbacks=[record]).fit(single, datamodule=data(1), ckpt_path=str(last))
    fresh = Record()
    trainer(tmp_path / "fresh", max_steps=8, precision="32-true", callbacks=[fresh]).fit(model(1, narrow=False), datamodule=data(1))
    assert len(record.batches) == 2 and torch.equal(record.batches[0][1], fresh.batches[6][1])


class StartState(L.Callback):
    """The replicas' weights and Adam moments once a fit has restored its checkpoint."""

    def on_train_start(self, trainer, pl_module) -> None:
        self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.moments = [v["exp_avg"].clone() for v in trainer.optimizers[0].state.values()]


@pytest.mark.slow  # end to end: a fit, a branch resumed from its checkpoint
def test_arms_branch_from_a_trunk_as_its_seeds_replicas(tmp_path):
    """A 2-seed trunk, then 2 arms (no cache; cache from epoch 1) from its checkpoint: each arm of a seed starts as that
    seed's trunk replica (weights, cache, Adam's moments), and the branch trains on with the arms' own gates."""
    from launch.runs.replicas import trunk_to_branch
    from checkpoints.file_format import save_checkpoint_file

    seeds = [0, 1]
    fit_replicas(tmp_path / "trunk", seeds, 3)
    trunk = load_checkpoint_file(tmp_path / "trunk/group/last.ckpt")
    arms = [{}, {"cache_start_epoch": 1}]
    trunk_path = str(tmp_path / "trunk/group/last.ckpt")
    branch = trunk_to_branch(load_checkpoint_file(trunk_path), seeds, arms, ["jsa-seed0", "jsa-seed1", "jsa-seed0-c", "jsa-seed1-c"])
    assert branch["replica_seeds"] == [0, 1, 0, 1]
    # one arm: other settings branch into runs of their own; the trunk's own runs resume it
    assert trunk_to_branch(load_checkpoint_file(trunk_path), seeds, arms[1:], ["jsa-seed0-c", "jsa-seed1-c"])["replica_seeds"] == [0, 1]
    assert trunk_to_branch(load_checkpoint_file(trunk_path), seeds, arms[:1], ["jsa-seed0", "jsa-seed1"]) is None
    save_checkpoint_file(branch, tmp_path / "branch.ckpt")
    start = StartState()
    replicas = Replicas([model(seed, **arm) for arm in arms for seed in seeds], seeds * 2)
    trainer(tmp_path / "branch", max_steps=5, precision="32-true", callbacks=[start]).fit(
        replicas, datamodule=ReplicaData(data(0), seeds * 2), ckpt_path=str(tmp_path / "branch.ckpt"))
    for name, value in trunk["state_dict"].items():
        for arm in range(2):
            assert torch.equal(start.weights[name][2 * arm:2 * arm + 2], value), (name, arm)
    trunk_moments = [entry["exp_avg"] for entry in trunk["optimizer_states"][0]["state"].values()]
    for moment, trunk_moment in zip(start.moments, trunk_moments):
        assert torch.equal(moment[:2], trunk_moment) and torch.equal(moment[2:], trunk_moment)
    assert not torch.equal(replicas.state_dict()["stacked_params.decoder/net/0/bias"][0],
                           replicas.state_dict()["stacked_params.decoder/net/0/bias"][2])  # the arms went on apart


ACCUMULATING = {torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default, torch.ops.aten.scatter_add.default,
                torch.ops.aten.scatter_add_.default, torch.ops.aten.index_add.default, torch.ops.aten.index_add_.default}


def writes_into_broadcasts(graph: torch.fx.Graph) -> list[str]:
    """The nodes of a graph after AOTAutograd that scatter into an expanded (broadcast) tensor. A table made by
    torch.zeros inside the vmapped step is one table broadcast over the replicas; inductor's CUDA kernels then
    accumulate every replica's values into its one copy (torch 2.11), and its deterministic fallback refuses it."""
    return [f"{node.target}: {node.args[0].format_node()}" for node in graph.nodes
            if node.target in ACCUMULATING and isinstance(node.args[0], torch.fx.Node)
            and node.args[0].target == torch.ops.aten.expand.default]


@pytest.mark.slow
@pytest.mark.parametrize("cls, backend", [("jsa", "inductor"), ("rws", "aot_eager")])
def test_the_compiled_batched_step_equals_the_eager_one(cls, backend, monkeypatch):
    """model.compile=step with replicas: the vmapped step compiled whole gives the eager step's losses and gradients,
    with the cache read by one replica (JSA, on the chain's states as the paper's protocol). JSA's through inductor
    (its random draws eager's), whose graphs scatter into no table the replicas share (`writes_into_broadcasts`);
    RWS's through aot_eager (Dynamo's and AOTAutograd's graphs of the vmapped step, eager kernels)."""
    import models.replicas
    from models.rws import RWS

    if backend != "inductor":
        monkeypatch.setattr(models.replicas, "compile_step", lambda step, **options: compile_step(step, backend=backend))

    def build(compile):
        if cls == "rws":
            models = [RWS(num_latents=6, num_categories=4, code_dim=4, num_samples=3, compile=compile) for _ in range(2)]
        else:
            models = [model(seed, compile=compile, cache_start_epoch=[None, 0][seed], gradient_states="chain")
                      for seed in (0, 1)]
        return Replicas(models, [0, 1])

    eager, compiled = build(False), build("step")
    compiled.load_state_dict(eager.state_dict())
    x = torch.bernoulli(torch.rand(2, 8, 1, 28, 28, generator=torch.Generator().manual_seed(1)))
    index = torch.arange(8).expand(2, -1)
    graphs, broadcast_writes = [], []

    def inspect(graph: torch.fx.Graph) -> None:
        graphs.append(graph)
        broadcast_writes.extend(writes_into_broadcasts(graph))

    with torch._inductor.config.patch(fallback_random=True, post_grad_custom_post_pass=inspect):
        for replicas in (eager, compiled):
            if cls == "jsa":  # a filled cache, which replica 1 reads
                torch.manual_seed(3)
                replicas.set_gates()
                replicas.training_step((x, index), 0)
        results = [replica_gradients(replicas, (x, index)) for replicas in (eager, compiled)]
    (eager_loss, eager_grads), (compiled_loss, compiled_grads) = results
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-4)
    for name in eager_grads:
        torch.testing.assert_close(compiled_grads[name], eager_grads[name], rtol=1e-4, atol=1e-4, msg=name)
    assert not broadcast_writes and (graphs or backend != "inductor"), broadcast_writes


# Where a replicated process saves: every 2 steps (the faults' settings), or at its validations only (every 2 epochs
# of 4 steps: steps 8, 16, ...), as a study's process validating every N epochs does.
SAVES = {"steps": {}, "validations": {"trainer.limit_train_batches": "4", "trainer.check_val_every_n_epoch": "2",
                                      "callbacks.model_checkpoint.every_n_train_steps": "null"}}
VALIDATION_STEPS = 8


@pytest.mark.slow
@pytest.mark.parametrize("saves", SAVES)
def test_a_killed_replicated_process_resumes_every_replica_where_it_stopped(tmp_path, saves):
    """`train.py replicas.seeds=[0,1]` killed (SIGKILL) once its last.ckpt exists, then resumed from it: the process and
    each replica's last.ckpt end as an uninterrupted process's do (weights, cache, optimizer), and each replica's run
    is the one it started in. Saving at validations only, the process's last.ckpt and each replica's last and best are
    written at the first validation, long before the end."""
    import signal

    from benchmarks.robustness import faults
    from tests import preloaded

    given = [s for s in faults.SETTINGS if s.split("=")[0] not in SAVES[saves]] + [f"{k}={v}" for k, v in SAVES[saves].items()]
    settings = [*given, "replicas.seeds=[0,1]", "data.val_size=59000", f"data.data_dir={DATA_DIR}"]

    def group(log_dir):
        return sorted((log_dir / "logs" / "replicas").glob("*/*/checkpoints/last.ckpt"))

    def run_train(cwd, *args):  # a real process (its own session, as faults.run_train's), forked with the imports done
        return preloaded.start_train(list(args), cwd, dict(os.environ))

    (tmp_path / "straight").mkdir()
    code, output = faults.finish(run_train(tmp_path / "straight", *settings))
    assert code == 0, output[-3000:]
    (tmp_path / "killed").mkdir()
    process = run_train(tmp_path / "killed", *settings)
    faults.wait_for(lambda: bool(group(tmp_path / "killed")), process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    (stopped,) = group(tmp_path / "killed")
    stopped_at = load_checkpoint_file(stopped)["global_step"]
    assert stopped_at < faults.STEPS
    if saves == "validations":  # saved at a validation, with each replica's last and best
        assert stopped_at % VALIDATION_STEPS == 0
        for seed in (0, 1):
            (run,) = (tmp_path / "killed/logs/tensorboard").glob(f"*-seed{seed}/version_0")
            assert load_checkpoint_file(run / "checkpoints/last.ckpt")["global_step"] >= stopped_at
            assert list((run / "checkpoints").glob("epoch*-step*.ckpt"))
    code, output = faults.finish(run_train(tmp_path / "killed", *settings, f"ckpt_path={stopped}"))
    assert code == 0, output[-3000:]
    (straight,) = group(tmp_path / "straight")
    ends = [load_checkpoint_file(path) for path in (straight, stopped)]
    assert ends[0]["global_step"] == ends[1]["global_step"] == faults.STEPS
    for name, value in ends[0]["state_dict"].items():
        assert torch.equal(value, ends[1]["state_dict"][name]), name
    for a, b in zip(ends[0]["optimizer_states"][0]["state"].values(), ends[1]["optimizer_states"][0]["state"].values()):
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    for seed in (0, 1):
        runs = [sorted((d / "logs/tensorboard").glob(f"*-seed{seed}/version_*")) for d in (tmp_path / "straight", tmp_path / "killed")]
        assert [r.name for r in runs[1]] == ["version_0"]
        lasts = [load_checkpoint_file(r[0] / "checkpoints/last.ckpt")["state_dict"] for r in runs]
        assert all(torch.equal(lasts[0][name], lasts[1][name]) for name in lasts[0])


def test_replica_runs_state_from_a_checkpoint_is_checked_and_never_removes_outside_the_run(tmp_path):
    """The callback's state comes from a checkpoint file: a version that is not a version directory is refused in one
    line, and a previous best file outside the replica's checkpoints/ is left where it is."""
    from checkpoints.errors import CheckpointError

    runs = ReplicaRuns(str(tmp_path / "tb"), ["a"])
    with pytest.raises(CheckpointError, match="altered"):
        runs.load_state_dict({"names": ["a"], "versions": ["../../elsewhere"], "best": [1.0], "best_files": [None]})
    outside = tmp_path / "precious.ckpt"
    outside.write_text("x")
    runs.load_state_dict({"names": ["a"], "versions": ["version_0"], "best": [float("inf")], "best_files": [str(outside)]})

    class Logger:
        log_dir = str(tmp_path / "tb" / "a" / "version_0")

    class Module:
        settings = [model(0)]

        def replica_state_dict(self, r):
            return self.settings[0].state_dict()

    class Trainer:
        current_epoch, global_step = 0, 1
        datamodule = type("D", (), {"replicas": [data(0)]})()

    runs.loggers, runs.validated = [Logger()], [1.0]  # a validation's val/nll: this save writes a best file
    runs.on_save_checkpoint(Trainer(), Module(), {"epoch": 0, "global_step": 1, "loops": {}})
    assert outside.exists() and (tmp_path / "tb/a/version_0/checkpoints/epoch000-step000001.ckpt").exists()


def test_each_replica_data_module_holds_its_own_seed():
    """Each replica's data module says its own seed, where hparams.yaml (`hparams_initial`) and its checkpoint
    (`hparams`) read it, and the module it was copied from keeps its own."""
    replicas = ReplicaData(data(9), [3, 4, 5])
    replicas.setup("fit")
    replicas.train_dataloader()
    assert [(r.seed, r.hparams["seed"], r.hparams_initial["seed"]) for r in replicas.replicas] == [(3, 3, 3), (4, 4, 4), (5, 5, 5)]
    assert replicas.datamodule.hparams["seed"] == 9


def test_a_replica_best_checkpoint_is_named_as_its_single_run_names_it(tmp_path):
    """One epoch of 3 batches and its validation: each replica's best has the name the single run's checkpoint callback
    (configs/callbacks/default.yaml) gives its best after the same steps, and the process's last.ckpt was written
    then (launch/runs/replicas.py's checkpoint callback)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from callbacks.validation_checkpoint import ValidationCheckpoint
    from launch.run_builder import checkpoint_settings

    short = dict(max_steps=-1, max_epochs=1, limit_train_batches=3, precision="32-true")
    single = ModelCheckpoint(**{**checkpoint_settings(), "dirpath": str(tmp_path / "single")})
    trainer(tmp_path, **short, callbacks=[single]).fit(model(0), datamodule=data(0))
    runs = ReplicaRuns(str(tmp_path / "tensorboard"), ["a", "b"])
    process = ValidationCheckpoint(dirpath=str(tmp_path / "process"), save_last=True, save_top_k=0)
    trainer(tmp_path, **short, callbacks=[runs, process]).fit(
        Replicas([model(0), model(1)], [0, 1]), datamodule=ReplicaData(data(0), [0, 1]))
    expected = sorted(p.name for p in (tmp_path / "single").glob("epoch*.ckpt"))
    assert len(expected) == 1 and expected[0].startswith("epoch000-")
    for name in ("a", "b"):
        assert sorted(p.name for p in (tmp_path / "tensorboard" / name / "version_0/checkpoints").glob("epoch*.ckpt")) == expected
    assert load_checkpoint_file(tmp_path / "process/last.ckpt")["epoch"] == 0


def test_a_replicated_run_stopped_before_any_validation_has_no_best_checkpoint_as_its_single_run(tmp_path):
    """The sanity check's validation ranks nothing: a replicated process stopped by max_steps before its first
    validation writes each replica's last.ckpt and no best, as the single run of its seed does."""
    from callbacks.validation_checkpoint import ValidationCheckpoint

    runs = ReplicaRuns(str(tmp_path / "tensorboard"), ["a", "b"])
    process = ValidationCheckpoint(dirpath=str(tmp_path / "process"), save_last=True, save_top_k=0)
    trainer(tmp_path, max_steps=1, num_sanity_val_steps=1, precision="32-true", callbacks=[runs, process]).fit(
        Replicas([model(0), model(1)], [0, 1]), datamodule=ReplicaData(data(0), [0, 1]))
    for name in ("a", "b"):
        assert sorted(p.name for p in (tmp_path / "tensorboard" / name / "version_0/checkpoints").glob("*.ckpt")) == ["last.ckpt"]


def test_the_progress_line_of_replicas_says_its_val_nll_is_over_the_replicas(tmp_path, capsys):
    """The plain progress line after a validation names the replicas' mean, min and max of val/nll, not one bare
    val/nll that reads as a run's."""
    from callbacks.progress import LineProgressBar

    short = dict(max_steps=-1, max_epochs=1, limit_train_batches=2, precision="32-true", enable_progress_bar=True)
    replicas = Replicas([model(0), model(1)], [0, 1])
    trainer(tmp_path, **short, callbacks=[LineProgressBar(refresh_seconds=0)]).fit(replicas, datamodule=ReplicaData(data(0), [0, 1]))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("validation done")]
    nll = sorted(float(m["val/nll"]) for m in replicas.replica_val)
    shown = dict(item.split("=") for item in line.split("  ")[-1].split())
    assert sorted(shown) == ["val/nll_max", "val/nll_mean", "val/nll_min"]
    assert float(shown["val/nll_min"]) == pytest.approx(nll[0], rel=1e-3) and float(shown["val/nll_max"]) == pytest.approx(nll[1], rel=1e-3)


@pytest.mark.slow  # two runs through train.py's Hydra front end
def test_a_replicas_curves_and_test_lie_at_the_steps_of_its_single_runs(tmp_path, monkeypatch, mnist_dir):
    """A replica's run logs train/loss, val/nll and its run_test at the steps the single run of its seed logs them,
    so that the two overlay in TensorBoard and benchmarks.compare pairs a test with its samples."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import launch.hydra_app
    from tests.launch.test_configs import composed

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    tiny = ["model=vae", "model.val_num_samples=2", "model.test_num_samples=2", "trainer.max_epochs=2", "trainer.limit_train_batches=3",
            "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "trainer.log_every_n_steps=1", "run_test=true"]
    launch.hydra_app.run(composed([*tiny, "replicas.seeds=[0,1]", "log_dir=replicated"]))
    launch.hydra_app.run(composed([*tiny, "seed=1", "log_dir=single"]))
    steps = []
    for root in ("replicated/tensorboard/*-seed1/version_0", "single/tensorboard/*/version_0"):
        (run,) = tmp_path.glob(root)
        events = EventAccumulator(str(run))
        events.Reload()
        steps.append({tag: [e.step for e in events.Scalars(tag)] for tag in ("train/loss", "val/nll", "test/nll")})
    assert steps[0] == steps[1] and steps[1]["val/nll"] == [2, 5], steps


@pytest.mark.slow  # two runs through train.py's Hydra front end
def test_a_run_stopped_by_max_steps_inside_an_epoch_leaves_checkpoints_that_resume_that_epoch(tmp_path, monkeypatch, mnist_dir):
    """Where trainer.max_steps ends training inside an epoch, the last.ckpt of a single run, of a replicated process
    and of each of its replicas resumes with the epoch's remaining batches (its loop state: the epoch not processed;
    tests/checkpoints/test_resume.py shows such a resume exact)."""
    import launch.hydra_app
    from tests.launch.test_configs import composed

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA_DIR", str(mnist_dir))
    tiny = ["model=vae", "model.val_num_samples=2", "trainer.max_steps=2", "trainer.limit_train_batches=3",
            "trainer.limit_val_batches=1"]
    launch.hydra_app.run(composed([*tiny, "replicas.seeds=[0,1]", "log_dir=replicated"]))
    launch.hydra_app.run(composed([*tiny, "log_dir=single"]))
    checkpoints = [*tmp_path.glob("*/tensorboard/*/version_0/checkpoints/last.ckpt"), *tmp_path.glob("replicated/replicas/*/*/checkpoints/last.ckpt")]
    assert len(checkpoints) == 4
    for path in checkpoints:
        progress = load_checkpoint_file(path)["loops"]["fit_loop"]
        assert progress["epoch_loop.batch_progress"]["current"]["completed"] == 2, path
        assert progress["epoch_progress"]["current"]["processed"] == progress["epoch_progress"]["current"]["completed"] == 0, path


@pytest.mark.slow  # end to end: a replicated trunk, then its arms branched from it and tested (train.py, twice)
def test_arms_branched_from_a_trunk_keep_their_own_best_and_test_it_with_their_own_seed(tmp_path):
    """`train.py replicas.seeds=[0,1]` for 2 epochs (the trunk, validating every epoch), then
    `replicas.arms=[{},{cache_start_epoch:2}]` from its last.ckpt to epoch 4 with run_test=true: the branch point is the
    trunk's last validation; each arm's run holds checkpoints of its own validations only (epochs 2 and 3), its curve
    starts after the branch point, and its test restored its own best; every replica's hparams.yaml, checkpoints and
    test say its own seed, with no changed setting."""
    import re

    import yaml
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests import preloaded

    settings = ["model=jsa", "model.mis_steps=2", "model.val_num_samples=2", "model.test_num_samples=2", "data.batch_size=32",
                "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
                "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "callbacks.gradient_variance.every_n_steps=0",
                "data.val_size=59000", f"data.data_dir={DATA_DIR}", "replicas.seeds=[0,1]", "log_dir=logs"]

    def train(*args):
        done = preloaded.run_train([*settings, *args], tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    train("trainer.max_epochs=2", "run_test=false")
    (trunk,) = (tmp_path / "logs/replicas").glob("*/*/checkpoints/last.ckpt")
    assert (load_checkpoint_file(trunk)["epoch"], load_checkpoint_file(trunk)["global_step"]) == (1, 4)
    output = train("trainer.max_epochs=4", "run_test=true", "replicas.arms=[{},{cache_start_epoch:2}]", f"ckpt_path={trunk}")
    assert "changed settings" not in output
    runs = sorted((tmp_path / "logs/tensorboard").glob("*-seed*-cache_start_epoch2/version_0")) + \
        sorted((tmp_path / "logs/tensorboard").glob("*-seed[01]/version_1"))  # the no-cache arm: a new run beside the trunk's
    assert len(runs) == 4
    restored = re.findall(r"Restoring states from the checkpoint path at (\S+)", output)
    for run in runs:
        seed = int(re.search(r"-seed(\d)", run.parent.name).group(1))
        files = sorted(p.name for p in (run / "checkpoints").glob("epoch*.ckpt"))
        assert files and all(int(name[5:8]) >= 2 for name in files), (run, files)
        (best,) = files
        assert str(run / "checkpoints" / best) in restored, (run, restored)
        events = EventAccumulator(str(run))
        events.Reload()
        assert [s.step for s in events.Scalars("val/nll")] == [5, 7]  # epochs of 2 steps, as its single run logs them
        assert len(events.Scalars("test/nll")) == 1
        assert yaml.safe_load((run / "hparams.yaml").read_text())["seed"] == seed
        for name in ("last.ckpt", best):
            checkpoint = load_checkpoint_file(run / "checkpoints" / name)
            assert checkpoint["datamodule_hyper_parameters"]["seed"] == checkpoint["hyper_parameters"]["test_seed"] == seed


@pytest.mark.parametrize("saved, seeds, held", [(None, [0, 1], "a single run, this process trains replicas of seeds [0, 1]"),
                                               ([0, 1], None, "replicas of seeds [0, 1], this process trains a single run"),
                                               ([0, 1], [2, 3], "replicas of seeds [0, 1], this process trains replicas of seeds [2, 3]")])
def test_a_checkpoint_of_other_replicas_or_of_a_single_run_is_refused_naming_both(saved, seeds, held):
    """A replicated process resumes from its own last.ckpt, of the same seeds; a single run from a single run's."""
    from types import SimpleNamespace

    from launch.checks.settings import SettingsError
    from launch.runs.replicas import check_replica_checkpoint

    check_replica_checkpoint({"replica_seeds": seeds} if seeds is not None else {}, SimpleNamespace(seeds=seeds), "own.ckpt")
    with pytest.raises(SettingsError, match=re.escape(f"ckpt_path=last.ckpt holds {held}: a replicated process resumes")):
        check_replica_checkpoint({"replica_seeds": saved} if saved is not None else {}, SimpleNamespace(seeds=seeds), "last.ckpt")


def test_a_single_runs_checkpoint_given_to_replicas_is_refused_as_one_before_its_weights_are_compared(tmp_path, monkeypatch, capsys):
    """The refusal says what the checkpoint holds, in the command's spelling, not which stacked weights it lacks."""
    import launch.cli_app

    torch.save({"state_dict": {}, "model_class": "models.vae.VAE", "pytorch-lightning_version": "2.6.6"}, tmp_path / "single.ckpt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["fit", "--model=VAE", "--replicas.seeds=[0,1]", f"--ckpt_path={tmp_path / 'single.ckpt'}"])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], f"error: --ckpt_path={tmp_path / 'single.ckpt'} holds a single run")


def test_a_replicated_processs_checkpoint_given_to_test_points_to_a_replicas_own(tmp_path, monkeypatch, capsys):
    """The process's last.ckpt, which its last line names, is a resume point; a replica is tested from its own run's."""
    import launch.cli_app

    torch.save({"state_dict": {}, "model_class": "models.vae.VAE", "pytorch-lightning_version": "2.6.6",
                "replica_seeds": [0, 1]}, tmp_path / "last.ckpt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        launch.cli_app.main(["test", f"--ckpt_path={tmp_path / 'last.ckpt'}"])
    assert stop.value.code == 2
    says(capsys.readouterr().err.strip().splitlines()[-1], f"--ckpt_path={tmp_path / 'last.ckpt'} holds replicas of seeds [0, 1]",
         "test a replica from its own run's checkpoints", "tensorboard/<name>-seed<S>")


@pytest.mark.slow  # a process of two arms through the CLI, then its resume with another setting
def test_a_process_of_arms_resumed_with_other_settings_keeps_its_own_resume_point(tmp_path, mnist_dir, monkeypatch, caplog):
    """Its runs would be renamed: they continue as new runs in a process of their own, and the checkpoint's process
    keeps its last.ckpt (the only resume point of its runs) as it was."""
    import launch.cli_app

    monkeypatch.chdir(tmp_path)
    tiny = ["--model=JSA", "--replicas.seeds=[0,1]", "--replicas.arms=[{}, {cache_start_epoch: 0}]", "--trainer.limit_val_batches=1",
            "--trainer.num_sanity_val_steps=0", "--model.val_num_samples=2", f"--data.data_dir={mnist_dir}", f"--log_dir={tmp_path / 'logs'}"]
    launch.cli_app.main(["fit", *tiny, "--trainer.max_steps=2"])
    (process,) = (tmp_path / "logs" / "replicas" / "jsa-mnist-mlp-K10-L20").iterdir()
    last = (process / "checkpoints" / "last.ckpt").read_bytes()
    with caplog.at_level(logging.WARNING, logger="launch.runs.replicas"):
        launch.cli_app.main(["fit", *tiny, "--model.mis_steps=5", "--trainer.max_steps=4",
                             f"--ckpt_path={process / 'checkpoints' / 'last.ckpt'}"])
    assert (process / "checkpoints" / "last.ckpt").read_bytes() == last
    assert f"--ckpt_path={process / 'checkpoints' / 'last.ckpt'}: runs jsa-mnist-mlp-K10-L5-seed0" in caplog.text, caplog.text
    assert "outside this run's checkpoint directory" not in caplog.text  # (its callbacks start afresh)
    (resumed,) = (tmp_path / "logs" / "replicas" / "jsa-mnist-mlp-K10-L5").iterdir()
    assert load_checkpoint_file(resumed / "checkpoints" / "last.ckpt")["global_step"] == 4


@pytest.mark.slow  # a replicated fit through the CLI, then a refused resume
def test_a_replicated_resume_that_does_not_fit_is_refused_before_writing_and_one_that_renames_its_runs_says_so(tmp_path, mnist_dir, monkeypatch, capsys, caplog):
    """A resume of a replicated process with a setting that changes a shape is refused naming the runs it would
    continue, before the process's config.yaml is rewritten or a branch point saved (the command it printed to resume
    must keep working); one whose settings rename the runs continues them as new runs, with a line that says so."""
    import launch.cli_app

    monkeypatch.chdir(tmp_path)
    tiny = ["--trainer.max_steps=2", "--trainer.limit_val_batches=1", "--trainer.num_sanity_val_steps=0",
            "--model.val_num_samples=2", f"--data.data_dir={mnist_dir}", f"--log_dir={tmp_path / 'logs'}"]
    launch.cli_app.main(["fit", "--model=JSA", "--replicas.seeds=[0,1]", *tiny])
    (process,) = (tmp_path / "logs" / "replicas" / "jsa-mnist-mlp-K10-L20").iterdir()
    config, files = (process / "config.yaml").read_bytes(), sorted(p.name for p in (process / "checkpoints").iterdir())
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        launch.cli_app.main(["fit", f"--config={process / 'config.yaml'}", f"--ckpt_path={process / 'checkpoints' / 'last.ckpt'}",
                             "--model.num_categories=12"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "does not fit this model" in err, err
    assert "(the first replica's run='jsa-mnist-mlp-K10-L20-seed0' -> 'jsa-mnist-mlp-K12-L20-seed0')" in err, err
    assert (process / "config.yaml").read_bytes() == config
    assert sorted(p.name for p in (process / "checkpoints").iterdir()) == files
    assert [p.name for p in (tmp_path / "logs" / "replicas").iterdir()] == ["jsa-mnist-mlp-K10-L20"]  # no branch's process
    # a setting that renames the runs and fits: they continue as new runs, and a line says so
    with caplog.at_level(logging.WARNING, logger="launch.runs.replicas"):
        launch.cli_app.main(["fit", f"--config={process / 'config.yaml'}", f"--ckpt_path={process / 'checkpoints' / 'last.ckpt'}",
                             "--model.mis_steps=5", "--trainer.max_steps=3"])
    assert (f"--ckpt_path={process / 'checkpoints' / 'last.ckpt'}: runs jsa-mnist-mlp-K10-L5-seed0, jsa-mnist-mlp-K10-L5-seed1 continue from its replicas "
            "jsa-mnist-mlp-K10-L20-seed0, jsa-mnist-mlp-K10-L20-seed1 as new runs") in caplog.text, caplog.text
