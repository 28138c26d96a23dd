"""The early check of a Hydra command line (`python train.py KEY=VALUE ...`): each job it would run composed as Hydra
composes it (launch/checks/hydra_config.py) and its settings checked (launch/checks/settings.py: check_composed), a
composition error as one line with the likely key or fix; and what composing does not see: a config choice that does
not exist, Hydra plugins, Optuna's one model per study, the layout's and Lightning 1's settings, options of the other
front end."""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from common.settings import did_you_mean
from launch import CLI_SUBCOMMANDS
from launch.checks.arguments import HYDRA_OPTIONS, OTHER_TREE, TAKES_VALUE, hydra_option, hydra_words, overrides_of, values_of
from launch.checks.configs import CONFIGS, config_value, declared, read_config
from launch.checks.precheck import EarlyRefusal, REMOVED_TRAINER_OPTIONS, removed_trainer_option
from launch.checks.received_config import composed as composed_file, hydra_folders, hydra_option_values
from launch.checks.settings import CONFIG_GROUPS, SettingsError, check_composed
from launch.checks.hydra_config import compose

MAX_CHECKED_VALUES = 64  # of one swept setting, checked before the jobs run


# Hydra's launchers and sweepers: `basic` (Hydra's own), the plugins pyproject's `cluster` extra installs (each choice:
# its plugin's package), this project's configs/hydra/<group>/*.yaml, which extend one of those (`defaults: - joblib`),
# and any other installed Hydra plugin (its folder hydra_plugins/hydra_<name>_launcher).
PLUGIN_PACKAGES = {"joblib": "hydra-joblib-launcher", "submitit_local": "hydra-submitit-launcher",
                   "submitit_slurm": "hydra-submitit-launcher", "optuna": "hydra-optuna-sweeper"}
CLUSTER_EXTRA = "pip install -e '.[cluster]'"


def installed_plugins() -> list[str]:
    """The folders of the installed Hydra plugins (hydra_joblib_launcher, ...), found without importing them."""
    try:
        spec = importlib.util.find_spec("hydra_plugins")
    except (ImportError, ValueError):
        return []
    return [path.name for location in (spec.submodule_search_locations or [] if spec else []) for path in Path(location).iterdir()]


def slurm_here() -> bool:
    """Whether this machine submits SLURM jobs (submitit looks for srun)."""
    return shutil.which("srun") is not None


def check_plugin_choice(group: str, value: str, multirun: bool, prints_only: bool = False) -> None:
    """`hydra/launcher=NAME` / `hydra/sweeper=NAME`: a config that exists, whose plugin is installed, in a multirun; a
    SLURM launcher where SLURM is (unless the command only prints its config)."""
    kind, installed = group.rsplit("/", 1)[1], installed_plugins()
    ours = [path.stem for path in (CONFIGS / group).glob("*.yaml")]
    known = sorted({"basic", *ours, *(name for name, package in PLUGIN_PACKAGES.items() if package.endswith(kind))})
    for choice in [str(v) for v in values_of(value) or []]:
        extends = read_config(f"{group}/{choice}.yaml").get("defaults") or [] if choice in ours else []
        plugin = next((p for p in [choice, *extends] if isinstance(p, str) and p in PLUGIN_PACKAGES), None)
        if plugin is not None and PLUGIN_PACKAGES[plugin].replace("-", "_") not in installed:  # (its folder's name)
            raise EarlyRefusal(f"{group}={choice}: the {plugin} {kind} plugin is not installed: {CLUSTER_EXTRA} "
                               f"(or pip install {PLUGIN_PACKAGES[plugin]})")
        if plugin == "submitit_slurm" and not prints_only and not slurm_here():
            raise EarlyRefusal(f"{group}={choice}: no SLURM on this machine (srun is not on PATH); run the command on the "
                               "cluster's login node, or hydra/launcher=slurm_local to run the jobs here (docs/cluster.md)")
        others = [name for name in installed if name.endswith(kind) and f"_{choice.split('_')[0]}_" in name]
        if plugin is None and choice not in known and not others:
            raise EarlyRefusal(f"{group}={choice}: no such {kind}; expected one of {', '.join(known)} "
                               f"(configs/{group}/ and the Hydra plugins of {CLUSTER_EXTRA}){did_you_mean(choice, known)}")
        if not multirun and choice != "basic":
            raise EarlyRefusal(f"{group}={choice}: a {kind} runs the jobs of a multirun only; add -m "
                               f"(python train.py -m {group}={choice} ...)")


