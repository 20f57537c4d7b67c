"""One run harness: every command stages, confines and scores a task the same way, and judges scores by one rule."""
from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import threading

import pytest

from mlab.core.plugins.registry import load_registry
from mlab.core.run.baseline import bench_baseline, check_fixed_baseline
from mlab.core.run.checktask import check_task
from mlab.core.run.harness import Harness
from mlab.core.run.scoring import ScoreRule, judge
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.cli import entry, mlab
from tests.fixtures.harness import FixedZeroTask as FixedZeroTaskForCheck
from tests.fixtures.harness import (
    FlakyStarterTask,
    NeverSubmitsTask,
    ReferenceTask,
    SlowReferenceTask,
    harness_registry,
)

REGISTRY = "tests.fixtures.harness:harness_registry"

ONE_HARNESS = entry("tests.fixtures.harness")


def test_judge_is_direction_aware_and_uses_the_task_margin():
    assert judge(1.2, 1.0, ScoreRule()).success and not judge(1.08, 1.0, ScoreRule()).success
    assert judge(1.08, 1.0, ScoreRule(success_margin=0.05)).success
    lower = ScoreRule(higher_is_better=False)
    assert judge(8.0, 10.0, lower).improvement == pytest.approx(0.2) and judge(8.0, 10.0, lower).success
    # over a baseline that is no valid score, improvement is refused with a reason, never +-inf
    for bad in (0.0, -1.0, math.inf, math.nan):
        refused = judge(0.742, bad, ScoreRule())
        assert refused.valid and refused.improvement is None and not refused.success
        assert refused.refused and "not a valid score" in refused.refused
    assert judge(0.742, 0.5, ScoreRule()).refused is None and judge(0.742, None, ScoreRule()).refused is None
    assert judge(None, 1.0, ScoreRule()) == judge(0.0, 1.0, ScoreRule())  # no score and score 0: both invalid
    assert not judge(0.9, None, ScoreRule()).success and judge(0.9, None, ScoreRule()).improvement is None


JUDGED = ("baseline", "baseline_source", "improvement", "success", "refused")


@pytest.mark.slow
def test_eval_json_the_results_database_and_the_report_agree_on_every_run(tmp_path):
    """A bench with successful, unimproved, invalid and errored runs, against a fixed baseline, a 0 baseline a
    task declares (refused) and a baseline measured by the bench's own baseline agent over its valid runs only:
    `mlab eval --json`, the results database and `mlab report --json` give each run the same baseline,
    improvement and success."""
    bench = tmp_path / "bench"
    # fixture-scenario seeds 0-4: invalid format, out of memory, no submission, limits reached, agent crash
    result = mlab("bench", "--tasks", "fixture/fixed-zero,fixture/fixed-two,fixture/counter",
                  "--agents", "fixture-appender,baseline,fixture-scenario", "--runs", "5",
                  "--agent-option", "steps=3", "--workers", "2",
                  "--bench-dir", bench, "--registry", REGISTRY, home=tmp_path / "home", timeout=900,
                  entry=ONE_HARNESS)
    assert result.returncode == 0, result.stderr
    evaluated = mlab("eval", "--json", bench, home=tmp_path / "home", entry=ONE_HARNESS)
    assert evaluated.returncode == 0, evaluated.stderr
    steps = mlab("eval", "--json", "--intermediate", bench, home=tmp_path / "home", entry=ONE_HARNESS)
    assert steps.returncode == 0, steps.stderr
    reported = mlab("report", bench, "--json", "--no-plots", "--no-html", home=tmp_path / "home", entry=ONE_HARNESS)
    assert reported.returncode == 0, reported.stderr
    eval_rows = {os.path.basename(r["run_dir"]): r for r in json.loads(evaluated.stdout)}
    step_rows = {os.path.basename(r["run_dir"]): r for r in json.loads(steps.stdout)}
    assert all("best_step" in r for r in step_rows.values())
    for name, row in step_rows.items():  # --intermediate judges the final snapshot the same way
        assert {k: row[k] for k in (*JUDGED[:-1], "score")} == {k: eval_rows[name][k] for k in (*JUDGED[:-1], "score")}
    report_rows = {r["run_dir"].rstrip("/").split("/")[-1]: r for r in json.loads(reported.stdout)["runs"]}
    with sqlite3.connect(bench / "results.db") as db:
        db.row_factory = sqlite3.Row
        stored = {r["run_dir"].split("/")[-1]: dict(r) for r in db.execute(
            "SELECT runs.run_dir, runs.final_score, verdicts.* FROM runs JOIN verdicts ON key = run_key")}
    assert len(eval_rows) == 45 and eval_rows.keys() == report_rows.keys() == stored.keys()
    for name, ours in eval_rows.items():
        mine = {"score": ours["score"], **{k: ours["baseline_refused" if k == "refused" else k] for k in JUDGED}}
        reports = {"score": report_rows[name]["final_score"],
                   **{k: report_rows[name]["baseline_refused" if k == "refused" else k] for k in JUDGED}}
        database = {"score": stored[name]["final_score"], **{k: stored[name][k] for k in JUDGED}}
        database["success"] = bool(database["success"])
        assert mine == reports == database, name
    by_task = {}
    for row in eval_rows.values():
        by_task.setdefault((row["task"], row["agent"]), set()).add(
            (row["score"], row["baseline"], row["improvement"], row["success"]))
    # a task's 0 baseline is no valid score: improvement refused everywhere, never +inf
    assert by_task[("fixture/fixed-zero", "fixture-appender")] == {(2.0, 0.0, None, False)}
    assert {r["baseline_refused"] for r in eval_rows.values() if r["task"] == "fixture/fixed-zero"} == {
        "baseline 0 is not a valid score (it must be finite and above 0)"}
    assert by_task[("fixture/fixed-two", "fixture-appender")] == {(2.0, 2.0, 0.0, False)}
    assert by_task[("fixture/fixed-two", "baseline")] == {(1.0, 2.0, -0.5, False)}
    # counter's baseline: the bench's baseline-agent runs, all valid here (1 line each)
    assert by_task[("fixture/counter", "fixture-appender")] == {(2.0, 1.0, 1.0, True)}
    scenario = {row["score"] for row in eval_rows.values() if row["agent"] == "fixture-scenario"}
    assert None in scenario  # runs that submitted nothing or crashed are in the bench, judged invalid
    invalid = [r for r in eval_rows.values() if r["agent"] == "fixture-scenario" and r["score"] is None]
    assert invalid and all(r["improvement"] is None and not r["success"] for r in invalid)
    assert any(r["failure"] == "agent_error" for r in invalid)  # the agent raised: its own failure class
    groups = {(g["task"], g["label"]): g for g in json.loads(reported.stdout)["groups"]}
    assert groups[("fixture/fixed-zero", "fixture-appender")]["success_rate"]["mean"] == 0.0
    assert groups[("fixture/fixed-two", "fixture-appender")]["success_rate"]["mean"] == 0.0
    assert groups[("fixture/counter", "fixture-appender")]["success_rate"]["mean"] == 1.0


