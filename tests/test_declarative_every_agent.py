"""Issue 16's acceptance: a declarative pack installed with pip runs with every agent the registry lists.

Each agent is driven by the scripted model with replies in its own format; every LLM agent replaces the starter by
the task's reference solution, so the harness's final score must beat the starter's. The agents and search
policies come from the registry, so an agent added later fails here until it has a script. Program agents (their own
loop, reaching the scripted model through mlab's endpoint) write the reference solution from the model's reply and
run it; the search agents take the data overview, grow two nodes and submit the better."""
from __future__ import annotations

import json
import math
import sys
import textwrap
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mlab.core.plugins.registry import load_registry  # noqa: E402
from tests.fixtures.agents_fixtures import (  # noqa: E402
    autogpt_response,
    edit_reply,
    langchain_response,
    react_response,
    research_response,
    simple_response,
    write_script,
)
from tests.fixtures.venvs import MAIN_SITE, make_venv  # noqa: E402

DECLARATIVE_PACK = REPO / "examples" / "task-pack-declarative"
LINE_FIT = DECLARATIVE_PACK / "mlab_example_declarative" / "line-fit"
PACK, DIST = "example-yaml", "mlab-example-declarative"
TASK = f"{PACK}/line-fit"
SOLVE = (LINE_FIT / "reference" / "solve.py").read_text()
EDIT_ARGS = {"script_name": "train.py", "save_name": "train.py", "edit_instruction": "fit the line by least squares"}
RUN = {"script_name": "train.py"}


def research_family(respond: Callable[..., str]) -> list[str]:
    """research, react and simple share the research actions and differ only in the entries of a reply."""
    return [respond("Execute Script", RUN, 1), respond("Edit Script (AI)", EDIT_ARGS, 2), edit_reply(SOLVE),
            respond("Execute Script", RUN, 3), respond("Final Answer", {"final_answer": "least squares"}, 4)]


def search_nodes() -> list[str]:
    """Two whole scripts of the reference solution (a plan, then the code), the second reporting the better
    validation metric."""
    return [f"Node {n}: least squares.\n\n```python\n{SOLVE}print('VALIDATION_METRIC: {metric}')\n```\n"
            for n, metric in ((1, 3.0), (2, 2.0))]


# The `command` agent's program: plain urllib against mlab's endpoint; it asks once, writes the script in the reply
# over the starter and runs it (which writes submission.csv).
COMMAND_PROGRAM = textwrap.dedent('''
    import json, os, re, subprocess, sys, urllib.request

    task = open(os.environ["MLAB_TASK_FILE"]).read()
    body = json.dumps({"model": os.environ["MLAB_MODEL"],
                       "messages": [{"role": "user", "content": task + "\\nReply with the whole train.py."}]})
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                     data=body.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        reply = json.loads(response.read())["choices"][0]["message"]["content"]
    open("train.py", "w").write(re.search(r"```python\\n(.*?)```", reply, re.DOTALL).group(1))
    subprocess.run([sys.executable, "train.py"], check=True)
''')
SMOL_WRITE = ("Thought: fit the line by least squares.\n<code>\nimport pathlib, subprocess, sys\n"
              f"pathlib.Path('train.py').write_text({SOLVE!r})\n"
              "done = subprocess.run([sys.executable, 'train.py'], capture_output=True, text=True)\n"
              "print(done.returncode, done.stdout)\n</code>")
MINI_WRITE = f"THOUGHT: fit the line by least squares.\n\n```mswea_bash_command\ncat > train.py <<'EOF'\n{SOLVE}EOF\n" \
    "python3 train.py\n```"
MINI_SUBMIT = "THOUGHT: done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"


# Scripted replies per agent (None: the agent needs no model); the steps each must take, in order.
SCRIPTS: dict[str, tuple[list[str] | None, list[str] | None]] = {
    "baseline": (None, None),
    "research": (research_family(research_response),
                 ["Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"]),
    "react": (research_family(react_response),
              ["Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"]),
    "simple": (research_family(simple_response),
               ["Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"]),
    "autogpt": ([autogpt_response("execute_python_file", RUN, 1),
                 autogpt_response("write_to_file", {"file_name": "train.py", "content": SOLVE}, 2),
                 autogpt_response("execute_python_file", RUN, 3),
                 autogpt_response("task_complete", {"reason": "least squares"}, 4)],
                ["Execute Script", "Write File", "Execute Script", "Final Answer"]),
    "langchain": ([langchain_response("execute_script", RUN, 1), langchain_response("edit_script_ai", EDIT_ARGS, 2),
                   edit_reply(SOLVE), langchain_response("execute_script", RUN, 3),
                   langchain_response("Final Answer", "least squares", 4)],
                  ["Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"]),
    # the data overview, one Python REPL step a node, the best node run as the starter, Final Answer
    "search": (search_nodes(), ["Python REPL"] * 4 + ["Final Answer"]),
    "aide": (search_nodes(), ["Python REPL"] * 4 + ["Final Answer"]),
    # program agents: one step per model call
    "command": (["The least-squares line.\n\n```python\n" + SOLVE + "```\n"], ["Model Call"]),
    "smolagents": ([SMOL_WRITE, "Thought: done.\n<code>\nfinal_answer('least squares')\n</code>"],
                   ["Model Call"] * 2),
    "mini-swe-agent": ([MINI_WRITE, MINI_SUBMIT], ["Model Call"] * 2),
}
SEARCH_OPTIONS = {"num_drafts": "2", "max_nodes": "2", "population_size": "2"}
# Drafts are at most 40% of the nodes (of max_nodes 2: one), so greedy and mcts improve the draft; the
# evolutionary population is at least 2 drafts.
SEARCH_OPERATORS = {"greedy": ["draft", "improve"], "mcts": ["draft", "improve"], "evolutionary": ["draft", "draft"]}
PROGRAM_AGENTS = {"command", "smolagents", "mini-swe-agent"}
NPM_CLI_AGENTS = {"codex", "claude-code"}


