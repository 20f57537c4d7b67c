"""`mlab bench` with the local engine: real worker processes, real run directories, a real SQLite database."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mlab.core.errors import MlabError
from mlab.core.run.trace_log import read_log
from tests.fixtures.bench_cli import REGISTRY, db_rows, start
from tests.fixtures.bench_plugins import SCENARIOS
from tests.fixtures.cli import mlab, mlab_in_process

TASK = "fixture/counter"


def wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = 120, every: float = 0.1) -> None:
    """Poll until condition() holds; a generous deadline, so a loaded machine is slow, not failing."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            stdout, stderr = proc.communicate()
            pytest.fail(f"gave up waiting for {what} (exit code {proc.returncode}):\n{stdout}\n{stderr}")
        time.sleep(every)


def steps_done(bench_dir: Path, run_dir: str) -> int:
    """The steps a running run has committed (the lines of its step log)."""
    try:
        log = read_log(bench_dir / run_dir)
    except MlabError:
        return 0
    return len(log.steps) if log is not None else 0


def bench(bench_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    result = mlab("bench", "--tasks", TASK, "--bench-dir", bench_dir, "--registry", REGISTRY, *args, timeout=timeout)
    return result


@pytest.mark.slow
def test_every_run_isolated_results_in_sqlite_and_rerun_skips_them(tmp_path):
    out = tmp_path / "bench"
    result = bench(out, "--agents", "fixture-appender,baseline", "--runs", "3", "--workers", "2", "--intermediate",
                   "--agent-option", "steps=4")
    assert result.returncode == 0, result.stderr
    rows = db_rows(out)
    assert [(r["agent"], r["seed"], r["status"]) for r in rows] == [
        (a, s, "finished") for a in ("baseline", "fixture-appender") for s in range(3)]
    assert len({r["run_dir"] for r in rows}) == 6
    for r in rows:
        run_dir = out / r["run_dir"]
        trace = json.loads((run_dir / "trace.json").read_text())
        assert trace["config"]["seed"] == r["seed"] and trace["config"]["agent"] == r["agent"]
        assert (run_dir / "workspace" / "step.py").is_file()
        assert r["final_score"] == (3.0 if r["agent"] == "fixture-appender" else 1.0)
        assert r["llm"] is None and r["failure"] is None and r["attempts"] == 1 and r["time_s"] > 0
    # one worker's files never reach another's workspace
    assert not (out / rows[0]["run_dir"] / "workspace" / "log.txt").read_text().startswith("line")
    steps = db_rows(out, "SELECT step, score FROM step_scores WHERE run_key LIKE '%fixture-appender%s1' ORDER BY step")
    assert [(s["step"], s["score"]) for s in steps] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 3.0)]
    versions = db_rows(out, "SELECT DISTINCT distribution FROM plugin_versions")
    assert "mlab-agent-baseline" in {v["distribution"] for v in versions}
    assert "6 finished, 0 failed" in result.stdout

    stamps = {r["key"]: (out / r["run_dir"] / "trace.json").stat().st_mtime_ns for r in rows}
    again = bench(out, "--agents", "fixture-appender,baseline", "--runs", "3", "--workers", "2",
                  "--agent-option", "steps=4")
    assert again.returncode == 0, again.stderr
    assert "6 already done before" in again.stdout
    assert {r["key"]: (out / r["run_dir"] / "trace.json").stat().st_mtime_ns for r in db_rows(out)} == stamps


@pytest.mark.slow
def test_failure_taxonomy_and_retry_of_failed_runs(tmp_path):
    out = tmp_path / "bench"
    args = ("--agents", "fixture-scenario", "--runs", str(len(SCENARIOS)), "--workers", "2", "--max-steps", "3",
            "--action-timeout", "1s")
    result = bench(out, *args)
    assert result.returncode == 0, result.stderr
    rows = db_rows(out)
    assert [r["failure"] for r in rows] == SCENARIOS
    crashed = rows[SCENARIOS.index("agent_error")]
    assert crashed["status"] == "failed" and "the agent crashed" in crashed["end_reason"]
    assert all(r["status"] == "finished" for r in rows if r is not crashed)
    assert rows[SCENARIOS.index(None)]["final_score"] == 1.0

    assert bench(out, *args).returncode == 0
    assert db_rows(out)[SCENARIOS.index("agent_error")]["attempts"] == 1  # failed runs stay failed by default
    retried = bench(out, *args, "--retry-failed")
    assert retried.returncode == 0, retried.stderr
    rows = db_rows(out)
    assert [r["attempts"] for r in rows] == [2 if f == "agent_error" else 1 for f in SCENARIOS]
    kept = list((out / "attempts").iterdir())
    assert len(kept) == 1 and (kept[0] / "trace.json").is_file()  # the failed attempt is kept for post-mortems


