"""What a real model driving mlab's agents showed (issue 41, item 6): each agent runs under the limits the run was
given and is told them, and its task text and observations carry nothing that is not its own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer

pytestmark = pytest.mark.timeout(300)


def _trace(run_dir: Path) -> dict:
    return json.loads((run_dir / "trace.json").read_text())


def _program_run(tmp_path: Path, server: FakeLLMServer, agent: str, *extra: str):
    run_dir = tmp_path / "run"
    done = mlab("run", "--task", "lite/wine", "--agent", agent, "--llm", "openai/gpt-4o-mini",
                "--llm-api-base", server.base_url, "--sandbox", "local", "--max-steps", "10", "--run-dir", run_dir,
                *extra, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-user-secret"})
    assert done.returncode == 0, done.stderr + done.stdout
    return run_dir


def _replies(*answers: str):
    calls = iter(range(100))
    return lambda body: answers[min(next(calls), len(answers) - 1)]


# ---- (a) smolagents' code steps run under --action-timeout, not smolagents' own 30 s --------------------------
@pytest.mark.slow  # over 2 s on two cores
def test_smolagents_code_step_is_bounded_by_the_action_timeout(tmp_path):
    pytest.importorskip("smolagents", reason="pip install -e 'plugins/agents/smolagents[agent]'")
    # a step of 3 s under a 1 s action timeout: smolagents' default (30 s) would let it finish
    step = "Thought: wait.\n<code>\nimport time\ntime.sleep(3)\nprint('SLEPT')\n</code>"
    with FakeLLMServer(_replies(step, "Thought: done.\n<code>\nfinal_answer('done')\n</code>")) as server:
        run_dir = _program_run(tmp_path, server, "smolagents", "--action-timeout", "1s")
    shown = "\n".join(s["observation"] for s in _trace(run_dir)["steps"])
    assert "maximum execution time of 1 seconds" in shown, shown


# ---- (b) a program agent's task text asks for no research log: only the research agent has an action for one -----
LOGGED_PROBLEM = ("Read data_description.txt to understand the data, and keep notes in your research log. Then fill "
                  "in train.py; keep notes of what you learn and plan in your research log.")


def _logged_registry():
    from tests.fixtures.agents_fixtures import TASK_NAME, TinyClassifierTask, fixture_registry

    class LoggedTask(TinyClassifierTask):
        research_problem = LOGGED_PROBLEM  # the original benchmark's wording

    registry = fixture_registry()
    registry.items["tasks"][TASK_NAME + "-logged"] = LoggedTask()
    registry.providers["tasks"][TASK_NAME + "-logged"] = "tests"
    return registry, TASK_NAME + "-logged"


def test_a_program_agent_is_not_asked_for_a_research_log(tmp_path):
    from mlab.core import RunConfig
    from mlab.core.run.runner import Runner

    program = tmp_path / "show_task.py"
    program.write_text("import os\nprint('FILE', open(os.environ['MLAB_TASK_FILE']).read())\n"
                       "print('VAR', os.environ['MLAB_RESEARCH_PROBLEM'])\n")
    registry, task = _logged_registry()
    config = RunConfig(task=task, agent="command", llm="scripted:" + str(tmp_path / "none.jsonl"), max_steps=3,
                       action_timeout_s=60, sandbox="local", agent_options={"command": f"python {program}"})
    (tmp_path / "none.jsonl").write_text("")
    trace = Runner(tmp_path / "run", config, registry).start()
    shown = trace.steps[-1].observation
    assert "FILE Read data_description.txt" in shown and "VAR Read data_description.txt" in shown, shown
    assert "research log" not in shown.lower(), shown


# ---- (c) litellm's "Provider List" banner stays out of mini-swe-agent's observations ---------------------------
@pytest.mark.slow  # over 2 s on two cores
def test_mini_swe_agent_observations_carry_no_litellm_banner(tmp_path):
    pytest.importorskip("minisweagent", reason="pip install -e 'plugins/agents/miniswe[agent]'")
    submit = "THOUGHT: done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
    with FakeLLMServer(_replies("THOUGHT: look.\n\n```mswea_bash_command\nls\n```", submit)) as server:
        run_dir = _program_run(tmp_path, server, "mini-swe-agent")
    steps = _trace(run_dir)["steps"]
    assert len(steps) == 2 and "EXIT STATUS: Submitted" in steps[-1]["observation"], steps[-1]["observation"]
    assert not [s["index"] for s in steps if "Provider List" in s["observation"]], steps[0]["observation"]


# ---- (d) `mlab runs` shows the bound a run ran under, not only its step limit -----------------------------------
@pytest.mark.slow
def test_mlab_runs_shows_the_call_limit_that_ended_a_run(tmp_path):
    listing = "Thought: look\nAction: List Files\nAction Input: {\"dir_path\": \".\"}"
    script = tmp_path / "replies.jsonl"
    script.write_text("\n".join(json.dumps(listing) for _ in range(5)) + "\n")
    done = mlab("run", "--task", "lite/wine", "--agent", "simple", "--llm", f"scripted:{script}", "--max-calls", "3",
                "--run-dir", tmp_path / "runs" / "a", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = mlab("runs", tmp_path / "runs", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if "lite/wine" in line)
    assert "3/50 steps, 3/3 calls" in row, shown.stdout
    rows = json.loads(mlab("runs", tmp_path / "runs", "--json", cwd=tmp_path).stdout)
    assert rows[0]["max_calls"] == 3 and rows[0]["llm_calls"] == 3


# ---- (e) the research agent is told the budget it has left, each step --------------------------------------------
def test_the_research_agents_prompt_shows_the_budget_left(tmp_path):
    from mlab.core import RunConfig
    from mlab.core.llm.client import read_call_log
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.runner import Runner
    from tests.fixtures.agents_fixtures import research_response

    listing = research_response("List Files", {"dir_path": "."})
    script = tmp_path / "replies.jsonl"
    script.write_text("\n".join(json.dumps(listing) for _ in range(3)) + "\n")
    config = RunConfig(task="lite/wine", agent="research", llm=f"scripted:{script}", max_steps=3,
                       action_timeout_s=60, max_tokens=15_000, max_calls=20)
    Runner(tmp_path / "run", config, load_registry()).start()
    calls = read_call_log(tmp_path / "run" / "llm_calls.jsonl")
    assert len(calls) == 3
    used = calls[0]["prompt_tokens"] + calls[0]["completion_tokens"]
    second = calls[1]["messages"][-1]["content"]
    assert f"{15_000 - used:,} of 15,000 tokens" in second and "19 of 20 model calls" in second, second
    assert "15,000 of 15,000 tokens" in calls[0]["messages"][-1]["content"]
