"""A budget of model calls (issue 30, item 5): `--max-calls N` on `mlab run` and `mlab bench` is recorded in the
run's config; the run's LLM client refuses the call past N before it reaches the model (concurrent calls
included), counting the calls of llm_calls.jsonl on --resume; the run ends cleanly, scored, its end reason saying
why; a program agent's endpoint refuses the call past it; and a bench of agents held to the same number of calls
reports what each spent."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from mlab.core import LLM, BudgetExceeded, Completion
from mlab.core.llm.client import LLMClient, read_call_log
from mlab.core.llm.generation import ROLES
from tests.fixtures.cli import REPO, mlab

pytestmark = pytest.mark.timeout(300)


class CountingLLM(LLM):
    """Counts the calls that reach it; `hold` keeps each call waiting until set, so calls overlap."""

    name = "counting"

    def __init__(self, model: str = "", hold: threading.Event | None = None, **options):
        super().__init__(model, **options)
        self.reached = 0
        self.hold = hold
        self._lock = threading.Lock()

    def complete(self, messages, **params) -> Completion:
        with self._lock:
            self.reached += 1
        if self.hold is not None:
            self.hold.wait(30)
        return Completion(text="ok", prompt_tokens=3, completion_tokens=1)


def client(tmp_path, backend, **kwargs) -> LLMClient:
    return LLMClient(dict.fromkeys(ROLES, backend), tmp_path / "llm_calls.jsonl", **kwargs)


def test_the_call_past_the_limit_is_refused_before_it_reaches_the_model(tmp_path):
    backend = CountingLLM()
    llm = client(tmp_path, backend, max_calls=3)
    for role in ("main", "fast", "edit"):  # every role's calls count
        llm.complete("hi", role=role)
    with pytest.raises(BudgetExceeded, match=r"^3 model calls made, limit 3 \(--max-calls\)$"):
        llm.complete("one more")
    assert backend.reached == 3 and len(read_call_log(tmp_path / "llm_calls.jsonl")) == 3


def test_a_resumed_client_counts_the_calls_of_the_log(tmp_path):
    llm = client(tmp_path, CountingLLM(), max_calls=3)
    llm.complete("a")
    llm.complete("b")
    llm.close()
    backend = CountingLLM()
    resumed = client(tmp_path, backend, max_calls=3)
    resumed.complete("c")
    with pytest.raises(BudgetExceeded):
        resumed.complete("d")
    assert backend.reached == 1


def test_concurrent_calls_never_exceed_the_limit(tmp_path):
    hold = threading.Event()
    backend = CountingLLM(hold=hold)
    llm = client(tmp_path, backend, max_calls=3)
    outcomes: list[str] = []

    def call():
        try:
            llm.complete("x")
            outcomes.append("answered")
        except BudgetExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while backend.reached < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # a fourth call, were it let through, would reach the model now
    assert backend.reached == 3
    hold.set()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["answered"] * 3 + ["refused"] * 5 and backend.reached == 3


# ---- a run and its resume ---------------------------------------------------------------------------------------
FIRST_PART = """
import os, sys
from pathlib import Path
from mlab.core import RunConfig
from mlab.core.run.runner import Runner
from tests.fixtures.agents_fixtures import fixture_registry, TASK_NAME

def on_step(step):
    if step.index == 2:
        os._exit(9)  # like a SIGKILL: the trace stays "running"

config = RunConfig(task=TASK_NAME, agent="research", llm=sys.argv[2], max_steps=20, action_timeout_s=60,
                   max_calls=3)
