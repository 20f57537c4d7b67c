"""Issue 34, item 7: the smaller defects a researcher met, one test each."""
from __future__ import annotations

import json
import re
import subprocess
import time

from tests.fixtures.cli import REPO, cli_env, entry, mlab

BENCH = entry("tests.fixtures.gated_run", "mlab")  # the CLI with fixture/counter and fixture-appender


def _appender_run(tmp_path, home):
    run_dir = tmp_path / "my-run"
    done = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", run_dir,
                "--sandbox", "local", entry=BENCH, home=home)
    assert done.returncode == 0, done.stderr
    return run_dir


def test_new_task_pack_prints_a_path_pip_installs_not_a_name_it_looks_up(tmp_path):
    made = mlab("new-task", "mypack", "--pack", "mypack", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "pip install ./mypack;" in made.stdout, made.stdout


def test_grade_of_a_misnamed_file_says_what_name_the_task_reads(tmp_path):
    wrong = tmp_path / "predictions.csv"
    wrong.write_text("id,label\n0,1\n")
    graded = mlab("grade", "lite/wine", wrong, "--sandbox", "local",
                  home=tmp_path / "home")
    assert graded.returncode == 1
    assert "the script" not in graded.stdout, graded.stdout
    assert "submission.csv" in graded.stdout and "predictions.csv" in graded.stdout, graded.stdout


def test_unpriced_model_costs_are_never_a_made_up_zero():
    from mlab.cli.view import cost_cell, running_table
    from mlab.core.bench.driver import BenchStatus, RunProgress

    assert cost_cell(0, 0, 0.0) == "-"  # no model at all
    assert cost_cell(3, 3, 0.0) == "unpriced"
    assert cost_cell(3, 1, 0.25) == "$0.2500 + unpriced"
    assert cost_cell(3, 0, 0.25) == "$0.2500"
    status = BenchStatus(total=2)
    status.add_cost(None)
    assert "$0.0000" not in status.cost_text() and "unknown" in status.cost_text()
    status.running = [RunProgress(key="t/a/m/0", step=2, max_steps=5, calls=2, unpriced_calls=2, started=1.0)]
    cells = [str(cell) for column in running_table(status, now=2.0).columns for cell in column._cells]
    assert "unpriced" in cells and not any(c.startswith("$0.0000") for c in cells)


def test_eval_calls_a_run_whose_process_is_gone_interrupted(tmp_path):
    home = tmp_path / "home"
    run_dir = _appender_run(tmp_path, home)
    trace = json.loads((run_dir / "trace.json").read_text())
    trace["status"] = "running"  # what a killed `mlab run` leaves
    (run_dir / "trace.json").write_text(json.dumps(trace))
    shown = mlab("eval", run_dir, entry=BENCH, home=home)
    assert shown.returncode == 0, shown.stderr
    assert "interrupted" in shown.stdout and "running" not in shown.stdout, shown.stdout


def test_runs_names_a_single_run_by_its_folder(tmp_path):
    home = tmp_path / "home"
    run_dir = _appender_run(tmp_path, home)
    listed = json.loads(mlab("runs", run_dir, "--json", entry=BENCH, home=home).stdout)
    assert [r["run"] for r in listed] == ["my-run"]


def test_check_task_of_a_missing_folder_says_the_folder_does_not_exist(tmp_path):
    checked = mlab("check-task", str(tmp_path / "my-task"))
    assert checked.returncode == 2
    assert "does not exist" in checked.stderr and "unknown task" not in checked.stderr, checked.stderr
    (tmp_path / "empty").mkdir()
    checked = mlab("check-task", str(tmp_path / "empty"))
    assert checked.returncode == 2 and "without a task.yaml" in checked.stderr, checked.stderr


def test_view_of_a_folder_not_made_yet_waits_for_it(tmp_path):
    later = tmp_path / "runs" / "later"
    proc = subprocess.Popen([*entry("mlab.cli.main"), "view", str(later)], cwd=REPO, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert "does not exist yet" in first and "waiting" in first, first
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting, not refused
        later.mkdir(parents=True)
        deadline = time.monotonic() + 60
        seen = ""
        while "open http://127.0.0.1:" not in seen and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        assert "open http://127.0.0.1:" in seen, seen
    finally:
        proc.kill()
        proc.wait()


def test_help_summaries_are_whole_sentences():
    shown = mlab("--help", env={"COLUMNS": "200"})
    commands = shown.stdout[shown.stdout.index("Commands:"):]
    assert not re.search(r"\.\.\.\s*$", commands, re.M), commands
    assert "e.g...." not in commands and "with..." not in commands
