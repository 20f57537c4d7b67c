"""Agent prompts are true for every shipped task (issue 30, item 3): each model-driven agent's first prompt,
recorded from a real run with the scripted model, asks nothing the task rules out and names only files that
exist in the run's workspace (or that the run is to write).

Facts checked: house-price's and spaceship-titanic's starters are unfinished by design (as in the original),
so no prompt may tell the agent to run the starter as it is and take its score as the baseline; the search
agent reads no file itself, so its prompt must not pass on the task's "read data_description.txt" and "do not
read the CSV files" requests."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mlab.core import ProgramAgent, RunConfig
from mlab.core.plugins.registry import load_registry
from mlab.core.run.runner import Runner
from mlab.core.run.taskdata import TaskHome
from tests.test_workspace_files import sources

REGISTRY = load_registry()
MODEL_AGENTS = sorted(name for name in REGISTRY.items["agents"]
                      if getattr(REGISTRY.get("agents", name), "needs_llm", False)
                      and name != "command" and not name.startswith(("fixture", "scripted")))  # command: no prompt
# Third-party programs (smolagents, mini-swe-agent) wrap the task text in their own package's prompt, whose
# examples name files of no task (`cat filename.py`): only what mlab adds to it is held to the workspace's files.
THIRD_PARTY = {name for name in MODEL_AGENTS if issubclass(REGISTRY.get("agents", name), ProgramAgent)}
LITE = sorted(name for name in REGISTRY.items["tasks"] if name.startswith("lite/"))
TABULAR = ["mlagentbench/house-price", "mlagentbench/spaceship-titanic", "mlagentbench/feedback",
           "mlagentbench/parkinsons"]
STARTER_DOES_NOT_RUN = {"mlagentbench/house-price", "mlagentbench/spaceship-titanic"}
RUN_AS_IT_IS = re.compile(r"\bas it is\b[^.\n]*\bbaseline\b|\bas-is\b|\bnote its score as the baseline\b|"
                          r"\brun the provided script\b", re.IGNORECASE)
NO_READING = re.compile(r"Do not read the CSV files|^\s*(Read|Start by reading) \S+\.txt", re.IGNORECASE | re.MULTILINE)
FILE_NAME = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:csv|txt|py|json))\b")
QUOTED_DOCUMENT = re.compile(r"^## [\w./-]+\.(?:txt|md)\n.*?(?=^## |^# |\Z)", re.MULTILINE | re.DOTALL)
# Files a run is asked to write, not to find.
WRITTEN = re.compile(r"^(submission\.csv|valid_submission\.csv|research_log\.log|solutions/.*|seen_ids\.txt)$")


def first_prompt(tmp_path: Path, task: str, agent: str) -> tuple[str, Path]:
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps("not a usable reply") + "\n")
    config = RunConfig(task=task, agent=agent, llm=f"scripted:{script}", max_steps=4, action_timeout_s=60)
    run_dir = tmp_path / "run"
    Runner(run_dir, config, REGISTRY).start()
    first = json.loads((run_dir / "llm_calls.jsonl").read_text().splitlines()[0])
    return "\n".join(m["content"] for m in first["messages"]), run_dir / "workspace"


def check(prompt: str, workspace: Path, task: str, agent: str) -> None:
    if task in STARTER_DOES_NOT_RUN:
        found = RUN_AS_IT_IS.search(prompt)
        assert found is None, f"{agent} on {task}: {found.group(0)!r}"
    if agent in ("search", "aide"):
        found = NO_READING.search(prompt)
        assert found is None, f"{agent} on {task} passes on {found.group(0)!r}"
    if agent in THIRD_PARTY:
        return
    # the task's own documents, which the search agent's overview shows verbatim, may name the original's files
    prompt = QUOTED_DOCUMENT.sub("", prompt)
    named = {m.group(1) for m in FILE_NAME.finditer(prompt)}
    missing = sorted(n for n in named if not WRITTEN.match(n) and not (workspace / n).exists())
    assert not missing, f"{agent} on {task} names files the workspace lacks: {missing}"


def checked(tasks: list[str]) -> list[tuple[str, str]]:
    """(task, agent) pairs `check` has something to hold against: a third-party program's prompt only on a task
    whose starter does not run (the rest of its prompt is its package's)."""
    return [(task, agent) for task in tasks for agent in MODEL_AGENTS
            if agent not in THIRD_PARTY or task in STARTER_DOES_NOT_RUN]


@pytest.fixture(scope="module")
def module_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prompts-home")


@pytest.fixture(autouse=True)
def _tasks_prepared_once(module_home, monkeypatch):
    """One MLAB_HOME for the module's runs: each task is prepared once, not once per agent."""
    monkeypatch.setenv("MLAB_HOME", str(module_home))


def test_every_model_driven_agent_is_checked():
    assert {"research", "search", "aide", "autogpt", "langchain"} <= set(MODEL_AGENTS)
    assert {agent for _task, agent in checked(TABULAR)} == set(MODEL_AGENTS)


@pytest.mark.parametrize("task, agent", [pytest.param(*pair, marks=[] if pair[0] == "lite/wine" else [pytest.mark.slow])
                                         for pair in checked(LITE)])
def test_first_prompt_on_lite_tasks(tmp_path, task, agent):
    prompt, workspace = first_prompt(tmp_path, task, agent)
    check(prompt, workspace, task, agent)


@pytest.mark.slow
@pytest.mark.parametrize("task, agent", checked(TABULAR))
def test_first_prompt_on_mlagentbench_tasks(tmp_path, task, agent):
    home = TaskHome.from_env()
    if not home.is_prepared(REGISTRY.get("tasks", task)):
        home.prepare(REGISTRY.get("tasks", task), sources(tmp_path / "src", task), log=lambda _m: None)
    prompt, workspace = first_prompt(tmp_path, task, agent)
    check(prompt, workspace, task, agent)
