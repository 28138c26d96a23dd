"""The code priors (models/components/priors.py) against exact answers on spaces small enough to enumerate:
normalized, causal, `sample` distributed as `log_prob` says, the batched candidate path equal to the
per-set path; the registry `PRIORS` as the one list every model and both front ends take their choices from;
checkpoints of the earlier layouts of the prior."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
from scipy.stats import chisquare

from models.components import priors
from models.components.priors import AutoregressivePrior, FactorizedPrior, PixelCNNPrior, UniformPrior, build_prior
from tests.conftest import says


def randomized(prior: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """The prior in float64 with its zero-initialized output layer (the learned priors start uniform, which would
    pass the tests below trivially) drawn at random; the other layers keep their random initialization (weights of
    N(0, 1) everywhere would saturate every gate of a deep PixelCNN)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in prior.parameters():
            if not parameter.any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return prior.double()


# (name, prior): tiny configurations with K^V code sets to enumerate.
PRIORS = {
    "uniform": lambda: UniformPrior(3, 3),
    "factorized": lambda: FactorizedPrior(3, 3),
    "autoregressive": lambda: AutoregressivePrior(3, 3, hidden=16, num_layers=2),
    "autoregressive_1layer": lambda: AutoregressivePrior(4, 2, hidden=5, num_layers=1),
    "pixelcnn": lambda: PixelCNNPrior((2, 3), 2, hidden=8, num_layers=2),
}


def all_code_sets(prior) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(prior.num_categories), repeat=prior.num_latents)))


@pytest.mark.parametrize("name", PRIORS)
def test_normalized(name):
    """sum over all K^V code sets of p(h) is 1 to float64 precision."""
    prior = randomized(PRIORS[name]())
    total = prior.log_prob(all_code_sets(prior)).logsumexp(0)
    assert abs(total.item()) < 1e-10


@pytest.mark.parametrize("name", PRIORS)
def test_causal(name):
    """Changing the code at position j never changes the conditionals at positions <= j."""
    torch.manual_seed(0)  # the hidden layers' initialization: a tiny MADE's could leave a later position blind by chance
    prior = randomized(PRIORS[name]())
    codes = all_code_sets(prior)
    logits = prior.conditional_logits(codes)
    for j in range(prior.num_latents):
        changed = codes.clone()
        changed[:, j] = (changed[:, j] + 1) % prior.num_categories
        after = prior.conditional_logits(changed)
        assert torch.equal(after[:, : j + 1], logits[:, : j + 1]), f"position {j} leaks into the conditionals up to it"
        if not prior.is_factorized and j < prior.num_latents - 1:  # and the later ones do read it
            assert not torch.allclose(after[:, j + 1 :], logits[:, j + 1 :])


@pytest.mark.parametrize("prior", [AutoregressivePrior(20, 3), PixelCNNPrior((7, 7), 3), PixelCNNPrior((8, 8), 3)],
                         ids=["made-20", "pixelcnn-7x7", "pixelcnn-8x8"])
def test_every_position_reads_every_earlier_one_and_no_other(prior):
    """At the default sizes: the conditional at position i depends on the code at j exactly when j < i (raster
    order), so there is neither a leak nor a blind spot nor a reach too short for the grid."""
    prior = randomized(prior)
    codes = torch.randint(3, (1, prior.num_latents), generator=torch.Generator().manual_seed(0))
    base = prior.conditional_logits(codes)[0]
    changed = torch.cat([codes.clone() for _ in range(prior.num_latents)])
    positions = torch.arange(prior.num_latents)
    changed[positions, positions] = (changed[positions, positions] + 1) % 3
    depends = (prior.conditional_logits(changed) - base).abs().amax(-1) > 1e-12  # [j, i]: changing j moves i
    assert torch.equal(depends, positions.unsqueeze(1) < positions.unsqueeze(0))


@pytest.mark.parametrize("name", PRIORS)
def test_sample_agrees_with_log_prob(name):
    """A chi-squared test of 20000 draws against exp(log_prob) over all code sets; drawn in float32, as a model
    draws them (the same weights, rounded)."""
    prior = randomized(PRIORS[name](), seed=1)
    torch.manual_seed(0)
    draws = copy.deepcopy(prior).float().sample(20000)
    sets = all_code_sets(prior)
    index = (draws.unsqueeze(1) == sets.unsqueeze(0)).all(-1).float().argmax(1)
    observed = torch.bincount(index, minlength=len(sets)).double()
    expected = prior.log_prob(sets).exp() * len(draws)
    assert chisquare(observed.numpy(), expected.detach().numpy()).pvalue > 1e-3


@pytest.mark.parametrize("name", PRIORS)
def test_batched_candidates_equal_per_set(name):
    """log_prob over (B, N, V) candidates in one pass equals log_prob of each set alone."""
    prior = randomized(PRIORS[name]())
    candidates = torch.randint(prior.num_categories, (4, 5, prior.num_latents))
    batched = prior.log_prob(candidates)
    one_by_one = torch.stack([torch.stack([prior.log_prob(c[None])[0] for c in row]) for row in candidates])
    assert batched.shape == (4, 5)
    torch.testing.assert_close(batched, one_by_one)


