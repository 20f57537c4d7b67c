"""The append-only trace: steps.jsonl, states stored as content-addressed changes, trace.json kept current."""
from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mlab.core.models import Action, RunConfig, Step, Trace, Usage
from tests.fixtures.cli import mlab_in_process
from tests.test_runner import finish, start_harness

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def mlab_home(tmp_path, monkeypatch):
    home = tmp_path / "mlab-home"
    monkeypatch.setenv("MLAB_HOME", str(home))
    return home


def kill_after_step(run_dir: Path, step: int, *extra: str) -> None:
    """Run the fixture harness and SIGKILL it once step `step` is traced."""
    proc = start_harness(run_dir, *extra)
    for line in proc.stdout:
        if line.startswith(f"STEP {step}"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def log_lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_bytes().splitlines()]


def assert_effects_once(run_dir: Path, trace: Trace) -> None:
    """Every step 1..N once, and the workspace shows each step's effect exactly once."""
    assert [s.index for s in trace.steps] == list(range(1, len(trace.steps) + 1))
    scripts = sum(1 for s in trace.steps if s.action.name == "Execute Script")
    assert (run_dir / "workspace" / "log.txt").read_text().splitlines() == [f"run {i}" for i in range(scripts)]
    appended = [s.index for s in trace.steps if s.action.name == "Append File"]
    notes = (run_dir / "workspace" / "notes.txt").read_text().splitlines()
    assert notes == [f"step {i}" for i in appended]


# ---- what a run writes ----------------------------------------------------------------------------

def test_a_run_logs_one_line_per_step_and_every_reader_gets_the_same_trace(tmp_path, mlab_home):
    from mlab.core.run.trace import read_trace

    run_dir = tmp_path / "run"
    out = finish(start_harness(run_dir, "--steps", "5"))
    assert "END finished final answer" in out
    records = [r for r in log_lines(run_dir) if r["kind"] != "state"]
    assert [r["kind"] for r in records] == ["run"] + ["step"] * 5 + ["run"]
    assert [r["step"]["index"] for r in records if r["kind"] == "step"] == [1, 2, 3, 4, 5]
    assert records[-1]["trace"]["status"] == "finished" and records[-1]["steps"] == 5
    # Each line names its states; the agent's state changes every step, the LLM state never (no LLM here).
    refs = [r["step"]["agent_state"]["$state"] for r in records if r["kind"] == "step"]
    assert len(set(refs)) == 5
    assert len({r["step"]["llm_state"]["$state"] for r in records if r["kind"] == "step"}) == 1
    # trace.json: one step a line, the last one's states inline, the others by reference.
    stored = json.loads((run_dir / "trace.json").read_text())
    assert stored["status"] == "finished" and [s["index"] for s in stored["steps"]] == [1, 2, 3, 4, 5]
    assert stored["steps"][-1]["agent_state"] == {"decisions": 5}
    assert all(set(s["agent_state"]) == {"$state"} for s in stored["steps"][:-1])
    trace = read_trace(run_dir)
    assert [s.agent_state for s in trace.steps] == [{"decisions": i} for i in range(1, 6)]
    assert trace.final_score == stored["final_score"] and trace.status == "finished"


def test_state_changes_round_trip_and_unchanged_state_costs_nothing(tmp_path):
    from mlab.core.run.trace_log import TraceLog, load_trace

    states = [
        {"log": ["a"], "notes": {"1": "x"}, "n": 1, "gone": True},
        {"log": ["a", "b"], "notes": {"1": "x", "2": "y"}, "n": 1, "gone": True},
        {"log": ["a", "b"], "notes": {"1": "x", "2": "y"}, "n": 1, "gone": True},  # unchanged
        {"log": ["b"], "notes": {"2": "z"}, "n": 2},  # shrunk, changed, a key removed
        {"log": ("t", 1), "notes": {3: "int key"}, "n": float("nan"), "obj": object()},  # not plain JSON
        {},
    ]
    trace = Trace(run_id="r", config=RunConfig(task="t", agent="a"), started_at=0.0)
    log = TraceLog(tmp_path)
    log.begin(trace)
    objects_after = []
    for index, state in enumerate(states, 1):
        trace.steps.append(Step(index=index, action=Action(name="List Files"), observation="ok", started_at=0.0,
                                duration_s=0.0, snapshot=f"step_{index:04d}", agent_state=state))
        log.append(trace)
        objects_after.append(sum(1 for r in log_lines(tmp_path) if r["kind"] == "state"))
    log.close()
    assert objects_after[2] == objects_after[1]  # the unchanged state is the same object
    refs = [r["step"]["agent_state"]["$state"] for r in log_lines(tmp_path) if r["kind"] == "step"]
    assert refs[2] == refs[1] and len(set(refs)) == 5
    loaded = [s.agent_state for s in load_trace(tmp_path).steps]
    assert loaded[:4] == states[:4] and loaded[5] == {}
    odd = loaded[4]
    assert odd["log"] == ["t", 1] and odd["notes"] == {"3": "int key"} and odd["n"] == "nan"
    assert odd["obj"].startswith("<object object")
    # A changed state stores its change, not a copy: the second state's record holds only "b" and "2".
    (second,) = [r["data"] for r in log_lines(tmp_path) if r["kind"] == "state" and r["digest"] == refs[1]]
    assert second["base"] == refs[0]
    assert second["changes"] == {"log": {"append": ["b"]}, "notes": {"update": {"2": "y"}, "remove": []}}


