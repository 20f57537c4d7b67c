"""`mlab grade` (a loose submission scored by the task's own scorer and judged against its baseline), `mlab runs`
(the runs under a folder), and `mlab eval` / `mlab report` on a folder of runs such as runs/demo after `make run`."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.cli import mlab, mlab_in_process

TASK = "lite/wine"


def one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlab: error:") and "Traceback" not in result.stderr, lines
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """What `make run` leaves for one task: a measured baseline and runs/demo/<task> (two runs here, one in a
    nested folder), made by the real commands."""
    root = tmp_path_factory.mktemp("demo")
    home = root / "home"
    assert mlab("baseline", TASK, "--runs", "1", home=home).returncode == 0
    for run in ("runs/demo/wine", "runs/demo/more/wine-2"):
        result = mlab("run", "--task", TASK, "--agent", "baseline", "--run-dir", root / run, home=home)
        assert result.returncode == 0, result.stderr
    answers = home / "tasks" / "lite__wine" / "hidden" / "answers.csv"
    return root, home, answers


@pytest.mark.slow
def test_grade_scores_a_file_and_a_folder_against_the_recorded_baseline(demo, tmp_path):
    root, home, answers = demo
    baseline = json.loads((home / "tasks" / "lite__wine" / "baseline.json").read_text())["score"]
    perfect = tmp_path / "submission.csv"
    shutil.copyfile(answers, perfect)  # every answer right: accuracy 1
    result = mlab("grade", TASK, perfect, "--json", home=home)
    assert result.returncode == 0, result.stderr
    graded = json.loads(result.stdout)
    assert (graded["task"], graded["metric"], graded["score"], graded["valid"]) == (TASK, "accuracy", 1.0, True)
    assert graded["baseline"] == pytest.approx(baseline) and graded["baseline_source"].startswith("measured")
    assert graded["improvement"] == pytest.approx((1.0 - baseline) / baseline) and graded["success"] is True

    # a run's workspace, given as a folder, scores what the run's own final snapshot scored
    trace = json.loads((root / "runs/demo/wine/trace.json").read_text())
    text = mlab("grade", "wine", root / "runs/demo/wine/workspace", home=home)
    assert text.returncode == 0, text.stderr
    assert f"accuracy = {trace['final_score']:.6g} (higher is better)" in text.stdout
    assert f"baseline: {baseline:.6g}" in text.stdout and "not a success" in text.stdout
    # grading reads the folder and never writes into it
    assert sorted(p.name for p in (root / "runs/demo/wine/workspace").iterdir()) == ["data", "submission.csv",
                                                                                      "train.py"]


@pytest.mark.slow
def test_grade_of_an_invalid_submission_says_why_and_exits_1(demo, tmp_path):
    _root, home, answers = demo
    short = tmp_path / "submission.csv"
    short.write_text("".join(answers.read_text().splitlines(keepends=True)[:5]))
    result = mlab("grade", TASK, short, "--json", home=home)
    assert result.returncode == 1
    graded = json.loads(result.stdout)
    assert graded["score"] is None and graded["valid"] is False and "invalid submission" in graded["error"]
    wrong_name = tmp_path / "predictions.csv"
    shutil.copyfile(answers, wrong_name)
    named = mlab("grade", TASK, wrong_name, home=home)
    assert named.returncode == 1 and "submission.csv" in named.stdout  # the task says which file it wants


def test_grade_refuses_bad_input_in_one_line(tmp_path):
    home = tmp_path / "home"
    one_line_error(mlab_in_process("grade", TASK, tmp_path / "missing.csv", home=home), "does not exist")
    (tmp_path / "s.csv").write_text("id,label\n")
    one_line_error(mlab_in_process("grade", "no-such-task", tmp_path / "s.csv", home=home),
                   "unknown task 'no-such-task'")


@pytest.mark.slow
def test_runs_lists_every_run_under_a_folder(demo):
    root, home, _answers = demo
    result = mlab("runs", "runs", "--json", home=home, cwd=root)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["run"] for r in rows] == ["demo/more/wine-2", "demo/wine"]
    for row in rows:
        trace = json.loads((root / "runs" / row["run"] / "trace.json").read_text())
        assert (row["status"], row["task"], row["agent"], row["steps"]) == ("finished", TASK, "baseline", 2)
        assert row["score"] == trace["final_score"] and row["end_reason"] == "final answer"
    table = mlab("runs", home=home, cwd=root)  # the default folder is runs
    assert table.returncode == 0 and "demo/more/wine-2" in table.stdout and "finished" in table.stdout


def test_runs_says_what_it_accepts(tmp_path):
    (tmp_path / "empty").mkdir()
    one_line_error(mlab_in_process("runs", tmp_path / "empty", home=tmp_path), "holds no runs", "trace.json",
                   "results.db")
    one_line_error(mlab_in_process("runs", tmp_path / "nope", home=tmp_path), "does not exist")


@pytest.mark.slow
def test_eval_and_report_take_a_folder_of_runs(demo, tmp_path):
    root, home, _answers = demo
    # The README's `mlab eval runs/*` after `make run`: runs/demo is a folder of runs, not a run.
    result = mlab("eval", "--json", *sorted((root / "runs").iterdir()), home=home)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert sorted(Path(r["run_dir"]).name for r in rows) == ["wine", "wine-2"]
    assert all(r["score"] is not None and r["baseline"] is not None for r in rows)

    report = mlab("report", root / "runs/demo", "--format", "csv", "--no-html", "--out", tmp_path / "r", home=home)
    assert report.returncode == 0, report.stderr
    per_task = tmp_path / "r" / "tables" / "per_task.csv"
    assert str(per_task) in report.stdout.splitlines()
    (row,) = list(csv.DictReader(per_task.open()))
    assert (row["task"], row["agent"], row["runs"]) == (TASK, "baseline", "2")
    assert (tmp_path / "r" / "success_rate.pdf").is_file()

    single = mlab("report", root / "runs/demo/wine", "--no-plots", "--no-html", "--out", tmp_path / "one",
                  home=home)
    assert single.returncode == 0, single.stderr
    assert "One run" in single.stdout and "lite/wine" in single.stdout  # one run: no intervals, no AUP


@pytest.mark.slow
def test_report_prints_latex_and_json_tables_and_keeps_files(demo, tmp_path):
    root, home, _answers = demo
    out = tmp_path / "r"
    latex = mlab("report", root / "runs/demo", "--format", "latex", "--no-plots", "--no-html", "--out", out,
                 home=home)
    assert latex.returncode == 0, latex.stderr
    assert latex.stdout.startswith(r"\begin{table}") and latex.stdout == (out / "tables" / "tables.tex").read_text()
    assert "tables.tex" in latex.stderr  # where it went, beside the data rather than in it
    as_json = mlab("report", root / "runs/demo", "--format", "json", "--no-plots", "--no-html", "--out", out,
                   home=home)
    assert as_json.returncode == 0, as_json.stderr
    tables = json.loads(as_json.stdout)
    assert tables["per_task"]["rows"][0]["runs"] == 2 and "overall" in tables and "thresholds" in tables
    one_line_error(mlab("report", root / "runs/demo", "--json", "--format", "csv", home=home), "--json", "--format")


@pytest.mark.slow
def test_runs_shows_a_run_whose_process_is_gone_as_interrupted(demo, tmp_path):
    root, home, _answers = demo
    killed = tmp_path / "runs" / "killed"
    shutil.copytree(root / "runs/demo/wine", killed, symlinks=True)
    trace = json.loads((killed / "trace.json").read_text())
    trace.update(status="running", end_reason=None)  # as a run killed mid-step leaves its trace
    (killed / "trace.json").write_text(json.dumps(trace))
    result = mlab("runs", tmp_path / "runs", "--json", home=home)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["status"] == "interrupted"