def overrides_given(argv: list[str]) -> list[str]:
    """The KEY=VALUE overrides of a Hydra command line, as written (+key, ~key, key@package alike), but Hydra's own
    (hydra/launcher=..., hydra.run.dir=...: check_plugin_choice judges the plugins, Hydra its own settings)."""
    return [word for word in hydra_words(argv) if not word.lstrip("+~").startswith(("hydra/", "hydra."))]


def jobs(parsed: list[Override], multirun: bool) -> tuple[list[list[str]], list[str]]:
    """The overrides of the jobs to compose, from the command line's parsed overrides, and the other values of the
    swept settings. Each value of a swept config group is composed once, with the other keys at their first value; a
    swept setting's other values (at most MAX_CHECKED_VALUES of each: the rest are checked by their jobs) are set on the
    first job's config. A sweep Optuna samples (interval()) is left to the constructors."""
    axes = []
    for override in parsed:
        if override.is_sweep_override() and not multirun:
            raise EarlyRefusal(f"{override.input_line}: several values run one job each in a multirun only; add -m (python "
                               "train.py -m ...), or give a list as [a,b] or a string with commas in quotes")
        try:
            values = list(override.sweep_string_iterator()) if override.is_sweep_override() else None
        except HydraException:
            continue
        axes.append([f"{override.get_key_element()}={value}" for value in values] if values else [override.input_line])
    first = [axis[0] for axis in axes]
    groups = [axis for axis in axes if "/" in axis[0].split("=")[0] or axis[0].lstrip("+~").split("=")[0] in CONFIG_GROUPS]
    return ([first] + [[*first[:i], value, *first[i + 1:]] for i, axis in enumerate(axes) if axis in groups for value in axis[1:]],
            [value for axis in axes if axis not in groups for value in axis[1:MAX_CHECKED_VALUES]])


def with_setting(cfg: Any, override: str) -> Any:
    """A copy of a composed config with `override` (KEY=VALUE, a key it has) applied, as Hydra applies a value."""
    parsed = OverridesParser.create().parse_override(override)
    changed = copy.deepcopy(cfg)
    OmegaConf.update(changed, parsed.key_or_group, parsed.value(), merge=True)
    return changed


def composed_job(job: list[str], argv: list[str]) -> Any:
    """The job's config as Hydra composes it, a `trainer.NAME=V` added as given (`++`): once Lightning is imported,
    check_composed names a wrong one of the Trainer's settings in one line where Hydra's struct mode would refuse it in
    several (before, the Trainer's settings are an open node: launch/checks/hydra_config.py)."""
    return compose([f"++{o}" if o.startswith("trainer.") else o for o in job], hydra_folders(argv))


def grammar_error(error: Exception, overrides: list[str]) -> str:
    """Hydra's grammar refusal as one line; for a value holding '=' unquoted (Lightning's epoch=0-step=3.ckpt), how to
    quote it."""
    equals = next((o for o in overrides if o.count("=") > 1 and not re.search("[\"'\\[{]", o)), None)
    if equals is not None and "mismatched input '='" in str(error):
        key, _, value = equals.partition("=")
        return (f"{equals}: Hydra reads the '=' in the value as a second one; quote the value for Hydra, and the whole for "
                f"the shell: '{key}=\"{value}\"'")
    wide = next((o for o in overrides if not o.isascii() and not re.search("[\"']", o)), None)
    if wide is not None and "LexerNoViableAlt" in str(error):  # Hydra's grammar reads unquoted values in ASCII only
        key, _, value = wide.partition("=")
        return (f"{wide}: Hydra reads an unquoted value in ASCII only; quote it for Hydra, and the whole for the shell: "
                f"'{key}=\"{value}\"'")
    text = " ".join(str(error).split())
    bad = next((o for o in overrides if parsed_override(o) is None), None)  # Hydra's message names the input only
    return f"{bad}: {text}" if bad is not None and bad not in text else text


