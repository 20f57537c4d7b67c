"""`mlab eval` says what is wrong in one line and names every run, and a run's failure is the same word in eval,
runs, report and the viewer (issue 44 items 5 and 18)."""
from __future__ import annotations

import functools
import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures import cli
from tests.fixtures.cli import cli_env

mlab = functools.partial(cli.mlab, entry=cli.entry("tests.fixtures.verdict_tasks"))


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two runs on a task whose answers lie in the home: one that submitted nothing (a final answer at once),
    one that wrote three lines."""
    root = tmp_path_factory.mktemp("agree")
    home, runs = root / "home", root / "runs"
    for name, steps in (("empty", 1), ("three", 3)):
        ok(mlab("run", "--task", "fixture/with-reference", "--agent", "fixture-appender", "--run-dir", runs / name,
                "--max-steps", 10, "--agent-option", f"steps={steps}", home=home))
    return home, runs


@pytest.mark.slow
def test_eval_in_a_home_without_the_task_says_so_in_one_line(tmp_path):
    """lite/digits scores against answers in the task home: in another home they are missing."""
    ok(cli.mlab("run", "--task", "lite/digits", "--agent", "baseline", "--run-dir", tmp_path / "run", "--max-steps", 3,
                home=tmp_path / "home"))
    result = cli.mlab("eval", tmp_path / "run", home=tmp_path / "other-home")
    assert result.returncode == 2, result.stdout + result.stderr
    line, = result.stderr.strip().splitlines()
    assert line.startswith("mlab: error: lite/digits is not prepared in this task home")
    assert str(tmp_path / "other-home") in line and "MLAB_HOME" in line
    assert "FileNotFoundError" not in result.stdout + line and "hidden" not in result.stdout + line


@pytest.mark.slow
def test_a_run_without_a_submission_fails_by_the_same_word_everywhere(folder):
    home, runs = folder
    evaluated = {Path(r["run_dir"]).name: r for r in json.loads(ok(mlab("eval", "--json", runs, home=home)))}
    listed = {r["run"]: r for r in json.loads(ok(mlab("runs", "--json", runs, home=home)))}
    reported = {r["key"]: r for r in json.loads(ok(mlab("report", runs, "--json", "--no-plots", "--no-html",
                                                        home=home)))["runs"]}
    view = subprocess.Popen([*cli.entry("tests.fixtures.verdict_tasks"), "view", str(runs)], env=cli_env(home=home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = next(line.split()[1] for line in view.stdout if line.startswith("open http://"))
        with urllib.request.urlopen(url.rstrip("/") + "/api/runs", timeout=60) as answer:
            shown = {r["id"]: r for r in json.loads(answer.read())["runs"]}
    finally:
        view.kill()
        view.wait()
        view.stdout.close()
        view.stderr.close()
    for name, failure in (("empty", "no_submission"), ("three", None)):
        assert [evaluated[name]["failure"], listed[name]["failure"], reported[name]["failure"],
                shown[name]["failure"]] == [failure] * 4, name


@pytest.mark.slow
def test_eval_of_the_run_folder_it_is_in_names_the_run(folder):
    home, runs = folder
    table = ok(mlab("eval", ".", cwd=runs / "three", home=home, env={"PYTHONPATH": str(cli.REPO)}))
    row = next(line for line in table.splitlines() if "fixture/with-reference" in line)
    assert row.split("│")[1].strip() == "three", table