@pytest.mark.parametrize("name", ["autoregressive", "pixelcnn"])
def test_learned_priors_start_uniform(name):
    prior = build_prior(name, 6, 3, grid=(2, 3))
    codes = torch.randint(3, (10, 6))
    torch.testing.assert_close(prior.log_prob(codes), torch.full((10,), -6 * torch.log(torch.tensor(3.0)).item()))


def test_uniform_is_frozen_and_names_are_checked():
    uniform = build_prior("uniform", 4, 5)
    assert type(uniform) is UniformPrior and not list(uniform.parameters()) and not uniform.state_dict()
    with pytest.raises(ValueError) as refused:
        build_prior("made", 4, 5)
    says(refused.value, "model.prior", "'made'", "uniform", "factorized", "autoregressive", "pixelcnn")
    with pytest.raises(ValueError, match="needs a grid of codes .*prior=autoregressive"):
        build_prior("pixelcnn", 4, 5)
    with pytest.raises(ValueError) as refused:
        build_prior("factorized", 4, 5, hidden=32)
    says(refused.value, "model.prior_hidden", "model.prior_layers", "autoregressive", "pixelcnn")
    with pytest.raises(ValueError, match=r"needs prior_hidden >= V - 1 = 11"):
        build_prior("autoregressive", 12, 5, hidden=5)


# ---- the priors inside the models -------------------------------------------------------------

from common.registry import registered  # noqa: E402
from models import JSA, RWS, VIMCO, VQVAE, DiscreteVAE  # noqa: E402
from models.categorical import CategoricalLatentModel  # noqa: E402


def tiny_model(cls, prior: str, **kwargs):
    """V = 3 positions, K = 2 classes (8 code sets), a 2x2 image, a random learned prior."""
    torch.manual_seed(0)
    model = cls(data_shape=(1, 2, 2), num_latents=3, num_categories=2, code_dim=2, likelihood="bernoulli",
                prior=prior, prior_hidden=8, **kwargs).double()
    with torch.no_grad():
        for parameter in model.prior.parameters():
            if parameter.requires_grad:
                parameter.copy_(torch.randn_like(parameter))
    return model


@pytest.mark.parametrize("cls", [cls for cls in registered("model") if issubclass(cls, CategoricalLatentModel)], ids=lambda cls: cls.__name__)
def test_models_score_with_the_exact_prior_and_train_it(cls):
    """log p(x, h) = log p(x | h) + log p(h) with the prior's exact log p(h); the IS-NLL converges to the exact
    -log p(x) = -logsumexp_h log p(x, h) over all 8 code sets; the training loss trains the prior."""
    model = tiny_model(cls, "autoregressive")
    x = torch.tensor([[[[0.0, 1.0], [1.0, 1.0]]], [[[1.0, 0.0], [0.0, 0.0]]]], dtype=torch.float64)
    sets = torch.tensor(list(itertools.product(range(2), repeat=3)))
    with torch.no_grad():
        log_joint = model.log_joint(x, sets.expand(2, -1, -1))
        log_px_given_h = model.likelihood.log_prob(x.unsqueeze(1), model.decoder_output(sets).unsqueeze(0).expand(2, -1, -1, -1, -1))
    torch.testing.assert_close(log_joint, log_px_given_h + model.prior.log_prob(sets).detach())
    exact_nll = -log_joint.logsumexp(1)
    torch.manual_seed(2)
    # 8,000 samples: within 0.07 of the exact value over 20 seeds, where a wrong p(h) is off by ~1 nat
    torch.testing.assert_close(model.nll(x, 8_000), exact_nll, atol=0.1, rtol=0)

    loss = model.training_loss(x, torch.arange(2))["loss"]
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.prior.parameters())
    assert sum(p.grad.abs().sum() for p in model.prior.parameters()) > 0


def test_gumbel_refuses_an_autoregressive_prior():
    with pytest.raises(ValueError) as refused:
        DiscreteVAE(estimator="gumbel", prior="autoregressive")
    says(refused.value, "estimator=gumbel", "factorized prior")
    DiscreteVAE(estimator="gumbel", prior="factorized")  # closed form exists


def test_samples_come_from_the_prior():
    """sample_prior decodes codes drawn by the prior: a prior that puts all mass on one code set gives one image."""
    model = JSA(num_latents=4, num_categories=3, prior="autoregressive", prior_hidden=16)
    with torch.no_grad():
        model.prior.output.bias.copy_(torch.tensor([0.0, 0.0, 50.0]).repeat(4))  # h_v = 2 everywhere
    images = model.sample_prior(5)
    torch.testing.assert_close(images, model.decoder_output(torch.full((5, 4), 2)))