def parsed_override(override: str) -> Any | None:
    """Hydra's reading of one override, or None where its grammar refuses it (a TypeError where Hydra fails to build
    it)."""
    try:
        return OverridesParser.create().parse_override(override)
    except (HydraException, TypeError):
        return None


def composition_error(error: Exception, job: list[str], argv: list[str], swept: dict[str, str]) -> str:
    """Hydra's refusal of a job's overrides as one line: a key its config does not have (check_composed's line for the
    job with the key added; else the file without it, the likely key and the `+` that adds it), a `+` on a key that has a
    value, else Hydra's first line."""
    text = str(error).strip()
    hydras_line = " ".join(text.split("\n\n")[0].split()) if text else type(error).__name__
    missing = re.match(r"In '([^']+)': Could not find '([^']+)/([^']+)'", text)
    if missing and missing[1] != "train":  # a config's defaults entry (the command line's choices are checked before)
        options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], re.M)
        where = next((path for folder in (CONFIGS, *hydra_folders(argv)) if (path := folder / f"{missing[1]}.yaml").is_file()),
                     missing[1])
        return (f"{where}: its defaults list names {missing[2]}/{missing[3]}, which does not exist; expected one of "
                f"{', '.join(options)}{did_you_mean(missing[3], options)}")
    found = re.match(r"Could not (override|append to config. An item is already at) '([^']+)'", text)
    appended = bool(found) and found[1] != "override"
    key = found and (found[2] if appended else getattr(error.__cause__, "full_key", None))
    given = next((o for o in job if key and o.lstrip("+~").split("=", 1)[0] == found[2]), None)
    if given is None:
        return hydras_line
    # the job's choices of configs and classes, without its settings (another may be a typo too)
    kept = [o for o in job if o is not given and ("." not in (k := o.split("=", 1)[0]) or k.endswith("._target_"))]
    group, parent = key.split(".")[0], key.rpartition(".")[0]
    sweep = (f"{group}={swept[group]}: not every {group} of the sweep takes it; give it in a multirun of those that do"
             if group in swept else None)
    try:
        cfg = composed_job(kept if appended else [*kept, f"++{given.lstrip('+~')}"], argv)
        if not appended:
            check_composed(cfg, classes=False)
    except SettingsError as refusal:
        return f"{refusal}" + (f" ({sweep})" if sweep else "")
    except (HydraException, OmegaConfBaseException):
        return hydras_line
    choice, node = cfg.hydra.runtime.choices.get(group), OmegaConf.select(cfg, parent) if parent else cfg
    target = node.get("_target_") if OmegaConf.is_dict(node) else None
    where = next((f"{folder}/{group}/{choice}.yaml" for folder in hydra_folders(argv) if (folder / group / f"{choice}.yaml").is_file()),
                 f"configs/{group}/{choice}.yaml") if choice else f"the config's {parent}" if parent else "configs/train.yaml"
    if appended:
        return (f"{given}: {key} already has a value ({where}" + (f", {target.rsplit('.', 1)[-1]}" if target else "") +
                f"), and + only adds a key that has none; drop the + to set it: {given.lstrip('+')}")
    options = [f"{parent}.{k}" if parent else k for k in (node if OmegaConf.is_dict(node) else {})
               if not str(k).startswith("_") and f"{parent}.{k}" != key]
    what = "callback" if parent == "callbacks" else "key"
    hint = did_you_mean(key, options) or (f" (it has {', '.join(options)})" if what == "callback" else "")
    takes = f", if {target.rsplit('.', 1)[-1]} takes it" if target else ""  # (its settings are known once imported)
    added = sweep or f"one it leaves out is added with +{given.lstrip('+~')}{takes}"
    return f"{key}: {where} has no such {what}{hint} ({added})"