@pytest.mark.slow
def test_models_tokens_cost_and_llm_errors(tmp_path):
    script = tmp_path / "replies.jsonl"
    script.write_text('"first"\n"second"\n')  # runs out at the third call: an LLM error
    out = tmp_path / "bench"
    result = bench(out, "--agents", "fixture-llm-stepper", "--llm", f"scripted:{script}", "--llm", "fixture-sleepy:0",
                   "--runs", "2", "--workers", "2", "--agent-option", "steps=4")
    assert result.returncode == 0, result.stderr
    rows = db_rows(out)
    assert [(r["llm"], r["seed"]) for r in rows] == [("fixture-sleepy:0", 0), ("fixture-sleepy:0", 1),
                                                     (f"scripted:{script}", 0), (f"scripted:{script}", 1)]
    sleepy, scripted = rows[:2], rows[2:]
    assert all(r["status"] == "finished" and r["failure"] is None for r in sleepy)
    assert all(r["prompt_tokens"] == 400 and r["completion_tokens"] == 80 for r in sleepy)
    assert all(r["cost_usd"] == pytest.approx(0.004) for r in sleepy)
    assert all(r["status"] == "failed" and r["failure"] == "llm_error" for r in scripted)
    assert "ran out of completions" in scripted[0]["end_reason"]

    budget = bench(tmp_path / "budget", "--agents", "fixture-llm-stepper", "--llm", "fixture-sleepy:0", "--runs", "1",
                   "--max-tokens", "250", "--agent-option", "steps=10")
    assert budget.returncode == 0, budget.stderr
    (row,) = db_rows(tmp_path / "budget")
    assert row["status"] == "finished" and row["end_reason"].startswith("budget reached")
    assert json.loads(row["config"])["max_tokens"] == 250 and row["steps"] < 9


@pytest.mark.slow
def test_ctrl_c_keeps_finished_runs_and_a_rerun_resumes_the_rest(tmp_path):
    out = tmp_path / "bench"
    args = ("--agents", "fixture-stepper", "--runs", "4", "--workers", "2", "--agent-option", "steps=8",
            # a second a step: the runs still under way when the test looks outlive its SIGINT on a loaded machine
            "--agent-option", "sleep=1.0", "--bench-dir", out, "--registry", REGISTRY)
    proc = start("bench", "--tasks", TASK, *args)
    def two_finished_and_the_rest_under_way() -> bool:
        """Each unfinished run has a step on disk, so a stopped run has a trace to resume."""
        rows = db_rows(out) if (out / "results.db").exists() else []  # the bench creates it whole, tables and all
        unfinished = [r for r in rows if r["status"] != "finished"]
        # The database says "running" until the driver hears a run ended, which lags on a loaded machine: a
        # run still under way is one whose own progress shows steps left (at most 5 of 8 done).
        return len(rows) == 4 and 1 <= len(unfinished) <= 2 and all(
            r["status"] == "running" and 1 <= steps_done(out, r["run_dir"]) <= 5 for r in unfinished)

    wait_for(two_finished_and_the_rest_under_way, "two finished runs and the other two under way", proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stdout
    rows = db_rows(out)
    finished = [r for r in rows if r["status"] == "finished"]
    stopped = [r for r in rows if r["status"] == "interrupted"]
    assert len(finished) >= 2 and len(finished) + len(stopped) == 4 and stopped
    for r in finished:
        assert json.loads((out / r["run_dir"] / "trace.json").read_text())["status"] == "finished"
    for r in stopped:
        trace = json.loads((out / r["run_dir"] / "trace.json").read_text())
        assert trace["status"] == "running" and len(trace["steps"]) < 8

    resumed = mlab("bench", "--tasks", TASK, *args)
    assert resumed.returncode == 0, resumed.stderr
    for r in db_rows(out):
        trace = json.loads((out / r["run_dir"] / "trace.json").read_text())
        assert r["status"] == "finished" and [s["index"] for s in trace["steps"]] == list(range(1, 9))
        executed = sum(s["action"]["name"] == "Execute Script" for s in trace["steps"])
        log = (out / r["run_dir"] / "workspace" / "log.txt").read_text().splitlines()
        assert log == [f"run {i}" for i in range(executed)]  # every step's effect exactly once
        assert r["final_score"] == executed and r["attempts"] == 1


@pytest.mark.parametrize("args, fragment", [
    (("--tasks", "no-such-task", "--agents", "baseline"), "unknown task"),
    (("--tasks", TASK, "--agents", "fixture-llm-stepper"), "need a model"),
    (("--tasks", TASK, "--agents", "baseline", "--ray-address", "auto"), "need --engine ray"),
    (("--tasks", TASK, "--agents", "baseline", "--runs", "0"), "--runs"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    result = mlab_in_process("bench", *args, "--bench-dir", tmp_path / "b", "--registry", REGISTRY)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr


def test_live_view_shows_each_running_runs_step_tokens_and_cost():
    from rich.console import Console, Group

    from mlab.cli.view import counts, running_table
    from mlab.core.bench.driver import BenchStatus, RunProgress

    status = BenchStatus(total=16, done=5, failed=1, pending=6, interrupted_runs=3, tokens=1000, cost_usd=0.5,
                         running=[RunProgress(key="t|a|m|s3", step=7, max_steps=20, tokens=2345, cost_usd=0.25,
                                              action="Execute Script", started=time.time() - 12,
                                              step_started=time.time() - 3)])
    console = Console(record=True, width=200)
    console.print(Group(counts("bench b", status), running_table(status)))
    text = console.export_text()
    assert "5 finished, 1 running, 1 failed, 3 interrupted, 6 pending (of 16)" in text
    assert "3,345 tokens" in text and "$0.7500" in text
    assert "t|a|m|s3" in text and "7/20" in text and "Execute Script" in text and "2,345" in text
