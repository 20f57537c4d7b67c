"""The search agent (greedy/AIDE-like, MCTS, evolutionary) run for real on lite tasks with a scripted model.

The scripted model returns whole solution scripts (pure numpy k-nearest-neighbour models). Each script prints the
validation score the test declares for it, so the policies' choices are known in advance; the submissions it
writes are real and the harness scores them.
"""
from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlab.core import RunConfig
from mlab.core.plugins.registry import load_registry
from mlab.core.run.runner import Runner
from mlab.core.run.trace import read_trace
from mlab_agent_search.fitness import infer_direction, read_outcome
from mlab_agent_search.graph import SolutionGraph
from mlab_agent_search.policies import Proposal, Settings, mcts
from tests.fixtures import cli
from tests.fixtures.cli import mlab_in_process as mlab
from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"lite/wine": ("label", "class"), "lite/diabetes": ("target", "regression"),
           "lite/digits": ("label", "digits")}

SOLUTION = '''"""k-nearest neighbours on standardized features (k={k})."""
import csv

import numpy as np

TARGET, KIND, K = {target!r}, {kind!r}, {k}


def load(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], np.array(rows[1:], dtype=float)


head, train = load("data/train.csv")
test_head, test = load("data/test.csv")
features = [c for c in test_head if c != "id"]
X = train[:, [head.index(c) for c in features]]
y = train[:, head.index(TARGET)]
Xt = test[:, [test_head.index(c) for c in features]]
mean, std = X.mean(0), X.std(0) + 1e-9
X, Xt = (X - mean) / std, (Xt - mean) / std
{bug}

def predict(X_fit, y_fit, X_new):
    d = ((X_new[:, None, :] - X_fit[None, :, :]) ** 2).sum(-1)
    near = y_fit[np.argsort(d, axis=1)[:, :K]]
    if KIND == "regression":
        return near.mean(1)
    return np.array([np.bincount(r.astype(int)).argmax() for r in near])


{report}
pred = predict(X, y, Xt)
with open("submission.csv", "w") as f:
    if KIND == "digits":
        f.write("id," + ",".join(map(str, range(10))) + "\\n")
        for i, p in zip(test[:, 0], pred):
            f.write(f"{{int(i)}}," + ",".join("1" if c == p else "0" for c in range(10)) + "\\n")
    else:
        f.write(f"id,{{TARGET}}\\n")
        for i, p in zip(test[:, 0], pred):
            f.write(f"{{int(i)}},{{p if KIND == 'regression' else int(p)}}\\n")
print("wrote submission.csv")
'''


def solution(task: str, k: int, metric: float | None = 0.5, bug: str = "") -> str:
    """A whole script: k-NN for the task, reporting `metric` as its validation score (None: reports none)."""
    target, kind = TARGETS[task]
    report = f'print("VALIDATION_METRIC: {metric}")' if metric is not None else 'print("done training")'
    return SOLUTION.format(target=target, kind=kind, k=k, bug=bug, report=report)


def reply(plan: str, code: str) -> str:
    return f"{plan}\nIt should help.\n\n```python\n{code}```\n"


BROKEN = 'X = X[:, features.index("no_such_column")]'  # a ValueError: the draft the scripted model gets wrong


def run_search(run_dir: Path, task: str, replies: list[str], options: dict, max_steps: int = 40,
               agent: str = "search", action_timeout_s: float = 120):
    script = run_dir.parent / f"{run_dir.name}.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    config = RunConfig(task=task, agent=agent, llm=f"scripted:{script}", max_steps=max_steps,
                       action_timeout_s=action_timeout_s, agent_options=options)
    return Runner(run_dir, config, load_registry()).start()


def graph_of(trace) -> list[dict]:
    return trace.steps[-1].agent_state["graph"]["nodes"]


def operators(nodes: list[dict]) -> list[tuple[str, list[int]]]:
    return [(n["operator"], n["parents"]) for n in nodes]