def check_hydra(argv: list[str]) -> list[tuple[list[str], Any]]:
    """Raise EarlyRefusal for the first mistake of a Hydra command line: each job composed and checked, an experiment's
    sweep (experiment=compare: its models) as given on the command line. Returns each (job, config) checked, which
    `check_after_imports` checks again once the classes are imported."""
    pairs = overrides_of(argv)
    if any(hydra_option(arg)[0] in OTHER_TREE for arg in argv):
        return []
    # --cfg only prints the config: a sweeper or launcher is fine there without -m.
    multirun = bool(hydra_modes(argv) & {"--multirun", "--cfg"}) or ("hydra.mode", "MULTIRUN") in pairs
    check_before_composing(argv, pairs, multirun, "--cfg" in hydra_modes(argv))
    words = hydra_words(argv)
    try:  # the grammar of every override, Hydra's own among them (hydra.sweeper.params...)
        parsed = OverridesParser.create().parse_overrides(words)
    except HydraException as error:
        raise EarlyRefusal(grammar_error(error, words)) from None
    # Hydra's own overrides (hydra/launcher=..., hydra.run.dir=...): check_plugin_choice judges the plugins, Hydra the rest
    planned, other_values = jobs([override for override in parsed if not override.is_hydra_override()], multirun)
    swept = {key: value for key, value in pairs if key in CONFIG_GROUPS and len(values_of(value) or []) > 1}

    def composed(job: list[str]) -> Any:
        try:
            return composed_job(job, argv)
        except (HydraException, OmegaConfBaseException) as error:
            raise EarlyRefusal(composition_error(error, job, argv, swept)) from None

    first = composed(planned[0])
    sweep = OmegaConf.to_container(first.hydra.sweeper, resolve=True).get("params") or {}
    params = [f"{k}={v}" for k, v in sweep.items() if isinstance(v, str) and k not in dict(pairs) and f"{k}={v}" not in argv]
    if params and not multirun:  # Hydra would run the sweep's first job alone, without a word
        experiment, key = first.hydra.runtime.choices.get("experiment"), params[0].split("=", 1)[0]
        raise EarlyRefusal(f"experiment={experiment} sweeps {params[0]}, one job each in a multirun only: add -m (python "
                           f"train.py -m experiment={experiment} ...), or give one {key}=NAME to run that job alone")
    if params:
        return check_hydra([*argv, *params])
    if ("hydra/sweeper", "tune") in pairs and "model" in swept:  # Optuna would pick the model too, in another's space
        models = " ".join(str(m) for m in values_of(swept["model"]))
        rest = " ".join(arg for arg in argv if not arg.startswith("model="))
        raise EarlyRefusal(f"hydra/sweeper=tune tunes one model per study: give model=NAME (every model in turn: for m in "
                           f"{models}; do python train.py {rest} model=$m; done)")
    checkpoints = {value for value in values_of(dict(pairs).get("ckpt_path", "null")) or [] if value is not None}
    if checkpoints and len(planned) + len(other_values) > len(checkpoints):  # (one job per checkpoint is fine)
        raise EarlyRefusal(f"ckpt_path={dict(pairs)['ckpt_path']} in a sweep: its jobs would resume the same run one after "
                           "another, each from the checkpoint the last one wrote, into one TensorBoard run; resume one "
                           "job at a time (without -m), or copy the checkpoint out of its run for the jobs to start new runs from")
    checked: list[tuple[list[str], Any]] = []
    for job, cfg in [(planned[0], first), *((planned[0], with_setting(first, value)) for value in other_values),
                     *((job, None) for job in planned[1:])]:
        checked.append((job, cfg if cfg is not None else composed(job)))
        check_job(*checked[-1], argv, first)
    return checked


def check_job(job: list[str], cfg: Any, argv: list[str], first: Any) -> bool:
    """One composed job's settings (launch/checks/settings.py: check_composed; its devices are the run's, which a
    launcher may start on another machine), a refusal naming the experiment file that sets the setting it names
    (`in_file`). Whether all were checked: not past an interpolation that does not resolve here."""
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} resolves against this job's Hydra node
    check_learning_rate(job, cfg)
    given = dict(o.lstrip("+~").split("=", 1) for o in job if "=" in o)
    if given.get("trainer.enable_checkpointing", "").lower() == "false":
        if kept := next((key for key in given if key.startswith("callbacks.model_checkpoint.")), None):
            raise EarlyRefusal(f"{kept}={given[kept]} with trainer.enable_checkpointing=false: no checkpoint is saved, so "
                               "it would be ignored; give one of the two")
    try:
        check_composed(cfg, devices=False)
    except SettingsError as error:
        raise EarlyRefusal(in_file(str(error), given, argv, first)) from None
    except OmegaConfBaseException:
        return False  # an interpolation that resolves only in a run (${hydra:runtime.output_dir}): the run checks it
    return True


