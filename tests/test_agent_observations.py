"""What agents see: edit diffs verbatim (cut with a note, never summarized), Understand File split between
entries, failed scripts flagged as errors, workspace-relative paths, the agent's own exceptions in their own
failure class, and a research problem fitted to the offered actions and the installed package versions."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mlab.core import Action, Agent, AgentContext, RunConfig, RunState, Task
from mlab.core.agentkit import AgentOptions, needs_summary, research_problem
from mlab.core.bench.results import classify
from mlab.core.models import Step
from mlab.core.run.llm_actions import MAX_DIFF_CHARS, split_blocks
from mlab.core.run.packages import KEY_PACKAGES, package_versions
from mlab.core.run.runner import Runner
from tests.fixtures.agents_fixtures import llm_calls, run_agent
from tests.fixtures.harness import TASK_NAME, fixture_registry
from tests.test_environment import act, make_env, scripted_llm

SHARED_DESCRIPTION = Path(__file__).resolve().parents[2] / "shared" / "data" / "house-prices" / "data_description.txt"


# ---- Edit Script diffs -----------------------------------------------------------------------------------
def big_edit(tmp_path):
    old = "".join(f"value_{i} = {i}\n" for i in range(800))
    new = "".join(f"value_{i} = {i * 2}\n" if i % 4 == 0 else f"value_{i} = {i}\n" for i in range(800))
    env = make_env(tmp_path, llm=scripted_llm(edit=[f"```python\n{new}```"]))
    (env.workspace / "model.py").write_text(old)
    observation, is_error = act(env, "Edit Script (AI)", script_name="model.py", edit_instruction="double every "
                                "fourth value", save_name="model.py")
    env.close()
    return observation, is_error, new


def test_a_long_edit_diff_is_cut_between_lines_with_a_note_naming_where_the_rest_is(tmp_path):
    observation, is_error, new = big_edit(tmp_path)
    assert not is_error
    head, note = observation.rsplit("\n[The diff goes on for ", 1)
    diff = head.split("Check that this diff does what you meant:\n", 1)[1]
    assert len(diff) <= MAX_DIFF_CHARS + 1
    assert all(re.match(r"^(@@ |[ +-]|--- |\+\+\+ )", line) for line in diff.splitlines())  # whole diff lines only
    last_shown = int(re.findall(r"^[ +]value_(\d+) =", diff, re.M)[-1])
    first_hidden_line = last_shown + 2  # value_N is line N + 1 of the file
    assert f"Inspect Script Lines on model.py, lines {first_hidden_line}-800" in note
    assert note.endswith("not shown here. See the rest in the file itself with Inspect Script Lines on model.py, "
                         f"lines {first_hidden_line}-800.]\n") and len(observation) < 5_000
    assert (tmp_path / "ws" / "model.py").read_text() == new


def test_edit_observations_are_never_summarized_by_the_research_agent(tmp_path):
    edit = Step(index=1, action=Action(name="Edit Script (AI)", args={}), observation="d" * 9_000, started_at=0,
                duration_s=0, snapshot="step_0001")
    run = edit.model_copy(update={"action": Action(name="Execute Script", args={})})
    assert not needs_summary(edit, 5_000) and needs_summary(run, 5_000)

    reply = ("Reflection: r\nResearch Plan and Status: 1. edit\nFact Check: none\nThought: t\n"
             "Action: {action}\nAction Input: {args}")
    instruction = {"script_name": "train.py", "edit_instruction": "add many prints", "save_name": "train.py"}
    edited = "".join(f"print({i})\n" for i in range(2_000))
    script = [reply.format(action="Edit Script (AI)", args=json.dumps(instruction)), f"```python\n{edited}```",
              reply.format(action="Final Answer", args=json.dumps({"final_answer": "done"}))]
    trace = run_agent(tmp_path / "run", "research", script, options={"summarize_over": 1_000})
    assert trace.end_reason == "final answer" and len(trace.steps[0].observation) > 4_000
    roles = [c["role"] for c in llm_calls(tmp_path / "run")]
    assert roles == ["main", "edit", "main"]  # the diff was not sent to the fast model to be summarized
    last_prompt = llm_calls(tmp_path / "run")[-1]["messages"][-1]["content"]
    assert "+print(1999)" not in last_prompt and "[The diff goes on for" in last_prompt
    assert "+print(0)" in last_prompt


# ---- Understand File ------------------------------------------------------------------------------------
def described_features(count: int) -> str:
    """A data description like the house-price one: an entry's heading, a blank (tabbed) line, indented levels."""
    parts = []
    for n in range(count):
        levels = "".join(f"       L{k}\tLevel {k} of feature {n}\n" for k in range(n % 7 + 2))
        parts.append(f"Feature{n}: what feature {n} measures\n\t\t\n{levels}\t\t\n")
    return "".join(parts)


def test_understand_file_blocks_split_between_entries_never_inside_one():
    text = described_features(300)
    blocks = split_blocks(text, limit=2_000)
    assert len(blocks) > 5
    assert "".join(block for _, _, block in blocks) == text  # every line, whole, once
    lines = text.splitlines()
    for first, last, block in blocks:
        assert block.count("\n") == last - first + 1 and len(block) <= 2_000
        assert re.match(r"Feature\d+: ", lines[first - 1]), lines[first - 1]  # each block starts an entry


@pytest.mark.shared_data
def test_understand_file_keeps_each_house_price_feature_whole():
    if not SHARED_DESCRIPTION.is_file():
        pytest.skip("../shared/data/house-prices is not here")
    text = SHARED_DESCRIPTION.read_text()
    for _, _, block in split_blocks(text, limit=3_000):
        opening = block.splitlines()[0]
        assert opening.strip() and not opening[0].isspace(), opening  # never a level cut from its heading
    whole = next(block for _, _, block in split_blocks(text, limit=3_000) if "PoolQC: Pool quality" in block)
    assert "NA\tNo Pool" in whole


