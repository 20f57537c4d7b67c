"""The run loop, traces, snapshots and resuming a run killed with SIGKILL."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def mlab_home(tmp_path, monkeypatch):
    home = tmp_path / "mlab-home"
    monkeypatch.setenv("MLAB_HOME", str(home))
    return home


def start_harness(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.fixtures.harness", str(run_dir), *extra], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return out


def load_trace(run_dir: Path) -> dict:
    return json.loads((run_dir / "trace.json").read_text())


def assert_consistent(run_dir: Path, steps: int) -> None:
    """Steps 1..N exactly once each; the workspace reflects each step's effect exactly once."""
    trace = load_trace(run_dir)
    assert [s["index"] for s in trace["steps"]] == list(range(1, steps + 1))
    assert trace["status"] == "finished" and trace["end_reason"] == "final answer"
    executed = sum(1 for s in trace["steps"] if s["action"]["name"] == "Execute Script")
    log = (run_dir / "workspace" / "log.txt").read_text().splitlines()
    assert log == [f"run {i}" for i in range(executed)]
    appended = [s["index"] for s in trace["steps"] if s["action"]["name"] == "Append File"]
    notes = (run_dir / "workspace" / "notes.txt").read_text().splitlines()
    assert notes == [f"step {i}" for i in appended]
    assert trace["final_score"] == float(executed)


def test_run_writes_complete_trace_and_snapshots(tmp_path, mlab_home):
    run_dir = tmp_path / "run"
    out = finish(start_harness(run_dir, "--steps", "6"))
    assert "END finished final answer 2.0" in out
    trace = load_trace(run_dir)
    assert json.loads((run_dir / "config.json").read_text())["task"] == "fixture/counter"
    assert [s["snapshot"] for s in trace["steps"]] == [f"step_{i:04d}" for i in range(1, 7)]
    first = json.loads((run_dir / "snapshots" / "step_0000.json").read_text())
    assert "step.py" in first and not any(k.startswith("data/") for k in first), "read-only data is not snapshotted"
    final = json.loads((run_dir / "snapshots" / "final.json").read_text())
    assert final == json.loads((run_dir / "snapshots" / "step_0006.json").read_text())
    assert "answer.txt" not in json.dumps(final) and not (run_dir / "workspace" / "answer.txt").exists()
    assert trace["total_time_s"] > 0 and trace["steps"][1]["observation"].startswith("The script ran")
    assert_consistent(run_dir, 6)


def test_unchanged_files_are_stored_once(tmp_path, mlab_home):
    run_dir = tmp_path / "run"
    finish(start_harness(run_dir, "--steps", "6"))
    objects = [p for p in (run_dir / "objects").rglob("*") if p.is_file()]
    digests = {p.name for p in objects}
    manifests = [json.loads(p.read_text()) for p in (run_dir / "snapshots").glob("step_*.json")]
    referenced = {entry["sha256"] for m in manifests for entry in m.values()}
    assert referenced <= digests
    # step.py never changes: one object for it across all 7 manifests
    assert len({m["step.py"]["sha256"] for m in manifests}) == 1
    assert len(objects) == len(digests) <= len(referenced) + 1


@pytest.mark.parametrize("seed", range(3))
def test_sigkill_at_random_moments_then_resume(tmp_path, mlab_home, seed):
    rng = random.Random(seed)
    run_dir = tmp_path / "run"
    steps = 10
    proc = start_harness(run_dir, "--steps", str(steps), "--sleep", "0.4")
    kills = 0
    while kills < 2:
        # wait for a step line, then kill at a random moment within the next step (often inside the script)
        line = proc.stdout.readline()
        if not line or line.startswith("END"):
            break
        if line.startswith("STEP") and rng.random() < 0.6:
            time.sleep(rng.uniform(0.0, 0.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            done = len(load_trace(run_dir)["steps"])
            assert done >= 1
            proc = start_harness(run_dir, "--resume", "--steps", str(steps), "--sleep", "0.4")
    finish(proc)
    assert_consistent(run_dir, steps)


def test_resume_of_finished_run_is_refused(tmp_path, mlab_home):
    run_dir = tmp_path / "run"
    finish(start_harness(run_dir, "--steps", "2"))
    proc = start_harness(run_dir, "--resume")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "already ended" in out


def test_run_that_fails_to_start_leaves_no_half_made_folder(tmp_path, mlab_home):
    from mlab.core import MlabError, RunConfig
    from mlab.core.runner import Runner
    from tests.fixtures.harness import AGENT_NAME, TASK_NAME, StepperAgent, fixture_registry

    class PickyAgent(StepperAgent):
        name = "fixture-picky"

        def __init__(self, ctx):
            raise MlabError(f"unknown agent option {sorted(ctx.options)}")

    registry = fixture_registry()
    registry.items["agents"]["fixture-picky"] = PickyAgent
    run_dir = tmp_path / "run"
    config = RunConfig(task=TASK_NAME, agent="fixture-picky", agent_options={"bogus": 1})
    with pytest.raises(MlabError, match="bogus"):
        Runner(run_dir, config, registry).start()
    assert not run_dir.exists()
    # the same folder then takes a good run
    good = RunConfig(task=TASK_NAME, agent=AGENT_NAME, agent_options={"steps": 2})
    trace = Runner(run_dir, good, registry).start()
    assert trace.status == "finished" and len(trace.steps) == 2
