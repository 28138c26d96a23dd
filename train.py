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
    # experiment_model/ is chosen by train.yaml itself (per experiment and model), not by the user.
    for group in sorted(p for p in CONFIG_DIR.iterdir() if p.is_dir() and p.name != "experiment_model"):
        choices = ",".join(sorted(f.stem for f in group.glob("*.yaml")))
        groups.append(f"{group.name}={{{choices}}}")
    return "  ".join(groups)


def run(cfg: Any) -> dict[str, float]:
    """Build data, model, logger, callbacks and trainer from a composed Hydra config and fit."""
    import lightning as L
    from hydra.utils import instantiate

    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data, _convert_="all")
    model = instantiate(cfg.model, data_shape=list(datamodule.image_shape), _convert_="all")
    logger = instantiate(cfg.logger) if cfg.get("logger") else False
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
            "logger": lazy_instance(TensorBoardLogger, save_dir="logs/tensorboard", name="cli", default_hp_metric=False)
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
