"""Choosing agents on the command line: `--agent` swaps the policy and nothing else."""
from __future__ import annotations

import functools
import json

import pytest

from tests.fixtures.agents_fixtures import fixture_registry
from tests.fixtures.cli import mlab_in_process

AGENTS = ["research", "simple", "react", "autogpt", "langchain"]


# The CLI with the fixture task and the fixture-policy model registered.
mlab = functools.partial(mlab_in_process, registry=fixture_registry)


@pytest.mark.parametrize("agent", AGENTS)
def test_agent_option_swaps_the_agent_and_nothing_else(tmp_path, agent):
    run_dir = tmp_path / agent
    # The same command for every agent; the fixture-policy model answers in whichever format the agent asks.
    result = mlab("run", "--task", "fixture/tiny-clf", "--llm", "fixture-policy", "--max-steps", "5",
                  "--run-dir", str(run_dir), "--agent", agent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "run finished: final answer; 2 steps" in result.stdout
    assert "final accuracy: 0.655" in result.stdout
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["config"]["agent"] == agent
    assert [s["action"]["name"] for s in trace["steps"]] == ["Execute Script", "Final Answer"]
    assert all(s["action"]["entries"] and s["action"]["raw_response"] for s in trace["steps"])


def test_unknown_agent_lists_the_valid_ones():
    result = mlab("run", "--task", "fixture/tiny-clf", "--llm", "fixture-policy", "--agent", "reserch")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("mlab: error: unknown agent 'reserch'; did you mean research or search? valid:")
    for name in ["baseline", *AGENTS]:
        assert name in lines[0]


@pytest.mark.parametrize("agent, option, fragment", [
    ("research", "actions=[\"Fly\"]", "unknown action(s) 'Fly' in option actions"),
    ("research", "colour=1", "agent 'research' has no option colour"),
    ("autogpt", "recent_chars=-1", "agent 'autogpt': option recent_chars: input should be greater than or equal "
                                   "to 1 (got -1)"),
    ("langchain", "tools=[\"Fly\"]", "unknown action(s) 'Fly' in option tools"),
])
def test_bad_agent_options_are_one_line_errors(tmp_path, agent, option, fragment):
    result = mlab("run", "--task", "fixture/tiny-clf", "--llm", "fixture-policy", "--agent", agent,
                  "--agent-option", option, "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr
