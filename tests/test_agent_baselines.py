"""The agents the research agent is compared against: AutoGPT-style and LangChain, run for real on a scripted model."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fixtures.agents_fixtures import (
    IMPROVED,
    autogpt_response,
    edit_reply,
    langchain_response,
    llm_calls,
    run_agent,
)

A, L = autogpt_response, langchain_response


def prompt_text(call: dict) -> str:
    return "\n".join(m["content"] for m in call["messages"])


# ---- autogpt --------------------------------------------------------------------------------------------
def test_autogpt_improves_the_script_and_stops_on_task_complete(tmp_path):
    script = [A("list_files", {"dir_path": "."}, 1), A("read_file", {"file_name": "train.py"}, 2),
              A("execute_python_file", {"script_name": "train.py"}, 3),
              A("write_to_file", {"file_name": "train.py", "content": IMPROVED}, 4),
              A("execute_python_file", {"script_name": "train.py"}, 5),
              A("task_complete", {"reason": "nearest centroid: 0.9875 validation accuracy"}, 6)]
    trace = run_agent(tmp_path / "run", "autogpt", script)
    assert (trace.status, trace.end_reason) == ("finished", "final answer")
    assert [s.action.name for s in trace.steps] == ["List Files", "Read File", "Execute Script", "Write File",
                                                   "Execute Script", "Final Answer"]
    assert trace.steps[-1].action.args == {"final_answer": "nearest centroid: 0.9875 validation accuracy"}
    assert trace.final_score == pytest.approx(0.955)
    for n, step in enumerate(trace.steps, start=1):
        assert step.action.entries["thoughts"]["criticism"] == f"criticism {n}"
        assert set(step.action.entries["thoughts"]) >= {"text", "reasoning", "plan", "criticism"}
        assert step.action.raw_response == script[n - 1]
    last = llm_calls(tmp_path / "run")[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "user"] * 5
    assert last[-1]["content"].startswith("Command execute_python_file returned: The script ran.")
    assert "task_complete: Submit" in last[0]["content"] and '"reason"' in last[0]["content"]


def test_autogpt_folds_old_events_into_a_running_memory(tmp_path):
    script = [A("read_file", {"file_name": "train.py"}, 1), A("list_files", {"dir_path": "."}, 2),
              "MEMORY A: I read train.py, a majority-class baseline.", A("list_files", {"dir_path": "data"}, 3),
              "MEMORY B: read train.py; data/ holds train.csv and test.csv.", A("task_complete", {"reason": "x"}, 4)]
    trace = run_agent(tmp_path / "run", "autogpt", script, options={"recent_chars": 500})
    assert trace.end_reason == "final answer"
    calls = llm_calls(tmp_path / "run")
    assert [c["role"] for c in calls] == ["main", "main", "fast", "main", "fast", "main"]
    assert "def predict(model, row)" in prompt_text(calls[2]) and "Step 1: command read_file" in prompt_text(calls[2])
    assert "MEMORY A" in prompt_text(calls[4])  # the memory is updated, not rewritten from scratch
    final_prompt = prompt_text(calls[5])
    assert "Running memory of your steps 1 to 2:\nMEMORY B" in final_prompt
    assert "def predict(model, row)" not in final_prompt and "list_files" in final_prompt
    assert trace.steps[-1].agent_state == {"memory": script[4], "folded_through": 2}


def test_autogpt_retries_invalid_replies_then_gives_up(tmp_path):
    script = ["I will list the files.", A("fly_to_moon", {}), A("read_file", {"filename": "train.py"}),
              A("execute_python_file", {"script_name": "train.py"}, 1)] + ["not json"] * 5
    trace = run_agent(tmp_path / "run", "autogpt", script)
    problems = [f["problem"] for f in trace.steps[0].action.entries["invalid_responses"]]
    assert "not a JSON object" in problems[0]
    assert "unknown action 'fly_to_moon'" in problems[1]
    assert 'wrong args for read_file: it takes exactly {"file_name": "..."}' in problems[2]
    retry = llm_calls(tmp_path / "run")[1]["messages"]
    assert retry[-2]["content"] == script[0] and retry[-1]["content"].startswith("Your reply could not be used")
    assert len(trace.steps) == 1
    assert trace.end_reason == "agent stopped: 5 invalid responses in a row; the last: the reply is not a JSON " \
                               "object (no JSON object (nothing starting with '{'))"


# ---- langchain ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_langchain_agent_uses_the_actions_as_tools(tmp_path):
    script = [L("execute_script", {"script_name": "train.py"}, 1),
              L("edit_script_ai", {"script_name": "train.py", "edit_instruction": "nearest centroid",
                                   "save_name": "train.py"}, 2),
              edit_reply(IMPROVED),
              L("inspect_script_lines", {"script_name": "train.py", "start_line_number": "1",
                                         "end_line_number": 5}, 3),
              L("execute_script", {"script_name": "train.py"}, 4),
              L("Final Answer", "nearest centroid reaches 0.9875 validation accuracy", 5)]
    trace = run_agent(tmp_path / "run", "langchain", script)
    assert (trace.status, trace.end_reason) == ("finished", "final answer")
    assert [s.action.name for s in trace.steps] == ["Execute Script", "Edit Script (AI)", "Inspect Script Lines",
                                                   "Execute Script", "Final Answer"]
    assert trace.steps[2].action.args == {"script_name": "train.py", "start_line_number": 1, "end_line_number": 5}
    assert trace.steps[-1].action.args == {"final_answer": "nearest centroid reaches 0.9875 validation accuracy"}
    assert trace.final_score == pytest.approx(0.955)
    assert trace.steps[0].action.entries == {"thought": "thought 1", "action": "execute_script",
                                             "action_input": {"script_name": "train.py"}}
    calls = [c for c in llm_calls(tmp_path / "run") if c["role"] == "main"]
    last = calls[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "user"] * 4
    assert last[2]["content"] == script[0] and last[3]["content"].startswith("Observation: The script ran.")
    assert "edit_script_ai: Have a model edit" in last[0]["content"]
    # the prefix (system prompt and question) is the same at every step, so providers can cache it
    assert all(c["messages"][0] == last[0] for c in calls)


def test_langchain_agent_retries_invalid_replies_then_gives_up(tmp_path):
    script = ["Thought: hmm, no action", L("train_model", {}), L("list_files", {"path": "."}),
              L("list_files", {"dir_path": "."}, 1)] + ["Thought: still thinking"] * 5
    trace = run_agent(tmp_path / "run", "langchain", script)
    problems = [f["problem"] for f in trace.steps[0].action.entries["invalid_responses"]]
    assert "no JSON blob" in problems[0]
    assert "there is no tool 'train_model'" in problems[1]
    assert "wrong arguments for list_files" in problems[2] and "dir_path: Field required" in problems[2]
    retry = llm_calls(tmp_path / "run")[1]["messages"]
    assert retry[-2]["content"] == script[0]
    assert retry[-1]["content"].startswith("That reply could not be used: the reply has no JSON blob")
    assert len(trace.steps) == 1 and trace.end_reason.startswith("agent stopped: 5 invalid responses in a row")


def test_langchain_chat_model_adapter_drives_any_backend():
    """The adapter is a genuine LangChain chat model over the run's LLM client (here the scripted backend)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    from mlab.core.llm.client import LLMClient
    from mlab_agent_langchain.chain import MlabChatModel
    from mlab_llm_scripted.backend import ScriptedLLM

    backend = ScriptedLLM(completions=[{"completion": "Hello STOP ignored", "prompt_tokens": 7,
                                        "completion_tokens": 3}])
    client = LLMClient({"main": backend, "fast": backend, "edit": backend})
    reply = MlabChatModel(client=client).invoke([SystemMessage("be brief"), HumanMessage("hi")], stop=[" STOP"])
    assert reply.content == "Hello"
    assert reply.usage_metadata["input_tokens"] == 7 and reply.usage_metadata["output_tokens"] == 3
    assert client.usage.calls == 1


def test_listing_plugins_does_not_import_langchain():
    code = ("import sys; from mlab.core.plugins.registry import load_registry; r = load_registry(); "
            "assert 'langchain' in r.items['agents']; print(sorted(m for m in sys.modules if 'langchain' in m))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = eval(result.stdout)
    assert "mlab_agent_langchain" in loaded
    assert not [m for m in loaded if m.startswith("langchain")], loaded
