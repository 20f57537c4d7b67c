"""mlab tasks in TRL's trainer (issue 45): trl_environment's class is what GRPOTrainer's environment_factory takes
(its public methods are the tools, with the schemas of the run's actions), and the README's first example, a few
GRPO steps on a tiny model built locally, runs offline with each rollout's reward the task's verdict."""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core.actions import ACTION_SPECS
from mlab.core.agentkit.tools import action_tools
from mlab.core.env import trl_environment
from tests.fixtures.cli import mlab

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Training agents on mlab tasks"


def readme_example() -> str:
    """The first Python block of the README's section on training."""
    text = (REPO / "README.md").read_text()
    assert SECTION in text, "the README has no section on training agents"
    found = re.search(r"```python\n(.*?)```", text[text.index(SECTION):], re.DOTALL)
    assert found, "the section has no Python example"
    return found.group(1)


@pytest.mark.slow  # over 2 s on two cores
def test_the_public_methods_are_the_tools_with_the_schemas_of_the_runs_actions():
    transformers = pytest.importorskip("transformers")
    env_class = trl_environment("lite/wine")
    # what TRL takes for tools: the public functions of the class but reset and get_reward
    public = sorted(n for n, _ in inspect.getmembers(env_class, inspect.isfunction) if not n.startswith("_"))
    offered = {n: s for n, s in ACTION_SPECS.items() if not s.uses_llm and not s.interactive_only}
    expected = {t["function"]["name"]: t["function"] for t in action_tools(offered)}
    assert public == sorted([*expected, "get_reward", "reset"])
    for name, function in expected.items():
        schema = transformers.utils.get_json_schema(getattr(env_class, name))["function"]
        assert schema["name"] == name and schema["description"] == function["description"]
        got = schema["parameters"]
        assert got["required"] == function["parameters"]["required"]
        assert {a: p["type"] for a, p in got["properties"].items()} == \
            {a: p["type"] for a, p in function["parameters"]["properties"].items()}
        assert {a: p["description"] for a, p in got["properties"].items()} == \
            {a: " ".join(p["description"].split()) for a, p in function["parameters"]["properties"].items()}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_readme_example_trains_offline_with_the_tasks_verdict_as_reward(tmp_path):
    pytest.importorskip("trl")
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{\"")]  # not TRL's own
    assert [s["step"] for s in steps] == [1, 2] and all("reward" in s for s in steps)
    # every rollout is a run folder, judged as `mlab eval` judges it: the mean reward is the mean verdict
    evaluated = mlab("eval", "--json", tmp_path / "runs" / "grpo")
    assert evaluated.returncode == 0, evaluated.stderr
    rows = json.loads(evaluated.stdout)
    assert len(rows) == 1 + 2 * 4 and all(r["agent"] == "trainer" and r["status"] == "finished" for r in rows)
    started = {r["run_dir"]: json.loads((Path(r["run_dir"]) / "trace.json").read_text())["started_at"] for r in rows}
    rollouts = sorted(rows, key=lambda r: started[r["run_dir"]])[1:]  # the first is the episode by hand
    for step, group in zip(steps, (rollouts[:4], rollouts[4:]), strict=True):
        verdicts = [r["improvement"] if r["valid"] else -1.0 for r in group]
        assert step["reward"] == pytest.approx(sum(verdicts) / 4)
