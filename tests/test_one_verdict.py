"""One verdict: `mlab eval`, `grade`, `runs` and `report` give a run the same score, baseline, baseline source,
improvement, success, placeholder note and reference ratio, whether it sits in a bench, a folder of runs or alone."""
from __future__ import annotations

import functools
import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures import cli
from tests.fixtures.cli import cli_env

# The CLI with the verdict fixture tasks registered.
mlab = functools.partial(cli.mlab, entry=cli.entry("tests.fixtures.verdict_tasks"))
VERDICT = ("score", "baseline", "baseline_source", "baseline_refused", "baseline_note", "valid", "improvement",
           "success", "success_margin", "reference_score", "of_reference")
SPENT = ("steps", "llm_calls", "tokens", "cost_usd")


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder of runs (no bench) on a task with a fixed baseline (2 lines), one with a measured baseline and a
    recorded reference score (check-task: the starter writes 1 line, the reference 5) and one whose fixed baseline
    is a placeholder (1e10, lower is better)."""
    root = tmp_path_factory.mktemp("verdict")
    home = root / "home"
    ok(mlab("baseline", "fixture/with-reference", "--runs", "1", home=home))
    ok(mlab("check-task", "fixture/with-reference", "--home", home, home=home))  # records the reference score
    runs = root / "runs"
    for task, agent, steps, where in (("fixture/fixed-two", "fixture-appender", 4, "fixed/up"),
                                      ("fixture/fixed-two", "baseline", 0, "fixed/starter"),
                                      ("fixture/with-reference", "fixture-appender", 3, "measured/up"),
                                      ("fixture/with-reference", "baseline", 0, "measured/starter"),
                                      ("fixture/placeholder", "fixture-appender", 3, "placeholder")):
        options = ["--agent-option", f"steps={steps}"] if steps else []
        ok(mlab("run", "--task", task, "--agent", agent, "--run-dir", runs / where, "--max-steps", 10,
                *options, home=home))
    return root, home, runs


def by_name(rows, key="run_dir"):
    return {Path(r[key]).name if key == "run_dir" else r[key]: r for r in rows}


@pytest.mark.slow
def test_eval_grade_runs_and_report_agree_on_every_run_of_a_folder(folder):
    root, home, runs = folder
    evaluated = {Path(r["run_dir"]).relative_to(runs).as_posix(): r
                 for r in json.loads(ok(mlab("eval", "--json", runs, home=home)))}
    listed = {r["run"]: r for r in json.loads(ok(mlab("runs", "--json", runs, home=home)))}
    reported = {r["key"]: r for r in json.loads(ok(mlab("report", runs, "--json", "--no-plots", "--no-html",
                                                        home=home)))["runs"]}
    assert evaluated.keys() == listed.keys() == reported.keys() == {
        "fixed/up", "fixed/starter", "measured/up", "measured/starter", "placeholder"}
    for name, row in evaluated.items():
        graded = json.loads(ok(mlab("grade", row["task"], runs / name / "workspace", "--json", home=home)))
        mine = {k: row[k] for k in VERDICT}
        assert mine == {k: listed[name][k] for k in VERDICT}, name
        assert mine == {k: reported[name][k] for k in VERDICT}, name
        assert mine == {k: graded[k] for k in VERDICT}, name
        assert {k: row[k] for k in SPENT} == {k: listed[name][k] for k in SPENT}, name
    fixed, starter = evaluated["fixed/up"], evaluated["fixed/starter"]
    # the task's fixed baseline outside a bench, in every command (the report said "missing" before)
    assert (fixed["score"], fixed["baseline"], fixed["improvement"], fixed["success"]) == (3.0, 2.0, 0.5, True)
    assert fixed["baseline_source"].startswith("fixed") and starter["success"] is False
    measured = evaluated["measured/up"]
    assert measured["baseline"] == 1.0 and measured["baseline_source"].startswith("measured")
    assert measured["reference_score"] == 5.0 and measured["of_reference"] == pytest.approx(2 / 5)
    assert evaluated["measured/starter"]["of_reference"] == pytest.approx(1 / 5)
    assert fixed["of_reference"] is None and fixed["baseline_note"] is None  # no reference recorded: no ratio
    placeholder = evaluated["placeholder"]
    assert placeholder["success"] is True and placeholder["baseline_note"] == (
        "fixed baseline 1e+10: any valid submission succeeds")
    assert all(r["llm_calls"] == 0 and r["steps"] >= 1 for r in evaluated.values())


@pytest.mark.slow
def test_every_terminal_output_labels_a_placeholder_success(folder):
    _root, home, runs = folder
    graded = ok(mlab("grade", "fixture/placeholder", runs / "placeholder" / "workspace", home=home))
    assert "a success" in graded and "any valid submission succeeds" in graded
    assert "any valid submission succeeds" in ok(mlab("eval", runs / "placeholder", home=home))
    assert "any valid submission succeeds" in ok(mlab("runs", runs, home=home))
    report = ok(mlab("report", runs, "--no-plots", "--no-html", home=home))
    assert "note: fixture/placeholder: fixed baseline 1e+10: any valid submission succeeds" in report
    assert "of" in report and "reference" in report and "model" in report and "calls" in report


def viewer_rows(runs: Path, home: Path) -> dict[str, dict]:
    """The run list `mlab view` serves for the folder, by run id."""
    view = subprocess.Popen([*cli.entry("tests.fixtures.verdict_tasks"), "view", str(runs)], env=cli_env(home=home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = next((line.split()[1] for line in view.stdout if line.startswith("open http://")), None)
        assert url, view.stderr.read()
        with urllib.request.urlopen(url.rstrip("/") + "/api/runs", timeout=60) as answer:
            return {r["id"]: r for r in json.loads(answer.read())["runs"]}
    finally:
        view.kill()
        view.wait()
        view.stdout.close()
        view.stderr.close()


@pytest.mark.slow
def test_the_viewer_shows_the_verdict_eval_gives_a_run_outside_a_bench(folder):
    _root, home, runs = folder
    evaluated = {Path(r["run_dir"]).relative_to(runs).as_posix(): r
                 for r in json.loads(ok(mlab("eval", "--json", runs, home=home)))}
    shown = viewer_rows(runs, home)
    assert shown.keys() == evaluated.keys()
    for name, row in evaluated.items():
        assert {k: shown[name][k] for k in ("baseline", "baseline_note", "improvement", "success")} == {
            k: row[k] for k in ("baseline", "baseline_note", "improvement", "success")}, name
    assert shown["fixed/up"]["success"] is True and shown["fixed/up"]["baseline"] == 2.0


@pytest.mark.slow
def test_a_plain_check_task_records_the_reference_runs_are_measured_against(tmp_path):
    """check-task in its scratch home (no --home) keeps the reference score in MLAB_HOME: "of reference" then has a
    figure without a special invocation."""
    home = tmp_path / "home"
    ok(mlab("baseline", "fixture/with-reference", "--runs", "1", home=home))
    ok(mlab("check-task", "fixture/with-reference", home=home))
    ok(mlab("run", "--task", "fixture/with-reference", "--agent", "fixture-appender", "--run-dir", tmp_path / "run",
            "--max-steps", 10, "--agent-option", "steps=3", home=home))
    row, = json.loads(ok(mlab("eval", "--json", tmp_path / "run", home=home)))
    assert row["reference_score"] == 5.0 and row["of_reference"] == pytest.approx(2 / 5)
