"""The rules that turn a user's settings into a run, each written once and applied by both front ends: defaults from
configs/ (launch/checks/configs.py reads them; LightningCLI takes them as its defaults); the likelihood and backbone
follow the data unless given (`follow_data`); the run's seed seeds the data order and the test stage unless they are
given (`seed_settings`); the callbacks every run gets (`always_on_callbacks`); the trainer's collective timeout, SLURM
root, signal handling and progress bar (`trainer_settings`); the last line of a run and no directory left by a refused
one (`running`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

from hydra.utils import instantiate
from lightning import Callback, Trainer
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

from callbacks.guards.nonfinite import NonFiniteLossGuard
from callbacks.guards.preemption import SaveOnPreemption
from callbacks.guards.process_group import CollectiveTimeout, ReleaseProcessGroupAtExit
from checkpoints.trainer import SafeCheckpoints
from common.signatures import constructor_defaults
from launch.checks.configs import config_file
from launch.errors import REFUSALS, StoppedByCtrlC, lightning_exits_as_ours
from launch.runs.distributed import strategy_with_timeout
from launch.runs.run_directory import no_traces_if_refused, run_summary_at_end, slurm_job_id


def trainer_defaults() -> dict[str, Any]:
    """The lightning.Trainer settings configs/trainer/default.yaml changes from the Trainer's own defaults."""
    own = constructor_defaults(Trainer)
    return {key: value for key, value in config_file("trainer/default.yaml").items()
            if key in own and value != own[key]}


def checkpoint_settings() -> dict[str, Any]:
    """ModelCheckpoint's settings (configs/callbacks/default.yaml's model_checkpoint): last + best on val/nll."""
    return {k: v for k, v in config_file("callbacks/default.yaml")["model_checkpoint"].items() if k != "_target_"}


def default_callbacks() -> list[Callback]:
    """The other callbacks of configs/callbacks/default.yaml, built with their settings there (the user may replace
    them: callbacks=..., --trainer.callbacks=...)."""
    return [instantiate(entry) for name, entry in config_file("callbacks/default.yaml").items() if name != "model_checkpoint"]


def always_on_callbacks(collective_timeout_s: float | None, given: Sequence[Callback] = ()) -> list[Callback]:
    """The callbacks every run gets beside the `given` ones, whatever the configs or the command line say:
    `SafeCheckpoints` (checkpoints/trainer.py), `SaveOnPreemption` and the NaN guard, with the
    settings of configs/callbacks/default.yaml unless one's own callback list replaces them (callbacks/guards/), the
    release of a DDP run's process group at exit, and, given a collective timeout (a DDP strategy named by a string),
    that timeout for the collectives after the ranks' start (callbacks/guards/process_group.py)."""
    guard = [] if any(isinstance(c, NonFiniteLossGuard) for c in given) else [NonFiniteLossGuard()]
    timeouts = [CollectiveTimeout(collective_timeout_s)] if collective_timeout_s is not None else []
    return [SafeCheckpoints(), SaveOnPreemption(), *guard, ReleaseProcessGroupAtExit(), *timeouts]


# A run's seed (seed=N, --seed_everything=N) seeds these too: the data order and binarization, and the test stage's
# importance samples; one given itself (data.seed=..., --model.test_seed=...) keeps its value.
SEEDED_SETTINGS = (("data", "seed"), ("model", "test_seed"))


def seed_settings(settings: dict[str, dict[str, Any]], classes: dict[str, type], seed: Any, seed_given: bool,
                  given: Callable[[str, str], bool]) -> None:
    """Set `settings[group][key]` to the run's seed for each of SEEDED_SETTINGS its class takes, in place, unless
    `given(group, key)` on the command line. A seed given on the command line wins over a value from a file or a
    checkpoint (test --ckpt_path=... --seed_everything=9 tests with seed 9); one from a config file fills only the
    settings still at their class default."""
    if not isinstance(seed, int) or isinstance(seed, bool):  # (LightningCLI's seed_everything=true: a random seed)
        return
    for group, key in SEEDED_SETTINGS:
        default = constructor_defaults(classes[group]).get(key, seed)
        if key in constructor_defaults(classes[group]) and not given(group, key) and (seed_given or settings[group].get(key) == default):
            settings[group][key] = seed


