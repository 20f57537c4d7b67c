"""mlab tasks as Inspect tasks (plugins/bridges/inspect): `mlab/<task>` run by Inspect's own eval loop and basic
agent with a mockllm model whose replies are tool calls; the tools run in mlab's sandbox on the run's workspace,
the task's scorer scores it as `mlab grade` does, and the run is an mlab run folder whose call log holds the
sample's model calls (issue 33: `mlab view` and `mlab report` show its calls, tokens and cost)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from mlab.core.llm.client import read_call_log
from tests.fixtures.cli import REPO, cli_env, mlab

# Looked up, not imported: importing Inspect costs each xdist worker over a second at collection, and both cases
# are in the slow tier (their subprocesses import it).
if importlib.util.find_spec("inspect_ai") is None:
    pytest.skip("inspect-ai is not installed (pip install -e '.[inspect]')", allow_module_level=True)
if importlib.util.find_spec("mlab_bridge_inspect") is None:
    pytest.skip("the Inspect bridge is not installed (make setup)", allow_module_level=True)

# Inspect's mockllm counts tokens with tiktoken (a download) unless a reply says its usage: each reply does.
DRIVER = textwrap.dedent("""
    import json, sys
    from inspect_ai import eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    calls = json.loads(sys.argv[2])
    outputs = [ModelOutput.for_tool_call("mockllm/model", name, args) for name, args in calls]
    for output in outputs:
        output.usage = ModelUsage(input_tokens=100, output_tokens=10, total_tokens=110)
    [log] = eval(sys.argv[1], model=get_model("mockllm/model", custom_outputs=outputs), log_dir=sys.argv[3],
                 display="none", sandbox_cleanup=True)
    sample = log.samples[0]
    score = sample.scores["mlab_scorer"]
    model_events = [e for e in sample.events if e.event == "model"]
    print(json.dumps({"status": log.status, "error": str(log.error) if log.error else None, "score": score.value,
                      "run_dir": score.metadata["run_dir"], "model_calls": len(model_events),
                      "tokens": sum(u.total_tokens for u in log.stats.model_usage.values()),
                      "tools": [m.text for m in sample.messages if m.role == "tool"]}))
