"""A run survives faults without losing or repeating steps.

- Runs SIGKILLed at random moments inside an LLM call, a script or a snapshot, then resumed.
- A full disk (a small tmpfs holding the run) while storing a snapshot or writing the trace.
- A script that corrupts its own files after they were snapshotted.

Also usable as a script (the process the SIGKILL tests kill):
    python -m tests.test_fault_tolerance RUN_DIR [--resume] [--steps N]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mlab.core import LLM, Action, Agent, Completion, RunConfig, RunState
from mlab.core.agentkit import AgentOptions
from mlab.core.models import Trace
from mlab.core.plugins.registry import load_registry
from mlab.core.sandbox.limits import Limits
from tests.fixtures.harness import CounterTask

REPO = Path(__file__).resolve().parents[1]
TASK_NAME = "fault/counter"
AGENT_NAME = "fault-agent"
LLM_NAME = "fault-slow"
LLM_SECONDS = 0.25
SCRIPT_SECONDS = 0.3
BIG_BYTES = 16 * 2**20
KINDS = ("llm", "script", "snapshot")


class FaultTask(CounterTask):
    """The harness fixture's counter task, with a slower step.py and a big-file script (scored the same way)."""

    name = TASK_NAME
    research_problem = "Run step.py."

    def prepare(self, ctx):
        (ctx.public_dir / "data").mkdir()
        (ctx.public_dir / "data" / "fixed.txt").write_text("read-only\n")
        (ctx.public_dir / "step.py").write_text(
            "import os, time\n"
            "n = int(open('counter.txt').read()) if os.path.exists('counter.txt') else 0\n"
            f"time.sleep({SCRIPT_SECONDS})\n"
            "open('log.txt', 'a').write(f'run {n}\\n')\n"
            "open('counter.txt', 'w').write(str(n + 1))\n"
            "print('count', n + 1)\n")
        (ctx.public_dir / "big.py").write_text(
            f"import os\nopen('big.bin', 'wb').write(os.urandom({BIG_BYTES}))\nprint('big written')\n")
        (ctx.hidden_dir / "answer.txt").write_text("42")

class SlowLLM(LLM):
    name = LLM_NAME
    description = "answers after a pause (tests)"

    def complete(self, messages, **params):
        time.sleep(LLM_SECONDS)
        return Completion(text="ok", prompt_tokens=3, completion_tokens=1)


