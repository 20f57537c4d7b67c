"""mlab.core.bridge, the public surface a bridge drives a run through (issue 43 item 3): a BridgedRun is a run
folder like any other (steps snapshotted and traced, a call log, a final score judged as `mlab eval` judges it), its
commands run confined in the run's sandbox, and its file access follows no link planted in the workspace."""
from __future__ import annotations

import json
import os
import time

import pytest

from mlab.core import Action, EnvError
from mlab.core.bridge import BridgedRun, load_task, task_names
from tests.fixtures.cli import mlab

TASK = "lite/wine"


@pytest.fixture(scope="module")
def wine_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("bridge-home")
    assert mlab("prepare", TASK, home=home).returncode == 0
    return home


@pytest.fixture
def run(wine_home, tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_HOME", str(wine_home))
    bridged = BridgedRun(TASK, tmp_path / "runs" / "one", agent="other-framework", sandbox="auto")
    yield bridged
    bridged.close()


def test_the_tasks_a_bridge_offers():
    assert TASK in task_names() and task_names() == sorted(task_names())
    assert "train.py" in load_task(TASK).research_problem


@pytest.mark.slow  # trains and scores the task's starter
def test_commands_become_steps_and_the_run_is_scored_and_judged(run):
    started = time.time()
    trained = run.exec(["bash", "-c", "python train.py >/dev/null && ls"])
    assert trained.exit_code == 0 and "submission.csv" in trained.output, trained.output
    step = run.step(Action(name="bash", args={"command": "python train.py"}), trained.output, started=started)
    assert (step.index, step.snapshot) == (1, "step_0001")
    # stdin reaches the command through a file the run's home holds only while it runs; `python` is the run's
    fed = run.exec(["python", "-"], stdin=b"import sys; print('FED', sys.prefix)")
    assert fed.exit_code == 0 and "FED" in fed.output, fed.output
    assert not any(p.name.startswith(".stdin-") for p in (run.run_dir / "home").iterdir())
    run.step(Action(name="python", args={"code": "..."}), fed.output, started=time.time())
    entry = {"time": started, "step": 1, "model": "other:model", "messages": [], "completion": "ls",
             "prompt_tokens": 100, "completion_tokens": 10, "cost_usd": 0.5, "error": None}
    run.record_calls([entry, {**entry, "step": 2}])
    verdict = run.finish("the other agent ended")
    assert verdict["score"] is not None and verdict["error"] is None and verdict["valid"] is True
    assert {"improvement", "success", "baseline", "baseline_source"} <= set(verdict)
    trace = json.loads((run.run_dir / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["final_score"] == verdict["score"]
    assert [s["action"]["name"] for s in trace["steps"]] == ["bash", "python"]
    assert [s["usage"]["calls"] for s in trace["steps"]] == [1, 2] and trace["usage"]["cost_usd"] == 1.0
    assert trace["config"]["llm"] == "other:model" and trace["config"]["agent"] == "other-framework"
    assert len((run.run_dir / "llm_calls.jsonl").read_text().splitlines()) == 2


def test_workspace_files_follow_no_planted_link(run, tmp_path):
    run.write_file("notes/a.txt", b"kept")
    assert run.read_file("notes/a.txt") == b"kept"
    assert run.read_file(str(run.workspace / "notes" / "a.txt")) == b"kept"  # absolute, in the workspace
    with pytest.raises(FileNotFoundError):
        run.read_file("notes/missing.txt")
    with pytest.raises(EnvError, match="read-only"):
        run.write_file("data/train.csv", b"changed")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("the answer")
    os.symlink(outside, run.workspace / "link")
    for escape in ("link/secret", "../../outside/secret", str(outside / "secret")):
        with pytest.raises(EnvError):
            run.read_file(escape)
        with pytest.raises(EnvError):
            run.write_file(escape, b"overwritten")
    assert (outside / "secret").read_text() == "the answer"
    assert run.exec(["pwd"], cwd="notes").output.strip().endswith("notes")
    with pytest.raises(EnvError):
        run.exec(["pwd"], cwd="link")
