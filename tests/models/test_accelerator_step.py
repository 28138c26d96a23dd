"""A training step fit for an accelerator (docs/mis.md#static-shapes-and-no-host-syncs): no host read-back or
data-dependent shape, for every model, prior and `gradient_states`, and `training_loss` captured by
torch.compile(fullgraph=True) as one graph that computes what the eager step computes.

Tiny models (8x8 images, V = K = 3, batch 4, L = 3). The quick loop captures one case per family with a backend that
runs the graph as captured; the slow cases send every family's step through AOTAutograd, and compile JSA's step
(scalar kernels) and the VAE's (vector instructions) with inductor, random ops drawn as eager draws them
(`fallback_random`), so that from one seed the compiled and the eager step agree.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import os
import re
import time
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from common.host_sync import HostSyncCounter
from models import JSA, RWS, VAE, VIMCO, VQVAE, DiscreteVAE
from samplers.mis import categorical_draw, sample_categorical
from tests.conftest import says

SMALL = dict(data_shape=(1, 8, 8), likelihood="bernoulli", hidden_channels=8)


def categorical(cls: type, backbone: str = "mlp", **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    flat = dict(num_latents=3) if backbone == "mlp" else {}  # conv: the 2x2 grid of an 8x8 image
    if kwargs.get("prior") in ("autoregressive", "pixelcnn"):
        kwargs = dict(prior_hidden=8, prior_layers=2, **kwargs)
    return cls(backbone=backbone, num_categories=3, code_dim=2, **flat, **SMALL, **kwargs)


def jsa(prior: str = "uniform", gradient_states: str = "chain", read_cache: bool = True, **kwargs) -> JSA:
    rows = {"chain_rows": "static"} if gradient_states == "chain" else {}  # (the other states score their own rows)
    return categorical(JSA, mis_steps=3, prior=prior, gradient_states=gradient_states, cache_size=4,
                       cache_start_epoch=0 if read_cache else None, **rows, **kwargs)


def images() -> torch.Tensor:
    return torch.bernoulli(torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0)))


STEPS: dict[str, Callable[[], torch.nn.Module]] = {
    **{f"jsa-{prior}-{states}-{'read' if read else 'noread'}": (lambda p=prior, s=states, r=read: jsa(p, s, r))
       for prior in ("uniform", "factorized", "autoregressive") for states in ("chain", "expected", "final")
       for read in (True, False)},
    "jsa-conv-pixelcnn": lambda: jsa("pixelcnn", backbone="conv"),
    **{f"jsa-rows2-{states}": (lambda s=states: categorical(JSA, mis_steps=3, prior="autoregressive", gradient_states=s,
                                                            gradient_rows=2, cache_size=4, cache_start_epoch=0))
       for states in ("chain", "expected")},
    **{f"rws-{prior}": (lambda p=prior: categorical(RWS, num_samples=3, prior=p)) for prior in ("uniform", "autoregressive")},
    "rws-S1-sleep-autoregressive": lambda: categorical(RWS, num_samples=1, sleep_phase=True, prior="autoregressive"),
    **{f"vimco-{prior}": (lambda p=prior: categorical(VIMCO, num_samples=3, prior=p)) for prior in ("factorized", "autoregressive")},
    "vimco-conv-pixelcnn": lambda: categorical(VIMCO, "conv", num_samples=3, prior="pixelcnn"),
    **{f"dvae-{cv}": (lambda c=cv: categorical(DiscreteVAE, num_samples=3, control_variate=c, prior="autoregressive"))
       for cv in ("optimal", "running_mean", "none")},
    "dvae-S1": lambda: categorical(DiscreteVAE, num_samples=1, control_variate="none"),
    "gumbel-factorized": lambda: categorical(DiscreteVAE, estimator="gumbel", prior="factorized"),
    "gumbel-straight-through": lambda: categorical(DiscreteVAE, estimator="gumbel", straight_through=True),
    "vae-mlp": lambda: VAE(latent_dim=2, **SMALL),
    "vae-conv": lambda: VAE(backbone="conv", latent_dim=2, **SMALL),
    "vqvae": lambda: categorical(VQVAE, "conv"),
    "vqvae-ema": lambda: categorical(VQVAE, "conv", ema=True),
    "vqvae-pixelcnn": lambda: categorical(VQVAE, "conv", prior="pixelcnn"),
}


# ---- no host read, no data-dependent shape ---------------------------------------------------------------------

# The quick loop: every gradient_states, every prior and every model family at least once; the rest are slow.
QUICK_STEPS = {"jsa-autoregressive-chain-read", "jsa-rows2-chain", "jsa-autoregressive-expected-noread", "jsa-factorized-final-read",
               "jsa-uniform-chain-noread", "jsa-conv-pixelcnn", "rws-S1-sleep-autoregressive", "vimco-autoregressive",
               "dvae-running_mean", "dvae-S1", "gumbel-straight-through", "vae-mlp", "vqvae-ema"}


@pytest.mark.parametrize("name", [name if name in QUICK_STEPS else pytest.param(name, marks=pytest.mark.slow) for name in STEPS])
def test_a_training_step_reads_nothing_back_and_has_static_shapes(name):
    """Loss and backward, the second step (the cache is filled, so a JSA chain starts from it), under the counter."""
    model = STEPS[name]()
    x, index = images(), torch.arange(4)
    model.training_loss(x, index)
    with HostSyncCounter() as counter:
        model.training_loss(x, index)["loss"].backward()
    assert counter.found == []


def test_distinct_chain_rows_are_found_by_the_counter():
    """chain_rows=distinct (the CPU's choice) selects its rows with nonzero: the counter sees it."""
    model = categorical(JSA, mis_steps=3, chain_rows="distinct")
    with HostSyncCounter() as counter:
        model.training_loss(images(), torch.arange(4))["loss"].backward()
    assert ("aten.nonzero.default", "output shape depends on the data") in counter.found


@pytest.mark.parametrize("op", ["item", "bool", "nonzero", "mask", "mask_put", "unique", "tolist", "one_hot", "multinomial_1",
                                "bincount", "repeat_interleave"])
def test_the_counter_finds_each_kind_of_host_read_and_data_dependent_shape(op):
    x = torch.tensor([0, 2, 1, 2])
    run = {
        "item": lambda: x.sum().item(), "bool": lambda: bool(x.any()), "nonzero": lambda: x.nonzero(),
        "mask": lambda: x[x > 0], "mask_put": lambda: x.clone().__setitem__(x > 0, 0), "unique": lambda: x.unique(),
        "tolist": lambda: x.tolist(), "one_hot": lambda: F.one_hot(x, 3), "multinomial_1": lambda: torch.multinomial(x.float(), 1),
        "bincount": lambda: x.bincount(), "repeat_interleave": lambda: torch.repeat_interleave(x),
    }[op]
    with HostSyncCounter() as counter:
        run()
    assert counter.found, op
    with HostSyncCounter() as counter:  # static and on the device: nothing to find
        torch.zeros(3).index_add_(0, x.clamp(max=2), torch.ones(4)).softmax(0).argmax()
    assert counter.found == []


def test_one_categorical_draw_is_multinomials_draw_without_its_host_check():
    """The same draws from the same random numbers: runs seeded before the change sample what they sampled."""
    probs = torch.rand(500, 7).softmax(-1)
    torch.manual_seed(3)
    reference = torch.multinomial(probs, 1)[:, 0]
    torch.manual_seed(3)
    assert torch.equal(categorical_draw(probs), reference)
    torch.manual_seed(3)
    assert torch.equal(sample_categorical(probs.log().view(100, 5, 7), 1).flatten(), reference)


# ---- the whole training_loss compiled as one graph -----------------------------------------------------------

@contextlib.contextmanager
def trainer_counters(cls: type, epoch: int, step: int):
    """`current_epoch` and `global_step` as a Trainer at that epoch and step would give them (a class attribute for
    the while: Dynamo reads a property of the class)."""
    own = {name: cls.__dict__.get(name) for name in ("current_epoch", "global_step")}
    cls.current_epoch, cls.global_step = property(lambda self: epoch), property(lambda self: step)
    try:
        yield
    finally:
        for name, value in own.items():
            delattr(cls, name) if value is None else setattr(cls, name, value)


def counting_backend(backend: str, graphs: list, runs: list | None = None) -> Callable:
    """`backend`, recording each graph it is handed (a recompile shows as a second graph) and each run of one."""
    def counting(graph_module, example_inputs):
        graphs.append(graph_module)
        compiled = torch._dynamo.lookup_backend(backend)(graph_module, example_inputs)
        return compiled if runs is None else lambda *args: (runs.append(len(graphs)), compiled(*args))[1]
    return counting


def compiled_against_eager(make: Callable[[], torch.nn.Module], backend: str, steps: int = 2, atol: float = 1e-5,
                           epochs: Callable[[int], int] = lambda step: 0) -> int:
    """Train copies of one model, eager and compiled (its own `compiled_training_loss`, fullgraph), on the same seeds:
    loss, gradients and buffers (the JSA cache and its epochs, running means) must agree after every step, each
    step in epoch `epochs(step)`. Returns how many graphs were compiled."""
    eager = make()
    compiled_model = copy.deepcopy(eager)
    graphs: list = []
    torch._dynamo.reset()
    compiled_model._compiled_training_loss = compiled_model.compile_training_loss(backend=counting_backend(backend, graphs))
    x, index = images(), torch.arange(4)
    for step in range(steps):
        results = []
        for model, loss_fn in ((eager, eager.training_loss), (compiled_model, compiled_model.compiled_training_loss)):
            torch.manual_seed(100 + step)
            with trainer_counters(type(model), epochs(step), step):
                terms = loss_fn(x if step % 2 == 0 else 1 - x, index)
            model.zero_grad()
            terms["loss"].backward()
            results.append((terms, {n: p.grad for n, p in model.named_parameters() if p.grad is not None},
                            {n: b for n, b in model.named_buffers() if not n.startswith("compiled_")}))
        (terms, grads, buffers), (terms_c, grads_c, buffers_c) = results
        assert terms.keys() == terms_c.keys() and grads.keys() == grads_c.keys() and grads
        for name in terms:
            torch.testing.assert_close(terms_c[name], terms[name], rtol=1e-5, atol=atol, msg=name)
        for name in grads:
            torch.testing.assert_close(grads_c[name], grads[name], rtol=1e-5, atol=atol, msg=name)
        for name in buffers:
            torch.testing.assert_close(buffers_c[name], buffers[name], rtol=1e-5, atol=atol, msg=name)
    torch._dynamo.reset()
    return len(graphs)


QUICK_COMPILE = {  # one per model family, captured whole by Dynamo (JSA's: the epoch test below, and the slow ones)
    "rws": lambda: categorical(RWS, num_samples=3),
    "vimco": lambda: categorical(VIMCO, num_samples=3),
    "dvae-reinforce": lambda: categorical(DiscreteVAE, num_samples=3),
    "dvae-gumbel": lambda: categorical(DiscreteVAE, estimator="gumbel", anneal_rate=0.1),  # a new temperature each step
    "vae": lambda: VAE(latent_dim=2, **SMALL),
}


@pytest.mark.parametrize("name", QUICK_COMPILE)
def test_training_loss_is_captured_as_one_graph(name):
    """fullgraph=True: a graph break, an .item() or a data-dependent shape would raise. Two steps, on other images,
    and one graph: nothing in the step is specialized on the data."""
    assert compiled_against_eager(QUICK_COMPILE[name], "eager") == 1


def test_a_compiled_jsa_step_takes_the_epoch_as_an_input():
    """Four epochs, the cache read from the third: two graphs (without the read, with it), not one per epoch, and the
    cache's epochs (its ages) as the eager step writes them."""
    make = lambda: categorical(JSA, mis_steps=3, chain_rows="static", cache_size=4, cache_start_epoch=2)  # noqa: E731
    assert compiled_against_eager(make, "eager", steps=4, epochs=lambda step: step) == 2


@pytest.mark.slow  # the quick loop's dvae-gumbel case above anneals too, over two steps
def test_a_compiled_gumbel_step_takes_the_temperature_as_an_input():
    """The temperature anneals every step: one graph for all steps, each at the eager step's temperature."""
    make = lambda: categorical(DiscreteVAE, estimator="gumbel", anneal_rate=0.1)  # noqa: E731
    assert compiled_against_eager(make, "eager", steps=3) == 1


# JSA's gradient states and its cache read are separate parts of the step (the weights of the candidates; the chain's
# start): each gradient state is compiled once, and the step with the read and without it, not every pair of them.
SLOW_COMPILE = {
    **{f"jsa-{states}-{'read' if read else 'noread'}": (lambda s=states, r=read: jsa("autoregressive", s, r))
       for states, read in (("chain", True), ("expected", True), ("final", False))},
    "jsa-rows2-chain": STEPS["jsa-rows2-chain"],
    "rws-sleep": lambda: categorical(RWS, num_samples=3, sleep_phase=True),
    "vimco": lambda: categorical(VIMCO, num_samples=3, prior="factorized"),
    "dvae-reinforce": lambda: categorical(DiscreteVAE, num_samples=3),
    "dvae-running-mean": lambda: categorical(DiscreteVAE, num_samples=3, control_variate="running_mean"),
    "dvae-gumbel": lambda: categorical(DiscreteVAE, estimator="gumbel", prior="factorized"),
    "vae": lambda: VAE(latent_dim=2, **SMALL),
}


# Inductor's kernels for JSA's step (scalar C++) and the VAE's (the CPU's vector instructions, the last test of this
# section); every other case through aot_eager: Dynamo's graph and the forward and backward graphs AOTAutograd derives
# from it (buffer writes included), run by eager kernels. What sets the cases apart (a family's loss, JSA's gradient
# states and rows) is in those graphs; what inductor adds (its lowering, fusion and kernels, the buffer writes and the
# random draws it keeps as eager's) it adds to JSA's step as to the others'.
WITH_INDUCTOR = "jsa-chain-read"
WITH_VECTOR_KERNELS = "vae"
THROUGH_AOT_EAGER = set(SLOW_COMPILE) - {WITH_INDUCTOR, WITH_VECTOR_KERNELS}


@pytest.mark.slow  # inductor compiles the forward and the backward
@pytest.mark.parametrize("name", [WITH_INDUCTOR])
def test_training_loss_compiled_with_inductor_equals_eager(name):
    with torch._inductor.config.patch(fallback_random=True):  # the compiled code's random draws are eager's
        assert compiled_against_eager(SLOW_COMPILE[name], "inductor") == 1


@pytest.mark.slow  # AOTAutograd traces each forward and backward
@pytest.mark.parametrize("name", sorted(THROUGH_AOT_EAGER))
def test_training_loss_compiled_through_aot_autograd_equals_eager(name):
    assert compiled_against_eager(SLOW_COMPILE[name], "aot_eager") == 1


@pytest.mark.slow  # inductor, and its vector headers compiled once for this process
def test_a_step_compiled_with_the_cpus_vector_instructions_equals_eager():
    """The suite compiles scalar C++ kernels (tests/conftest.py: TORCHINDUCTOR_VEC_ISA_OK=0); here the CPU's own vector
    instructions, as inductor picks them outside the suite, for one step with a random draw (the VAE's)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa, valid_vec_isa_list
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    if os.environ.get("TORCHINDUCTOR_VEC_ISA_OK") == "0":
        assert not pick_vec_isa()  # the suite's setting (tests/conftest.py): scalar kernels
    try:
        with torch._inductor.config.patch({"fallback_random": True, "cpp.vec_isa_ok": None}):  # None: probe the CPU
            valid_vec_isa_list.cache_clear()  # the CPU's instruction sets, found again under this setting
            assert pick_vec_isa(), "this CPU has no vector instructions inductor uses"
            began = time.time()
            assert compiled_against_eager(SLOW_COMPILE[WITH_VECTOR_KERNELS], "inductor") == 1
        kernels = [path.read_text() for path in Path(cache_dir()).rglob("*.cpp") if path.stat().st_mtime >= began]
        assert kernels and any("at::vec::Vectorized" in kernel for kernel in kernels)
    finally:
        valid_vec_isa_list.cache_clear()  # and under the suite's again, for the tests after this one


# ---- model.compile=step: the Trainer's training step compiled whole ------------------------------------------

def test_model_compile_step_trains_through_the_compiled_step(monkeypatch):
    """Three epochs of a Trainer, the cache read from the second: every training step ran the compiled graph (two
    graphs, before and after the read begins; Dynamo's backend that runs them as they are, to keep the test quick)."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from models.base import LatentVariableModel

    graphs, runs = [], []
    compile_training_loss = LatentVariableModel.compile_training_loss
    monkeypatch.setattr(LatentVariableModel, "compile_training_loss",
                        lambda self, **options: compile_training_loss(self, backend=counting_backend("eager", graphs, runs)))
    torch._dynamo.reset()
    model = categorical(JSA, mis_steps=3, chain_rows="static", cache_size=8, cache_start_epoch=1, compile="step")
    x = torch.cat([images(), 1 - images()])
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, log_every_n_steps=1)
    trainer.fit(model, DataLoader(TensorDataset(x, torch.arange(8)), batch_size=4))
    assert len(graphs) == 2 and runs == [1, 1, 2, 2, 2, 2]  # 3 epochs of 2 steps, each run compiled
    assert model.cache.fill_rate() == 1 and trainer.callback_metrics["train/cache_hit_rate"] == 1
    torch._dynamo.reset()


def test_model_compile_takes_networks_or_step():
    assert categorical(RWS, compile=True).compile_networks and not categorical(RWS, compile=True).compile_step
    assert categorical(RWS, compile="step").compile_step and not categorical(RWS, compile="step").compile_networks
    with pytest.raises(ValueError) as refused:
        categorical(RWS, compile="all")
    says(refused.value, "compile", "'all'", "false", "true", "'networks'", "'step'")


def test_a_new_batch_shape_gets_a_static_graph_of_its_own():
    """An epoch's short last batch: a second graph, with static shapes (dynamic=False: CUDA graphs need them, and
    inductor failed on the conv backbone's symbolic batch size), not one graph over a symbolic batch size."""
    model = categorical(RWS, num_samples=3)
    graphs: list = []
    torch._dynamo.reset()
    model._compiled_training_loss = model.compile_training_loss(backend=counting_backend("eager", graphs))
    for batch in (4, 3, 4):
        model.compiled_training_loss(images()[:batch], torch.arange(batch))["loss"].backward()
    shapes = [[tuple(node.meta["example_value"].shape) for node in graph.graph.nodes
               if node.op == "placeholder" and isinstance(node.meta.get("example_value"), torch.Tensor)] for graph in graphs]
    assert len(graphs) == 2 and all(isinstance(size, int) for graph in shapes for shape in graph for size in shape), shapes
    torch._dynamo.reset()


@pytest.mark.slow  # RWS's and the VAE's steps compiled
def test_the_estimator_table_names_a_compilation_that_fails_and_goes_on(monkeypatch, capsys):
    """benchmarks/speed/gpu_scaling.py --estimators: a model whose compiled step raises (another torch's compiler) gets
    one line naming it, and the others are still measured compiled (through aot_eager: the table's handling is tested
    here, inductor's kernels above)."""
    from benchmarks.speed import gpu_scaling
    from models.base import LatentVariableModel

    compile_training_loss = LatentVariableModel.compile_training_loss
    monkeypatch.setattr(LatentVariableModel, "compile_training_loss",
                        lambda self, **options: compile_training_loss(self, backend="aot_eager"))
    def fails(self, x, index):
        raise RuntimeError("planted compile failure\nsecond line")

    monkeypatch.setattr(JSA, "compiled_training_loss", fails)
    gpu_scaling.main(["--estimators", "--quick", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "compile failed: jsa-chain (RuntimeError: planted compile failure)" in out
    rws = next(line for line in out.splitlines() if line.split()[:2] == ["mlp", "rws"])
    assert len(rws.split()) > 4  # eager and compiled columns filled


def test_each_test_process_has_its_own_compile_cache():
    """tests/conftest.py: torch.compile's kernel cache is this process's own, not the shared default two xdist workers
    would both write (a kernel read half-written: 'file too short')."""
    import os

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert cache_dir().endswith(f"torchinductor-{os.getpid()}")


# ---- the compile and replica machinery stays out of the models' steps --------------------------------------------

MACHINERY = re.compile(r"compil|replica|batched|cudagraph|held_step|set_gates")


@pytest.mark.parametrize("name", ["jsa", "rws", "vimco", "vqvae", "dvae"])
def test_a_models_step_reads_no_name_of_the_compile_or_replica_machinery(name):
    """What changes as training goes on reaches a step through `step_input` alone (models/compiled_step.py holds it for a
    compiled step, models/replicas.py for the batched one): no name the module reads belongs to that machinery (class
    declarations such as `replica_settings` are assignments, not reads)."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "models" / f"{name}.py").read_text())
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    read |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not {n for n in read if MACHINERY.search(n)}, name


def test_jsas_step_reads_as_the_algorithm():
    """One encoder pass, the index-cached MIS call on its detached log-probabilities, the two losses, in that order."""
    source = inspect.getsource(JSA.jsa_step)
    lines = ["log_q = self.posterior(x)", "sample = index_cached_mis(log_q.detach(), lambda latent: self.log_joint(x, latent), "
             "self.mis_steps, start, has_start)", "loss_p, loss_q = self.jsa_loss(x, log_q, sample, has_start)"]
    positions = [source.find(line) for line in lines]
    assert -1 not in positions and positions == sorted(positions), positions