def test_a_line_longer_than_a_block_is_kept_apart_and_said_to_be_cut():
    text = "short\n" + "x" * 50_000 + "\nafter\n"
    blocks = split_blocks(text, limit=1_000)
    assert [(first, last) for first, last, _ in blocks] == [(1, 1), (2, 2), (3, 3)]
    assert "[line 2 is 50001 characters long; the rest of it is not shown]" in blocks[1][2]


# ---- running code ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("source, failed", [
    ("print('fine')\n", False),
    ("import sys\nprint('bad')\nsys.exit(3)\n", True),
    ("def f():\n    return 1 / 0\nf()\n", True),
    ("import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()\nprint('carry on')\n",
     True),
])
def test_scripts_that_fail_are_errors_with_workspace_relative_paths(tmp_path, source, failed):
    env = make_env(tmp_path)
    (env.workspace / "job.py").write_text(source + "import os\nprint('cwd', os.getcwd())\n")
    observation, is_error = act(env, "Execute Script", script_name="job.py")
    env.close()
    assert is_error == failed and observation.startswith("The script ran. Output:")
    assert str(tmp_path) not in observation and os.path.realpath(tmp_path) not in observation
    if "1 / 0" in source:
        assert 'File "job.py", line' in observation
    if "exit(3)" in source:
        assert observation.rstrip().endswith("[exit code 3]")
    elif "f()" not in source:  # the script got to its end
        assert "cwd .\n" in observation


def test_a_repl_command_that_raises_is_an_error_without_host_paths(tmp_path):
    env = make_env(tmp_path)
    (env.workspace / "helper.py").write_text("def boom():\n    raise ValueError('no')\n")
    fine, fine_error = act(env, "Python REPL", command="x = 2\nprint(x * 21)")
    raised, raised_error = act(env, "Python REPL", command="import helper\nhelper.boom()")
    env.close()
    assert (fine.strip(), fine_error) == ("42", False)
    assert raised_error and "ValueError: no" in raised and 'File "helper.py", line 2' in raised
    assert str(tmp_path) not in raised


# ---- the agent's own failures ---------------------------------------------------------------------------
class CrashingOptions(AgentOptions):
    garbage: bool = False


class CrashingAgent(Agent):
    name = "test-crashing"
    description = "raises on its second step"
    needs_llm = False
    Options = CrashingOptions

    def step(self, state: RunState):
        if state.step_index == 2:
            return {"surely": "not this"} if self.ctx.options.get("garbage") else 1 / 0
        return Action(name="List Files", args={"dir_path": "."})


@pytest.mark.parametrize("options, reason", [
    ({}, "agent error: ZeroDivisionError: division by zero"),
    ({"garbage": True}, "agent error: CrashingAgent.step returned dict, not an Action or StopRun"),
])
def test_an_agent_exception_is_an_agent_error_not_a_harness_error(tmp_path, options, reason):
    registry = fixture_registry()
    registry.items["agents"][CrashingAgent.name] = CrashingAgent
    trace = Runner(tmp_path / "run", RunConfig(task=TASK_NAME, agent=CrashingAgent.name, agent_options=options,
                                              max_steps=5), registry).start()
    assert (trace.status, trace.end_reason) == ("failed", reason)
    assert len(trace.steps) == 1 and classify(trace) == "agent_error"
    errors = (tmp_path / "run" / "errors.log").read_text()
    assert "mlab.core.run.agent_step.AgentFailed: " + reason.removeprefix("agent error: ") in errors
    assert ("in step\n" in errors) == (not options)  # the agent's own frame, when it raised


# ---- the research problem -------------------------------------------------------------------------------
class NotesTask(Task):
    name = "fixture/notes"
    description = "a task whose text asks for a research log"
    research_problem = ("Read data_description.txt to understand the data and the machine learning task, and keep "
                        "notes in your research log. Then fill in train.py.\nStart by reading task.txt; keep notes "
                        "of what you learn and plan in your research log.\nSubmit submission.csv.")


def context(actions, packages=None) -> AgentContext:
    return AgentContext(task_name=NotesTask.name, research_problem=NotesTask.research_problem, actions={},
                        llm=None, packages=packages or {})


def test_the_research_log_is_mentioned_only_when_its_action_is_offered():
    without = research_problem(context([]), ["List Files", "Execute Script"])
    assert "research log" not in without.lower()
    assert without.startswith("Read data_description.txt to understand the data and the machine learning task. "
                              "Then fill in train.py.\nStart by reading task.txt.\nSubmit submission.csv.")
    offered = research_problem(context([]), ["Append Summary to Research Log"])
    assert offered == NotesTask.research_problem


def test_the_research_problem_names_the_installed_versions(tmp_path):
    versions = package_versions()
    assert list(versions)[0] == "python" and set(versions) <= {"python", *KEY_PACKAGES}
    assert versions["pandas"] == __import__("pandas").__version__
    text = research_problem(context([], versions), [])
    assert text.endswith(f"Your code runs with Python {versions['python']}, numpy {versions['numpy']}, pandas "
                         f"{versions['pandas']}, scikit-learn {versions['scikit-learn']} and torch "
                         f"{versions['torch']} installed; write it for these versions.")
    reply = ("Reflection: r\nResearch Plan and Status: 1. x\nFact Check: none\nThought: t\nAction: Final Answer\n"
             "Action Input: {\"final_answer\": \"done\"}")
    run_agent(tmp_path / "run", "research", [reply])
    system = llm_calls(tmp_path / "run")[0]["messages"][0]["content"]
    assert f"pandas {versions['pandas']}" in system and "research log" not in system.lower()
