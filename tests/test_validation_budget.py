"""Validate Submission's budget is per run, not per process: a run killed with kill -9 and resumed goes on with the
calls its trace shows used, and the report says how many calls each run made.

Also the process the test kills:  python -m tests.test_validation_budget mlab ARGS...  (the real CLI with the
fixture-validating agent registered)
"""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlab.core import Action, Agent, RunState
from mlab.core.run.validation import calls_made
from tests.fixtures.cli import mlab

REPO = Path(__file__).resolve().parents[1]
AGENT_NAME = "fixture-validating"
PAUSE_VARIABLE = "MLAB_TEST_PAUSE_FILE"  # the agent waits, once, after its 2nd validation while this file is absent
PAUSED = "PAUSED AFTER 2 CALLS"
MAKE_PREDICTIONS = (
    "import csv\n"
    "ids = [row['id'] for row in csv.DictReader(open('data/valid.csv', newline=''))]\n"
    "with open('valid_submission.csv', 'w', newline='') as f:\n"
    "    csv.writer(f).writerows([['id', 'label'], *([i, 0] for i in ids)])\n")


class ValidatingAgent(Agent):
    """Writes all-zero predictions, then calls Validate Submission until it is refused, then answers."""

    name = AGENT_NAME
    description = "calls Validate Submission until its budget is spent (tests)"
    needs_llm = False

    def step(self, state: RunState):
        if state.step_index == 1:
            return Action(name="Write File", args={"file_name": "make_predictions.py", "content": MAKE_PREDICTIONS})
        if state.step_index == 2:
            return Action(name="Execute Script", args={"script_name": "make_predictions.py"})
        pause = Path(os.environ[PAUSE_VARIABLE])
        if calls_made(state.history) == 2 and not pause.exists():
            pause.write_text("paused")
            print(PAUSED, flush=True)
            time.sleep(300)  # the test kills the run here, its 2 calls recorded
        if "no Validate Submission calls left" in state.history[-1].observation:
            return Action(name="Final Answer", args={"final_answer": "spent"})
        return Action(name="Validate Submission", args={})


def main(argv: list[str]) -> None:
    from mlab.core.plugins.registry import load_registry

    registry = load_registry()
    registry.items["agents"][AGENT_NAME] = ValidatingAgent
    registry.providers["agents"][AGENT_NAME] = "tests"
    if argv[:1] != ["mlab"]:
        raise SystemExit("usage: python -m tests.test_validation_budget mlab ARGS...")
    from mlab.cli.main import main as mlab_main

    mlab_main(argv[1:])


def mlab_with_agent(*args: str, env: dict[str, str], **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.test_validation_budget", "mlab", *args], cwd=REPO,
                            env=env, stdin=subprocess.DEVNULL, text=True, start_new_session=True, **popen)


@pytest.mark.slow
def test_kill_9_after_two_validations_then_resume_leaves_max_calls_less_two_and_the_report_counts_them(tmp_path):
    from mlab.core.plugins.registry import load_registry

    budget = load_registry().get("tasks", "lite/wine").validation.max_calls
    run_dir = tmp_path / "run"
    env = {**os.environ, PAUSE_VARIABLE: str(tmp_path / "paused")}
    first = mlab_with_agent("run", "--task", "lite/wine", "--agent", AGENT_NAME, "--allow-validate", "--sandbox",
                            "local", "--max-steps", "40", "--run-dir", str(run_dir), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert first.stdout is not None
    seen = []
    for line in first.stdout:  # the agent prints this while it waits, both calls saved in the trace
        seen.append(line)
        if PAUSED in line:
            break
    else:
        pytest.fail("".join(seen[-40:]))
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)

    resumed = mlab_with_agent("run", "--resume", str(run_dir), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished", trace["end_reason"]
    told = [s["observation"] for s in trace["steps"] if s["action"]["name"] == "Validate Submission"]
    # 2 before the kill, then max_calls - 2 more, numbered on from 3, then the refusal
    assert len(told) == budget + 1, told
    assert [t.rsplit("call ", 1)[-1] for t in told[:-1]] == [f"{n} of {budget}." for n in range(1, budget + 1)], told
    assert "no Validate Submission calls left" in told[-1], told[-1]

    report = mlab("report", run_dir, "--json", "--out", tmp_path / "report",
                  env={PAUSE_VARIABLE: str(tmp_path / "paused")})
    assert report.returncode == 0, report.stderr
    runs = json.loads(report.stdout)["runs"]
    assert [r["validation_calls"] for r in runs] == [budget], runs
    tables = subprocess.run([sys.executable, "-m", "mlab.cli.main", "report", str(run_dir), "--format", "csv",
                             "--out", str(tmp_path / "report")],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert tables.returncode == 0, tables.stderr
    written = [Path(line) for line in tables.stdout.splitlines() if line.endswith("runs.csv")]
    assert written, tables.stdout
    with open(written[0], newline="") as f:
        assert [(r["task"], r["validation_calls"]) for r in csv.DictReader(f)] == [("lite/wine", str(budget))]


if __name__ == "__main__":
    main(sys.argv[1:])
