"""`mlab grade`: a misnamed submission is named with the name the task reads; task parameters are taken from -T
or from the run folder graded."""
from __future__ import annotations

import json

import pytest

from tests.fixtures.cli import mlab, mlab_in_process
from tests.fixtures.param_task import param_task


def test_grade_of_a_misnamed_file_says_what_name_the_task_reads(tmp_path):
    wrong = tmp_path / "predictions.csv"
    wrong.write_text("id,label\n0,1\n")
    graded = mlab("grade", "lite/wine", wrong, "--sandbox", "local",
                  home=tmp_path / "home")
    assert graded.returncode == 1
    assert "the script" not in graded.stdout, graded.stdout
    assert "submission.csv" in graded.stdout and "predictions.csv" in graded.stdout, graded.stdout


@pytest.mark.slow  # over 2 s on two cores
def test_grade_takes_task_parameters_and_a_run_folders_own(tmp_path):
    param_task(tmp_path)
    home = tmp_path / "home"
    sub = tmp_path / "submission.csv"
    sub.write_text("id,y\n" + "".join(f"{i},1\n" for i in range(7, 12)))
    graded = mlab_in_process("grade", "./shifted", sub, "-T", "rows=7", "--json", "--sandbox", "local", cwd=tmp_path,
                             home=home)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert json.loads(graded.stdout)["score"] == 0.0 and json.loads(graded.stdout)["task_params"] == {"rows": 7}
    defaults = mlab_in_process("grade", "./shifted", sub, "--sandbox", "local", cwd=tmp_path, home=home)
    assert defaults.returncode == 1  # the defaults' answers have other ids

    made = mlab("run", "--task", "./shifted", "--agent", "baseline", "--run-dir", "runs/seven", "-T", "rows=7",
                "--sandbox", "local", cwd=tmp_path, home=home)
    assert made.returncode == 0, made.stderr
    for given in ("runs/seven", "runs/seven/workspace", "runs/seven/workspace/submission.csv"):
        graded = mlab_in_process("grade", "./shifted", given, "--sandbox", "local", cwd=tmp_path, home=home)
        assert graded.returncode == 0, (given, graded.stdout, graded.stderr)
        assert "mse = 1 " in graded.stdout and "rows=7 (the run's)" in graded.stdout, graded.stdout