""")


def inspect_eval(task: str, calls: list, tmp_path: Path, home: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", DRIVER, task, json.dumps(calls), str(tmp_path / "logs")],
                            cwd=REPO, env=cli_env({"MLAB_INSPECT_RUNS": str(tmp_path / "runs")}, home=home),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_inspect_eval_of_a_lite_task_runs_confined_and_scores_as_mlab_grade(tmp_path):
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.taskdata import TaskHome

    home = tmp_path / "home"
    assert mlab("prepare", "lite/wine", home=home).returncode == 0
    hidden = TaskHome(home).hidden_dir(load_registry().get("tasks", "lite/wine"))
    answers = sorted(p.name for p in hidden.iterdir())
    assert answers, "the task has hidden files to look for"
    probe = (f"ls -la {hidden}; cat {hidden}/* | head -3; ls {home}; "
             f"find / -name {answers[0]} 2>/dev/null | grep -v ^/proc; echo PROBE-END")
    got = inspect_eval("mlab/lite/wine", [
        ["bash", {"command": probe}],
        ["bash", {"command": "python train.py"}],
        ["python", {"code": "import os; print(sorted(os.listdir('.')))"}],
        ["submit", {"answer": "trained the starter"}],
    ], tmp_path, home)
    assert got["status"] == "success" and got["error"] is None, got
    probe_output, trained, listing = got["tools"][:3]
    # the hidden answers are out of sight of the bash tool: no listing, no content, not found anywhere
    assert "PROBE-END" in probe_output and not any(name in probe_output.replace(f"{hidden}", "") for name in answers)
    assert "No such file or directory" in probe_output, probe_output
    assert "submission.csv" in trained and "submission.csv" in listing
    # scored by the task's scorer: the same number `mlab grade` gives the same workspace
    run_dir = Path(got["run_dir"])
    graded = mlab("grade", "lite/wine", run_dir / "workspace", "--json", home=home)
    assert graded.returncode == 0, graded.stderr
    assert got["score"]["final_score"] == json.loads(graded.stdout)["score"] is not None
    assert got["score"]["valid"] is True
    # and the run is an mlab run folder: its trace has the tools' commands as steps, `mlab runs` lists it
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["final_score"] == got["score"]["final_score"]
    assert [s["action"]["name"] for s in trace["steps"]][-3:] == ["bash", "bash", "python"]
    listed = mlab("runs", run_dir.parent, "--json", home=home)
    assert listed.returncode == 0 and run_dir.name in listed.stdout, listed.stderr
    # the sample's model calls are the run's: its call log, the trace's usage, `mlab report` and `mlab view`
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    assert len(calls) == got["model_calls"] == 4
    assert all((c["prompt_tokens"], c["completion_tokens"], c["error"]) == (100, 10, None) for c in calls)
    assert all(c["model"] == "inspect:mockllm/model" and c["cost_usd"] is None for c in calls)  # no price known
    assert "wine" in calls[0]["messages"][-1]["content"].lower()  # the task's problem, as the agent was told
    assert probe in calls[0]["completion"] and "python train.py" in calls[1]["completion"]
    # a call's step is the step it led to: the command it asked for
    assert trace["steps"][calls[0]["step"] - 1]["action"]["args"] == {"command": probe}
    assert trace["steps"][calls[1]["step"] - 1]["action"]["args"] == {"command": "python train.py"}
    assert any("[bash result]" in m["content"] and "PROBE-END" in m["content"] for m in calls[1]["messages"])
    assert trace["usage"]["calls"] == 4 and trace["usage"]["prompt_tokens"] + trace["usage"]["completion_tokens"] \
        == 440 == got["tokens"]
    assert trace["config"]["llm"] == "inspect:mockllm/model"
    report = mlab("report", run_dir.parent, "--json", home=home)
    assert report.returncode == 0, report.stderr
    [row] = [r for r in json.loads(report.stdout)["runs"] if r["run_dir"].endswith(run_dir.name)]
    assert (row["llm_calls"], row["prompt_tokens"] + row["completion_tokens"]) == (4, 440)
    from mlab.core.view.server import Viewer

    with Viewer(run_dir.parent) as viewer:
        with urllib.request.urlopen(viewer.url + f"api/run?id={run_dir.name}", timeout=60) as answer:
            shown = json.loads(answer.read())
    assert len(shown["calls"]) == 4 and shown["calls"][0]["prompt_tokens"] == 100, list(shown)


@pytest.mark.slow  # imports Inspect and litellm
def test_model_events_become_call_log_entries_with_their_step_tokens_and_price():
    from datetime import datetime, timedelta, timezone

    from inspect_ai.event import ModelEvent
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageTool,
        ChatMessageUser,
        GenerateConfig,
        ModelOutput,
        ModelUsage,
    )

    from mlab.core.llm.client import usage_of_log
    from mlab_bridge_inspect.calls import call_entries

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def event(seconds: float, model: str, usage: ModelUsage | None, error: str | None = None) -> ModelEvent:
        output = ModelOutput.for_tool_call(model, "bash", {"command": "ls"})
        output.usage = usage
        return ModelEvent(model=model, input=[ChatMessageUser(content="task"),
                                              ChatMessageAssistant(content="", tool_calls=output.message.tool_calls),
                                              ChatMessageTool(content="train.py", function="bash")],
                          tools=[], tool_choice="auto", config=GenerateConfig(temperature=0.5), output=output,
                          error=error, timestamp=t0 + timedelta(seconds=seconds),
                          completed=t0 + timedelta(seconds=seconds + 2), working_time=2.0)

    usage = ModelUsage(input_tokens=1000, output_tokens=100, total_tokens=1100)
    events = [event(0, "openai/gpt-4o-mini", usage), event(10, "mockllm/model", usage),
              event(20, "openai/gpt-4o-mini", usage.model_copy(update={"total_cost": 0.5})),
              event(30, "openai/gpt-4o-mini", None, error="rate limited")]
    step_starts = [(t0 + timedelta(seconds=s)).timestamp() for s in (5, 6, 15)]
    entries = call_entries(events, step_starts)
    assert [e["step"] for e in entries] == [1, 3, 4, 4]  # the step each call led to
    priced, unpriced, given, failed = entries
    assert priced["cost_usd"] is not None and 0 < priced["cost_usd"] < 0.01  # litellm's price of gpt-4o-mini
    assert unpriced["cost_usd"] is None and given["cost_usd"] == 0.5  # Inspect's own cost wins
    assert (failed["completion"], failed["error"], failed["prompt_tokens"]) == (None, "rate limited", 0)
    assert priced["messages"][1]["role"] == "assistant" and '"command": "ls"' in priced["messages"][1]["content"]
    assert priced["messages"][2] == {"role": "user", "content": "[bash result]\ntrain.py"}
    assert priced["params"] == {"temperature": 0.5} and priced["latency_s"] == 2.0
    assert priced["model"] == "inspect:openai/gpt-4o-mini" and '"command": "ls"' in priced["completion"]
    total = usage_of_log(entries)
    assert (total.calls, total.total_tokens, total.unpriced_calls) == (3, 3300, 1)
