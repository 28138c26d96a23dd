"""The bounds and rules of launch/checks/received_config.py that the command-line cases (benchmarks/robustness/
bad_inputs.py's config_source_cases, run as real commands in tests/checkpoints/test_received_configs.py) do not reach:
an alias inside its own node, a tag on a key, nesting and file-count bounds, the groups a Hydra defaults list names, a
linked group folder, a received file put into configs/, path settings that are files, an unset environment variable."""

from __future__ import annotations

import pytest

from benchmarks.robustness.bad_inputs import BOMB
from launch.checks import received_config
from launch.checks.received_config import received_files, refuse_received_configs
from tests.conftest import says

STRANGER = "_target_: strangers_module.Thing\n"


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LATENT_ZOO_TRUST", raising=False)


def write(files: dict[str, str]) -> None:
    from pathlib import Path

    for name, text in files.items():
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_text(text)


@pytest.mark.parametrize("text, said", [
    ("a: &x [1, *x]\n", "received.yaml: its YAML aliases expand to more than 100000 nodes"),  # for ever
    ("? !!python/name:strangers_module.make ''\n: 1\n", "received.yaml: line 1 carries the YAML tag"),  # on a key
])
def test_a_file_that_would_expand_for_ever_or_construct_a_key_is_refused(text, said):
    write({"received.yaml": text})
    assert said in refuse_received_configs(["fit", "-c", "received.yaml"], cli=True)


def test_a_file_that_is_not_yaml_is_refused_naming_the_line_and_the_fix():
    write({"received.yaml": "trainer:\n  max_epochs: 1\n model: x: y\n"})
    assert refuse_received_configs(["fit", "-c", "received.yaml"], cli=True) == (
        "config file received.yaml is not valid YAML at line 3, column 2: expected <block end>, but found '<block mapping "
        "start>'; fix it there (often the indentation, a missing space after ':' or an unclosed quote or bracket)")


def test_nested_config_files_are_bounded_in_depth_and_refused_when_they_loop():
    write({f"level{i}.yaml": f"model: level{i + 1}.yaml\n" for i in range(8)} | {"level8.yaml": "{}\n"})
    assert refuse_received_configs(["fit", "-c", "level1.yaml"], cli=True) is None  # eight files: the bound
    assert "more than 8 levels deep" in refuse_received_configs(["fit", "-c", "level0.yaml"], cli=True)
    write({"level8.yaml": "model: level3.yaml\n"})
    assert "names itself again through its nested config files (a loop)" in \
        refuse_received_configs(["fit", "-c", "level4.yaml"], cli=True)


def test_the_files_one_command_reads_are_bounded(monkeypatch):
    monkeypatch.setattr(received_config, "MAX_RECEIVED_FILES", 3)
    write({f"received/experiment/e{i}.yaml": "{}\n" for i in range(4)})
    assert "the command would read more than 3 config files" in refuse_received_configs(["-cd", "received"], cli=False)


@pytest.mark.parametrize("defaults", ["- /mine: evil", "- override /mine@callbacks.x: evil", "- optional mine: evil"])
def test_a_group_a_hydra_defaults_list_names_is_read(defaults):
    """Not one of configs/'s groups: reached only through the defaults list of a file in the user's folder."""
    write({"received/experiment/x.yaml": f"# @package _global_\ndefaults:\n  {defaults}\n", "received/mine/evil.yaml": STRANGER})
    assert refuse_received_configs(["-cd", "received", "experiment=x"], cli=False).startswith(
        "Hydra config received/mine/evil.yaml: _target_ names 'strangers_module.Thing'")


def test_a_hydra_group_folder_that_is_a_link_is_read_through_it(tmp_path):
    write({"elsewhere/bomb.yaml": "# @package _global_\n" + BOMB})
    (tmp_path / "received").mkdir()
    (tmp_path / "received" / "experiment").symlink_to(tmp_path / "elsewhere")
    assert "aliases expand" in refuse_received_configs(["hydra.searchpath=[file://received]", "experiment=bomb"], cli=False)