def begun_log(run_dir: Path):
    """A new run folder with an empty trace and its log begun: (run_dir, trace, log)."""
    from mlab.core.run.trace_log import TraceLog

    run_dir.mkdir()
    trace = Trace(run_id="r", config=RunConfig(task="t", agent="a"), started_at=0.0)
    log = TraceLog(run_dir)
    log.begin(trace)
    return run_dir, trace, log


def test_trace_bytes_grow_linearly_in_steps(tmp_path):
    """A research-agent-like state (a growing research log and summaries, an undo history) costs per step
    what changed: bytes after 2N steps are twice those after N, not four times."""
    from mlab.core.run.trace import write_trace

    def run_bytes(steps: int) -> int:
        run_dir, trace, log = begun_log(tmp_path / f"run{steps}")
        research_log: list[str] = []
        backups: dict[str, list[str]] = {}
        for index in range(1, steps + 1):
            research_log.append(f"Step {index}: tried learning rate {index / 1000} " + "x" * 400)
            backups.setdefault(f"train_{index % 5}.py", []).append(f"{index:064x}")
            trace.steps.append(Step(
                index=index, action=Action(name="Edit Script (AI)", args={"script_name": "train.py"}),
                observation="The edited file is saved. " + "y" * 300, started_at=0.0, duration_s=0.0,
                snapshot=f"step_{index:04d}",
                agent_state={"research_log": list(research_log), "summaries": {str(i): "s" * 200 for i in
                                                                             range(1, index + 1)}},
                env_state={"backups": {k: list(v) for k, v in backups.items()}},
                llm_state={"usage": {"calls": index}}))
            log.append(trace)
        log.close()
        new = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
        old_dir = tmp_path / f"old{steps}"
        old_dir.mkdir()
        write_trace(old_dir, trace)  # the layout before: one trace.json, each step's states inline
        return new, (old_dir / "trace.json").stat().st_size

    (small, old_small), (large, old_large) = run_bytes(50), run_bytes(100)
    assert large < 2.2 * small, (small, large)
    assert old_large > 3.5 * old_small  # what quadratic growth looks like
    assert large * 4 < old_large, (large, old_large)