def test_the_uniform_prior_is_one_class_that_stores_nothing():
    for model in (JSA(num_latents=4, num_categories=3), VQVAE(backbone="mlp", num_latents=4, num_categories=3)):
        assert type(model.prior) is UniformPrior
        assert not [name for name in model.state_dict() if name.startswith("prior")]
        assert not [name for name, _ in model.named_parameters() if name.startswith("prior")]


def test_logits_that_are_not_uniform_are_refused_by_a_uniform_prior():
    learned = JSA(num_latents=4, num_categories=3, prior="factorized")
    with torch.no_grad():
        learned.prior.logits.normal_()
    with pytest.raises(Exception, match='Unexpected key.*"prior.logits"'):  # another prior's: not dropped as uniform
        JSA(num_latents=4, num_categories=3).load_state_dict(learned.state_dict())


# ---- the registry: a prior is its class and one line in PRIORS ---------------------------------

class ToyPrior(priors.CodePrior):
    """A fixed prior that is not uniform: p(h_v = k) ∝ k + 1 at every position. Factorized, so that the
    Gumbel-softmax estimator takes it too."""

    is_factorized = True

    def __init__(self, num_latents: int, num_categories: int) -> None:
        super().__init__(num_latents, num_categories)
        logits = torch.arange(1, num_categories + 1).log().expand(num_latents, -1).clone()
        self.register_buffer("logits", logits, persistent=False)

    def log_probs(self) -> torch.Tensor:
        return self.logits.log_softmax(-1)

    def conditional_logits(self, codes: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(codes.shape[0], -1, -1)


DISCRETE = [cls for cls in registered("model") if cls.has_discrete_latent]


@pytest.fixture
def toy(monkeypatch):
    """`toy` registered the way CONTRIBUTING.md says: one line in the registry (undone after the test)."""
    monkeypatch.setitem(priors.PRIORS, "toy", ToyPrior)


def test_every_discrete_latent_model_takes_a_registered_prior(toy):
    assert {DiscreteVAE, JSA, RWS, VIMCO, VQVAE} <= set(DISCRETE)
    for cls in DISCRETE:
        model = cls(prior="toy")
        assert type(model.prior) is ToyPrior and model.prior_name == "toy" and model.run_tag.endswith("-toy")
        codes = torch.tensor([[0] * model.num_latents, [model.num_categories - 1] * model.num_latents])
        expected = model.num_latents * (torch.tensor([1.0, model.num_categories]).log()
                                        - math.log(model.num_categories * (model.num_categories + 1) / 2))
        torch.testing.assert_close(model.prior.log_prob(codes), expected)
        assert model.sample_prior(2).shape == (2, *model.data_shape)
    DiscreteVAE(estimator="gumbel", prior="toy")  # factorized: its KL has a closed form


def test_lightning_cli_takes_a_registered_prior(toy, tmp_path, monkeypatch):
    """jsonargparse checks --model.prior against the constructor's type hint, read when the parser is built."""
    from lightning.pytorch.cli import LightningCLI

    monkeypatch.setattr("sys.argv", ["train.py"])  # the arguments are given below, not pytest's
    for cls in DISCRETE:
        cli = LightningCLI(cls, run=False, save_config_callback=None,
                           args=["--model.prior=toy", "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"])
        assert type(cli.model.prior) is ToyPrior, cls.__name__


def test_hydra_takes_a_registered_prior(toy):
    """model.prior=toy composes, passes the Hydra front end's settings check (the constructor's type hints) and builds,
    in every model config of a discrete latent."""
    from hydra.utils import get_class, instantiate
    from omegaconf import OmegaConf

    from launch.checks.configs import config_targets
    from launch.checks.settings import check_settings
    from tests.launch.test_configs import STANDALONE, composed

    built = set()
    for name in STANDALONE:
        cls = get_class(config_targets("model")[name])
        if not cls.has_discrete_latent:
            continue
        cfg = composed([f"model={name}", "model.prior=toy"])
        check_settings(cls, OmegaConf.to_container(cfg.model, resolve=True), "model")
        model = instantiate(cfg.model, _convert_="all")
        assert type(model.prior) is ToyPrior, name
        built.add(cls)
    assert built == set(DISCRETE)


def test_the_precheck_takes_a_registered_prior_and_the_registry_refuses_another(toy):
    """A prior registered by one's own code (a script that registers one, then calls train.main()) passes the checks
    before the imports in both front ends; a name nobody registered is refused by the registry, naming the choices."""
    from launch.checks.early import refuse_early

    assert refuse_early(["model=jsa", "model.prior=toy"], cli=False) is None
    assert refuse_early(["fit", "--model=VQVAE", "--model.prior=toy"], cli=True) is None
    with pytest.raises(ValueError, match="model.prior: unknown prior 'gaussian'; choose one of uniform, factorized, autoregressive, pixelcnn, toy"):
        JSA(prior="gaussian")