def workspace_state(workspace: Path) -> dict[str, str]:
    """{relpath: sha256 or 'link:target'} of the workspace, read-only data left out."""
    state = {}
    for path in sorted(workspace.rglob("*")):
        rel = path.relative_to(workspace).as_posix()
        if rel == "data" or rel.startswith("data/"):
            continue
        if path.is_symlink():
            state[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def manifest_state(manifest: dict) -> dict[str, str]:
    return {rel: ("link:" + e["link"]) if "link" in e else e["sha256"] for rel, e in manifest.items()}


class FaultOptions(AgentOptions):
    steps: int = 7
    run_dir: str


class FaultAgent(Agent):
    """Steps cycle through an LLM call, a short script and a script writing a big file (a slow snapshot);
    each phase is announced on stdout so a test can kill the process inside it. The first step in each
    process checks that the workspace is exactly the last completed step's snapshot."""

    name = AGENT_NAME
    description = "test agent"
    needs_llm = True

    Options = FaultOptions

    def __init__(self, ctx):
        super().__init__(ctx)
        self.steps = int(ctx.options.get("steps", 7))
        self.run_dir = Path(ctx.options["run_dir"])
        self.checked = False

    def step(self, state: RunState):
        if not self.checked:
            self.checked = True
            snapshot = state.history[-1].snapshot if state.history else "step_0000"
            expected = manifest_state(json.loads((self.run_dir / "snapshots" / f"{snapshot}.json").read_text()))
            actual = workspace_state(self.run_dir / "workspace")
            print("VERIFY ok" if actual == expected else
                  f"VERIFY bad {snapshot}: {sorted(set(actual.items()) ^ set(expected.items()))}", flush=True)
        index = state.step_index
        if index >= self.steps:
            return Action(name="Final Answer", args={"final_answer": "done"})
        kind = KINDS[(index - 1) % 3]
        print(f"PHASE {kind} {index}", flush=True)
        if kind == "llm":
            answer = self.ctx.llm.complete(f"step {index}").text
            return Action(name="Append File", args={"file_name": "notes.txt", "content": f"step {index} {answer}\n"})
        if kind == "script":
            return Action(name="Execute Script", args={"script_name": "step.py"})
        return Action(name="Execute Script", args={"script_name": "big.py"})


def fault_registry():
    registry = load_registry()
    if TASK_NAME not in registry.items["tasks"]:
        registry.items["tasks"][TASK_NAME] = FaultTask()
        registry.providers["tasks"][TASK_NAME] = "tests"
        registry.items["agents"][AGENT_NAME] = FaultAgent
        registry.providers["agents"][AGENT_NAME] = "tests"
        registry.items["llms"][LLM_NAME] = SlowLLM
        registry.providers["llms"][LLM_NAME] = "tests"
    return registry


def main(argv=None) -> int:
    from mlab.core.run.runner import Runner

    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--pause-after-final", action="store_true",
                        help="wait once the Final Answer step is saved, so a test can kill the run right there")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    config = RunConfig(task=TASK_NAME, agent=AGENT_NAME, llm=f"{LLM_NAME}:m", max_steps=100, action_timeout_s=60,
                       agent_options={"steps": args.steps, "run_dir": str(run_dir)})

    def on_step(step):
        print(f"STEP {step.index}", flush=True)
        if args.pause_after_final and step.action.name == "Final Answer":
            print("SAVED FINAL", flush=True)
            time.sleep(120)

    runner = Runner(run_dir, config, fault_registry(), on_step=on_step)
    trace = runner.resume() if args.resume else runner.start()
    print(f"END {trace.status} {trace.end_reason} {trace.final_score}", flush=True)
    return 0


# ---- SIGKILL at random moments --------------------------------------------------------------------

