"""Agents declare their options (a pydantic model each): unknown keys and bad values are refused in one line that
names the valid options, before a run writes anything, and `mlab agents` lists every option."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mlab.core import RunConfig
from mlab.core.agentkit.options import check_agent_options, option_rows
from mlab.core.errors import MlabError
from mlab.core.plugins.registry import load_registry
from mlab.core.run.runner import Runner
from tests.fixtures.cli import mlab_in_process as mlab
from tests.fixtures.harness import TASK_NAME, fixture_registry

REPO = Path(__file__).resolve().parents[1]
BUILT_IN = {
    "baseline": [],
    "research": ["actions", "retrieval", "history_steps", "summarize_over", "max_attempts", "tools"],
    "react": ["actions", "retrieval", "history_steps", "summarize_over", "max_attempts", "tools"],
    "simple": ["actions", "retrieval", "history_steps", "summarize_over", "max_attempts", "tools"],
    "autogpt": ["commands", "recent_chars", "result_chars", "max_attempts"],
    "langchain": ["tools", "observation_chars", "scratchpad_chars", "max_attempts"],
}


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_an_unknown_option_is_refused_naming_the_valid_ones(tmp_path):
    line = one_line_error(mlab("run", "--task", "lite/digits", "--agent", "baseline", "--agent-option", "foo=1",
                               "--run-dir", str(tmp_path / "run")))
    assert line == "mlab: error: agent 'baseline' has no option foo; options: none (it takes no options)"
    line = one_line_error(mlab("run", "--task", "lite/digits", "--agent", "research", "--llm", "scripted:x.jsonl",
                               "--agent-option", "histroy_steps=2", "--run-dir", str(tmp_path / "run")))
    assert line.startswith("mlab: error: ") and ("agent 'research' has no option histroy_steps; options: actions, "
                                                 "retrieval, history_steps, summarize_over, max_attempts") in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("agent, options, message", [
    ("research", {"history_steps": 0}, "agent 'research': option history_steps: input should be greater than or "
                                       "equal to 1 (got 0)"),
    ("research", {"retrieval": "maybe"}, "agent 'research': option retrieval: input should be a valid boolean"),
    ("research", {"actions": []}, "agent 'research': option actions: value should have at least 1 item"),
    ("langchain", {"max_attempts": "many"}, "agent 'langchain': option max_attempts: input should be a valid "
                                            "integer"),
    ("autogpt", {"commands": 3}, "agent 'autogpt': option commands: input should be a valid list"),
])
def test_bad_values_are_one_line_errors(agent, options, message):
    with pytest.raises(MlabError) as caught:
        check_agent_options(load_registry().get("agents", agent), options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_good_values_are_converted_and_defaults_filled():
    research = load_registry().get("agents", "research")
    options = check_agent_options(research, {"actions": "List Files, Execute Script", "retrieval": "true",
                                             "history_steps": "5"})
    assert options.model_dump() == {"actions": ["List Files", "Execute Script"], "retrieval": True,
                                    "history_steps": 5, "summarize_over": 5000, "max_attempts": 5, "tools": "text"}


def test_a_run_with_a_bad_option_writes_nothing(tmp_path):
    with pytest.raises(MlabError, match="has no option colour; options: steps, sleep"):
        Runner(tmp_path / "run", RunConfig(task=TASK_NAME, agent="fixture-stepper", agent_options={"colour": 1}),
               fixture_registry())
    assert not (tmp_path / "run").exists()


def test_mlab_agents_lists_every_option_in_the_table_and_in_json():
    listed = json.loads(mlab("agents", "--json").stdout)
    by_name = {row["name"]: row for row in listed}
    for agent, names in BUILT_IN.items():
        rows = by_name[agent]["options"]
        assert [o["name"] for o in rows] == names
        assert all(o["description"] and not o["required"] for o in rows)
    history = next(o for o in by_name["research"]["options"] if o["name"] == "history_steps")
    assert (history["type"], history["default"]) == ("int", 3)
    table = mlab("agents", env={"COLUMNS": "250"}).stdout
    assert "history_steps=3: how many recent steps the prompt shows in full" in table
    assert "observation_chars=5000" in table and "none" in table


def test_required_options_are_listed_as_required():
    from tests.test_fault_tolerance import FaultAgent

    rows = {o["name"]: o for o in option_rows(FaultAgent)}
    assert rows["run_dir"] == {"name": "run_dir", "type": "str", "required": True, "default": None,
                               "description": ""}
    with pytest.raises(MlabError, match="option run_dir: field required"):
        check_agent_options(FaultAgent, {"steps": 2})


def test_a_bench_gives_each_agent_the_options_it_declares():
    from mlab.core.bench.agent_options import bench_agent_options

    agents = load_registry().items["agents"]
    research, baseline = agents["research"], agents["baseline"]
    some_option = next(iter(research.Options.model_fields))
    value = research.Options().model_dump()[some_option]
    chosen = bench_agent_options([research, baseline], {some_option: value})
    assert chosen == {"research": {some_option: value}, "baseline": {}}
    with pytest.raises(MlabError, match="no agent of this bench has an option 'nosuch'"):
        bench_agent_options([research, baseline], {"nosuch": 1})
    with pytest.raises(MlabError, match="agent 'baseline' has no option"):
        bench_agent_options([research, baseline], {f"baseline:{some_option}": value})
    with pytest.raises(MlabError, match="'autogpt' is not in this bench"):
        bench_agent_options([research, baseline], {f"autogpt:{some_option}": value})
