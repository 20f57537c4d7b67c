"""The research agent and its ablations, run for real on an in-process task with a scripted model."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core import ACTION_SPECS
from mlab.core.agentkit import InvalidResponse, loads_lenient, parse_named_entries
from tests.fixtures.agents_fixtures import (
    IMPROVED,
    STARTER,
    TASK_NAME,
    edit_reply,
    fixture_registry,
    llm_calls,
    react_response,
    research_response,
    run_agent,
    simple_response,
    write_script,
)

REPO = Path(__file__).resolve().parents[1]
R = research_response
ENTRIES = ["Reflection", "Research Plan and Status", "Fact Check", "Thought", "Action", "Action Input"]
LIST = ("List Files", {"dir_path": "."})
FINAL = ("Final Answer", {"final_answer": "done"})


def main_calls(run_dir: Path) -> list[dict]:
    return [c for c in llm_calls(run_dir) if c["role"] == "main"]


def prompt_text(call: dict) -> str:
    return "\n".join(m["content"] for m in call["messages"])


# ---- parsing ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ('```json\n{"a": "b"}\n```', {"a": "b"}),
    ('{"a": "b", "c": [1, 2,],}', {"a": "b", "c": [1, 2]}),
    ('{"a": "line one\nline two"}', {"a": "line one\nline two"}),
    ('Sure: {"a": 1} and some words after', {"a": 1}),
])
def test_lenient_json(text, expected):
    assert loads_lenient(text) == expected


def test_unescaped_quotes_are_read_by_known_keys():
    text = '{"script_name": "train.py", "edit_instruction": "print "done" at the end", "save_name": "train.py"}'
    assert loads_lenient(text, keys=["script_name", "edit_instruction", "save_name"]) == {
        "script_name": "train.py", "edit_instruction": 'print "done" at the end', "save_name": "train.py"}


def test_response_parsing_is_tolerant():
    text = ("```\n**Reflection:** the run failed\n## Research Plan and Status:\n1. baseline (done)\n"
            "Fact Check: guessed\nThought: edit\nAction: edit script (ai)\nAction Input: ```json\n"
            '{\n "script_name": "train.py",\n "edit_instruction": "use\nmore epochs",\n "save_name": "train.py",\n}\n'
            "```\nObservation: I imagine it worked\n```")
    action = parse_named_entries(text, ENTRIES, ACTION_SPECS)
    assert action.name == "Edit Script (AI)"
    assert action.args == {"script_name": "train.py", "edit_instruction": "use\nmore epochs", "save_name": "train.py"}
    assert action.entries["Reflection"] == "the run failed"
    assert action.entries["Research Plan and Status"] == "1. baseline (done)"
    assert action.raw_response == text


def test_plan_lines_that_look_like_entries_are_not_taken_for_them():
    text = R("List Files", {"dir_path": "."}, plan="1. Action: run the baseline\n2. Thought: compare")
    action = parse_named_entries(text, ENTRIES, ACTION_SPECS)
    assert action.name == "List Files" and action.entries["Thought"] == "thought 0"
    assert action.entries["Research Plan and Status"] == "1. Action: run the baseline\n2. Thought: compare"


@pytest.mark.parametrize("text, problem", [
    ("Thought: hm\nAction: List Files\nAction Input: {\"dir_path\": \".\"}", "lacks the entries Reflection"),
    (R("Train Model", {}), "unknown action 'Train Model'"),
    (R("List Files", {}).replace("{}", "{dir_path: .}"), "could not be read as JSON"),
    (R("List Files", {"path": "."}), "missing dir_path; unexpected path"),
])
def test_invalid_responses_say_what_is_wrong(text, problem):
    with pytest.raises(InvalidResponse, match=problem):
        parse_named_entries(text, ENTRIES, ACTION_SPECS)


# ---- runs -------------------------------------------------------------------------------------------
def test_research_agent_improves_on_the_baseline(tmp_path):
    from tests.fixtures.harness import measure_baseline

    task = fixture_registry().get("tasks", TASK_NAME)
    script = [
        R("Inspect Script Lines", {"script_name": "train.py", "start_line_number": 1, "end_line_number": 40}, 1),
        R("Execute Script", {"script_name": "train.py"}, 2),
        R("Edit Script (AI)", {"script_name": "train.py", "save_name": "train.py",
                               "edit_instruction": "replace the majority-class model with nearest centroid"}, 3),
        edit_reply(IMPROVED),
        R("Execute Script", {"script_name": "train.py"}, 4),
        R(*FINAL, 5),
    ]
    trace = run_agent(tmp_path / "run", "research", script)
    assert (trace.status, trace.end_reason) == ("finished", "final answer")
    assert [s.action.name for s in trace.steps] == [
        "Inspect Script Lines", "Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"]
    assert "def predict(model, row):" in trace.steps[0].observation
    assert "validation accuracy: 0.6250" in trace.steps[1].observation
    assert "+    x1, x2 = float(row" in trace.steps[2].observation  # the diff of the edit
    assert "validation accuracy: 0.9875" in trace.steps[3].observation
    assert (tmp_path / "run" / "workspace" / "train.py").read_text() == IMPROVED
    baseline = measure_baseline(task, record=False)[0]
    assert trace.final_score == pytest.approx(0.955) and trace.final_score > baseline + 0.2
    main_responses = [c for c in script if not c.startswith("Here is the edited")]
    for n, step in enumerate(trace.steps, start=1):
        assert list(step.action.entries) == ENTRIES
        assert step.action.entries["Reflection"] == f"reflection {n}"
        assert step.action.entries["Research Plan and Status"] == f"1. measure baseline (plan {n})"
        assert step.action.entries["Fact Check"] == f"fact check {n}: guessed"
        assert step.action.entries["Thought"] == f"thought {n}"
        assert step.action.entries["Action Input"] == step.action.args
        assert step.action.raw_response == main_responses[n - 1]
    edit_call = [c for c in llm_calls(tmp_path / "run") if c["role"] == "edit"][0]
    assert "nearest centroid" in prompt_text(edit_call) and STARTER in prompt_text(edit_call)
    first = main_calls(tmp_path / "run")[0]
    system = first["messages"][0]["content"]
    assert task.research_problem in system and "Edit Script (AI)" in system and "Read File" not in system


@pytest.mark.slow  # trains scikit-learn models on a real task, twice
def test_research_agent_beats_the_baseline_on_a_lite_task(tmp_path):
    """The same run on the built-in lite/wine task (scikit-learn): scaled logistic regression beats the k-NN starter."""
    from mlab.core import RunConfig
    from mlab.core.run import taskdata
    from mlab.core.run.runner import Runner
    from tests.fixtures.harness import measure_baseline

    registry = fixture_registry()
    if "lite/wine" not in registry.items["tasks"]:
        pytest.skip("the lite task pack is not installed")
    task = registry.get("tasks", "lite/wine")
    taskdata.prepare(task, log=lambda _msg: None)
    starter = (taskdata.public_dir(task) / "train.py").read_text()
    knn = "model = KNeighborsClassifier(n_neighbors=5)"
    assert knn in starter, "the lite/wine starter changed; update this test's edit"
    edited = ("from sklearn.linear_model import LogisticRegression\nfrom sklearn.pipeline import make_pipeline\n"
              "from sklearn.preprocessing import StandardScaler\n" + starter.replace(
                  knn, "model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))"))
    script = write_script(tmp_path / "script.jsonl", [
        R("Inspect Script Lines", {"script_name": "train.py", "start_line_number": 1, "end_line_number": 30}, 1),
        R("Execute Script", {"script_name": "train.py"}, 2),
        R("Edit Script (AI)", {"script_name": "train.py", "save_name": "train.py",
                               "edit_instruction": "standardize the features and use logistic regression"}, 3),
        edit_reply(edited),
        R("Execute Script", {"script_name": "train.py"}, 4),
        R(*FINAL, 5),
    ])
    config = RunConfig(task="lite/wine", agent="research", llm=f"scripted:{script}", max_steps=10,
                       action_timeout_s=120)
    trace = Runner(tmp_path / "run", config, registry).start()
    assert trace.end_reason == "final answer", trace.end_reason
    assert [s.action.name for s in trace.steps] == [
        "Inspect Script Lines", "Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"]
    assert "Validation accuracy:" in trace.steps[1].observation and "Validation accuracy:" in trace.steps[3].observation
    assert all(list(s.action.entries) == ENTRIES for s in trace.steps)
    baseline = measure_baseline(task, record=False)[0]
    assert trace.final_score > baseline * 1.1, (trace.final_score, baseline)
    print(f"lite/wine: baseline {baseline:.4f}, research agent {trace.final_score:.4f}")


def test_invalid_responses_are_retried_with_the_correction(tmp_path):
    script = [
        "Thought: let me look\nAction: List Files\nAction Input: {\"dir_path\": \".\"}",
        R("Train Model", {"epochs": 3}),
        R(*LIST).replace('{"dir_path": "."}', "{dir_path: .}"),
        R(*LIST, 1),
        R(*FINAL, 2),
    ]
    trace = run_agent(tmp_path / "run", "research", script)
    assert trace.end_reason == "final answer" and len(trace.steps) == 2
    retries = trace.steps[0].action.entries["invalid_responses"]
    assert [r["response"] for r in retries] == script[:3]
    assert "lacks the entries Reflection, Research Plan and Status, Fact Check" in retries[0]["problem"]
    assert "unknown action 'Train Model'" in retries[1]["problem"]
    assert "could not be read as JSON" in retries[2]["problem"]
    calls = main_calls(tmp_path / "run")
    # each retry shows the bad response and what was wrong with it, after the same prompt
    assert [m["role"] for m in calls[1]["messages"]] == ["system", "user", "assistant", "user"]
    assert calls[1]["messages"][2]["content"] == script[0]
    assert calls[1]["messages"][3]["content"].startswith("That response could not be used: the response lacks")
    assert "unknown action 'Train Model'" in calls[2]["messages"][3]["content"]
    assert calls[1]["messages"][:2] == calls[0]["messages"]
    assert trace.steps[1].agent_state["invalid_responses"] == 3
    assert "invalid response, asked again" in (tmp_path / "run" / "errors.log").read_text()


def test_five_invalid_responses_end_the_run_with_the_reason(tmp_path):
    script = [R(*LIST, 1)] + [f"I am not sure what to do ({n})" for n in range(5)] + [R(*FINAL, 2)]
    trace = run_agent(tmp_path / "run", "research", script)
    assert len(trace.steps) == 1
    assert trace.end_reason.startswith("agent stopped: 5 invalid responses in a row; the last: the response lacks")
    assert len(main_calls(tmp_path / "run")) == 6  # one good response, then five attempts, then no more
    assert trace.final_score is None and "no submission.csv" in trace.final_score_error


def test_long_observations_are_summarized_before_entering_the_history(tmp_path):
    summary = "train.csv: 400 rows, columns id,x1,x2,label; labels 0 and 1"
    script = [
        R("Read File", {"file_name": "data/train.csv"}, 1),
        summary,  # the fast model's summary, asked for at the start of step 2
        R(*FINAL, 2),
    ]
    options = {"actions": ["Read File", "Final Answer"]}
    trace = run_agent(tmp_path / "run", "research", script, options=options)
    assert trace.end_reason == "final answer"
    observation = trace.steps[0].observation
    assert len(observation) > 5000 and observation.startswith("id,x1,x2,label")
    calls = llm_calls(tmp_path / "run")
    assert [c["role"] for c in calls] == ["main", "fast", "main"]
    assert observation in prompt_text(calls[1]) and 'Read File {"file_name": "data/train.csv"}' in prompt_text(calls[1])
    step2_prompt = prompt_text(calls[2])
    assert summary in step2_prompt and f"summary of {len(observation)} characters" in step2_prompt
    assert observation[:200] not in step2_prompt
    assert trace.steps[1].agent_state["summaries"] == {"1": summary}
    system = calls[0]["messages"][0]["content"]
    assert "- Read File:" in system and "- Execute Script:" not in system  # only the chosen actions are shown


def test_prompt_holds_only_the_last_three_steps(tmp_path):
    script = [R(*LIST, n) for n in range(1, 7)] + [R(*FINAL, 7)]
    trace = run_agent(tmp_path / "run", "research", script)
    assert len(trace.steps) == 7
    prompt = main_calls(tmp_path / "run")[6]["messages"][1]["content"]
    for n in (4, 5, 6):
        assert f"[Step {n}]" in prompt and f"thought {n}" in prompt and f"reflection {n}" in prompt
    for n in (1, 2, 3):
        assert f"[Step {n}]" not in prompt and f"thought {n}" not in prompt
    assert prompt.count("Observation:") == 3 and "steps 1 to 3 are not shown" in prompt
    # the plan is restated in every response: only the newest copy is shown
    assert "plan 6" in prompt and "plan 5" not in prompt and "plan 4" not in prompt
    assert "This is step 7 of at most 30" in prompt


def test_retrieval_mode_keeps_a_research_log_and_recalls_from_it(tmp_path):
    script = [R(*LIST, 1)]
    for n in range(2, 5):
        script += [f"LOG {n - 1}: listed the files", R(*LIST, n)]
    script += ["LOG 4: listed the files", "RECALLED: the workspace holds train.py and data/", R(*FINAL, 5)]
    trace = run_agent(tmp_path / "run", "research", script, options={"retrieval": True})
    assert trace.end_reason == "final answer" and len(trace.steps) == 5
    calls = llm_calls(tmp_path / "run")
    assert [c["role"] for c in calls] == ["main"] + ["fast", "main"] * 3 + ["fast", "fast", "main"]
    recall = prompt_text(calls[-2])
    assert "[Step 1]\nLOG 1" in recall and "plan 4" in recall and "LOG 2" not in recall  # steps 2-4 are shown
    last = prompt_text(calls[-1])
    assert "Notes recalled from your research log of step 1:\nRECALLED: the workspace" in last
    state = trace.steps[-1].agent_state
    assert [e["text"] for e in state["research_log"]] == [f"LOG {n}: listed the files" for n in range(1, 5)]


@pytest.mark.parametrize("agent, respond, entries", [
    ("react", react_response, ["Thought", "Action", "Action Input"]),
    ("simple", simple_response, ["Action", "Action Input"]),
])
def test_ablations_run_end_to_end(tmp_path, agent, respond, entries):
    script = [respond("Execute Script", {"script_name": "train.py"}, 1),
              respond("Edit Script (AI)", {"script_name": "train.py", "edit_instruction": "nearest centroid",
                                           "save_name": "train.py"}, 2),
              edit_reply(IMPROVED),
              respond("Execute Script", {"script_name": "train.py"}, 3), respond(*FINAL, 4)]
    trace = run_agent(tmp_path / "run", agent, script)
    assert trace.end_reason == "final answer" and trace.final_score == pytest.approx(0.955)
    assert all(list(s.action.entries) == entries for s in trace.steps)
    system = main_calls(tmp_path / "run")[0]["messages"][0]["content"]
    assert "Response format" in system and "Reflection:" not in system and "Fact Check:" not in system


def test_resumed_run_continues_with_the_same_memory(tmp_path, monkeypatch):
    summary = "SUMMARY: 400 rows of id,x1,x2,label"
    script = write_script(tmp_path / "script.jsonl", [
        R("Read File", {"file_name": "data/train.csv"}, 1),
        summary,
        R(*LIST, 2),
        R(*LIST, 3),
        R(*FINAL, 4),
    ])
    run_dir = tmp_path / "run"
    base = [sys.executable, "-m", "tests.fixtures.agents_fixtures", "run", str(run_dir)]
    first = subprocess.run(base + ["--agent", "research", "--llm", f"scripted:{script}", "--die-after", "2",
                                   "--option", 'actions=["Read File", "List Files", "Final Answer"]'],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert first.returncode == 9 and "STEP 2" in first.stdout, first.stdout + first.stderr
    from mlab.core.run.trace import read_trace

    killed = read_trace(run_dir)
    assert killed.status == "running" and killed.steps[-1].agent_state["summaries"] == {"1": summary}
    calls_before = len(llm_calls(run_dir))
    second = subprocess.run(base + ["--resume"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and "END finished final answer" in second.stdout, second.stdout + second.stderr
    resumed = llm_calls(run_dir)[calls_before:]
    assert [c["role"] for c in resumed] == ["main", "main"]  # the summary was not asked for again
    assert summary in prompt_text(resumed[0]) and "[Step 1]" in prompt_text(resumed[0])
    final = json.loads((run_dir / "trace.json").read_text())
    assert [s["action"]["name"] for s in final["steps"]] == ["Read File", "List Files", "List Files", "Final Answer"]
    assert final["steps"][-1]["agent_state"]["summaries"] == {"1": summary}
