"""The run loop, traces, snapshots and resuming a run killed with SIGKILL."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlab.core.run.snapshot import SnapshotStore

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def mlab_home(tmp_path, monkeypatch):
    home = tmp_path / "mlab-home"
    monkeypatch.setenv("MLAB_HOME", str(home))
    return home


def start_harness(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.fixtures.harness", "stepper-run", str(run_dir), *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


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
    store = SnapshotStore(run_dir)
    digests = store.objects.digests()
    manifests = [json.loads(p.read_text()) for p in (run_dir / "snapshots").glob("step_*.json")]
    referenced = {entry["sha256"] for m in manifests for entry in m.values()}
    assert referenced <= digests
    # step.py never changes: one object for it across all 7 manifests
    assert len({m["step.py"]["sha256"] for m in manifests}) == 1
    packed = [line for path in (run_dir / "objects").rglob("*.idx") for line in path.read_text().splitlines()]
    assert len(packed) == len(digests) <= len(referenced) + 1  # each stored once


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.slow
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


# writes into the workspace every 0.2 s for 30 s: whenever the resumed run starts, the ghost is still at it
GHOST = "import time\nfor _ in range(150):\n    time.sleep(0.2)\n    open('log.txt', 'a').write('ghost\\n')"


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
@pytest.mark.slow
def test_resume_ends_commands_the_killed_harness_left_running_before_it_restores(tmp_path, mlab_home):
    """A killed harness's commands die through parent-death signals, which a loaded machine may deliver late: a
    command that outlives it (here one made to, in a PID namespace of its own, working in the workspace) must not
    write into the resumed run."""
    run_dir = tmp_path / "run"
    proc = start_harness(run_dir, "--steps", "8", "--sleep", "0.3")
    while not proc.stdout.readline().startswith("STEP 2"):
        assert proc.poll() is None, proc.stdout.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    ghost = subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", GHOST], cwd=run_dir / "workspace")
    try:
        if ghost.poll() not in (None, 0):
            pytest.skip("unshare --pid is not allowed here")
        finish(start_harness(run_dir, "--resume", "--steps", "8", "--sleep", "0.3"))
        assert ghost.wait(timeout=10) != 0  # killed by the resume (it would write for 30 s)
    finally:
        if ghost.poll() is None:
            ghost.kill()
        ghost.wait()
    assert_consistent(run_dir, 8)
    assert "ended 1 command(s) of the earlier harness" in (run_dir / "errors.log").read_text()


def test_resume_of_finished_run_is_refused(tmp_path, mlab_home):
    run_dir = tmp_path / "run"
    finish(start_harness(run_dir, "--steps", "2"))
    proc = start_harness(run_dir, "--resume")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "already ended" in out


def test_run_that_fails_to_start_leaves_no_half_made_folder(tmp_path, mlab_home):
    from mlab.core import MlabError, RunConfig
    from mlab.core.run.runner import Runner
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


# ---- sandboxes: auto, warnings ------------------------------------------------------------------

def test_sandbox_auto_prefers_bwrap_and_falls_back_to_local():
    from mlab.core import MlabError
    from mlab.core.plugins.registry import Registry
    from mlab.core.sandbox.contract import Sandbox
    from mlab.core.sandbox.local import LocalSandbox
    from mlab.core.sandbox.resolve import resolve_sandbox

    class Unusable(Sandbox):
        name = "bwrap"
        auto_rank = 10

        @classmethod
        def available(cls):
            return False, "no bubblewrap here"

        def popen(self, argv, spec):
            raise AssertionError("never started")

    registry = Registry(plugins=[])
    registry.items["sandboxes"].update({"local": LocalSandbox, "bwrap": Unusable})
    assert resolve_sandbox(registry, "auto") is LocalSandbox
    with pytest.raises(MlabError, match="sandbox 'bwrap' is not available here: no bubblewrap here"):
        resolve_sandbox(registry, "bwrap")
    del registry.items["sandboxes"]["local"]
    with pytest.raises(MlabError, match="no confining sandbox is available here .*bwrap: no bubblewrap here.*"
                                        "--sandbox unconfined"):
        resolve_sandbox(registry, "auto")
    installed = load_registry_with_fixtures().items["sandboxes"].get("bwrap")
    if installed is not None and installed.available()[0]:
        assert resolve_sandbox(load_registry_with_fixtures(), "auto") is installed


def load_registry_with_fixtures():
    from tests.fixtures.harness import fixture_registry
    return fixture_registry()


def test_run_with_sandbox_auto(tmp_path, mlab_home):
    from mlab.core import RunConfig
    from mlab.core.run.runner import Runner
    from tests.fixtures.harness import AGENT_NAME, TASK_NAME

    registry = load_registry_with_fixtures()
    config = RunConfig(task=TASK_NAME, agent=AGENT_NAME, sandbox="auto", agent_options={"steps": 3})
    runner = Runner(tmp_path / "run", config, registry)
    bwrap = registry.items["sandboxes"].get("bwrap")
    expected = "bwrap" if bwrap is not None and bwrap.available()[0] else "local"
    assert runner.harness.sandbox_cls.name == expected
    trace = runner.start()
    assert trace.status == "finished" and trace.steps[1].observation.startswith("The script ran")
    assert trace.config.sandbox == expected  # the trace names the sandbox that ran, not "auto"


def test_unconfined_local_sandbox_warns_and_records_it(tmp_path, mlab_home):
    """Without namespaces a script can read the hidden answers: the run says so, on stderr and in the trace."""
    from mlab.core import RunConfig
    from mlab.core.run.runner import Runner
    from mlab.core.sandbox.local import LocalSandbox
    from tests.fixtures.harness import AGENT_NAME, TASK_NAME

    class Unconfined(LocalSandbox):
        name = "fixture-unconfined"

        def __init__(self):
            super().__init__(namespaces=False)

    registry = load_registry_with_fixtures()
    registry.items["sandboxes"]["fixture-unconfined"] = Unconfined
    config = RunConfig(task=TASK_NAME, agent=AGENT_NAME, sandbox="fixture-unconfined", agent_options={"steps": 2})
    said: list[str] = []
    trace = Runner(tmp_path / "run", config, registry, warn=said.append).start()
    assert trace.status == "finished"
    assert len(said) >= 1 and "can read the task's hidden answers" in said[0] and "--sandbox bwrap" in said[0]
    stored = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert stored["errors"][0] == said[0]
    assert said[0] in (tmp_path / "run" / "errors.log").read_text()
    # A resume says it again, without recording it twice.
    registry.items["sandboxes"]["fixture-unconfined"] = Unconfined
    said.clear()
    stored["status"] = "running"
    (tmp_path / "run" / "trace.json").write_text(json.dumps(stored))
    Runner(tmp_path / "run", config, registry, warn=said.append).resume()
    assert said and json.loads((tmp_path / "run" / "trace.json").read_text())["errors"].count(said[0]) == 1


def test_warning_reaches_stderr_of_the_cli_process(tmp_path, mlab_home):
    code = ("import sys\nfrom pathlib import Path\nfrom mlab.core import RunConfig\n"
            "from mlab.core.sandbox.local import LocalSandbox\nfrom mlab.core.run.runner import Runner\n"
            "from tests.fixtures.harness import AGENT_NAME, TASK_NAME, fixture_registry\n"
            "class U(LocalSandbox):\n    name = 'u'\n"
            "    def __init__(self):\n        super().__init__(namespaces=False)\n"
            "r = fixture_registry()\nr.items['sandboxes']['u'] = U\n"
            f"Runner(Path({str(tmp_path / 'run')!r}), RunConfig(task=TASK_NAME, agent=AGENT_NAME, sandbox='u',"
            " agent_options={'steps': 1}), r).start()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("mlab: warning: sandbox u: the local sandbox cannot use mount and PID")


# ---- snapshots: links, odd files ------------------------------------------------------------------

def test_snapshots_keep_symlinks_and_restore_removes_strays(tmp_path):
    from mlab.core.run.snapshot import SnapshotStore

    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "model.txt").write_text("v1\n")
    os.symlink("model.txt", ws / "latest")
    os.symlink("../model.txt", ws / "sub" / "up")
    os.symlink("/etc/passwd", ws / "outside")
    os.symlink("missing", ws / "dangling")
    store = SnapshotStore(tmp_path / "store")
    manifest = store.take(ws, "s1")
    assert {k: v.get("link") for k, v in manifest.items()} == {
        "model.txt": None, "latest": "model.txt", "sub/up": "../model.txt", "outside": "/etc/passwd",
        "dangling": "missing"}
    # The agent removes links, turns one into a file, plants new ones, a FIFO and a folder-link out.
    os.remove(ws / "latest")
    os.remove(ws / "sub" / "up")
    (ws / "sub" / "up").write_text("not a link\n")
    os.symlink("/tmp", ws / "stray")
    os.mkfifo(ws / "pipe")
    os.remove(ws / "outside")
    os.symlink(tmp_path, ws / "outside")
    store.take(ws, "s2")  # a FIFO does not block a snapshot
    store.restore("s1", ws)
    assert os.readlink(ws / "latest") == "model.txt" and os.readlink(ws / "sub" / "up") == "../model.txt"
    assert os.readlink(ws / "outside") == "/etc/passwd" and os.readlink(ws / "dangling") == "missing"
    assert not os.path.lexists(ws / "stray") and not os.path.lexists(ws / "pipe")
    assert (ws / "model.txt").read_text() == "v1\n"
    # Materialized for scoring, a link out of the folder is left out; links inside stay.
    out = tmp_path / "scratch"
    out.mkdir()
    store.materialize("s1", out)
    assert os.readlink(out / "latest") == "model.txt" and (out / "sub" / "up").read_text() == "v1\n"
    assert not os.path.lexists(out / "outside") and not os.path.lexists(out / "dangling")


def test_lone_surrogates_and_odd_objects_in_an_action_reach_the_trace(tmp_path, mlab_home):
    from mlab.core import Action, RunConfig
    from mlab.core.run.runner import Runner
    from tests.fixtures.harness import TASK_NAME, StepperAgent

    class Odd(StepperAgent):
        name = "fixture-odd"

        def step(self, state):
            if state.step_index == 1:
                return Action(name="Write File", args={"file_name": "x\udcff.txt", "content": float("inf"),
                                                      "extra": {1: object()}},
                              entries={"thought": "bad \ud800"}, raw_response="raw \udfff")
            return Action(name="Final Answer", args={"final_answer": "done"})

    registry = load_registry_with_fixtures()
    registry.items["agents"]["fixture-odd"] = Odd
    trace = Runner(tmp_path / "run", RunConfig(task=TASK_NAME, agent="fixture-odd"), registry).start()
    assert trace.status == "finished" and len(trace.steps) == 2
    stored = json.loads((tmp_path / "run" / "trace.json").read_text())["steps"][0]
    assert stored["is_error"] and stored["observation"].startswith("EnvError: wrong arguments for Write File")
    assert stored["action"]["args"] == {"file_name": "x\\udcff.txt", "content": "inf", "extra": {"1": stored[
        "action"]["args"]["extra"]["1"]}}
    assert stored["action"]["args"]["extra"]["1"].startswith("<object object at")
    assert stored["action"]["entries"] == {"thought": "bad \\ud800"}
    assert stored["action"]["raw_response"] == "raw \\udfff"


def test_a_task_that_cannot_run_here_refuses_before_anything_is_made(tmp_path, mlab_home):
    from mlab.core import MlabError, RunConfig
    from mlab.core.run.runner import Runner
    from tests.fixtures.harness import AGENT_NAME, CounterTask, fixture_registry

    class NeedsGpu(CounterTask):
        name = "fixture/needs-gpu"

        def check_runnable(self):
            raise MlabError("fixture/needs-gpu needs a GPU; none found")

    registry = fixture_registry()
    registry.items["tasks"]["fixture/needs-gpu"] = NeedsGpu()
    run_dir = tmp_path / "run"
    with pytest.raises(MlabError, match="needs a GPU"):
        Runner(run_dir, RunConfig(task="fixture/needs-gpu", agent=AGENT_NAME), registry).start()
    assert not run_dir.exists()


def test_without_namespaces_local_refuses_and_unconfined_must_be_asked_for_by_name(tmp_path, mlab_home, monkeypatch):
    """Where the kernel allows no namespaces, neither auto nor local runs agent code: only `unconfined`, named,
    recorded in the trace as such."""
    from mlab.core import MlabError, RunConfig
    from mlab.core.run.runner import Runner
    from mlab.core.sandbox import local
    from mlab.core.sandbox.resolve import resolve_sandbox
    from tests.fixtures.harness import AGENT_NAME, TASK_NAME

    monkeypatch.setattr(local, "namespace_prefix", lambda: None)
    registry = load_registry_with_fixtures()
    # as on a machine without bubblewrap (the registry is shared by the whole session: put back afterwards)
    monkeypatch.delitem(registry.items["sandboxes"], "bwrap", raising=False)
    with pytest.raises(MlabError, match="sandbox 'local' is not available here: no mount, PID and network "
                                        "namespaces.*--sandbox unconfined"):
        resolve_sandbox(registry, "local")
    with pytest.raises(MlabError, match="no confining sandbox is available here"):
        resolve_sandbox(registry, "auto")
    said: list[str] = []
    config = RunConfig(task=TASK_NAME, agent=AGENT_NAME, sandbox="unconfined", agent_options={"steps": 2})
    trace = Runner(tmp_path / "run", config, registry, warn=said.append).start()
    assert trace.status == "finished" and trace.config.sandbox == "unconfined"
    assert any("its scores prove nothing" in text for text in trace.errors)


def test_the_trace_records_the_gpu_devices_the_run_saw(tmp_path, mlab_home, stand_in_gpu):
    run_dir = tmp_path / "run"
    finish(start_harness(run_dir, "--steps", "2"))
    assert load_trace(run_dir)["devices"] == [stand_in_gpu]
