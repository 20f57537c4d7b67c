"""`mlab check-task` records the reference score "of reference" needs, whatever the order a researcher works in
(issue 44 item 4): on a task already prepared it checks the data the task was prepared from (never a download),
or the prepared data itself when there is no local copy; and a later first prepare keeps the reference it
recorded."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli import mlab_in_process
from tests.fixtures.mlagentbench import tabular

TASK = "mlagentbench/house-price"
NO_DATA_DIR = {"MLAB_DATA_DIR": None, "KAGGLE_USERNAME": None, "KAGGLE_KEY": None}


def reference(home: Path) -> float | None:
    from mlab.core.run.scoring import recorded_reference
    from mlab.core.run.taskdata import TaskHome

    return recorded_reference(TaskHome(home), TASK)


def ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.slow
def test_check_task_of_a_prepared_task_checks_the_data_it_was_prepared_from(tmp_path):
    source = tabular.house_prices(tmp_path / "src", rows=60)
    home = tmp_path / "home"
    ok(mlab_in_process("prepare", TASK, "--data-dir", source, home=home, env=NO_DATA_DIR))
    checked = mlab_in_process("check-task", TASK, "--json", home=home, env=NO_DATA_DIR)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report, = json.loads(checked.stdout)
    assert report["status"] == "passed" and report["steps"]["reproducible prepare"] == "ok"
    assert "kaggle" not in checked.stdout.lower() + checked.stderr.lower()
    assert reference(home) == pytest.approx(report["reference"])


@pytest.mark.slow
def test_check_task_of_a_task_prepared_without_a_local_copy_checks_the_prepared_data(tmp_path):
    """A task downloaded when prepared (prepared.json names no source) has no copy to prepare again from: the
    starter and the reference run on the prepared data, and the reproducible prepare is said to be unchecked."""
    source = tabular.house_prices(tmp_path / "src", rows=60)
    home = tmp_path / "home"
    ok(mlab_in_process("prepare", TASK, "--data-dir", source, home=home, env=NO_DATA_DIR))
    record = home / "tasks" / "mlagentbench__house-price" / "prepared.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "source": None}))
    checked = mlab_in_process("check-task", TASK, "--json", home=home, env=NO_DATA_DIR)
    report, = json.loads(checked.stdout)
    assert checked.returncode == 3, checked.stdout + checked.stderr  # passed, one step not checked
    assert report["status"] == "passed" and report["steps"]["reference"] == "ok", report
    assert report["steps"]["reproducible prepare"].startswith("not checked")
    assert reference(home) == pytest.approx(report["reference"])


@pytest.mark.slow
def test_a_first_prepare_after_check_task_keeps_the_reference_it_recorded(tmp_path):
    source = tabular.house_prices(tmp_path / "src", rows=60)
    home = tmp_path / "home"
    report, = json.loads(ok(mlab_in_process("check-task", TASK, "--data-dir", source, "--json", home=home,
                                            env=NO_DATA_DIR)))
    assert reference(home) == pytest.approx(report["reference"])
    ok(mlab_in_process("prepare", TASK, "--data-dir", source, home=home, env=NO_DATA_DIR))
    assert reference(home) == pytest.approx(report["reference"])
    # prepared again from other data, the reference no longer applies
    other = tabular.house_prices(tmp_path / "other", rows=60, seed=1)
    ok(mlab_in_process("prepare", TASK, "--data-dir", other, "--force", home=home, env=NO_DATA_DIR))
    assert reference(home) is None
