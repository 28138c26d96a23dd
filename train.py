"""Train, validate and test the collection's models. Two front ends, one set of classes:

Hydra (config tree in configs/, `key=value` overrides, `-m` multirun):
    python train.py model=vae data=mnist trainer.max_epochs=5
    python train.py -m model=vae data=mnist,cifar10

LightningCLI (jsonargparse; subcommands fit/validate/test/predict):
    python train.py fit --model=VAE --data=MNISTDataModule --trainer.max_epochs=1
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
CLI_SUBCOMMANDS = ("fit", "validate", "test", "predict")
# Lightning 2.6 on torch 2.14 warns about its own use of a torch pytree API on every step.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")

USAGE = """\
usage: python train.py [KEY=VALUE ...]             (Hydra; -m for multirun)
       python train.py {{fit,validate,test,predict}} [--OPTION VALUE ...]  (LightningCLI)

Hydra, with the config tree in configs/:
  python train.py model=vae data=mnist trainer.max_epochs=5
  python train.py -m model=vae data=mnist,cifar10          # one run per combination
  python train.py -m experiment=compare data=mnist         # all models side by side, then:
  python -m benchmarks.compare logs/tensorboard            # the comparison report (table and plots)
  python train.py ckpt_path=PATH/last.ckpt                 # resume
  config groups: {groups}
  python train.py --cfg job      prints the composed config; --hydra-help for Hydra's own options

LightningCLI, the same classes through jsonargparse:
  python train.py fit --model=VAE --data=MNISTDataModule --trainer.max_epochs=1
  python train.py fit --help      lists every option of model, data and trainer

TensorBoard: tensorboard --logdir logs/tensorboard
"""


def _config_groups() -> str:
    groups = []
    for group in sorted(p for p in CONFIG_DIR.iterdir() if p.is_dir()):
        choices = ",".join(sorted(f.stem for f in group.glob("*.yaml")))
        groups.append(f"{group.name}={{{choices}}}")
    return "  ".join(groups)


def signature_defaults(cls: type) -> dict[str, Any]:
    """The constructor arguments of `cls` with their defaults, following **kwargs up the class hierarchy:
    the one source of the model's defaults, for Hydra as for LightningCLI."""
    import inspect

    defaults: dict[str, Any] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        for p in parameters:
            if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", *defaults) and p.default is not p.empty:
                defaults[p.name] = list(p.default) if isinstance(p.default, tuple) else p.default
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return defaults


def register_model_defaults() -> None:
    """Store every registered model's constructor defaults as Hydra config `model_defaults/<Class>`, which
    each configs/model/*.yaml extends, so `--cfg job` shows them and `model.NAME=VALUE` needs no `+`."""
    from hydra.core.config_store import ConfigStore

    import models

    store = ConfigStore.instance()
    for name in models.__all__:
        cls = getattr(models, name)
        settings = {k: v for k, v in signature_defaults(cls).items() if k not in ("data_shape", "optimizer")}
        store.store(group="model_defaults", name=name, node=settings)


def model_settings(cfg: Any) -> dict[str, Any]:
    """cfg.model as a dict, with the config's `discrete_latent` settings (experiment=compare) applied to a
    model that has a discrete latent (JSA, DiscreteVAE, VQ-VAE), unless the command line sets them for the model."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    settings = OmegaConf.to_container(cfg.model, resolve=True)
    shared = cfg.get("discrete_latent")
    if shared and get_class(settings["_target_"]).has_discrete_latent:
        overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
        given = {o.split("=", 1)[0].lstrip("+~").removeprefix("model.") for o in overrides if o.lstrip("+~").startswith("model.")}
        settings.update({k: v for k, v in OmegaConf.to_container(shared, resolve=True).items() if k not in given})
    return settings


def run(cfg: Any) -> dict[str, float]:
    """Build data, model, logger, callbacks and trainer from a composed Hydra config and fit."""
    import lightning as L
    from hydra.utils import instantiate

    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data, _convert_="all")
    model = instantiate(model_settings(cfg), data_shape=list(datamodule.image_shape), _convert_="all")
    # The run's directory: <model>-<data>-<the model's key settings>, e.g. jsa-mnist-mlp-K10-L10.
    logger = instantiate(cfg.logger, name=f"{cfg.run_name}-{model.run_tag}") if cfg.get("logger") else False
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values()]
    trainer = instantiate(cfg.trainer, logger=logger, callbacks=callbacks, _convert_="all")
    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    if cfg.get("run_test"):
        # The best checkpoint on val/nll, unless a callback put SG-MCMC's posterior mean into the model.
        use_model = any(getattr(c, "use_mean", False) for c in callbacks) or not trainer.checkpoint_callback
        trainer.test(model, datamodule=datamodule, ckpt_path=None if use_model else "best")
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


def hydra_main() -> None:
    import hydra

    register_model_defaults()

    @hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
    def _main(cfg: Any) -> None:
        run(cfg)

    _main()


def cli_main(args: list[str] | None = None) -> Any:
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.loggers import TensorBoardLogger
    from jsonargparse import lazy_instance

    import datamodules  # noqa: F401  (registers the subclasses for --data=NAME)
    import models  # noqa: F401  (registers the subclasses for --model=NAME)
    from callbacks import default_callbacks
    from datamodules import ImageDataModule
    from models import LatentVariableModel

    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser: Any) -> None:
            # The model is built for the data's image shape, as in the Hydra front end.
            parser.link_arguments("data.image_shape", "model.init_args.data_shape", apply_on="instantiate")
            # Same checkpointing as configs/callbacks/default.yaml: last + best on val/nll.
            parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
            parser.set_defaults({"checkpoint.monitor": "val/nll", "checkpoint.mode": "min", "checkpoint.save_last": True})

    return CLI(
        LatentVariableModel,
        ImageDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={
            "logger": lazy_instance(TensorBoardLogger, save_dir="logs/tensorboard", name="cli", default_hp_metric=False),
            "callbacks": [lazy_instance(type(c)) for c in default_callbacks()],  # as configs/callbacks/default.yaml
        },
    )


def main() -> None:
    argv = sys.argv[1:]
    if argv and argv[0] in CLI_SUBCOMMANDS:
        cli_main(argv)
    elif any(a in ("-h", "--help") for a in argv):
        print(USAGE.format(groups=_config_groups()))
    else:
        hydra_main()


if __name__ == "__main__":
    main()
