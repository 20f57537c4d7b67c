"""Tests a task pack author would write: the Task contract in-process, then `mlab check-task` and a real run
through the CLI."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core import InvalidSubmission, PrepareContext
from mlab_example_tasks.line_fit import LineFitTask


@pytest.fixture
def prepared(tmp_path):
    task = LineFitTask()
    public, hidden = tmp_path / "public", tmp_path / "hidden"
    public.mkdir()
    hidden.mkdir()
    task.prepare(PrepareContext(public_dir=public, hidden_dir=hidden, log=lambda _msg: None))
    return task, public, hidden


def write_submission(workspace: Path, rows) -> None:
    with open(workspace / "submission.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "y"])
        writer.writerows(rows)


def test_answers_stay_hidden(prepared):
    _task, public, hidden = prepared
    assert sorted(p.name for p in public.iterdir()) == ["test.csv", "train.csv", "train.py"]
    assert sorted(p.name for p in hidden.iterdir()) == ["answers.csv"]
    assert "y" not in (public / "test.csv").read_text().splitlines()[0].split(",")


def test_prepare_is_reproducible(prepared, tmp_path):
    # The same workspace and answers at every prepare: a baseline measured once holds on every machine.
    task, public, hidden = prepared
    again = tmp_path / "again"
    (again / "public").mkdir(parents=True)
    (again / "hidden").mkdir()
    task.prepare(PrepareContext(public_dir=again / "public", hidden_dir=again / "hidden", log=lambda _msg: None))
    for name in ("train.csv", "test.csv", "train.py"):
        assert (again / "public" / name).read_bytes() == (public / name).read_bytes()
    assert (again / "hidden" / "answers.csv").read_bytes() == (hidden / "answers.csv").read_bytes()


def test_starter_gives_a_valid_score_and_perfect_answers_score_zero(prepared):
    task, public, hidden = prepared
    subprocess.run([sys.executable, "train.py"], cwd=public, check=True, capture_output=True, timeout=60)
    starter = task.evaluate(public, hidden)
    assert math.isfinite(starter) and starter > 0
    with open(hidden / "answers.csv", newline="") as f:
        write_submission(public, [(row["id"], row["y"]) for row in csv.DictReader(f)])
    assert task.evaluate(public, hidden) == 0.0


@pytest.mark.parametrize("content", [
    None,                              # no file at all
    "id,prediction\n0,1.0\n",          # wrong columns
    "id,y\n0,not-a-number\n",          # unparsable value
    "id,y\n0,nan\n",                   # not finite
    "id,y\n0,1.0\n",                   # rows missing
])
def test_unusable_submissions_are_invalid(prepared, content):
    task, public, hidden = prepared
    if content is not None:
        (public / "submission.csv").write_text(content)
    with pytest.raises(InvalidSubmission):
        task.evaluate(public, hidden)


def test_reference_solution_beats_the_starter_by_the_margin(tmp_path):
    # `mlab check-task`: prepare in a scratch home (and again in another: the files must match), run starter
    # and reference in the sandbox, compare.
    result = subprocess.run([sys.executable, "-m", "mlab.cli.main", "check-task", "example/line-fit",
                             "--home", str(tmp_path / "home"), "--timeout", "60", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    [report] = json.loads(result.stdout)
    assert report["status"] == "passed", report["reason"]
    assert report["steps"]["reproducible prepare"] == "ok"
    assert report["reference"] < report["baseline"] and report["improvement"] > report["margin"]


def test_a_whole_run_through_the_cli(tmp_path):
    # The way mlab itself will use the pack: discovered through its entry point, run in the sandbox.
    env = {**os.environ, "MLAB_HOME": str(tmp_path / "home")}
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "mlab.cli.main", "run", "--task", "example/line-fit",
                             "--agent", "baseline", "--run-dir", str(run_dir)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished"
    assert math.isfinite(trace["final_score"]) and trace["final_score"] > 0
