"""The places a command names on disk (launch/checks/paths.py) that tests/launch/checks/test_precheck.py's table does
not reach: a run name that is a path, Lightning's checkpoint names refused, URLs left to the run, each value of a sweep,
and a config file in any spelling (it may set log_dir and data_dir) leaving those to be checked once parsed; a config
folder (-cd) checked like any command, Hydra's --cfg alone printing without checks."""

from __future__ import annotations

import pytest

from launch.checks.early import refuse_early
from launch.checks.paths import PathRefusal, check_paths


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATA_DIR", raising=False)


@pytest.mark.parametrize("name", ["../../outside", "a/b", "..", ".", "a\\b", ""])
def test_a_run_name_that_is_a_path_is_refused(name):
    with pytest.raises(PathRefusal, match=r"expected a name \(no '/', not '.' or '..'\): runs are written under log_dir"):
        check_paths([f"run_name={name}"], cli=False, data_class=None)
    check_paths(["run_name=mine"], cli=False, data_class=None)


@pytest.mark.parametrize("argv, cli", [(["test", "--ckpt_path=best"], True), (["fit", "--ckpt_path=last"], True),
                                       (["ckpt_path=last"], False), (["-m", "ckpt_path=hpc"], False)])
def test_lightnings_names_for_a_checkpoint_of_the_trainers_run_are_refused_with_the_file_to_give(argv, cli, tmp_path):
    option = "--" * cli + "ckpt_path="
    with pytest.raises(PathRefusal, match=rf"^{option}\w+: Lightning's name for a checkpoint of the trainer's own run.*"
                                          r"give the checkpoint file: logs/tensorboard/<run>/version_N/checkpoints/last\.ckpt"):
        check_paths(argv, cli=cli, data_class=None)
    (tmp_path / "last").write_bytes(b"")  # a file of that name is a file
    check_paths(["ckpt_path=last"], cli=False, data_class=None)


def test_a_url_is_left_to_the_run():
    check_paths(["ckpt_path=http://127.0.0.1:9/last.ckpt"], cli=False, data_class=None)  # refused unfetched, once read


def test_each_value_of_a_sweep_is_checked(tmp_path):
    (tmp_path / "a.ckpt").write_bytes(b"")
    with pytest.raises(PathRefusal, match="^ckpt_path=nope.ckpt: no such file"):
        check_paths(["-m", "ckpt_path=a.ckpt,nope.ckpt"], cli=False, data_class=None)
    (tmp_path / "afile").write_text("")
    with pytest.raises(PathRefusal, match="^log_dir=afile: afile is a file, not a directory"):
        check_paths(["-m", "log_dir=runs,afile"], cli=False, data_class=None)


@pytest.mark.parametrize("argv, cli", [(["log_dir="], False), (["log_dir=''"], False), (["-m", "log_dir=runs,"], False),
                                       (["fit", "--log_dir="], True), (["fit", "--log_dir", ""], True)])
def test_an_empty_log_dir_is_refused(argv, cli):
    """Hydra would put its own directory, ${log_dir}/hydra, at /hydra; LightningCLI would write under the default."""
    with pytest.raises(PathRefusal, match=r"log_dir=\S*: an empty path; give a directory the run can write to$"):
        check_paths(argv, cli=cli, data_class=None)


@pytest.mark.parametrize("config", [["-c", "run.yaml"], ["-crun.yaml"], ["--config=run.yaml"], ["--conf", "run.yaml"]])
def test_a_config_file_in_any_spelling_may_set_log_dir_and_data_dir(config, tmp_path, monkeypatch):
    (tmp_path / "logs").write_text("a file where the default log_dir would be")
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "nothing-here"))
    check_paths(["fit", *config], cli=True, data_class=None)
    with pytest.raises(PathRefusal, match=r"^--log_dir=logs \(the default\): logs is a file, not a directory"):
        check_paths(["fit"], cli=True, data_class=None)


def test_an_option_after_a_flag_alone_is_read_as_an_option():
    """`--trainer.fast_dev_run --ckpt_path nope.ckpt`: a flag takes no value that starts with '-' (arguments.option_values)."""
    with pytest.raises(PathRefusal, match=r"^--ckpt_path=nope\.ckpt: no such file"):
        check_paths(["fit", "--trainer.fast_dev_run", "--ckpt_path", "nope.ckpt"], cli=True, data_class=None)


@pytest.mark.parametrize("config_folder", [["-cd", "mine"], ["--config-dir=mine"], ["--config-d", "mine"]])
def test_a_config_folder_is_checked_like_any_command_only_cfg_prints_without_checks(config_folder, tmp_path):
    """Hydra's -cd adds a config folder and runs the command; only -c (--cfg, -cjob) prints the config and runs nothing."""
    (tmp_path / "mine").mkdir()
    assert refuse_early([*config_folder, "ckpt_path=nope.ckpt"], cli=False).startswith("ckpt_path=nope.ckpt: no such file")
    assert "add -m" in refuse_early([*config_folder, "hydra/launcher=joblib"], cli=False)
    assert refuse_early(["-cjob", "ckpt_path=nope.ckpt"], cli=False) is None
    assert refuse_early(["--cfg", "job", "hydra/launcher=joblib"], cli=False) is None