def test_a_received_file_put_into_configs_is_read_when_chosen(tmp_path, monkeypatch):
    monkeypatch.setattr(received_config, "CONFIGS", tmp_path / "configs")
    write({"configs/experiment/received.yaml": "# @package _global_\nthing:\n  " + STRANGER})
    assert refuse_received_configs(["experiment=received"], cli=False).startswith(
        f"Hydra config {tmp_path / 'configs' / 'experiment' / 'received.yaml'}: thing._target_ names 'strangers_module.Thing'")
    assert refuse_received_configs(["experiment=mine"], cli=False) is None  # not chosen: not read


def test_what_hydra_reads_and_imports_is_listed():
    write({"received/model/mine.yaml": "_target_: models.VAE\n", "received/trainer/big.yaml": "_target_: lightning.Trainer\n",
           "received/notes/readme.yaml": STRANGER})  # notes/ is no group Hydra reads here
    found = received_files(["--config-dir=received", "model=mine"], cli=False)
    assert sorted(found.files) == ["Hydra config received/model/mine.yaml", "Hydra config received/trainer/big.yaml"]
    assert sorted(found.imports) == ["Hydra config received/model/mine.yaml: _target_ = models.VAE",
                                     "Hydra config received/trainer/big.yaml: _target_ = lightning.Trainer"]


@pytest.mark.parametrize("argv", [["fit", "-c", "run.yaml"], ["test", "--ckpt_path=received.ckpt"],
                                  ["fit", "--model=VQVAE", "--model.autoencoder_checkpoint=big.ckpt"]])
def test_a_path_setting_names_a_file_that_is_neither_read_nor_imported(argv):
    """ckpt_path: received.ckpt is a file name (a dotted one), and the file is a checkpoint, not a config; a checkpoint
    larger than a config file may be is not read as one."""
    write({"run.yaml": "ckpt_path: received.ckpt\ntrainer:\n  default_root_dir: runs.v2\n", "received.ckpt": "PK\x03\x04 ]]] !!",
           "big.ckpt": "PK" * (1 << 20)})
    assert refuse_received_configs(argv, cli=True) is None


def test_an_unset_environment_variable_without_a_default_is_refused_naming_it(monkeypatch):
    monkeypatch.delenv("LATENT_ZOO_UNSET", raising=False)
    assert refuse_received_configs(["log_dir=${oc.env:LATENT_ZOO_UNSET}"], cli=False) == (
        "log_dir=${oc.env:LATENT_ZOO_UNSET}: the environment variable LATENT_ZOO_UNSET is not set; set it, or give a "
        "default: ${oc.env:LATENT_ZOO_UNSET,DEFAULT}")
    assert refuse_received_configs(["log_dir=${oc.env:LATENT_ZOO_UNSET,logs}"], cli=False) is None


@pytest.mark.parametrize("option", ["-cp", "--config-dir"])
def test_a_runs_hydra_record_given_as_a_config_folder_says_how_to_run_it_again(option, tmp_path):
    """A run's .hydra folder (config.yaml, hydra.yaml naming Hydra's own launcher, overrides.yaml) is a record: the line
    points at its overrides, not at LATENT_ZOO_TRUST."""
    record = tmp_path / "run" / ".hydra"
    record.mkdir(parents=True)
    (record / "config.yaml").write_text("model:\n  _target_: models.VAE\n")
    (record / "hydra.yaml").write_text("hydra:\n  launcher:\n    _target_: hydra._internal.core_plugins.basic_launcher.BasicLauncher\n")
    (record / "overrides.yaml").write_text("- model=vae\n")
    refusal = refuse_received_configs([option, str(record), "-cn", "config"], cli=False)
    assert refusal is not None and "\n" not in refusal and "LATENT_ZOO_TRUST" not in refusal
    says(refusal, f"{record} is the record of a run", str(record / "overrides.yaml"), "python train.py OVERRIDES", "--config-dir it ran with")
