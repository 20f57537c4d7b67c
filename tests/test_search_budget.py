"""The search agent spends its budget on nodes (issue 30, item 4): the data overview takes one step, each node one
step (the script written and run by one Python REPL command), the drafts are a share of the nodes the steps
allow, the prompt shows the data (columns, types, row counts, the description files) and keeps each earlier
node's plan, result and metric, and a token budget ends the search with the best node submitted.

The scripted model answers as a real one does: a plan of a few sentences, then the whole script; one draft
fails and is debugged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlab.core import LLM, Completion, RunConfig
from mlab.core.plugins.registry import load_registry
from mlab.core.run.runner import Runner
from tests.test_agent_search import BROKEN, graph_of, llm_prompts, node_script, solution

TASK = "lite/wine"
LONG_PLAN = ("Standardize the thirteen measurements and classify each wine by its nearest neighbours; "
             "the classes are clusters in a few hidden factors, so a distance-based model should separate them "
             "well. I keep a fifth of the training rows aside and print the accuracy on them. This plan is longer "
             "than two hundred characters on purpose, and its last words must survive: KEEP-THIS-TAIL.")


def reply(plan: str, code: str) -> str:
    return f"{plan}\n\n```python\n{code}```\n"


def replies() -> list[str]:
    return [reply(LONG_PLAN, solution(TASK, 1, 0.80)),
            reply("Draft 2: 3-NN (with a mistake in the column lookup).", solution(TASK, 3, 0.9, bug=BROKEN)),
            reply("Draft 3: 5-NN.", solution(TASK, 5, 0.86)),
            reply("Fix: look the columns up by name.", solution(TASK, 3, 0.84)),
            reply("Improve: 7 neighbours.", solution(TASK, 7, 0.88)),
            reply("Improve: 9 neighbours.", solution(TASK, 9, 0.91)),
            reply("Improve: 11 neighbours.", solution(TASK, 11, 0.90))] + \
        [reply(f"Improve: {k} neighbours.", solution(TASK, k, 0.5)) for k in (13, 15, 17)]


def run(tmp_path: Path, max_steps: int = 10, **config):
    script = tmp_path / "replies.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in replies()))
    cfg = RunConfig(task=TASK, agent="aide", llm=f"scripted:{script}", max_steps=max_steps, action_timeout_s=120,
                    **config)
    return Runner(tmp_path / "run", cfg, load_registry()).start()


@pytest.mark.slow
def test_in_ten_steps_aide_writes_at_least_five_nodes_and_improves_one(tmp_path):
    trace = run(tmp_path)
    nodes = graph_of(trace)
    names = [s.action.name for s in trace.steps]
    assert len(trace.steps) == 10 and (trace.status, trace.end_reason) == ("finished", "final answer")
    # one step for the overview, one per node, two to submit the best
    assert names == ["Python REPL"] * 9 + ["Final Answer"]
    assert len(nodes) == 7
    ops = [n["operator"] for n in nodes]
    assert ops == ["draft"] * 3 + ["debug", "improve", "improve", "improve"]  # 3 drafts: 40% of 7 nodes
    assert [n["status"] for n in nodes] == ["ok", "buggy", "ok", "ok", "ok", "ok", "ok"]
    assert nodes[1]["error"].startswith("ValueError") and nodes[3]["parents"] == [2]
    assert all(n["write_step"] == n["run_step"] == n["id"] + 1 for n in nodes)
    # the best node (6: 0.91) is written over train.py, run, and its submission scored
    assert trace.steps[-1].action.entries["best"] == 6
    assert (tmp_path / "run/workspace/train.py").read_text() == node_script(tmp_path / "run", trace, nodes[5]) \
        == solution(TASK, 9, 0.91)
    assert (tmp_path / "run/workspace/solutions/node_006.py").is_file()
    assert "wrote submission.csv" in trace.steps[-2].observation and trace.final_score is not None


@pytest.mark.slow
def test_the_prompt_shows_the_data_and_the_memory_keeps_each_nodes_plan_and_metric(tmp_path):
    trace = run(tmp_path)
    prompts = llm_prompts(tmp_path / "run")
    first = prompts[0]
    # the data overview, read by the agent's own code: rows, columns, types, the starter
    assert "# Data overview (read from the workspace by the harness)" in first
    assert "## data/train.csv:" in first and "- alcohol: float" in first and "- label: int" in first
    rows = sum(1 for _ in open(tmp_path / "run/workspace/data/train.csv")) - 1
    assert f"## data/train.csv: {rows} rows, 15 columns" in first
    assert "## The starter script, train.py" in first and "data/valid.csv" not in first
    assert "(higher is better)" in first
    # memory: the full plan, the outcome and the metric of every earlier node
    later = prompts[6]
    assert "KEEP-THIS-TAIL" in later and "- node 1 (draft): VALIDATION_METRIC 0.8. Plan: " in later
    assert "- node 2 (draft): buggy: ValueError" in later
    assert "- node 5 (improve of node 4)" not in later or "VALIDATION_METRIC 0.88" in later
    assert trace.steps[0].action.name == "Python REPL"


def test_the_task_text_asks_nothing_a_script_writer_cannot_do():
    from mlab_agent_search.prompts import for_script_writer

    registry = load_registry()
    for name in ("mlagentbench/house-price", "mlagentbench/spaceship-titanic", "mlagentbench/parkinsons",
                 "mlagentbench/feedback", "mlagentbench/fathomnet"):
        text = for_script_writer(registry.get("tasks", name).research_problem)
        assert "Do not read the CSV" not in text and "directly" not in text, name
        assert not text.lstrip().startswith(("Read ", "Start by reading")), name
        assert "(shown in the data overview below)" in text, name


@pytest.mark.slow
def test_with_allow_validate_the_requirement_names_the_files_a_script_uses(tmp_path):
    trace = run(tmp_path, max_steps=12, allow_validate=True)
    nodes = graph_of(trace)
    first = llm_prompts(tmp_path / "run")[0]
    assert ("it predicts the rows of `data/valid.csv` (validation inputs: their labels are kept by the harness"
            in first)
    assert "`solutions/node_001_valid.csv` (exactly this path)" in first
    assert "Validate Submission" not in first and "## data/valid.csv:" in first
    # overview 1, each node 2 (REPL, then Validate Submission when it ran), finish 2: the steps allow 4 nodes,
    # 2 of them drafts (these scripts write no validation predictions, so every node fails and is debugged)
    names = [s.action.name for s in trace.steps]
    assert len(names) == 12 and names[0] == "Python REPL" and names[-1] == "Final Answer"
    assert all(names[i - 1] == "Python REPL" for i, name in enumerate(names) if name == "Validate Submission")
    assert len(nodes) >= 4 and [n["operator"] for n in nodes][:3] == ["draft", "draft", "debug"]
    assert nodes[0]["error"].startswith("validation: there is no 'solutions/node_001_valid.csv'")


@pytest.mark.slow
def test_a_token_budget_ends_the_search_with_the_best_node_submitted(tmp_path):
    trace = run(tmp_path, max_steps=40, max_tokens=9_000)
    nodes = graph_of(trace)
    assert (trace.status, trace.end_reason) == ("finished", "final answer"), trace.end_reason
    assert 2 <= len(nodes) < 10
    answer = trace.steps[-1].action.args["final_answer"]
    assert "tokens used (--token-limit): not enough for another node" in answer
    calls = [json.loads(line) for line in (tmp_path / "run/llm_calls.jsonl").read_text().splitlines()]
    assert sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls) <= 9_000
    assert trace.final_score is not None


# ---- budgets that compare (issue 30, item 5) ------------------------------------------------------------------
class BothAgentsLLM(LLM):
    """Answers the research agent in its format (run the starter, then look at the files again and again) and the
    search agent with a working script; tokens counted from the text (4 characters a token), so budgets bind as
    with a real model."""

    name = "fixture-both"
    description = "answers research and aide"

    def __init__(self, model: str = "", **options):
        super().__init__(model, **options)
        self.calls = 0

    def complete(self, messages, **params) -> Completion:
        from tests.fixtures.agents_fixtures import research_response

        self.calls += 1
        prompt = "\n".join(m.content for m in messages)
        if "Research Plan and Status" in prompt:
            text = (research_response("Execute Script", {"script_name": "train.py"}, self.calls) if self.calls == 1
                    else research_response("List Files", {"dir_path": "."}, self.calls))
        else:
            text = reply(f"Script {self.calls}: {2 * self.calls + 1}-NN.", solution(TASK, 2 * self.calls + 1, 0.8))
        return Completion(text=text, model="fixture-both", prompt_tokens=len(prompt) // 4,
                          completion_tokens=len(text) // 4)

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = int(state.get("calls", 0))


def budget_registry():
    registry = load_registry()
    registry.items["llms"]["fixture-both"] = BothAgentsLLM
    registry.providers["llms"]["fixture-both"] = "tests"
    return registry


@pytest.mark.slow
def test_a_bench_of_research_and_aide_at_one_token_budget_ends_each_run_at_it_scored(tmp_path):
    from tests.fixtures.bench_cli import db_rows
    from tests.fixtures.cli import mlab

    limit = 12_000
    out = tmp_path / "bench"
    result = mlab("bench", "--tasks", TASK, "--agents", "research,aide", "--llm", "fixture-both", "--runs", "1",
                  "--max-steps", "40", "--token-limit", str(limit), "--bench-dir", out, "--registry",
                  "tests.test_search_budget:budget_registry", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = {r["agent"]: r for r in db_rows(out)}
    assert sorted(rows) == ["aide", "research"]
    for agent, row in rows.items():
        assert row["status"] == "finished" and row["final_score"] is not None, (agent, row)
        assert json.loads(row["config"])["max_tokens"] == limit
        assert row["llm_calls"] >= 2 and row["steps"] >= 2 and row["time_s"] > 0
        calls = [json.loads(line) for line in (out / row["run_dir"] / "llm_calls.jsonl").read_text().splitlines()]
        spent = sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
        assert spent == row["prompt_tokens"] + row["completion_tokens"] and len(calls) == row["llm_calls"]
        largest = max(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
        assert spent <= limit + largest  # a run overshoots by at most the call that crossed the limit
    # research uses its model every step and is stopped at the budget; aide stops itself before it and submits
    assert rows["research"]["end_reason"].startswith("budget reached")
    assert rows["aide"]["end_reason"] == "final answer"
    aide_calls = (out / rows["aide"]["run_dir"] / "llm_calls.jsonl").read_text().splitlines()
    assert sum(json.loads(c)["prompt_tokens"] + json.loads(c)["completion_tokens"] for c in aide_calls) <= limit
