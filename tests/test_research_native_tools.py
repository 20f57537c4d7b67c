"""The research agent with native tool calls (issue 41, item 4): `--agent-option tools=native` offers each action as
an OpenAI function tool, the model's tool call becomes the Action (Reflection, plan, fact check and thought ride
along as the call's first arguments), a bad call is answered with a correction as its tool result, and each
observation goes back as a tool result naming its call. The text ReAct format stays the default."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.agents_fixtures import TASK_NAME, llm_calls, research_response, run_agent
from tests.fixtures.cli import entry, mlab
from tests.fixtures.llm_server import FakeLLMServer

pytestmark = pytest.mark.timeout(300)

NATIVE = {"tools": "native"}
FIELDS = {"reflection": "r", "research_plan_and_status": "1. baseline (in progress)", "fact_check": "none yet",
          "thought": "run it"}


def _call(call_id: str, name: str, **args) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _tool_names(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


@pytest.mark.slow  # over 2 s on two cores
def test_a_native_tools_run_on_lite_wine_reaches_a_score(tmp_path):
    answers = iter([
        {"content": None, "tool_calls": [_call("call_run", "execute_script", **FIELDS, script_name="train.py")]},
        {"content": None, "tool_calls": [_call("call_end", "final_answer", **{**FIELDS, "thought": "submit"},
                                               final_answer="ran the k-NN starter")]},
    ])
    run_dir = tmp_path / "run"
    with FakeLLMServer(lambda body: next(answers)) as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "research", "--agent-option", "tools=native",
                    "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", "local",
                    "--max-steps", "5", "--run-dir", run_dir, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stderr + done.stdout
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["end_reason"] == "final answer" and trace["final_score"] is not None, trace["end_reason"]
    steps = trace["steps"]
    assert [s["action"]["name"] for s in steps] == ["Execute Script", "Final Answer"]
    assert steps[0]["action"]["args"] == {"script_name": "train.py"}
    assert "Validation accuracy:" in steps[0]["observation"]
    entries = steps[0]["action"]["entries"]
    assert (entries["Reflection"], entries["Research Plan and Status"], entries["Thought"]) == (
        "r", "1. baseline (in progress)", "run it")
    assert entries["tool_call_id"] == "call_run"

    first, second = (r.body for r in server.requests)
    names = _tool_names(first)
    assert "execute_script" in names and "edit_script_ai" in names and "final_answer" in names
    execute = next(t["function"] for t in first["tools"] if t["function"]["name"] == "execute_script")
    assert list(execute["parameters"]["properties"]) == [*FIELDS, "script_name"]
    assert execute["parameters"]["required"] == [*FIELDS, "script_name"]
    assert first["tool_choice"] == "required" and "stop" not in first
    system = first["messages"][0]["content"]
    assert "Response format" not in system and "Action Input" not in system and "research_plan_and_status" in system
    # the second request carries the first call and its result, under the same id
    (assistant,) = [m for m in second["messages"] if m.get("tool_calls")]
    (result,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert assistant["tool_calls"][0]["id"] == result["tool_call_id"] == "call_run"
    assert assistant["tool_calls"][0]["function"]["name"] == "execute_script"
    assert "Validation accuracy:" in result["content"]
    assert "This is step 2 of at most 5" in second["messages"][-1]["content"]
    usage = trace["usage"]
    print(f"native tools on lite/wine: {len(steps)} steps, {usage['calls']} calls, "
          f"{usage['prompt_tokens'] + usage['completion_tokens']} tokens, score {trace['final_score']:.4f}")


def _scripted(name: str, **args) -> dict:
    return {"tool_calls": [{"name": name, "arguments": {**FIELDS, **args}}]}


def test_a_bad_tool_call_is_answered_with_a_correction_and_asked_again(tmp_path):
    script = [
        _scripted("train_model", epochs="3"),
        _scripted("list_files", path="."),
        {"tool_calls": [{"name": "list_files", "arguments": {"dir_path": "."}}]},
        "I will list the files now.",
        _scripted("list_files", dir_path="."),
        _scripted("final_answer", final_answer="done"),
    ]
    trace = run_agent(tmp_path / "run", "research", script, options=NATIVE)
    assert trace.end_reason == "final answer" and [s.action.name for s in trace.steps] == ["List Files", "Final Answer"]
    problems = [f["problem"] for f in trace.steps[0].action.entries["invalid_responses"]]
    assert "unknown tool 'train_model'" in problems[0] and "list_files" in problems[0]
    assert "missing dir_path; unexpected path" in problems[1]
    assert "lacks reflection, research_plan_and_status, fact_check, thought" in problems[2]
    assert "called no tool" in problems[3]
    calls = [c for c in llm_calls(tmp_path / "run") if c["role"] == "main"]
    assert all(c["params"]["tools"] for c in calls)
    # a bad call is answered by a tool result naming it, a reply without a call by a user message
    assert [m["role"] for m in calls[1]["messages"][-2:]] == ["assistant", "tool"]
    assert calls[1]["messages"][-2]["tool_calls"][0]["id"] == calls[1]["messages"][-1]["tool_call_id"] == "call_0_0"
    assert calls[1]["messages"][-1]["content"].startswith("That call could not be used: unknown tool")
    assert calls[1]["messages"][:-2] == calls[0]["messages"]
    assert [m["role"] for m in calls[4]["messages"][-2:]] == ["assistant", "user"]
    assert calls[4]["messages"][-2]["content"] == "I will list the files now."
    # the next step shows the good call and its observation under the scripted call's id
    history = calls[5]["messages"]
    call = next(m for m in history if m.get("tool_calls"))["tool_calls"][0]
    result = next(m for m in history if m["role"] == "tool")
    assert call["id"] == result["tool_call_id"] == "call_4_0" and "train.py" in result["content"]
    assert json.loads(call["arguments"]) == {**FIELDS, "dir_path": "."}
    assert trace.steps[1].agent_state["invalid_responses"] == 4


def test_a_text_only_model_in_native_mode_fails_in_one_line_before_the_run(tmp_path):
    run_dir = tmp_path / "run"
    done = mlab("run", "--task", TASK_NAME, "--agent", "research", "--agent-option", "tools=native",
                "--llm", "fixture-policy", "--sandbox", "local", "--run-dir", run_dir,
                entry=entry("tests.fixtures.agents_fixtures", "mlab"), cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 2, done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "tools=native" in lines[0] and "fixture-policy" in lines[0] and "text-only" in lines[0], lines[0]
    assert not run_dir.exists()


def test_the_text_format_stays_the_default(tmp_path):
    trace = run_agent(tmp_path / "run", "research", [research_response("Final Answer", {"final_answer": "done"})])
    assert trace.end_reason == "final answer"
    (call,) = llm_calls(tmp_path / "run")
    assert "tools" not in call["params"] and call["params"]["stop"] == ["\nObservation:"]
    assert "Response format" in call["messages"][0]["content"]


def test_the_simple_ablation_in_native_mode_has_tools_with_only_the_actions_arguments(tmp_path):
    script = [{"tool_calls": [{"name": "execute_script", "arguments": {"script_name": "train.py"}}]},
              {"tool_calls": [{"name": "final_answer", "arguments": {"final_answer": "ran it"}}]}]
    trace = run_agent(tmp_path / "run", "simple", script, options=NATIVE)
    assert trace.end_reason == "final answer" and trace.steps[0].action.args == {"script_name": "train.py"}
    first = llm_calls(tmp_path / "run")[0]
    execute = next(t["function"] for t in first["params"]["tools"] if t["function"]["name"] == "execute_script")
    assert execute["parameters"]["required"] == ["script_name"]
    assert "Call exactly one tool in each response." in first["messages"][0]["content"]