def node_script(run_dir: Path, trace, node: dict) -> str:
    action = trace.steps[node["write_step"] - 1].action
    return action.entries["script"] if action.name == "Python REPL" else action.args["content"]


def llm_prompts(run_dir: Path) -> list[str]:
    calls = [json.loads(line) for line in (run_dir / "llm_calls.jsonl").read_text().splitlines()]
    return ["\n".join(m["content"] for m in c["messages"]) for c in calls]


def check_submitted_best(run_dir: Path, trace, best_id: int) -> None:
    """The run starts with the data overview and ends by writing the best node's script as train.py and running
    it (one REPL step), then submitting; the harness scored that submission."""
    names = [s.action.name for s in trace.steps]
    assert (trace.status, trace.end_reason) == ("finished", "final answer"), trace.end_reason
    assert names[0] == "Python REPL" and "_mlab_overview('train.py')" in trace.steps[0].action.args["command"]
    assert names[-2:] == ["Python REPL", "Final Answer"]
    best = graph_of(trace)[best_id - 1]
    assert "_p.Path('train.py')" in trace.steps[-2].action.args["command"] and not trace.steps[-2].is_error
    assert "wrote submission.csv" in trace.steps[-2].observation
    assert trace.steps[-1].action.entries["best"] == best_id
    assert f"node {best_id}" in trace.steps[-1].action.args["final_answer"]
    assert trace.final_score is not None and trace.final_score_error is None
    assert (run_dir / "workspace" / "train.py").read_text() == node_script(run_dir, trace, best)


# ---- each policy, end to end -----------------------------------------------------------------------
@pytest.mark.slow  # over 2 s on two cores
def test_greedy_drafts_debugs_and_improves_the_best_then_submits_it(tmp_path):
    task = "lite/wine"
    replies = [
        reply("Draft: 1-NN.", solution(task, 1, 0.80)),
        reply("Draft: 3-NN, with a bug.", solution(task, 3, 0.99, bug=BROKEN)),
        reply("Draft: 5-NN.", solution(task, 5, 0.90)),
        reply("Fix: drop the bad column lookup (but forget the metric).", solution(task, 3, None)),
        reply("Fix: print the metric.", solution(task, 3, 0.85)),
        reply("Improve: 9 neighbours.", solution(task, 9, 0.93)),
        reply("Improve: 15 neighbours.", solution(task, 15, 0.91)),
    ]
    trace = run_search(tmp_path / "run", task, replies,
                       {"policy": "greedy", "num_drafts": 3, "max_debug_depth": 2, "max_nodes": 7})
    nodes = graph_of(trace)
    assert operators(nodes) == [("draft", []), ("draft", []), ("draft", []), ("debug", [2]), ("debug", [4]),
                                ("improve", [3]), ("improve", [6])]
    assert [n["status"] for n in nodes] == ["ok", "buggy", "ok", "buggy", "ok", "ok", "ok"]
    assert [n["fitness"] for n in nodes] == [0.8, None, 0.9, None, 0.85, 0.93, 0.91]
    assert "ValueError" in nodes[1]["error"] and nodes[3]["error"] == "printed no VALIDATION_METRIC line"
    assert [n["debug_depth"] for n in nodes[3:5]] == [1, 2]
    # one step per node: the script written to solutions/ and run by one REPL command
    for n in nodes:
        assert n["file"] == f"solutions/node_{n['id']:03d}.py"
        step = trace.steps[n["write_step"] - 1]
        assert step.action.name == "Python REPL" and f"_p.Path({n['file']!r})" in step.action.args["command"]
        assert n["run_step"] == n["write_step"]
        assert (tmp_path / "run/workspace" / n["file"]).read_text() == node_script(tmp_path / "run", trace, n)
    assert len(trace.steps) == 1 + 7 + 2
    check_submitted_best(tmp_path / "run", trace, best_id=6)
    prompts = llm_prompts(tmp_path / "run")
    assert "Your job: fix a failing solution" in prompts[3] and "no_such_column" in prompts[3]
    assert "ValueError" in prompts[3]
    assert "Your job: improve a working solution" in prompts[5] and "VALIDATION_METRIC = 0.9" in prompts[5]
    assert solution(task, 5, 0.90) in prompts[5]  # the best node's script is the one improved
    assert "- node 2 (draft): buggy: ValueError" in prompts[5]
    assert "(higher is better)" in prompts[0] and "data/" in prompts[0] and "KNeighborsClassifier" in prompts[0]
    assert "- node 6 (improve of node 3): VALIDATION_METRIC 0.93 (the best so far). Plan: Improve: 9 neighbours." \
        "\nIt should help." in prompts[6]
    # the viewer shows the graph: each node step carries its operator, parents and the graph's table
    write = trace.steps[nodes[5]["write_step"] - 1].action.entries
    assert (write["node"], write["operator"], write["parents"]) == (6, "improve", [3])
    assert write["plan"] == "Improve: 9 neighbours.\nIt should help."
    table = trace.steps[-1].action.entries["graph"].splitlines()
    assert table[0].split() == ["node", "parents", "operator", "status", "fitness", "plan"]
    assert table[6].split()[:6] == ["6", "3", "improve", "ok", "0.93", "*"]
    assert table[2].split()[:4] == ["2", "-", "draft", "buggy"]
    check_report_shows_the_graph(tmp_path / "run", tmp_path / "report")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)
