"""mlab tasks as Inspect tasks (plugins/bridges/inspect): `mlab/<task>` run by Inspect's own eval loop and basic
agent with a mockllm model whose replies are tool calls; the tools run in mlab's sandbox on the run's workspace,
the task's scorer scores it as `mlab grade` does, and the run is an mlab run folder."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.cli import REPO, cli_env, mlab

pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (pip install -e '.[inspect]')")
pytest.importorskip("mlab_bridge_inspect", reason="the Inspect bridge is not installed (make setup)")

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
    print(json.dumps({"status": log.status, "error": str(log.error) if log.error else None, "score": score.value,
                      "run_dir": score.metadata["run_dir"],
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