def resumed_seed(seed: Any, seed_given: bool, checkpoint: dict[str, Any] | None) -> Any:
    """The seed of a run started from a checkpoint where the command line gives none: the one its data module was
    seeded with (a replica's own seed too), so that its data order and test stage continue as they were."""
    saved = (checkpoint or {}).get("datamodule_hyper_parameters") or {}
    return saved["seed"] if not seed_given and type(saved.get("seed")) is int else seed


def follow_data(model_settings: dict[str, Any], model_class: type, data_class: type, binarize: Any) -> dict[str, Any]:
    """The model's settings with the likelihood and backbone that suit the data where they are not given and the
    model takes them: Bernoulli for binarized pixels, else the discretized logistic; CIFAR-10's convolutional networks."""
    suited = {"likelihood": model_settings.get("likelihood") or data_class.likelihood_for(binarize),
              "backbone": model_settings.get("backbone") or data_class.backbone}
    takes = constructor_defaults(model_class)
    return {**model_settings, **{key: value for key, value in suited.items() if key in takes}}


def trainer_settings(settings: Any, logger: Any, timeout_s: float, unlogged_dir: str | None = None) -> dict[str, Any]:
    """What the run changes in the trainer's `settings` (strategy, callbacks, enable_progress_bar, default_root_dir):
    - without a logger, or under fast_dev_run (no default_root_dir given), the run's files go to `unlogged_dir`, not
      the working directory where Lightning and LightningCLI would put them;
    - a DDP strategy named by a string gets a collective timeout (launch/runs/distributed.py);
    - in a SLURM job, Lightning's auto-requeue saves and finds hpc_ckpt_N.ckpt in the run's directory;
    - the always-on callbacks join the given ones;
    - with the progress bar off, its callback goes (Lightning refuses both)."""
    changed = {"strategy": strategy_with_timeout(settings.get("strategy"), timeout_s)}
    # the strategy's timeout covers the ranks' start; the collectives after it get timeout_s
    collective_timeout_s = timeout_s if changed["strategy"] is not settings.get("strategy") else None
    if logger and slurm_job_id() is not None:
        changed["default_root_dir"] = logger.log_dir
    # fast_dev_run replaces any logger by Lightning's DummyLogger, which has no directory: the same as none.
    if (not logger or settings.get("fast_dev_run")) and settings.get("default_root_dir") is None and unlogged_dir is not None:
        changed["default_root_dir"] = unlogged_dir
    given = list(settings.get("callbacks") or [])
    callbacks = [*given, *always_on_callbacks(collective_timeout_s, given)]
    if settings.get("enable_progress_bar") is False:  # None: on
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    return {**changed, "callbacks": callbacks}


@contextlib.contextmanager
def running(trainer: Any, say: Callable[[str], Any], evaluating_only: bool = False) -> Iterator[None]:
    """Around fit/test: the last line names the run, its last.ckpt and the TensorBoard command (also after Ctrl-C or
    SIGTERM); a run refused before it saved a checkpoint leaves nothing behind. Ctrl-C exits with 130 wherever it comes
    (SIGTERM: 143); when the process only evaluates (validate, test), the run it was logging into is left as it was (a half-written
    test stage's image grids without its metrics would look like a result)."""
    undone = (*REFUSALS, StoppedByCtrlC, SIGTERMException) if evaluating_only else REFUSALS
    with run_summary_at_end(trainer, say), no_traces_if_refused(trainer.logger, undone), lightning_exits_as_ours():
        yield