def check_learning_rate(job: list[str], cfg: Any) -> None:
    """`model.lr=X` given where the optimizer's learning rate is not `${model.lr}` (optimizer=sgld sets its own step
    size; optimizer.lr=Y given too): the model would train with the optimizer's, X unused."""
    given = next((o.lstrip("+~") for o in reversed(job) if o.lstrip("+~").startswith("model.lr=")), None)  # (Hydra: the last)
    raw = OmegaConf.to_container(cfg.optimizer, resolve=False).get("lr") if OmegaConf.is_dict(cfg.get("optimizer")) else None
    if given is not None and raw is not None and raw != "${model.lr}":
        both = any(o.lstrip("+~").startswith("optimizer.lr=") for o in job)
        source = "given too" if both else f"configs/optimizer/{cfg.hydra.runtime.choices.get('optimizer')}.yaml"
        fix = "give one of the two" if both else f"give optimizer.lr={given.split('=', 1)[1]}"
        raise EarlyRefusal(f"{given}: the run trains with the optimizer's learning rate, optimizer.lr={raw} ({source}), "
                           f"not model.lr; {fix}")


# The jobs the check before the imports composed for a command line: (its argv, each (job, config)).
composed_before_imports: tuple[tuple[str, ...], list[tuple[list[str], Any]]] = ((), [])


def check_after_imports(argv: list[str]) -> None:
    """Once Lightning is imported, before Hydra composes (whose struct mode would refuse an unknown key in several
    lines): the jobs the early check composed, checked again now that the Trainer's, the optimizer's and the
    callbacks' settings are known, without composing them again; composed again where no early check ran in this
    process, where a job builds a class of one's own, whose defaults were not known before the imports, or where a
    job's check stopped at an interpolation (of a Trainer's default, say, unknown before the imports too)."""
    global composed_before_imports
    key, checked = composed_before_imports
    composed_before_imports = ((), [])  # handed over once: a sweep's configs are not kept while its jobs run
    if key != tuple(argv) or any(declared(OmegaConf.select(cfg, f"{group}._target_")) is None
                                 for _, cfg in checked for group in ("model", "data")) or \
            not all([check_job(job, cfg, argv, checked[0][1]) for job, cfg in checked]):
        check_hydra(argv)


def in_file(line: str, given: dict[str, str], argv: list[str], cfg: Any) -> str:
    """`line`, prefixed with the picked experiment file (configs/experiment/ or a --config-dir's, `# @package _global_`)
    that sets the setting it names when the job's overrides (`given`: key -> value) do not."""
    import yaml

    key = re.match(r"[\w.]*", line)[0].rstrip(".")
    if key in given:
        return line
    name = f"{cfg.hydra.runtime.choices.get('experiment')}.yaml"
    for path in (folder / "experiment" / name for folder in (CONFIGS, *hydra_folders(argv))):
        text = path.read_text(errors="replace") if path.is_file() else ""
        if "@package _global_" in text[:2000] and config_value(yaml.safe_load(text), key.split(".")) is not None:
            return f"{path}: {line}"
    return line


def check_before_composing(argv: list[str], pairs: list[tuple[str, str]], multirun: bool, prints_only: bool) -> None:
    """What composing does not see: Hydra plugins, Lightning 1's Trainer options, a config choice that does not exist."""
    for key, value in pairs:
        if key in ("hydra/launcher", "hydra/sweeper"):
            check_plugin_choice(key, value, multirun, prints_only)
        if key.startswith("trainer.") and key.removeprefix("trainer.") in REMOVED_TRAINER_OPTIONS:
            raise EarlyRefusal(removed_trainer_option(key, value, cli=False))
        if key == "callbacks" and value.replace(" ", "") == "{}":  # (Hydra merges a mapping into the group's)
            raise EarlyRefusal("callbacks={}: merges nothing into the callbacks, which stay as they are; ~callbacks leaves "
                               "them all out (the checkpoints, the save on SIGTERM and the NaN guard stay)")
        if key in CONFIG_GROUPS and key != "hydra":
            check_config_choice(key, value, [CONFIGS, *hydra_folders(argv)])


