"""`mlab bench --engine ray`: each run a Ray task on a local Ray the command starts (Ray is an optional extra)."""
from __future__ import annotations

import importlib.util
import sqlite3

import pytest

from tests.fixtures.bench_cli import REGISTRY, mlab

HAVE_RAY = importlib.util.find_spec("ray") is not None


@pytest.mark.skipif(HAVE_RAY, reason="checks the message shown when Ray is not installed")
def test_ray_engine_without_ray_is_a_one_line_error(tmp_path):
    result = mlab("bench", "--tasks", "fixture/counter", "--agents", "baseline", "--engine", "ray",
                  "--bench-dir", tmp_path / "b", "--registry", REGISTRY)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["mlab: error: --engine ray needs Ray: pip install 'mlab[ray]'"]


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'mlab[ray]'); the local engine is tested")
def test_ray_engine_runs_the_same_bench(tmp_path):
    out = tmp_path / "bench"
    result = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,fixture-llm-stepper",
                  "--llm", "fixture-sleepy:0.05", "--runs", "2", "--workers", "4", "--engine", "ray",
                  "--intermediate", "--agent-option", "steps=3", "--bench-dir", out, "--registry", REGISTRY,
                  timeout=300)
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(out / "results.db")
    rows = conn.execute(
        "SELECT agent, seed, status, final_score, prompt_tokens FROM runs ORDER BY agent, seed").fetchall()
    assert rows == [("fixture-appender", 0, "finished", 2.0, 0), ("fixture-appender", 1, "finished", 2.0, 0),
                    ("fixture-llm-stepper", 0, "finished", 2.0, 300), ("fixture-llm-stepper", 1, "finished", 2.0, 300)]
    assert conn.execute("SELECT COUNT(*) FROM step_scores").fetchone()[0] == 12
    conn.close()
    again = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,fixture-llm-stepper",
                 "--llm", "fixture-sleepy:0.05", "--runs", "2", "--engine", "ray", "--agent-option", "steps=3",
                 "--bench-dir", out, "--registry", REGISTRY, timeout=300)
    assert again.returncode == 0 and "4 already done before" in again.stdout
