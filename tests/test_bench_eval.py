"""Scoring final and intermediate snapshots in parallel, into a bench's database."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core.bench.evaluate import eval_rows, evaluate_runs
from mlab.core.models import RunConfig
from mlab.core.run.runner import Runner
from tests.fixtures.bench_cli import REGISTRY, REPO
from tests.fixtures.bench_plugins import bench_registry
from tests.fixtures.cli import mlab


def appender_run(run_dir: Path, steps: int) -> Path:
    config = RunConfig(task="fixture/counter", agent="fixture-appender", max_steps=1000,
                       agent_options={"steps": steps})
    trace = Runner(run_dir, config, bench_registry()).start()
    assert trace.status == "finished" and len(trace.steps) == steps
    return run_dir


def test_intermediate_scores_at_most_50_evenly_spaced_snapshots_in_parallel(tmp_path):
    long_run, short_run = appender_run(tmp_path / "long", 120), appender_run(tmp_path / "short", 5)
    parallel = evaluate_runs([long_run, short_run], intermediate=True, workers=2, registry=bench_registry())
    long, short = parallel
    assert long["final"] == (119.0, None) and short["final"] == (4.0, None)
    assert len(long["steps"]) == 50 and long["steps"][0][0] == 1 and long["steps"][-1][0] == 120
    for step, snapshot, score, error in long["steps"]:
        assert snapshot == f"step_{step:04d}" and error is None
        assert score == float(min(step, 119))  # step i appended line i; the last step only submits
    assert [s[2] for s in short["steps"]] == [1.0, 2.0, 3.0, 4.0, 4.0]
    serial = evaluate_runs([long_run, short_run], intermediate=True, workers=1, registry=bench_registry())
    assert [r["steps"] for r in serial] == [r["steps"] for r in parallel]
    assert evaluate_runs([short_run], registry=bench_registry())[0]["steps"] == []


def test_eval_of_a_bench_folder_stores_step_scores_and_best_step(tmp_path):
    out = tmp_path / "bench"
    result = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--runs", "2",
                  "--agent-option", "steps=3", "--bench-dir", out, "--registry", REGISTRY)
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(out / "results.db")
    assert conn.execute("SELECT COUNT(*) FROM step_scores").fetchone()[0] == 0
    rows = eval_rows([out], intermediate=True, workers=2, registry=bench_registry())
    assert [(r["score"], r["best_step"], r["best_score"]) for r in rows] == [(2.0, 2, 2.0), (2.0, 2, 2.0)]
    assert [s["score"] for s in rows[0]["step_scores"]] == [1.0, 2.0, 2.0]
    stored = conn.execute("SELECT run_key, step, score FROM step_scores ORDER BY run_key, step").fetchall()
    assert [(step, score) for _k, step, score in stored] == [(1, 1.0), (2, 2.0), (3, 2.0)] * 2
    conn.close()


def test_mlab_eval_intermediate_on_the_command_line(tmp_path):
    """Through `mlab eval`, through mlab.core.bench.evaluate.eval_rows."""
    help_text = mlab("eval", "--help").stdout
    if "--intermediate" not in help_text:
        pytest.skip("mlab eval has no --intermediate yet (the cli/run_cmds.py change is not applied)")
    run_dir = appender_run(tmp_path / "run", 4)
    code = ("import sys; from tests.fixtures.bench_plugins import bench_registry; bench_registry();"
            "from mlab.cli.main import main;"
            "main(['eval', '--json', '--intermediate', '--workers', '2', *sys.argv[1:]])")
    result = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["score"] == 3.0 and [s["score"] for s in row["step_scores"]] == [1.0, 2.0, 3.0, 3.0]
    assert row["best_step"] == 3