class _Listener:
    """A TCP server on the host's loopback that accepts whatever connects."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()


@pytest.mark.parametrize("task, sandbox, expected", [
    ("network-probe", "local", 2.0), ("network-probe", "bwrap", 12.0),
    ("network-needing-probe", "local", 1.0), ("network-needing-probe", "bwrap", 11.0)])
@pytest.mark.slow
def test_baseline_runs_the_starter_in_the_sandbox_the_user_chose(tmp_path, task, sandbox, expected):
    """The starter's view tells which sandbox ran it (its PID 1), and that the host's loopback is out of reach
    unless the task declares it needs the network at run time."""
    if sandbox == "bwrap":
        bwrap = load_registry().items["sandboxes"].get("bwrap")
        if bwrap is None or not bwrap.available()[0]:
            pytest.skip("bwrap is not installed or does not work here")
    home = tmp_path / "home"
    assert mlab("prepare", f"fixture/{task}", home=home, entry=ONE_HARNESS).returncode == 0
    listener = _Listener()
    public = TaskHome(home).data_root / f"fixture__{task}" / "public"
    (public / "port.txt").write_text(str(listener.port))
    result = mlab("baseline", f"fixture/{task}", "--sandbox", sandbox, home=home, entry=ONE_HARNESS)
    listener.sock.close()
    assert result.returncode == 0, result.stderr
    assert f"in sandbox {sandbox}" in result.stdout
    recorded = json.loads((public.parent / "baseline.json").read_text())
    assert recorded["score"] == expected and recorded["sandbox"] == sandbox


def test_a_measured_baseline_is_the_mean_of_the_valid_starter_runs_only(tmp_path):
    home = tmp_path / "home"
    result = mlab("baseline", "fixture/flaky-starter", "--runs", "4", home=home, entry=ONE_HARNESS)
    assert result.returncode == 0, result.stderr
    record = json.loads(TaskHome(home).baseline_path(FlakyStarterTask()).read_text())
    assert (record["score"], record["n"], record["runs"], record["scores"]) == (2.0, 2, 4, [1.0, None, 3.0, None])
    # the default sandbox is auto: which one it picks is the harness's decision, named as the one that ran
    sandbox = record["sandbox"]
    assert sandbox in load_registry().items["sandboxes"]
    assert f"baseline lines = 2 (sd 1.414), the mean of 2 valid of 4 run(s) in sandbox {sandbox}" in result.stdout
    assert record["stdev"] == pytest.approx(math.sqrt(2))
    assert record["machine"]["cpus"] == os.cpu_count() and record["machine"]["arch"]


def test_a_bench_baseline_averages_the_baseline_agents_valid_runs_only():
    got = bench_baseline((None, "missing"), [1.0, None, 0.0, 3.0, -2.0, math.nan])
    assert got == (2.0, "measured (baseline agent, 2 of 6 runs valid)")
    assert bench_baseline((0.5, "fixed: x"), [9.0]) == (0.5, "fixed: x")
    assert bench_baseline((None, "missing"), [None, 0.0]) == (None, "missing")


def test_the_issues_scripted_run_is_judged_as_the_original_judges_it():
    """spaceship-titanic, scored 0.742 by a scripted research run: +inf% before (a 0 baseline), the original's
    +48.4% and a success now."""
    task = load_registry().items["tasks"]["mlagentbench/spaceship-titanic"]
    verdict = judge(0.742, task.fixed_baseline, task)
    assert verdict.improvement == pytest.approx(0.484) and verdict.success and verdict.refused is None


def test_every_installed_task_with_a_fixed_baseline_declares_a_valid_one_and_its_source():
    fixed = [task for task in load_registry().items["tasks"].values() if task.fixed_baseline is not None]
    assert fixed, "the built-in pack fixes six baselines"
    assert [problem for task in fixed if (problem := check_fixed_baseline(task))] == []
    bad = FixedZeroTaskForCheck()
    assert check_fixed_baseline(bad) == "fixture/fixed-zero: fixed baseline 0 is not a valid score (it must be " \
        "finite and above 0)"


def test_a_starter_without_any_valid_run_records_no_baseline(tmp_path):
    home = tmp_path / "home"
    result = mlab("baseline", "fixture/never-submits", "--runs", "2", home=home, entry=ONE_HARNESS)
    *progress, error = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(progress) == 4, result.stderr  # each run's start and end, then one error
    assert "none of the 2 starter runs produced a valid score" in error
    assert "the starter wrote nothing usable" in result.stderr
    assert not TaskHome(home).baseline_path(NeverSubmitsTask()).exists()


def test_baseline_with_an_unknown_sandbox_is_a_one_line_error(tmp_path):
    result = mlab("baseline", "fixture/counter", "--sandbox", "nope", home=tmp_path / "home", entry=ONE_HARNESS)
    assert result.returncode == 2
    assert result.stderr.startswith("mlab: error: unknown sandbox 'nope'") and "Traceback" not in result.stderr


def test_check_task_works_in_the_home_it_is_given_and_leaves_the_process_environment_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "user-home"))
    before = dict(os.environ)
    home = TaskHome(tmp_path / "check-home")
    harness = Harness(harness_registry(), home)
    report = check_task(harness, ReferenceTask(), timeout_s=60)
    assert report.passed, report.reason
    assert (report.baseline, report.reference, report.improvement) == (1.0, 5.0, 4.0)
    assert dict(os.environ) == before
    assert home.is_prepared(ReferenceTask()) and not (tmp_path / "user-home").exists()
    # prepare ran with the caller's environment untouched: it saw the user's MLAB_HOME, not the check's home
    assert (home.hidden_dir(ReferenceTask()) / "mlab_home_seen.txt").read_text() == str(tmp_path / "user-home")


def test_check_task_cli_uses_the_chosen_sandbox_and_a_fresh_home(tmp_path):
    result = mlab("check-task", "fixture/with-reference", "--sandbox", "local", "--json", home=tmp_path / "home",
                  entry=ONE_HARNESS)
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(result.stdout)
    assert report["status"] == "passed" and report["baseline"] == 1.0 and report["reference"] == 5.0
    # the check prepared into a temporary home of its own; the user's home gets the reference score it recorded
    written = sorted(p.relative_to(tmp_path / "home").as_posix() for p in (tmp_path / "home").rglob("*") if p.is_file())
    assert written == ["tasks/fixture__with-reference/reference.json"]


@pytest.mark.slow
def test_check_task_says_which_limit_stopped_a_script_that_left_no_submission(tmp_path):
    harness = Harness(harness_registry(), TaskHome(tmp_path / "home"))
    report = check_task(harness, SlowReferenceTask(), timeout_s=3)
    assert report.status == "failed" and report.baseline == 1.0 and report.reference is None
    assert "stopped by its timeout limit" in report.steps["reference"]
    assert report.output_tail["reference"] == "starting"
