"""What a real model driving mlab's agents showed (issue 41, item 6): each agent runs under the limits the run was
given and is told them, and its task text and observations carry nothing that is not its own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer

pytestmark = pytest.mark.timeout(300)


def _trace(run_dir: Path) -> dict:
    return json.loads((run_dir / "trace.json").read_text())


def _program_run(tmp_path: Path, server: FakeLLMServer, agent: str, *extra: str):
    run_dir = tmp_path / "run"
    done = mlab("run", "--task", "lite/wine", "--agent", agent, "--llm", "openai/gpt-4o-mini",
                "--llm-api-base", server.base_url, "--sandbox", "local", "--max-steps", "10", "--run-dir", run_dir,
                *extra, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-user-secret"})
    assert done.returncode == 0, done.stderr + done.stdout
    return run_dir


def _replies(*answers: str):
    calls = iter(range(100))
    return lambda body: answers[min(next(calls), len(answers) - 1)]


# ---- (a) smolagents' code steps run under --action-timeout, not smolagents' own 30 s --------------------------
def test_smolagents_code_step_is_bounded_by_the_action_timeout(tmp_path):
    pytest.importorskip("smolagents", reason="pip install -e 'plugins/agents/smolagents[agent]'")
    # a step of 3 s under a 1 s action timeout: smolagents' default (30 s) would let it finish
    step = "Thought: wait.\n<code>\nimport time\ntime.sleep(3)\nprint('SLEPT')\n</code>"
    with FakeLLMServer(_replies(step, "Thought: done.\n<code>\nfinal_answer('done')\n</code>")) as server:
        run_dir = _program_run(tmp_path, server, "smolagents", "--action-timeout", "1s")
    shown = "\n".join(s["observation"] for s in _trace(run_dir)["steps"])
    assert "maximum execution time of 1 seconds" in shown, shown