def start(run_dir: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "MLAB_LOAD_PLUGINS": "local"}  # the built-in local sandbox, this file's task, agent, model
    return subprocess.Popen([sys.executable, "-m", "tests.test_fault_tolerance", str(run_dir), *extra], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def in_snapshot(pid: int, run_dir: Path) -> bool:
    """The harness has a snapshot object or the big workspace file open: it is storing a snapshot."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        # the store keeps its pack open from the first snapshot on: a loose object is what storing big.bin opens
        loose = target.startswith(str(run_dir / "objects")) and not target.startswith(str(run_dir / "objects" / "pack"))
        if loose or target == str(run_dir / "workspace" / "big.bin"):
            return True
    return False


def kill_in_phase(proc: subprocess.Popen, kind: str, run_dir: Path, rng: random.Random, out: list[str]) -> bool:
    """Read the harness's output until a step of this kind starts, then SIGKILL it inside that phase.
    Returns whether the kill landed where intended (False when the run ended first)."""
    while True:
        line = proc.stdout.readline()
        if not line:
            return False
        out.append(line)
        if line.startswith("END"):
            return False
        if not line.startswith(f"PHASE {kind} "):
            continue
        landed = True
        if kind == "llm":
            time.sleep(rng.uniform(0.02, LLM_SECONDS - 0.08))
        elif kind == "script":
            time.sleep(rng.uniform(0.15, SCRIPT_SECONDS + 0.05))
        else:
            deadline = time.monotonic() + 10
            while not in_snapshot(proc.pid, run_dir) and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.0005)
            landed = in_snapshot(proc.pid, run_dir)
            time.sleep(rng.uniform(0, 0.005))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        out.append(f"KILLED in {kind} (landed: {landed})\n")
        return landed


def check_trace_after_kill(run_dir: Path) -> int:
    data = json.loads((run_dir / "trace.json").read_text())  # valid JSON after any kill
    trace = Trace.model_validate(data)
    assert trace.status == "running"
    assert [s.index for s in trace.steps] == list(range(1, len(trace.steps) + 1))
    return len(trace.steps)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.slow
def test_sigkill_during_llm_call_script_or_snapshot_then_resume(tmp_path, seed):
    rng = random.Random(seed)
    steps = 7
    run_dir = tmp_path / "run"
    kinds = [KINDS[(seed + k) % 3] for k in range(2)]
    out: list[str] = []
    proc = start(run_dir, "--steps", str(steps))
    landed = []
    for kind in kinds:
        if kill_in_phase(proc, kind, run_dir, rng, out):
            landed.append(kind)
        elif proc.poll() is None or not out[-1].startswith("KILLED"):
            break  # the run ended before this phase came
        done = check_trace_after_kill(run_dir)
        assert done < steps
        proc = start(run_dir, "--resume", "--steps", str(steps))
    rest, _ = proc.communicate(timeout=90)
    out.append(rest)
    text = "".join(out)
    assert proc.returncode == 0, text
    assert "END finished final answer" in text, text
    # Each process began with the workspace exactly as the last completed step left it.
    assert text.count("VERIFY ok") == 1 + text.count("KILLED") and "VERIFY bad" not in text, text
    assert landed == kinds, text  # every kill happened inside the phase it was meant for
    trace = json.loads((run_dir / "trace.json").read_text())
    Trace.model_validate(trace)
    assert [s["index"] for s in trace["steps"]] == list(range(1, steps + 1))
    names = [(s["action"]["name"], s["action"]["args"].get("script_name")) for s in trace["steps"]]
    scripts = [i for i, (name, script) in enumerate(names, 1) if script == "step.py"]
    llm_steps = [i for i, (name, _s) in enumerate(names, 1) if name == "Append File"]
    ws = run_dir / "workspace"
    assert (ws / "log.txt").read_text().splitlines() == [f"run {k}" for k in range(len(scripts))]
    assert (ws / "notes.txt").read_text().splitlines() == [f"step {i} ok" for i in llm_steps]
    assert trace["final_score"] == float(len(scripts))
    assert manifest_state(json.loads((run_dir / "snapshots" / "final.json").read_text())) == workspace_state(ws)
    shutil.rmtree(run_dir, ignore_errors=True)  # 16 MB objects add up over ten runs


@pytest.mark.slow
def test_sigkill_after_the_final_answer_step_was_saved_resumes_straight_to_scoring(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, "--steps", "3", "--pause-after-final")
    out = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("SAVED FINAL"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = Trace.model_validate_json((run_dir / "trace.json").read_text())
    assert saved.status == "running" and [s.action.name for s in saved.steps][-1] == "Final Answer", "".join(out)
    resumed = start(run_dir, "--resume", "--steps", "3")
    rest, _ = resumed.communicate(timeout=90)
    assert resumed.returncode == 0, rest
    assert "END finished final answer 1.0" in rest, rest
    assert "VERIFY" not in rest and "PHASE" not in rest and "STEP" not in rest, rest  # the agent was not asked again
    trace = Trace.model_validate_json((run_dir / "trace.json").read_text())
    assert [s.action.name for s in trace.steps] == [s.action.name for s in saved.steps]  # no second Final Answer
    assert trace.final_score == 1.0 and trace.final_snapshot == "final"


# ---- a full disk ----------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 24 MB tmpfs for the run directory; skipped where mounting is not allowed."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs that can fill up")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "mlab-test-disk", str(mount_point)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def filler(folder: Path, leave: int) -> Path:
    """Fill the file system of folder until about `leave` bytes are free."""
    path = folder / f"filler-{uuid.uuid4().hex[:6]}"
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(path, "wb") as f:
        f.write(os.urandom(max(0, free - leave)))
    return path


class DiskAgent(Agent):
    """Plays actions; a callable in the list runs in the harness between steps."""

    name = "disk-agent"
    description = "test agent"
    needs_llm = False
    plan: list = []

    def __init__(self, ctx):
        super().__init__(ctx)
        self.position = 0

    def step(self, state):
        while self.position < len(self.plan):
            item = self.plan[self.position]
            self.position += 1
            if callable(item):
                item()
                continue
            return item
        return Action(name="Final Answer", args={"final_answer": "done"})

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state.get("position", 0)


def disk_runner(run_dir: Path, plan: list):
    from mlab.core.run.runner import Runner

    registry = fault_registry()
    registry.items["agents"]["disk-agent"] = type("DiskPlan", (DiskAgent,), {"plan": plan})
    config = RunConfig(task=TASK_NAME, agent="disk-agent", max_steps=50, action_timeout_s=30)
    # The default stop at 100 MB free would end every script on this small disk before it starts.
    return Runner(run_dir, config, registry, limits=Limits(min_free_disk_bytes=None), warn=lambda _t: None)


def test_full_disk_while_storing_a_snapshot_undoes_the_step(small_disk):
    run_dir = small_disk / "run"
    plan = [Action(name="Write File", args={"file_name": "small.txt", "content": "kept\n"}),
            Action(name="Write File", args={"file_name": "fill.py", "content":
                   "import os\nopen('big.bin', 'wb').write(os.urandom(14_000_000))\nprint('wrote')\n"}),
            Action(name="Execute Script", args={"script_name": "fill.py"}),  # 14 MB twice does not fit in 24
            Action(name="List Files", args={"dir_path": "."})]
    trace = disk_runner(run_dir, plan).start()
    assert trace.status == "finished" and [s.index for s in trace.steps] == [1, 2, 3, 4, 5]
    obs = trace.steps[2].observation
    assert "wrote" in obs and "[The disk is full, so the files this step produced could not be kept" in obs
    assert trace.steps[3].observation == "big.py\ndata/\nfill.py\nsmall.txt\nstep.py"
    assert not (run_dir / "workspace" / "big.bin").exists()
    assert "big.bin" not in json.loads((run_dir / "snapshots" / "step_0003.json").read_text())
    assert "disk full while storing snapshot step_0003" in (run_dir / "errors.log").read_text()
    assert not list((run_dir / "objects").rglob(".*tmp*")), "half-written objects are cleaned up"


def test_full_disk_while_writing_the_trace_keeps_the_previous_one(small_disk):
    from mlab.core.run.runner import DiskFull

    run_dir = small_disk / "run"
    state = {}

    def fill_up():
        # Room for a step's manifest (one page) but not for a trace holding a 40 kB observation.
        if "filler" not in state:  # once: a resumed agent passes here again
            state["filler"] = filler(small_disk, leave=8192)

    plan = [Action(name="Write File", args={"file_name": "long.txt", "content": "x" * 40_000}),
            Action(name="Write File", args={"file_name": "a.txt", "content": "a\n"}),
            fill_up,
            Action(name="Read File", args={"file_name": "long.txt"}),
            Action(name="Write File", args={"file_name": "b.txt", "content": "b\n"})]
    runner = disk_runner(run_dir, plan)
    with pytest.raises(DiskFull) as raised:
        runner.start()
    message = str(raised.value)
    assert "is full" in message and "stopped after step 2" in message and "--resume" in message
    kept = Trace.model_validate_json((run_dir / "trace.json").read_text())
    assert kept.status == "running" and [s.index for s in kept.steps] == [1, 2]
    assert not [p for p in run_dir.iterdir() if ".tmp" in p.name], "no half-written trace is left behind"
    # With space again the run resumes where the trace ends: the interrupted step is done once, nothing lost.
    state["filler"].unlink()
    trace = disk_runner(run_dir, plan).resume()
    assert trace.status == "finished" and [s.index for s in trace.steps] == [1, 2, 3, 4, 5]
    assert [s.action.name for s in trace.steps] == ["Write File", "Write File", "Read File", "Write File",
                                                   "Final Answer"]
    assert (run_dir / "workspace" / "b.txt").read_text() == "b\n"


def test_full_disk_that_undoing_cannot_fix_stops_the_run_resumably(small_disk):
    from mlab.core.run.runner import DiskFull

    run_dir = small_disk / "run"
    state = {}

    def fill_up():
        if "filler" not in state:
            state["filler"] = filler(small_disk, leave=0)

    plan = [Action(name="Write File", args={"file_name": "a.txt", "content": "a\n"}),
            fill_up,
            Action(name="Write File", args={"file_name": "b.txt", "content": "b\n"})]
    with pytest.raises(DiskFull, match="stopped after step 1"):
        disk_runner(run_dir, plan).start()
    kept = Trace.model_validate_json((run_dir / "trace.json").read_text())
    assert [s.index for s in kept.steps] == [1]
    state["filler"].unlink()
    trace = disk_runner(run_dir, plan).resume()
    assert trace.status == "finished" and [s.index for s in trace.steps] == [1, 2, 3]


# ---- a script corrupting its own files ------------------------------------------------------------

def test_script_corrupting_its_files_leaves_earlier_snapshots_intact(tmp_path):
    from mlab.core.run.snapshot import SnapshotStore

    corrupt = ("import os\n"
               "st = os.stat('model.txt')\n"
               "with open('model.txt', 'r+b') as f:\n    f.write(b'GARBAGE!')\n"  # same size, in place
               "os.utime('model.txt', ns=(st.st_atime_ns, st.st_mtime_ns))\n"  # and the same mtime
               "os.truncate('weights.bin', 10)\n"
               "os.remove('notes.txt')\nos.symlink('/etc/passwd', 'notes.txt')\n"
               "os.chmod('model.txt', 0)\n"
               "print('corrupted')\n")
    plan = [Action(name="Write File", args={"file_name": "model.txt", "content": "good model v1\n"}),
            Action(name="Write File", args={"file_name": "weights.bin", "content": "w" * 5000}),
            Action(name="Write File", args={"file_name": "notes.txt", "content": "notes\n"}),
            Action(name="Write File", args={"file_name": "corrupt.py", "content": corrupt}),
            Action(name="Execute Script", args={"script_name": "corrupt.py"})]
    run_dir = tmp_path / "run"
    trace = disk_runner(run_dir, plan).start()
    assert "corrupted" in trace.steps[4].observation
    store = SnapshotStore(run_dir)
    before = store.manifest("step_0004")
    after = store.manifest("step_0005")
    assert before["model.txt"]["sha256"] != after["model.txt"]["sha256"]  # the in-place change was seen
    assert after["notes.txt"]["link"] == "/etc/passwd"
    # Every stored object still holds exactly the bytes its name promises.
    for digest in store.objects.digests():
        assert hashlib.sha256(store.read_object(digest)).hexdigest() == digest
    scratch = tmp_path / "step4"
    scratch.mkdir()
    store.materialize("step_0004", scratch)
    assert (scratch / "model.txt").read_text() == "good model v1\n"
    assert (scratch / "weights.bin").read_text() == "w" * 5000 and (scratch / "notes.txt").read_text() == "notes\n"
    # And going back to it puts the good files back, the planted link replaced by the file.
    store.restore("step_0004", run_dir / "workspace", skip=lambda rel: rel.startswith("data"))
    assert (run_dir / "workspace" / "model.txt").read_text() == "good model v1\n"
    assert not os.path.islink(run_dir / "workspace" / "notes.txt")
    assert workspace_state(run_dir / "workspace") == manifest_state(before)


if __name__ == "__main__":
    sys.exit(main())
