"""Real frontier CLI agents as mlab agents (issue 41, item 3): Codex CLI and Claude Code, installed from npm by
`make cli-agents` at their plugins' pins, run inside the run's sandbox with no network, reach the run's model only
through mlab's endpoint (OpenAI Responses and Anthropic Messages, streamed), use their own tools in the sandbox
and reach a scored run; a scripted tool-calling model on 127.0.0.1 answers them over real HTTP."""
from __future__ import annotations

import json
import os
import re

import pytest

from mlab.core.llm.client import read_call_log
from mlab.core.plugins.registry import load_registry
from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer
from tests.fixtures.sandboxes import make_sandbox
from tests.test_program_agents import _killed_after_call_2_then_resumed, _trace

pytestmark = pytest.mark.timeout(600)

# agent -> (its shell tool, the argument naming the command)
SHELL = {"codex": ("exec_command", "cmd"), "claude-code": ("Bash", "command")}


def _needs(agent: str) -> None:
    cls = load_registry().get("agents", agent)
    ok, why = cls.available()
    if not ok:  # CI runs `make test`, which installs them: there this fails rather than skips
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(why)


def _python(body: dict) -> str:
    told = "\n".join(str(m.get("content") or "") for m in body["messages"])
    return re.search(r"Run Python as `([^`]+)`", told).group(1)


def scripted(agent: str, resumable: bool = False):
    """A tool-calling model: run the starter with the shell tool, then (resumable: write notes.txt and hang, where
    the harness is killed; after the resume, look, then) say it is done."""
    tool, argument = SHELL[agent]

    def respond(body: dict) -> str | dict:
        results = sum(m["role"] == "tool" for m in body["messages"])
        resumed = "interrupted and resumed" in json.dumps(body["messages"])
        if not resumed:
            commands = [f"{_python(body)} train.py"]
            if resumable:
                commands.append("echo 'after call 2' > notes.txt; sleep 600")
        else:
            commands = ["ls"]
        if results >= len(commands):
            return "Done: submission.csv is written."
        return {"content": None, "tool_calls": [{"id": f"call_{results}", "type": "function", "function": {
            "name": tool, "arguments": json.dumps({argument: commands[results]})}}]}
    return respond


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["local", "bwrap", "docker"])
@pytest.mark.parametrize("agent", ["codex", "claude-code"])
def test_a_real_cli_agent_reaches_a_scored_run_through_the_endpoint(tmp_path, agent, sandbox):
    _needs(agent)
    make_sandbox(sandbox)
    with FakeLLMServer(scripted(agent)) as server:
        done = mlab("run", "--task", "lite/wine", "--agent", agent, "--llm", "openai/gpt-4o-mini", "--llm-api-base",
                    server.base_url, "--sandbox", sandbox, "--max-steps", "10", "--token-limit", "2000000",
                    "--run-dir", tmp_path / "run", cwd=tmp_path, env={"OPENAI_API_KEY": "sk-user-secret"})
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(tmp_path / "run")
    assert trace["status"] == "finished" and trace["end_reason"] == "agent program exited (code 0)", \
        trace["end_reason"] + trace["steps"][-1]["observation"][-3000:]
    assert trace["final_score"] is not None
    calls = read_call_log(tmp_path / "run" / "llm_calls.jsonl")
    assert len(calls) == len(server.requests) == 2
    tool = SHELL[agent][0]
    assert [c.get("tool_calls", [{}])[0].get("name") for c in calls] == [tool, None]
    # the CLI's own tool list reached the run's model, in OpenAI's shape; the tool's result came back up
    offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert tool in offered, offered
    assert server.requests[1].body["messages"][-1]["role"] == "tool"
    assert all("sk-user-secret" not in json.dumps(r.body) for r in server.requests)
    steps = trace["steps"]
    assert steps[0]["action"]["args"]["tool_calls"][0]["name"] == tool
    assert "+ submission.csv" in steps[0]["observation"], steps[0]["observation"][-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["codex", "claude-code"])
def test_kill_9_then_resume_starts_the_cli_agent_afresh_on_the_saved_workspace(tmp_path, agent):
    _needs(agent)
    make_sandbox("local")
    trace, calls = _killed_after_call_2_then_resumed(tmp_path, "local", ["--agent", agent],
                                                     scripted(agent, resumable=True))
    assert trace["end_reason"] == "agent program exited (code 0)"
    # call 2 (the hang) is redone by the resumed session, which starts anew, told so, on the workspace as it was
    # when call 2 arrived: the starter's submission is there, notes.txt (written after call 2) is not
    assert [c["step"] for c in calls] == [1, 2, 2, 3]
    assert "interrupted and resumed" in json.dumps(calls[2]["messages"])
    assert [s["index"] for s in trace["steps"]] == [1, 2, 3]