def test_the_viewer_shows_the_solution_graph_in_chromium(tmp_path):
    task = "lite/wine"
    replies = [reply("Draft: 1-NN.", solution(task, 1, 0.80)),
               reply("Draft: 3-NN, with a bug.", solution(task, 3, 0.99, bug=BROKEN)),
               reply("Fix: 9 neighbours, no bad column.", solution(task, 9, 0.93))]
    (tmp_path / "runs").mkdir()
    run_search(tmp_path / "runs" / "g", task, replies, {"policy": "greedy", "num_drafts": 2, "max_nodes": 3})
    view = subprocess.Popen([sys.executable, "-m", "mlab.cli.main", "view", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = next((line.split()[1] for line in view.stdout if line.startswith("open http://")), None)
        assert url, view.stderr.read()
        with Browser(tmp_path / "profile") as browser:
            browser.open(url + "#run=g")
            rows = browser.wait_for("var t = document.getElementById('solution-graph');"
                                    "return t && Array.from(t.querySelectorAll('tbody tr')).map("
                                    "function (r) { return Array.from(r.cells).map(function (c) {"
                                    " return c.textContent; }); });")
    finally:
        view.kill()
        view.wait()
        view.stdout.close()
        view.stderr.close()
    assert [r[:6] for r in rows] == [["1", "-", "draft", "ok", "0.80000", ""], ["2", "-", "draft", "buggy", "-", ""],
                                     ["3", "2", "debug", "ok", "0.93000", "*"]]
    assert "ValueError" in rows[1][6]


def check_report_shows_the_graph(run_dir: Path, out_dir: Path) -> None:
    """`mlab report` of the run prints the graph as a table and puts it in its JSON: parents, operator, status,
    fitness per node, the best marked."""
    shown = mlab("report", run_dir, "--out", out_dir, "--no-plots")
    assert shown.returncode == 0, shown.stderr
    assert "Solution graph of run" in shown.stdout
    assert any(line.split("│")[1:6] and [c.strip() for c in line.split("│")[1:7]] ==
               ["6", "3", "improve", "ok", "0.93", "*"] for line in shown.stdout.splitlines())
    assert "Solution graph of run" in (out_dir / "index.html").read_text()
    as_json = mlab("report", run_dir, "--out", out_dir, "--no-plots", "--no-html", "--json")
    assert as_json.returncode == 0, as_json.stderr
    (run,) = json.loads(as_json.stdout)["runs"]
    graph = run["solution_graph"]
    assert graph["direction"] == "higher" and graph["best"] == 6
    assert [(n["node"], n["parents"], n["operator"], n["status"], n["fitness"], n["best"]) for n in graph["nodes"]] \
        == [(1, "-", "draft", "ok", 0.8, False), (2, "-", "draft", "buggy", None, False),
            (3, "-", "draft", "ok", 0.9, False), (4, "2", "debug", "buggy", None, False),
            (5, "4", "debug", "ok", 0.85, False), (6, "3", "improve", "ok", 0.93, True),
            (7, "6", "improve", "ok", 0.91, False)]
    assert "ValueError" in graph["nodes"][1]["plan"]


def test_the_report_shows_the_agents_own_pick_of_the_best_node_and_ranks_nothing_itself():
    from mlab.core.run.solution_graph import graph_in

    nodes = [{"id": 1, "parents": [], "operator": "draft", "status": "ok", "fitness": 0.9},
             {"id": 2, "parents": [1], "operator": "improve", "status": "ok", "fitness": 0.7}]
    picked = graph_in({"graph": {"direction": "higher", "best": 2, "nodes": nodes}})
    assert picked is not None and [row["best"] for row in picked.rows()] == [False, True]
    assert picked.payload()["best"] == 2
    unnamed = graph_in({"graph": {"direction": "higher", "nodes": nodes}})
    assert unnamed is not None and not any(row["best"] for row in unnamed.rows())
    stale = graph_in({"graph": {"direction": "higher", "best": 9, "nodes": nodes}})
    assert stale is not None and stale.best() is None


@pytest.mark.slow  # over 2 s on two cores
def test_mcts_follows_uct_and_debugs_a_failed_draft_on_a_lower_is_better_task(tmp_path):
    task = "lite/diabetes"
    # MAE: lower is better. Hand-computed UCT choices (c = 1.414): after the drafts node 3 (the best) is
    # improved twice, then node 1 once, then the failed draft's exploration term wins and it is debugged.
    replies = [reply("Draft A.", solution(task, 3, 50)), reply("Draft B.", solution(task, 5, 10, bug=BROKEN)),
               reply("Draft C.", solution(task, 7, 45)), reply("Improve C.", solution(task, 9, 42)),
               reply("Improve C again.", solution(task, 11, 47)), reply("Improve A.", solution(task, 5, 44)),
               reply("Fix B.", solution(task, 15, 40))]
    trace = run_search(tmp_path / "run", task, replies,
                       {"policy": "mcts", "num_drafts": 3, "max_debug_depth": 1, "max_nodes": 7})
    nodes = graph_of(trace)
    assert operators(nodes) == [("draft", []), ("draft", []), ("draft", []), ("improve", [3]), ("improve", [3]),
                                ("improve", [1]), ("debug", [2])]
    assert trace.steps[-1].agent_state["graph"]["direction"] == "lower"
    check_submitted_best(tmp_path / "run", trace, best_id=7)
    assert "(lower is better)" in llm_prompts(tmp_path / "run")[0]


@pytest.mark.slow
def test_evolutionary_drafts_a_population_then_crosses_over_and_improves(tmp_path):
    task = "lite/wine"
    replies = [reply("Draft A.", solution(task, 1, 0.80)), reply("Draft B.", solution(task, 3, 0.7, bug=BROKEN)),
               reply("Draft C.", solution(task, 5, 0.90)), reply("Fix B.", solution(task, 3, 0.85)),
               reply("Cross.", solution(task, 9, 0.93)), reply("Improve.", solution(task, 7, 0.88)),
               reply("Cross again.", solution(task, 11, 0.91))]
    trace = run_search(tmp_path / "run", task, replies,
                       {"policy": "evolutionary", "population_size": 3, "max_debug_depth": 1, "max_nodes": 7})
    nodes = graph_of(trace)
    assert [n["operator"] for n in nodes] == ["draft"] * 3 + ["debug", "crossover", "improve", "crossover"]
    assert nodes[3]["parents"] == [2]
    population = {1, 3, 4}  # the three ok nodes when the first crossover is made
    assert len(set(nodes[4]["parents"])) == 2 and set(nodes[4]["parents"]) <= population
    assert len(nodes[5]["parents"]) == 1 and set(nodes[5]["parents"]) <= population | {5}
    check_submitted_best(tmp_path / "run", trace, best_id=5)
    cross_prompt = llm_prompts(tmp_path / "run")[4]
    assert "Your job: combine two working solutions" in cross_prompt
    for parent in nodes[4]["parents"]:
        assert node_script(tmp_path / "run", trace, nodes[parent - 1]) in cross_prompt


# Every policy on a higher-is-better and a lower-is-better task; digits (higher is better, like wine, and the
# costliest to run: 64 features a node) once, since a policy never looks at the task beyond its direction.
@pytest.mark.slow
@pytest.mark.parametrize("task, policy", [(task, policy) for task in ("lite/wine", "lite/diabetes")
                                          for policy in ("greedy", "mcts", "evolutionary")]
                         + [("lite/digits", "greedy")])
def test_every_policy_on_every_lite_task(tmp_path, policy, task):
    """At least three drafts, a deliberately failing one debugged, improvement (and crossover for
    evolutionary), and the best node's submission scored."""
    lower = infer_direction(load_registry().get("tasks", task).research_problem) == "lower"
    replies = [reply(f"Script {n}.", solution(task, 1 + 2 * n, (50 - n) if lower else n / 20,
                                              bug=BROKEN if n == 2 else ""))
               for n in range(1, 12)]
    options = {"policy": policy, "num_drafts": 3, "population_size": 3, "max_nodes": 9, "max_debug_depth": 1}
    trace = run_search(tmp_path / "run", task, replies, options)
    nodes = graph_of(trace)
    ops = [n["operator"] for n in nodes]
    assert ops[:3] == ["draft"] * 3 and "debug" in ops and "improve" in ops
    assert nodes[1]["status"] == "buggy" and any(n["parents"] == [2] and n["operator"] == "debug" for n in nodes)
    if policy == "evolutionary":
        assert "crossover" in ops
    best = max((n for n in nodes if n["status"] == "ok"), key=lambda n: -n["fitness"] if lower else n["fitness"])
    check_submitted_best(tmp_path / "run", trace, best_id=best["id"])


# ---- resume -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_kill_9_mid_search_then_resume_continues_the_same_graph(tmp_path):
    task = "lite/wine"
    replies = [reply("Draft: 1-NN.", solution(task, 1, 0.80)),
               reply("Draft: broken.", solution(task, 3, 0.99, bug=BROKEN)),
               reply("Draft: 5-NN.", solution(task, 5, 0.90)), reply("Fix.", solution(task, 3, 0.85)),
               reply("Improve: 9-NN.", solution(task, 9, 0.93)), reply("Improve: 11-NN.", solution(task, 11, 0.92))]
    script = tmp_path / "replies.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "mlab.cli.main", "run", "--task", task, "--agent", "aide",
               "--llm", f"scripted:{script}", "--run-dir", str(run_dir), "--max-steps", "40",
               "--agent-option", "num_drafts=3", "--agent-option", "max_nodes=6"]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    steps_at_kill = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                steps_at_kill = len(json.loads((run_dir / "trace.json").read_text())["steps"])
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                steps_at_kill = 0
            if steps_at_kill >= 5:  # node 4 (the debug) has run; node 5 may be running
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None and steps_at_kill < 5:
            proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    before = read_trace(run_dir)  # trace.json names a running run's states; the log holds them
    assert before.status == "running" and 5 <= len(before.steps) < 1 + 6 + 2
    nodes_before = before.steps[-1].agent_state["graph"]["nodes"]
    assert len(nodes_before) >= 4

    resumed = cli.mlab("run", "--resume", run_dir, timeout=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = json.loads((run_dir / "trace.json").read_text())
    assert (after["status"], after["end_reason"]) == ("finished", "final answer")
    nodes = after["steps"][-1]["agent_state"]["graph"]["nodes"]
    # the graph went on where it stopped: the same nodes, same ids and steps, then the rest as if never killed
    for old in nodes_before:
        new = nodes[old["id"] - 1]
        assert {k: new[k] for k in ("id", "operator", "parents", "file", "write_step")} == \
               {k: old[k] for k in ("id", "operator", "parents", "file", "write_step")}
        if old["status"] != "pending":
            assert new["status"] == old["status"] and new["fitness"] == old["fitness"]
    assert [(n["id"], n["operator"], n["parents"]) for n in nodes] == [
        (1, "draft", []), (2, "draft", []), (3, "draft", []), (4, "debug", [2]), (5, "improve", [3]),
        (6, "improve", [5])]
    assert len(after["steps"]) == 1 + 6 + 2 and after["final_score"] is not None
    assert (run_dir / "workspace/train.py").read_text() == solution(task, 9, 0.93)
    calls = (run_dir / "llm_calls.jsonl").read_text().splitlines()
    assert len([c for c in calls if json.loads(c).get("error") is None]) >= 6  # every reply was used


# ---- failures the search must survive ------------------------------------------------------------------
def test_unusable_replies_are_asked_again_then_end_the_search_with_the_best_submitted(tmp_path):
    task = "lite/wine"
    replies = [reply("Draft.", solution(task, 5, 0.9)),
               "I would use a random forest.",  # no code block
               reply("Draft with a syntax error.", "def broken(:\n    pass\n"),
               reply("Draft 2.", solution(task, 7, 0.8))] + ["no code, sorry"] * 3
    trace = run_search(tmp_path / "run", task, replies, {"num_drafts": 3, "max_attempts": 3})
    nodes = graph_of(trace)
    assert operators(nodes) == [("draft", []), ("draft", [])]
    problems = [f["problem"] for f in trace.steps[nodes[1]["write_step"] - 1].action.entries["invalid_responses"]]
    assert problems == ["the reply has no complete ```python code block holding the whole script",
                        "the script is not valid Python: invalid syntax (line 1)"]
    prompts = llm_prompts(tmp_path / "run")
    assert prompts[2].endswith("That reply could not be used: the reply has no complete ```python code block "
                               "holding the whole script. " + prompts[0].rsplit("\n", 1)[-1])
    assert "the model gave no usable script for draft in 3 replies" in trace.steps[-1].action.args["final_answer"]
    check_submitted_best(tmp_path / "run", trace, best_id=1)


@pytest.mark.slow
def test_a_script_past_the_time_limit_is_a_timeout_node_and_is_debugged(tmp_path):
    task = "lite/wine"
    replies = [reply("Slow draft.", "import time\ntime.sleep(60)\n"), reply("Faster.", solution(task, 5, 0.9))]
    trace = run_search(tmp_path / "run", task, replies, {"num_drafts": 1, "max_nodes": 2}, action_timeout_s=3)
    nodes = graph_of(trace)
    assert [(n["operator"], n["status"]) for n in nodes] == [("draft", "timeout"), ("debug", "ok")]
    assert "it ran past the time limit" in llm_prompts(tmp_path / "run")[1]
    check_submitted_best(tmp_path / "run", trace, best_id=2)


@pytest.mark.slow
def test_with_no_working_node_the_starter_is_run_and_submitted(tmp_path):
    task = "lite/wine"
    trace = run_search(tmp_path / "run", task, [reply("Broken.", solution(task, 5, 0.9, bug=BROKEN))],
                       {"num_drafts": 1, "max_debug_depth": 0, "max_nodes": 1})
    assert [s.action.name for s in trace.steps] == ["Python REPL", "Python REPL", "Execute Script", "Final Answer"]
    assert trace.steps[-2].action.args == {"script_name": "train.py"}
    assert trace.steps[-1].action.args["final_answer"].endswith("the starter script train.py was run instead.")
    assert trace.final_score is not None  # the starter's own submission


def test_a_best_script_that_fails_when_run_again_is_reported_in_the_final_answer(tmp_path):
    task = "lite/wine"
    once = ('import os\nif os.path.exists("ran_once"):\n    raise SystemExit("refusing a second run")\n'
            'open("ran_once", "w").close()\n')
    trace = run_search(tmp_path / "run", task, [reply("Once only.", once + solution(task, 5, 0.9))],
                       {"num_drafts": 1, "max_nodes": 1})
    assert graph_of(trace)[0]["status"] == "ok" and "[exit code 1]" in trace.steps[-2].observation
    assert trace.steps[-1].action.args["final_answer"].endswith(
        "It is now train.py; its final run failed: refusing a second run")


@pytest.mark.slow  # over 2 s on two cores
def test_the_search_stops_early_enough_to_submit_within_max_steps(tmp_path):
    task = "lite/wine"
    replies = [reply(f"Script {n}.", solution(task, 2 * n + 1, n / 10)) for n in range(1, 9)]
    trace = run_search(tmp_path / "run", task, replies, {"num_drafts": 8}, max_steps=11)
    nodes = graph_of(trace)
    assert len(nodes) == 8 and len(trace.steps) == 11  # the overview + 8 nodes + 2 to finish
    # the drafts adapt to the budget: 40% of the 8 nodes the steps allow, then the best is improved
    assert operators(nodes) == [("draft", [])] * 4 + [("improve", [4]), ("improve", [5]), ("improve", [6]),
                                                      ("improve", [7])]
    assert "steps left" in trace.steps[-1].action.args["final_answer"]
    check_submitted_best(tmp_path / "run", trace, best_id=8)


# ---- options ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("agent, option, fragment", [
    ("search", "policy=beam", "agent 'search': option policy: input should be 'greedy', 'mcts' or 'evolutionary'"),
    ("search", "num_drafts=0", "agent 'search': option num_drafts: input should be greater than or equal to 1"),
    ("search", "exploration_constant=-1", "option exploration_constant: input should be greater than or equal"),
    ("search", "population_size=1", "option population_size: input should be greater than or equal to 2"),
    ("search", "direction=up", "option direction: input should be 'auto', 'higher' or 'lower'"),
    ("search", "max_nodes=many", "option max_nodes: input should be a valid integer"),
    ("search", "drafts=3", "agent 'search' has no option drafts; options: policy, num_drafts, max_debug_depth"),
    ("aide", "policy=mcts", "agent 'aide': option policy: input should be 'greedy'"),
])
def test_bad_options_are_refused_in_one_line_before_the_run(tmp_path, agent, option, fragment):
    script = tmp_path / "replies.jsonl"
    script.write_text('"x"\n')
    result = mlab("run", "--task", "lite/wine", "--agent", agent, "--llm", f"scripted:{script}",
                  "--agent-option", option, "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr and fragment in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


def test_the_agents_list_shows_search_and_aide_with_their_options():
    result = mlab("agents", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    declared = ["policy", "num_drafts", "max_debug_depth", "max_nodes", "exploration_constant", "population_size",
                "direction", "output_chars", "max_attempts"]
    for agent in ("search", "aide"):
        assert rows[agent]["provider"].startswith("mlab-agent-search")
        assert [o["name"] for o in rows[agent]["options"]] == declared
        assert all(o["description"] for o in rows[agent]["options"])
    assert rows["search"]["options"][0]["default"] == rows["aide"]["options"][0]["default"] == "greedy"


# ---- the parts, directly ------------------------------------------------------------------------------
@pytest.mark.parametrize("task, direction", [("lite/wine", "higher"), ("lite/digits", "higher"),
                                             ("lite/diabetes", "lower")])
def test_the_metric_direction_is_read_from_the_task(task, direction):
    registry = load_registry()
    assert infer_direction(registry.get("tasks", task).research_problem) == direction
    assert (direction == "higher") == registry.get("tasks", task).metric.higher_is_better


def test_direction_is_unknown_when_the_text_does_not_say():
    assert infer_direction("Improve the model in train.py and write submission.csv.") is None
    assert infer_direction("Lower the error rate; accuracy is reported too.") == "lower"  # said outright wins


@pytest.mark.parametrize("observation, is_error, expected", [
    ("The script ran. Output:\nepoch 1\nVALIDATION_METRIC: 0.75\nVALIDATION_METRIC: 0.8125\n", False,
     ("ok", 0.8125, "")),
    ("The script ran. Output:\nVALIDATION_METRIC = -3.5e-2\n", False, ("ok", -0.035, "")),
    ("The script ran. Output:\nVALIDATION_METRIC: nan\n", False, ("buggy", None, "VALIDATION_METRIC is nan")),
    ("The script ran. Output:\naccuracy 0.8\n", False, ("buggy", None, "printed no VALIDATION_METRIC line")),
    ("The script ran. Output:\nTraceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'a'\n"
     "[exit code 1]", True, ("buggy", None, "KeyError: 'a'")),
    ("EnvError: the script ran past the time limit of 3 s and was killed. Output before that:\n", True,
     ("timeout", None, "ran past the time limit")),
])
def test_a_run_is_read_into_status_and_fitness(observation, is_error, expected):
    outcome = read_outcome(observation, is_error)
    assert (outcome.status, outcome.fitness, outcome.error) == expected


def test_mcts_widens_a_node_as_its_visits_grow_then_descends_by_uct():
    graph = SolutionGraph(direction="higher")
    settings = Settings(num_drafts=1, max_debug_depth=1, exploration_constant=1.0, population_size=2)
    rng = random.Random(0)

    def evaluated(operator, parents, fitness):
        node = graph.add(operator, parents, f"n{len(graph.nodes) + 1}.py", 1, "")
        node.status, node.fitness = "ok", fitness

    assert mcts(graph, settings, rng).operator == "draft"
    evaluated("draft", [], 0.5)
    assert mcts(graph, settings, rng) == Proposal("improve", (1,))  # 1 visit: room for ceil(sqrt(1)) = 1 child
    evaluated("improve", [1], 0.6)
    assert mcts(graph, settings, rng) == Proposal("improve", (1,))  # 2 visits: room for a second child
    evaluated("improve", [1], 0.7)
    # 3 visits allow 2 children: full, so UCT picks among them; node 3 has the higher reward
    assert mcts(graph, settings, rng) == Proposal("improve", (3,))


def test_a_plan_the_model_labels_is_not_labelled_twice(tmp_path):
    """A reply that starts "Plan: ..." (or "**Plan:**") gave "Plan: Plan: ..." in the search's memory."""
    task = "lite/wine"
    replies = [reply("Plan: 1-NN.", solution(task, 1, 0.80)), reply("**Plan:** 3-NN.", solution(task, 3, 0.90)),
               reply("## Plan\n5-NN.", solution(task, 5, 0.85)), reply("Plan to use 7-NN.", solution(task, 7, 0.8))]
    trace = run_search(tmp_path / "run", task, replies, {"policy": "greedy", "num_drafts": 4, "max_nodes": 4})
    assert [n["plan"] for n in graph_of(trace)] == [f"{k}-NN.\nIt should help." for k in (1, 3, 5)] + [
        "Plan to use 7-NN.\nIt should help."]  # a sentence that starts with the word is no label
    shown = [line for line in llm_prompts(tmp_path / "run")[2].splitlines() if line.startswith("- node")]
    assert [line.split(". ", 1)[1] for line in shown] == ["Plan: 1-NN.", "Plan: 3-NN."]