Runner(Path(sys.argv[1]), config, fixture_registry(), on_step=on_step).start()
"""


def test_a_resumed_run_stops_at_the_calls_its_log_and_the_limit_leave(tmp_path):
    from tests.fixtures.agents_fixtures import research_response, write_script

    script = write_script(tmp_path / "replies.jsonl",
                          [research_response("List Files", {"dir_path": "."}, i) for i in range(1, 9)])
    run_dir = tmp_path / "run"
    first = subprocess.run([sys.executable, "-c", FIRST_PART, str(run_dir), f"scripted:{script}"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 9, first.stdout + first.stderr
    assert json.loads((run_dir / "config.json").read_text())["max_calls"] == 3
    assert len(read_call_log(run_dir / "llm_calls.jsonl")) == 2
    done = mlab("mlab", "run", "--resume", run_dir, entry=(sys.executable, "-m", "tests.fixtures.agents_fixtures"),
                timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished"
    assert trace["end_reason"] == "budget reached: 3 model calls made, limit 3 (--max-calls)"
    assert len(trace["steps"]) == 3 and trace["usage"]["calls"] == 3
    assert len(read_call_log(run_dir / "llm_calls.jsonl")) == 3
    assert trace["final_score"] is not None or trace["final_score_error"]  # scored


def test_a_bad_call_limit_is_one_line(tmp_path):
    done = mlab("run", "--task", "lite/wine", "--agent", "research", "--llm", "scripted:x.jsonl",
                "--max-calls", "0", "--run-dir", tmp_path / "run", timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "Invalid value for '--max-calls': 0 is not in the range x>=1" in done.stderr, done.stderr


# ---- a program agent --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_endpoint_refuses_a_program_agents_call_past_the_limit(tmp_path):
    from tests.fixtures.llm_server import FakeLLMServer
    from tests.test_program_agents import _run

    with FakeLLMServer(lambda body: "go on") as server:
        done, run_dir = _run(tmp_path, server, "local", "--max-calls", "2")
    assert done.returncode == 0, done.stderr + done.stdout
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished"
    assert trace["end_reason"] == "budget reached: 2 model calls made, limit 2 (--max-calls)"
    assert trace["final_score"] is not None
    assert len(read_call_log(run_dir / "llm_calls.jsonl")) == 2 == len(server.requests)
    assert "REFUSED 429" in trace["steps"][-1]["observation"]


# ---- a bench of two agents at one call budget -------------------------------------------------------------------
@pytest.mark.slow
def test_a_bench_of_research_and_aide_at_four_calls_each_scored_calls_reported(tmp_path):
    from tests.fixtures.bench_cli import db_rows
    from tests.test_search_budget import TASK

    out = tmp_path / "bench"
    result = mlab("bench", "--tasks", TASK, "--agents", "research,aide", "--llm", "fixture-both", "--runs", "1",
                  "--max-steps", "40", "--max-calls", "4", "--bench-dir", out, "--registry",
                  "tests.test_search_budget:budget_registry", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = {r["agent"]: r for r in db_rows(out)}
    assert sorted(rows) == ["aide", "research"]
    for agent, row in rows.items():
        assert row["status"] == "finished" and row["final_score"] is not None, (agent, row)
        assert json.loads(row["config"])["max_calls"] == 4
        calls = read_call_log(out / row["run_dir"] / "llm_calls.jsonl")
        assert row["llm_calls"] == len(calls) == 4, (agent, row["end_reason"])
    # research calls its model every step and is stopped at the budget; aide stops itself and submits its best
    assert rows["research"]["end_reason"] == "budget reached: 4 model calls made, limit 4 (--max-calls)"
    assert rows["aide"]["end_reason"] == "final answer"
    trace = json.loads((out / rows["aide"]["run_dir"] / "trace.json").read_text())
    assert "model calls made (--max-calls)" in trace["steps"][-1]["action"]["args"]["final_answer"]
    # the report shows the calls per agent
    report = mlab("report", out, "--json", timeout=120)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert {g["label"]: g["llm_calls"]["mean"] for g in data["groups"]} == \
        {"aide (fixture-both)": 4, "research (fixture-both)": 4}
    assert {label: o["llm_calls"]["mean"] for label, o in data["overall"].items()} == \
        {"aide (fixture-both)": 4, "research (fixture-both)": 4}
    shown = mlab("report", out, timeout=120)
    assert "model" in shown.stdout and "calls" in shown.stdout