def check_config_choice(group: str, value: str, folders: list[Path]) -> None:
    """`group=NAME` (or a sweep of names): a config in configs/<group>/ or a --config-dir's, else a refusal naming the
    folders searched, with the likely name, or how to leave the group out (Hydra refuses group=null from the command
    line), or where a config of one's own goes."""
    available, no_such = configs_in(folders, group)
    swept = parsed_override(f"{group}={value}") if values_of(value) is None else None  # choice(jsa,vae)
    choices = list(swept.sweep_string_iterator()) if swept is not None and isinstance(swept.value(), ChoiceSweep) \
        else [str(v) if v is not None else "null" for v in values_of(value) or []]  # (quotes: Hydra's syntax)
    for choice in choices:
        if choice not in available:
            leave_out = f" ({group}=none leaves it out)" if "none" in available else f" (~{group} leaves it out)"
            own = "" if len(folders) > 1 else f"; a config of your own: --config-dir DIR with DIR/{group}/{choice}.yaml"
            fix = did_you_mean(choice, available) or (leave_out if choice in ("null", "none", "None", "false") else own)
            raise EarlyRefusal(f"{group}={choice}: {no_such}{fix}")
        for path in (folder / group / f"{choice}.yaml" for folder in folders if folder != CONFIGS):
            if path.is_file():
                check_own_package(group, path)


def check_own_package(group: str, path: Path) -> None:
    """A config of one's own in `group`/ without a `# @package` line is placed under `group:` (Hydra's default): its
    own `group:` key, or a defaults entry `...@group`, would land under group.group, where no class looks."""
    import yaml

    with open(path, errors="replace") as file:
        if "@package" in file.read(2000):  # (Hydra reads the directive in the file's header)
            return
    node = composed_file(path, f"Hydra config {path}")
    top = node.value if isinstance(node, yaml.MappingNode) else []
    entries = [str(key.value) for name, value in top if name.value == "defaults" and isinstance(value, yaml.SequenceNode)
               for entry in value.value if isinstance(entry, yaml.MappingNode)
               for key, _ in entry.value]
    nested = f"its key {group}:" if any(name.value == group for name, _ in top) else \
        next((f"its defaults entry {entry}" for entry in entries if entry.endswith(f"@{group}")), None)
    if nested:
        raise EarlyRefusal(f"{path}: {nested} lands under {group}.{group}, since Hydra places a config of {group}/ "
                           f"under {group}: unless it says otherwise; begin the file with `# @package _global_`, as "
                           f"configs/{group}/*.yaml do")


def configs_in(folders: list[Path], group: str = "") -> tuple[list[str], str]:
    """The names of the configs in `group` of `folders` (configs/ first), and the refusal of a name not among them,
    which names the folders searched and the names found."""
    available = sorted({path.stem for folder in folders for path in (folder / group).glob("*.yaml")})
    searched = (f"{Path('configs') / group if folder == CONFIGS else folder / group}/" for folder in folders)
    return available, f"no such config in {' or '.join(searched)}; expected one of {', '.join(available)}"


def hydra_modes(argv: list[str]) -> set[str]:
    """The modes a Hydra command line asks for (HYDRA_MODES), as Hydra's argparse reads its options (arguments.py:
    hydra_option: abbreviations, --cfg=job, -cjob)."""
    return {mode for arg in argv if arg.startswith("-") and (mode := hydra_option(arg)[0]) in HYDRA_MODES}