def registered_runs() -> list[tuple[str, str | None]]:
    """(agent, policy) for every registered agent, one per value of its `policy` option if it has one."""
    runs: list[tuple[str, str | None]] = []
    for name, agent in sorted(load_registry().items["agents"].items()):
        options = getattr(agent, "Options", None)
        field = options.model_fields.get("policy") if options is not None else None
        policies = typing.get_args(field.annotation) if field is not None else ()
        runs.extend((name, policy) for policy in policies) if policies else runs.append((name, None))
    return runs


RUNS = registered_runs()


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A throwaway venv with the declarative example pack pip-installed."""
    venv = make_venv(tmp_path_factory.mktemp("every-agent") / "venv")
    venv.install(DECLARATIVE_PACK)
    return venv


@pytest.fixture(scope="module")
def starter_score(venv, tmp_path_factory):
    """The harness's score of the unchanged starter (the baseline agent submits it as it is)."""
    return finished_run(venv, tmp_path_factory.mktemp("starter") / "run", "baseline", None, None)["final_score"]


def finished_run(venv, run_dir: Path, agent: str, policy: str | None, replies: list[str] | None) -> dict:
    args = ["run", "--task", TASK, "--agent", agent, "--max-steps", "20", "--run-dir", str(run_dir)]
    if replies is not None:
        args += ["--llm", f"scripted:{write_script(run_dir.parent / 'replies.jsonl', replies)}"]
    options = {**SEARCH_OPTIONS, "policy": policy} if policy is not None else {}
    if agent == "command":
        program = run_dir.parent / "my_agent.py"
        program.write_text(COMMAND_PROGRAM)
        options = {"command": f"python {program}"}
    args += [a for key, value in options.items() for a in ("--agent-option", f"{key}={value}")]
    # This venv reaches the main .venv's packages (smolagents, mini-swe-agent) through a .pth file; the sandbox
    # shows only the venv's own folders, so the main site-packages is shown read-only as a user would.
    env = {"MLAB_SANDBOX_RO": MAIN_SITE} if agent in ("smolagents", "mini-swe-agent") else None
    result = venv.mlab(*args, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["final_score_error"] is None, trace["final_score_error"]
    assert math.isfinite(trace["final_score"]) and trace["final_score"] > 0, trace["final_score"]
    assert trace["plugin_versions"][DIST] == "0.1.0"
    assert not (run_dir / "workspace" / "answers.csv").exists()
    return trace


@pytest.mark.slow
def test_the_installed_venv_lists_every_agent_this_test_runs(venv):
    listed = sorted(row["name"] for row in venv.mlab_json("agents"))
    assert listed == sorted({agent for agent, _policy in RUNS})
    assert TASK in {row["name"] for row in venv.mlab_json("tasks")}


@pytest.mark.slow
@pytest.mark.parametrize("agent, policy", RUNS, ids=[f"{a}-{p}" if p else a for a, p in RUNS])
def test_the_installed_declarative_task_runs_with_every_agent(venv, starter_score, tmp_path, agent, policy):
    if agent in NPM_CLI_AGENTS:  # installed by make cli-agents beside the checkout, not into a venv of packages
        pytest.skip(f"{agent} runs whole in tests/test_cli_agents.py (scripted tool calls, local, bwrap, docker)")
    assert agent in SCRIPTS, f"agent {agent!r} is registered but has no scripted replies here; add them to SCRIPTS"
    replies, expected_steps = SCRIPTS[agent]
    trace = finished_run(venv, tmp_path / "run", agent, policy, replies)
    if replies is None:  # the baseline submits the starter's predictions
        assert trace["final_score"] == pytest.approx(starter_score)
        return
    steps = trace["steps"]
    assert [s["action"]["name"] for s in steps] == expected_steps
    if agent in PROGRAM_AGENTS:
        assert trace["end_reason"] == "agent program exited (code 0)", trace["end_reason"]
        assert "+ submission.csv" in steps[0]["observation"], steps[0]["observation"]
        # the fit's output: mini-swe-agent sends its commands' output with its next call, the others print it
        shown = steps[1]["action"]["args"]["messages"][-1]["content"] if agent == "mini-swe-agent" \
            else steps[0]["observation"]
        assert "least squares: w=" in shown, shown
    else:
        assert trace["end_reason"] == "final answer", trace["end_reason"]
    if policy is not None:
        nodes = steps[-1]["agent_state"]["graph"]["nodes"]
        assert [(n["operator"], n["fitness"]) for n in nodes] == list(zip(SEARCH_OPERATORS[policy], (3.0, 2.0),
                                                                          strict=True))
        assert steps[-1]["action"]["entries"]["best"] == 2
        assert "least squares: w=" in steps[-2]["observation"]  # the best node, run as the starter
    elif agent not in PROGRAM_AGENTS:
        assert "least squares: w=" in steps[2]["observation"]
    # the reference solution, written by the agent, beats the starter by the harness's own scoring
    assert trace["final_score"] < 0.5 * starter_score, (trace["final_score"], starter_score)
