"""What each agent spent, beside its success: steps, model calls, tokens, cost and time per run (results.db,
report.json) and per agent (the tables, CSV)."""
from __future__ import annotations

import csv
import io
import json

import pytest

from tests.fixtures.bench_cli import REGISTRY, db_rows
from tests.fixtures.cli import mlab


@pytest.mark.slow
def test_the_report_shows_what_each_agent_spent(tmp_path):
    out, home = tmp_path / "bench", {"MLAB_HOME": str(tmp_path / "home")}
    result = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-llm-stepper,fixture-appender",
                  "--llm", "fixture-sleepy:0", "--runs", "2", "--workers", "2", "--agent-option", "steps=4",
                  "--bench-dir", out, "--registry", REGISTRY, env=home)
    assert result.returncode == 0, result.stderr
    stored = {(r["agent"], r["seed"]): r for r in db_rows(out)}
    assert {k: (r["steps"], r["llm_calls"]) for k, r in stored.items()} == {
        ("fixture-appender", 0): (4, 0), ("fixture-appender", 1): (4, 0),
        ("fixture-llm-stepper", 0): (4, 4), ("fixture-llm-stepper", 1): (4, 4)}
    reported = mlab("report", out, "--json", "--no-plots", "--no-html", env=home)
    assert reported.returncode == 0, reported.stderr
    data = json.loads(reported.stdout)
    assert {(r["agent"], r["llm_calls"]) for r in data["runs"]} == {("fixture-appender", 0),
                                                                    ("fixture-llm-stepper", 4)}
    per_agent = {label.split(" ")[0]: o for label, o in data["overall"].items()}
    assert per_agent["fixture-llm-stepper"]["llm_calls"]["mean"] == 4
    assert per_agent["fixture-llm-stepper"]["tokens"]["mean"] > 0 == per_agent["fixture-appender"]["tokens"]["mean"]
    assert per_agent["fixture-llm-stepper"]["cost_usd"]["mean"] > 0
    assert all(o["steps"]["mean"] == 4 for o in per_agent.values())
    tables = mlab("report", out, "--format", "csv", "--no-plots", "--no-html", env=home)
    assert tables.returncode == 0, tables.stderr
    overall = list(csv.DictReader(io.StringIO((out / "report" / "tables" / "overall.csv").read_text())))
    assert {row["agent"].split(" ")[0]: float(row["llm_calls"]) for row in overall} == {
        "fixture-llm-stepper": 4.0, "fixture-appender": 0.0}
    assert {"steps", "tokens", "time_s", "cost_usd", "success_original"} <= set(overall[0])
    text = mlab("report", out, "--no-plots", "--no-html", env=home)
    assert "model" in text.stdout and "calls" in text.stdout