# ---- crashes ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_torn_last_line_is_ignored_and_its_step_done_again(tmp_path, mlab_home):
    from mlab.core.run.trace import read_trace

    run_dir = tmp_path / "run"
    kill_after_step(run_dir, 3, "--steps", "6", "--sleep", "0.3")
    before = read_trace(run_dir)
    done = len(before.steps)
    # While a run goes on, trace.json names every step's states (inline, a step's write would grow with them);
    # the log resolves them.
    stored = json.loads((run_dir / "trace.json").read_text())["steps"]
    assert all(set(s["agent_state"]) == {"$state"} for s in stored) and before.steps[-1].agent_state
    # A kill while appending the next step's line leaves half of it: not committed, so not in the trace.
    line = (run_dir / "steps.jsonl").read_bytes().splitlines(keepends=True)[-1]
    torn = line.replace(f'"index":{done}'.encode(), f'"index":{done + 1}'.encode())[:len(line) // 2]
    with open(run_dir / "steps.jsonl", "ab") as f:
        f.write(torn)
    assert [s.index for s in read_trace(run_dir).steps] == list(range(1, done + 1))
    proc = start_harness(run_dir, "--resume", "--steps", "6", "--sleep", "0.3")
    assert "END finished final answer" in finish(proc)
    records = log_lines(run_dir)  # every line parses: the torn one was cut before appending
    assert records[-1]["kind"] == "run" and records[-1]["steps"] == 6
    trace = read_trace(run_dir)
    assert trace.status == "finished"
    assert_effects_once(run_dir, trace)


@pytest.mark.slow
def test_a_step_committed_in_the_log_but_not_in_trace_json_counts(tmp_path, mlab_home):
    """Killed between the fsync of the step's line and the update of trace.json: the step is committed."""
    from mlab.core.run.trace import read_trace, write_trace

    run_dir = tmp_path / "run"
    kill_after_step(run_dir, 3, "--steps", "6", "--sleep", "0.3")
    full = read_trace(run_dir)
    done = len(full.steps)
    behind = full.model_copy(update={"steps": full.steps[:-1]})
    write_trace(run_dir, behind)  # trace.json as it was before the last step
    assert len(json.loads((run_dir / "trace.json").read_text())["steps"]) == done - 1
    assert read_trace(run_dir) == full
    proc = start_harness(run_dir, "--resume", "--steps", "6", "--sleep", "0.3")
    out = finish(proc)
    assert f"STEP {done}\n" not in out  # the committed step is not done again
    trace = read_trace(run_dir)
    assert trace.status == "finished"
    assert_effects_once(run_dir, trace)


def test_unreadable_trace_json_is_rebuilt_from_the_log(tmp_path, mlab_home):
    from mlab.core.run.trace import read_trace

    run_dir = tmp_path / "run"
    kill_after_step(run_dir, 2, "--steps", "5", "--sleep", "0.3")
    full = read_trace(run_dir)
    text = (run_dir / "trace.json").read_text()
    (run_dir / "trace.json").write_text(text[:len(text) // 2])  # torn mid-write
    assert read_trace(run_dir) == full
    (run_dir / "trace.json").unlink()  # or lost in a power cut (it is not fsynced each step)
    assert read_trace(run_dir) == full
    assert "END finished final answer" in finish(start_harness(run_dir, "--resume", "--steps", "5"))
    assert json.loads((run_dir / "trace.json").read_text())["status"] == "finished"
    assert_effects_once(run_dir, read_trace(run_dir))


@pytest.mark.slow  # over 2 s on two cores
def test_damaged_state_object_makes_its_step_done_again(tmp_path, mlab_home):
    from mlab.core.run.trace import read_trace

    run_dir = tmp_path / "run"
    kill_after_step(run_dir, 3, "--steps", "6", "--sleep", "0.3")
    before = read_trace(run_dir)
    log = run_dir / "steps.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    digest = json.loads(lines[-1])["step"]["agent_state"]["$state"]
    # The last state object no longer matches its name (damaged, or edited by hand), and trace.json, whose last
    # step holds that state inline, is gone.
    (at,) = [i for i, line in enumerate(lines) if json.loads(line).get("digest") == digest]
    lines[at] = lines[at].replace(b'"decisions":{"set":', b'"decisions":{"set":1')
    log.write_bytes(b"".join(lines))
    (run_dir / "trace.json").unlink()
    assert read_trace(run_dir).steps[-1].agent_state == {"$state": digest}  # unreadable: left as a reference
    out = finish(start_harness(run_dir, "--resume", "--steps", "6", "--sleep", "0.3"))
    assert f"STEP {len(before.steps)}\n" in out  # done again
    assert f"step {len(before.steps)} is done again" in (run_dir / "errors.log").read_text()
    trace = read_trace(run_dir)
    assert trace.status == "finished"
    assert_effects_once(run_dir, trace)


@pytest.mark.slow
def test_old_run_with_only_trace_json_loads_and_resumes(tmp_path, mlab_home):
    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.run.trace_log import read_log

    run_dir = tmp_path / "run"
    kill_after_step(run_dir, 2, "--steps", "5", "--sleep", "0.3")
    trace = read_trace(run_dir)
    write_trace(run_dir, trace)  # the old layout: every state inline, no log
    (run_dir / "steps.jsonl").unlink()
    assert read_trace(run_dir) == trace
    assert "END finished final answer" in finish(start_harness(run_dir, "--resume", "--steps", "5"))
    resumed = read_trace(run_dir)
    assert resumed.status == "finished" and resumed.steps[:len(trace.steps)] == trace.steps
    committed = read_log(run_dir)
    assert committed is not None and [s["index"] for s in committed.steps] == [1, 2, 3, 4, 5]
    assert_effects_once(run_dir, resumed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_sigkill_at_random_moments_keeps_log_and_trace_json_consistent(tmp_path, mlab_home, seed):
    from mlab.core.run.trace import read_trace

    rng = random.Random(seed)
    run_dir = tmp_path / "run"
    steps = 8
    proc: subprocess.Popen | None = start_harness(run_dir, "--steps", str(steps), "--sleep", "0.2")
    kills = 0
    while proc is not None and kills < 3:
        line = proc.stdout.readline()
        if not line or line.startswith("END"):
            break
        if line.startswith("STEP") and rng.random() < 0.5:
            time.sleep(rng.uniform(0.0, 0.4))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            lines = (run_dir / "steps.jsonl").read_bytes().split(b"\n")
            assert all(json.loads(x) for x in lines[:-1]) and lines[-1] == b""  # whole lines only
            shown = json.loads((run_dir / "trace.json").read_text())
            trace = read_trace(run_dir)
            assert [s.index for s in trace.steps] == list(range(1, len(trace.steps) + 1))
            assert 0 <= len(trace.steps) - len(shown["steps"]) <= 1  # trace.json lags the log by a step at most
            # killed after the run ended (status written), or resumed
            proc = None if trace.status == "finished" else start_harness(
                run_dir, "--resume", "--steps", str(steps), "--sleep", "0.2")
    if proc is not None:
        finish(proc)
    trace = read_trace(run_dir)
    assert trace.status == "finished" and len(trace.steps) == steps
    assert_effects_once(run_dir, trace)
    assert not math.isnan(trace.total_time_s) and trace.usage == Usage()


def test_viewer_sees_a_step_the_log_committed_after_it_last_read_the_run(tmp_path, mlab_home):
    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.view.runs import Catalog

    run_dir = tmp_path / "runs" / "r"
    kill_after_step(run_dir, 2, "--steps", "5", "--sleep", "0.3")
    full = read_trace(run_dir)
    done = len(full.steps)
    log = run_dir / "steps.jsonl"
    whole = log.read_bytes()
    last_step_at = whole.rindex(b'{"kind":"step"')
    log.write_bytes(whole[:last_step_at])  # as it was before the last step was committed
    write_trace(run_dir, full.model_copy(update={"steps": full.steps[:-1]}))
    catalog = Catalog(tmp_path / "runs")
    assert catalog.runs()["runs"][0]["steps"] == done - 1
    log.write_bytes(whole)  # the step's line is committed; the process dies before trace.json is updated
    assert catalog.runs()["runs"][0]["steps"] == done


def test_a_damaged_line_inside_the_log_is_a_one_line_error(tmp_path, mlab_home):
    run_dir = tmp_path / "run"
    finish(start_harness(run_dir, "--steps", "3"))
    lines = (run_dir / "steps.jsonl").read_bytes().splitlines(keepends=True)
    lines[2] = b'{"kind": "step", "step": {"no index": 1}}\n'
    (run_dir / "steps.jsonl").write_bytes(b"".join(lines))
    (run_dir / "trace.json").write_text("{torn")
    result = mlab_in_process("eval", run_dir)
    assert result.returncode == 2, result.stderr
    assert "steps.jsonl is damaged at line 3" in result.stderr and "Traceback" not in result.stderr
    # With trace.json whole, readers still get the run; a resume says what is wrong and writes nothing.
    finished = json.loads((run_dir / "steps.jsonl").read_bytes().splitlines()[-1])["trace"]
    finished["steps"] = []
    (run_dir / "trace.json").write_text(json.dumps({**finished, "status": "running"}))
    from mlab.core.run.trace import read_trace

    assert read_trace(run_dir).status == "running"
    before = (run_dir / "steps.jsonl").read_bytes()
    proc = start_harness(run_dir, "--resume", "--steps", "3")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "damaged at line 3" in out
    assert (run_dir / "steps.jsonl").read_bytes() == before


def test_an_undo_history_of_one_file_edited_every_step_costs_each_step_its_new_version(tmp_path):
    """The undo history is a dict of growing lists (file -> digests of earlier versions); a list that grew is
    stored as its new items, so editing one file at every step does not store its whole history every step."""
    def state_bytes(steps: int) -> int:
        run_dir, trace, log = begun_log(tmp_path / f"run{steps}")
        versions: list[str] = []
        for index in range(1, steps + 1):
            versions.append(f"{index:064x}")
            trace.steps.append(Step(index=index, action=Action(name="Append File", args={"file_name": "log.txt"}),
                                    observation="ok", started_at=0.0, duration_s=0.0, snapshot=f"step_{index:04d}",
                                    env_state={"backups": {"log.txt": list(versions), "other.py": ["0" * 64]}}))
            log.append(trace)
        log.close()
        states = [r for r in log_lines(run_dir) if r["kind"] == "state"]
        return sum(len(json.dumps(r)) for r in states)

    small, large = state_bytes(100), state_bytes(200)
    assert large < 2.1 * small, (small, large)  # before: 370 KB and 1.42 MB (quadratic)
    # and the history reads back whole, step by step
    from mlab.core.run.trace_log import load_trace

    steps = load_trace(tmp_path / "run100").steps
    assert [len(s.env_state["backups"]["log.txt"]) for s in steps] == list(range(1, 101))
    assert steps[-1].env_state["backups"]["other.py"] == ["0" * 64]
