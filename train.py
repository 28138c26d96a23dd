"""Train, validate and test the collection's models: one set of classes, two front ends. This file only dispatches:
launch/hydra_app.py and launch/cli_app.py describe the run, launch/run_builder.py builds it.

    python train.py model=vae data=mnist trainer.max_epochs=5        # Hydra: configs/, key=value, -m for multirun
    python train.py fit --model=VAE --data=MNISTDataModule --trainer.max_epochs=1   # LightningCLI: fit/validate/test
"""

from __future__ import annotations

import signal
import sys
import warnings

from launch import CLI_SUBCOMMANDS
from launch.checks.configs import CONFIGS as CONFIG_DIR
# Lightning 2.6 on torch 2.14 warns about its own use of a torch pytree API on every step.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")

USAGE = """\
usage: python train.py [KEY=VALUE ...]             (Hydra; -m for multirun)
       python train.py {{fit,validate,test}} [--OPTION VALUE ...]  (LightningCLI)

Hydra, with the config tree in configs/ (defaults: model=jsa data=mnist):
  python train.py model=vae data=mnist trainer.max_epochs=5
  python train.py -m model=vae data=mnist,cifar10          # one run per combination
  python train.py -m experiment=compare data=mnist         # all models side by side, then:
  python -m benchmarks.compare logs/tensorboard            # the comparison report (table and plots)
  python train.py model=vae optimizer=sgld optimizer.lr=1e-7 callbacks=sgmcmc   # sample the weights (SG-MCMC)
  python train.py ckpt_path=PATH/last.ckpt                 # resume, in the same TensorBoard run
  config groups: {groups}
  python train.py --cfg job      # prints the composed config (every default); --hydra-help for Hydra's options

LightningCLI, the same classes and defaults through jsonargparse (defaults: --model=JSA --data=MNISTDataModule):
  python train.py fit --model=VAE --data=MNISTDataModule --trainer.max_epochs=1
  python train.py test --model=VAE --ckpt_path=PATH/last.ckpt   # logs into the run that wrote the checkpoint
  python train.py fit --help     # the trainer's options; a model's: fit --model.help JSA (a data module's: --data.help)
  python train.py fit --config configs/cli/jsa_paper.yaml   # the JSA paper's protocol, from a config file

TensorBoard: tensorboard --logdir logs/tensorboard
"""


def _config_groups() -> str:
    groups = []
    # cli/ holds LightningCLI's config files, hydra/ Hydra's own launcher and sweeper groups (hydra/launcher=joblib).
    for group in sorted(p for p in CONFIG_DIR.iterdir() if p.is_dir() and p.name not in ("cli", "hydra")):
        choices = ",".join(sorted(f.stem for f in group.glob("*.yaml")))
        groups.append(f"{group.name}={{{choices}}}")
    return "  ".join(groups)



def main() -> None:
    argv = sys.argv[1:]
    from launch.checks.early import exit_on_sigterm

    exit_on_sigterm()  # one line and exit status 143 wherever Lightning does not take SIGTERM
    from launch.checks.early import refuse_early  # before the imports of torch and Lightning: typos are refused at once
    from launch.checks.received_config import refuse_received_configs  # a config file that would hang or import a stranger's module

    cli = bool(argv) and argv[0] in CLI_SUBCOMMANDS
    refusal = refuse_received_configs(argv, cli) or refuse_early(argv, cli=cli)
    if refusal:
        from launch.checks.early import exit_with

        exit_with(refusal)
    if not cli and any(a in ("-h", "--help") for a in argv):
        print(USAGE.format(groups=_config_groups()))
        return
    # Ctrl-C is held while torch and Lightning are imported (torch's import of numpy can swallow it, or fail in a
    # recursion), and taken as soon as they are: one line and exit status 130 (below).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        if cli:
            from launch import cli_app as front_end
        else:
            from launch import hydra_app as front_end
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if cli:
        from launch.errors import quiet_console

        quiet_console(hydra=False)
    from launch.checks.configs import record_library_settings

    record_library_settings()  # Lightning is imported: later commands' early checks know its classes' settings
    front_end.main()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C while torch and Lightning are imported, before a front end takes it
        from launch.checks.early import CTRL_C

        print(f"error: {CTRL_C}", file=sys.stderr)
        sys.exit(130)