def check_config_search(argv: list[str]) -> None:
    """A config folder (-cd) or primary config (-cn) that does not exist (Hydra answers in several lines, exit status 1)."""
    for folder in hydra_option_values(argv, "--config-dir"):
        if not Path(folder).is_dir():
            raise EarlyRefusal(f"--config-dir {folder}: no such directory (it adds a folder of configs of your own to configs/)")
    for name in hydra_option_values(argv, "--config-name") if not hydra_option_values(argv, "--config-path") else ():
        available, no_such = configs_in([CONFIGS, *map(Path, hydra_option_values(argv, "--config-dir"))])
        if name.removesuffix(".yaml") not in available:
            raise EarlyRefusal(f"--config-name {name}: {no_such}{did_you_mean(name, available)}")


HYDRA_MODES = ("--run", "--multirun", "--cfg", "--info", "--shell-completion")  # one per command


def check_hydra_command(argv: list[str], prints_only: bool) -> None:
    """Raise EarlyRefusal for the first mistake of a Hydra command line seen before the imports: Hydra's
    --experimental-rerun (or an abbreviation argparse expands to it), which unpickles the file it is given (a stranger's
    file would run code); a LightningCLI option or config file without its subcommand, or a bare word, which Hydra
    answers with its usage text or its grammar; then the overrides (check_hydra)."""
    for index, arg in enumerate(argv):
        flag, value = arg.split("=", 1)[0], (arg.split("=", 1)[1] if "=" in arg else (argv[index + 1:] or [""])[0])
        if flag in ("-c", "--config", "--conf") and value.endswith((".yaml", ".yml")):  # Hydra's -c is --cfg job|hydra|all
            raise EarlyRefusal(f"{flag} {value}: a config file is LightningCLI's, which needs a subcommand first: python "
                               f"train.py fit --config={value} (Hydra takes an experiment file: -cd FOLDER experiment=NAME)")
        before = hydra_option(argv[index - 1]) if index > 0 else (None, None)
        after_option = before[0] in (*TAKES_VALUE, *OTHER_TREE) and before[1] is None  # its value (--info searchpath)
        bare = "=" not in arg and not arg.startswith("~")  # (~key deletes a key)
        if not arg.startswith("-") and not after_option and (bare or not flag.lstrip("+~")):  # a word, or no key before =
            runnable = [name for name in CLI_SUBCOMMANDS if name != "predict"]  # (predict: refused, cli_check.py)
            raise EarlyRefusal(f"{arg}: not a setting; Hydra takes KEY=VALUE (python train.py model=jsa ...), LightningCLI a "
                               f"subcommand first: {', '.join(runnable)} (python train.py fit --model=JSA ...)"
                               f"{did_you_mean(arg, runnable) if bare else ''}")
        if hydra_option(arg)[0] == "--experimental-rerun":
            raise EarlyRefusal(f"{flag}: a run's config.pickle is never unpickled here (a stranger's file could run "
                               "code); to rerun a run, pass the overrides in its .hydra/overrides.yaml")
        if arg.startswith("--") and len(flag) > 2 and not any(option.startswith(flag) for option in HYDRA_OPTIONS):
            hydra = " (in Hydra, python train.py --cfg job prints the composed config)" if flag == "--print_config" else \
                " (Hydra takes key=value settings: python train.py --help)"
            raise EarlyRefusal(f"{flag} is an option of the LightningCLI front end, which needs a subcommand first: "
                               f"python train.py fit {arg}{hydra}")
    modes = hydra_modes(argv)
    if len(modes) > 1:  # Hydra's answer is a traceback
        raise EarlyRefusal(f"{' and '.join(sorted(modes))}: Hydra takes one of {', '.join(HYDRA_MODES)} at a time (--cfg job "
                           "prints the config of one job: leave out -m)")
    for value in hydra_option_values(argv, "--cfg"):
        if value not in ("job", "hydra", "all"):  # (Hydra answers with its usage text)
            raise EarlyRefusal(f"--cfg {value}: expected job (the run's config), hydra (Hydra's own) or all"
                               f"{did_you_mean(value, ['job', 'hydra', 'all'])}")
    check_config_search(argv)
    global composed_before_imports
    composed_before_imports = ((), [])  # (a refused command line leaves none)
    composed_before_imports = (tuple(argv), check_hydra(argv))
