"""A hostile agent against each sandbox: nothing escapes, nothing is lost.

Every case is a real run (the core's Runner, in this process) whose agent plays a fixed list of hostile
actions. After each run: the run finished normally (the harness kept running through every step), its trace
is valid JSON that records every step, no process the run started is left, the files outside the workspace
and the task's hidden answers are untouched, and neither the answers nor the harness's API keys appear
anywhere in the trace. Each case then checks its own steps: contained, with a clear EnvError.
"""
from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mlab.core import Action, Agent, InvalidSubmission, Metric, RunConfig, RunState, Task
from mlab.core.models import Trace
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from mlab.core.run.environment import MAX_ARG_CHARS
from mlab.core.run.runner import Runner
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.sandbox.limits import Limits
from tests.fixtures.sandboxes import CONFINING
from tests.test_sandbox import make_sandbox

SECRET = "SECRET-ANSWER-7f3a"
API_KEY = "sk-hostile-test-key-0042"
TRAIN = "id,label\n1,0\n2,1\n"
TASK_NAME = "hostile/box"
SANDBOXES = CONFINING  # every registered sandbox that confines (tests/fixtures/sandboxes.py)
TIMEOUT = 3.0  # per action; the slowest cases (endless loops) cost this much
# The disk limit counts what the whole file system gains, which other processes share, and a file at the size
# limit takes a little more than that on disk: it is kept far from the other limits so that only the limit a
# case tests can fire (test_filling_the_disk_quota sets its own).
LIMITS = {"memory_bytes": 768 * 2**20, "max_processes": 64, "output_bytes": 100_000, "file_size_bytes": 64 * 2**20,
          "disk_bytes": 2**30}


class HostileTask(Task):
    name = TASK_NAME
    description = "A task whose answers an agent must not reach"
    research_problem = "Write submission.csv."
    metric = Metric(name="rows", higher_is_better=True)
    read_only_files = ["data/*"]
    starter_script = "train.py"

    def prepare(self, ctx):
        (ctx.public_dir / "data").mkdir()
        (ctx.public_dir / "data" / "train.csv").write_text(TRAIN)
        (ctx.public_dir / "train.py").write_text("print('training')\n")
        (ctx.hidden_dir / "answers.csv").write_text(SECRET + "\n")

    def evaluate(self, workspace, hidden_dir):
        submission = Path(workspace) / "submission.csv"
        if not submission.is_file():
            raise InvalidSubmission("no submission.csv")
        text = submission.read_text(errors="replace")
        return 1000.0 if SECRET in text else float(len(text.splitlines()))


@dataclass
class Probe:
    """A check run in the harness between two steps (no step of its own)."""
    fn: Callable[[], None]


class PlaybookAgent(Agent):
    name = "hostile-playbook"
    description = "plays a fixed list of actions, then submits"
    needs_llm = False
    playbook: list[Any] = []

    def __init__(self, ctx):
        super().__init__(ctx)
        self.position = 0

    def step(self, state: RunState):
        while self.position < len(self.playbook):
            item = self.playbook[self.position]
            self.position += 1
            if isinstance(item, Probe):
                item.fn()
                continue
            return item
        return Action(name="Final Answer", args={"final_answer": "done"})

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state.get("position", 0)


def registry():
    reg = load_registry()
    if TASK_NAME not in reg.items["tasks"]:
        reg.items["tasks"][TASK_NAME] = HostileTask()
        reg.providers["tasks"][TASK_NAME] = "tests"
    return reg


@dataclass
class Run:
    run_dir: Path
    trace: dict
    outside: Path

    @property
    def ws(self) -> Path:
        return self.run_dir / "workspace"

    @property
    def steps(self) -> list[dict]:
        return self.trace["steps"]

    def step(self, index: int) -> tuple[str, bool]:
        """(observation, is_error) of step `index` (1-based, as in the trace)."""
        step = self.steps[index - 1]
        return step["observation"], step["is_error"]

    def errors(self, *indices: int) -> list[str]:
        return [self.step(i)[0] for i in indices if self.step(i)[1]]


def write(name: str, content: str) -> Action:
    return Action(name="Write File", args={"file_name": name, "content": content})


def script(code: str, name: str = "evil.py") -> list[Action]:
    """Two steps: write the script, then run it."""
    return [write(name, code), Action(name="Execute Script", args={"script_name": name})]


def act(name: str, **args) -> Action:
    return Action(name=name, args=args)


def home_marked(run_dir: Path) -> list[int]:
    """Live processes of this run: each carries the run's sandbox home in its environment."""
    needle = f"HOME={run_dir / 'home'}".encode() + b"\x00"
    found = []
    for entry in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(entry, "rb") as f:
                if needle not in f.read() + b"\x00":
                    continue
            with open(entry.replace("environ", "stat")) as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.split("/")[2]))
        except (OSError, ValueError, IndexError):
            continue
    return found


def run_case(tmp_path: Path, sandbox: str, playbook: list[Any], monkeypatch=None, timeout: float = TIMEOUT,
             **limits) -> Run:
    """Run playbook; the harness must keep going through every step and record each."""
    make_sandbox(sandbox)  # skips, with the reason, where this sandbox cannot run
    if monkeypatch is not None:
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
        monkeypatch.setenv("MLAB_TEST_SECRET_TOKEN", API_KEY)
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "file.txt").write_text("outside\n")
    (outside / "dir" / "x.txt").write_text("outside x\n")
    reg = registry()
    agent = type("Playbook", (PlaybookAgent,), {"playbook": playbook})
    reg.items["agents"][PlaybookAgent.name] = agent
    run_dir = tmp_path / "run"
    config = RunConfig(task=TASK_NAME, agent=PlaybookAgent.name, sandbox=sandbox, max_steps=len(playbook) + 5,
                       action_timeout_s=timeout)
    warnings: list[str] = []
    trace = Runner(run_dir, config, reg, limits=Limits(**{**LIMITS, **limits}), warn=warnings.append).start()
    text = (run_dir / "trace.json").read_text()
    data = json.loads(text)  # valid JSON on disk
    Trace.model_validate(data)
    run = Run(run_dir, data, outside)
    actions = [item for item in playbook if not isinstance(item, Probe)]
    # The harness kept running through every hostile step and recorded each.
    assert (data["status"], data["end_reason"]) == ("finished", "final answer"), data["end_reason"]
    assert len(data["steps"]) == len(actions) + 1 == len(trace.steps)
    assert [s["index"] for s in data["steps"]] == list(range(1, len(actions) + 2))
    # Nothing got out.
    deadline = time.monotonic() + 15
    while home_marked(run_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert home_marked(run_dir) == [], "processes of the run are still alive"
    assert (outside / "file.txt").read_text() == "outside\n"
    assert sorted(os.listdir(outside)) == ["dir", "file.txt"] and os.listdir(outside / "dir") == ["x.txt"]
    assert (taskdata.hidden_dir(HostileTask()) / "answers.csv").read_text() == SECRET + "\n"
    assert SECRET not in text and API_KEY not in text
    assert data["final_score"] != 1000.0
    assert (run.ws / "data" / "train.csv").read_text() == TRAIN
    return run


def answers_path() -> str:
    return str(taskdata.hidden_dir(HostileTask()) / "answers.csv")


def env_error(obs: str, *fragments: str) -> bool:
    return obs.startswith("EnvError:") and all(f in obs for f in fragments)


parametrize = pytest.mark.parametrize("sandbox", SANDBOXES)


# ---- paths ----------------------------------------------------------------------------------------

@parametrize
def test_path_traversal_with_dotdot(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        act("Read File", file_name="../../outside/file.txt"),
        act("Read File", file_name="data/../../../outside/file.txt"),
        act("Write File", file_name="../escape.txt", content="x"),
        act("Append File", file_name="../../outside/file.txt", content="pwned"),
        act("Copy File", source="train.py", destination="../../outside/dir/copied.py"),
        act("List Files", dir_path="../.."),
        act("Execute Script", script_name="../../outside/run.py"),
        act("Inspect Script Lines", script_name="../trace.json", start_line_number=1, end_line_number=5),
    ])
    for i in range(1, 9):
        obs, err = run.step(i)
        assert err and env_error(obs, "points outside the workspace"), obs
    assert not (run.run_dir / "escape.txt").exists()


@parametrize
def test_absolute_paths(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        act("Read File", file_name=answers_path()),
        act("Write File", file_name=str(tmp_path / "outside" / "file.txt"), content="pwned"),
        act("List Files", dir_path="/"),
        act("Execute Script", script_name="/usr/lib/python3/dist-packages/x.py"),
        act("Copy File", source="/etc/passwd", destination="passwd"),
    ])
    for i in range(1, 6):
        obs, err = run.step(i)
        assert err and env_error(obs, "absolute paths are not allowed"), obs
    assert not (run.ws / "passwd").exists()


@parametrize
def test_symlinks_made_by_a_script_point_out(tmp_path, sandbox):
    outside = tmp_path / "outside"
    plant = ("import os\n"
             f"os.symlink({str(outside / 'file.txt')!r}, 'out.txt')\n"
             f"os.symlink({str(outside / 'dir')!r}, 'out_dir')\n"
             f"os.symlink({answers_path()!r}, 'answers.csv')\n"
             f"os.symlink({answers_path()!r}, 'submission.csv')\n"  # would the scorer follow it?
             "os.symlink('../../outside/file.txt', 'rel.txt')\n"
             "print('planted')\n")
    through = [act("Read File", file_name="out.txt"), act("Read File", file_name="answers.csv"),
               act("Write File", file_name="out.txt", content="pwned"),
               act("Append File", file_name="rel.txt", content="pwned"),
               act("Write File", file_name="out_dir/new.txt", content="pwned"),
               act("Copy File", source="answers.csv", destination="stolen.csv"),
               act("List Files", dir_path="out_dir"),
               act("Inspect Script Lines", script_name="answers.csv", start_line_number=1, end_line_number=1),
               act("Undo Edit Script", script_name="out.txt")]
    peek = script("for name in ('answers.csv', 'out.txt'):\n"
                  "    try:\n        print(name, open(name).read())\n"
                  "    except OSError as e:\n        print(name, 'refused', e.strerror)\n", "peek.py")
    run = run_case(tmp_path, sandbox, [*script(plant), *through, *peek])
    assert "planted" in run.step(2)[0]
    for i in range(3, 3 + len(through)):
        obs, err = run.step(i)
        assert err and env_error(obs, "outside the workspace"), obs
    obs, err = run.step(3 + len(through) + 1)
    assert "answers.csv refused" in obs  # the script cannot follow it either: the answers are not there
    # Snapshots keep the links as links, and scoring never follows one out of the workspace.
    final = SnapshotStore(run.run_dir).manifest("final")
    assert final["submission.csv"]["link"] == answers_path() and final["out_dir"]["link"] == str(outside / "dir")
    assert run.trace["final_score"] is None and "no submission.csv" in run.trace["final_score_error"]


@parametrize
def test_hard_links_to_outside_files(tmp_path, sandbox):
    code = ("import os\n"
            f"for target in ({str(tmp_path / 'outside' / 'file.txt')!r}, {answers_path()!r}, '/etc/passwd'):\n"
            "    try:\n        os.link(target, 'hl_' + os.path.basename(target))\n        print('LINKED', target)\n"
            "    except OSError as e:\n        print('refused', e.strerror)\n"
            "open('a.txt', 'w').write('original\\n')\nos.link('a.txt', 'b.txt')\nprint('inner link')\n")
    run = run_case(tmp_path, sandbox, [*script(code), write("b.txt", "replaced\n"),
                                       act("Append File", file_name="b.txt", content="more\n")])
    obs, _err = run.step(2)
    assert "LINKED" not in obs and obs.count("refused") == 3 and "inner link" in obs, obs
    # Writing one name of a hard-linked pair replaces that name; it never writes through the link.
    assert (run.ws / "a.txt").read_text() == "original\n"
    assert (run.ws / "b.txt").read_text() == "replaced\nmore\n"


# ---- read-only files ------------------------------------------------------------------------------

@parametrize
def test_read_only_files_through_every_writing_action(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        write("data/train.csv", "hacked"), write("./data/../data/train.csv", "hacked"),
        act("Append File", file_name="data/train.csv", content="hacked"),
        act("Copy File", source="train.py", destination="data/train.csv"),
        act("Copy File", source="train.py", destination="data/new.csv"),
        act("Undo Edit Script", script_name="data/train.csv"),
        act("Edit Script (AI)", script_name="train.py", edit_instruction="x", save_name="data/train.csv"),
        act("Edit Script Segment (AI)", script_name="train.py", start_line_number=1, end_line_number=1,
            edit_instruction="x", save_name="data/train.csv"),
    ])
    for i in range(1, 9):
        obs, err = run.step(i)
        assert err and obs.startswith("EnvError:") and ("read-only" in obs or "language model" in obs), obs
    assert not (run.ws / "data" / "new.csv").exists()


@parametrize
def test_read_only_files_through_scripts_and_the_repl(tmp_path, sandbox):
    code = ("import os, shutil\n"
            "def attempt(what, fn):\n"
            "    try:\n        fn()\n        print('DONE', what)\n"
            "    except OSError as e:\n        print('refused', what, e.strerror)\n"
            "attempt('write', lambda: open('data/train.csv', 'w').write('hacked'))\n"
            "attempt('append', lambda: open(os.path.abspath('data/train.csv'), 'a').write('hacked'))\n"
            "attempt('truncate', lambda: os.truncate('data/train.csv', 0))\n"
            "attempt('chmod', lambda: os.chmod('data/train.csv', 0o777))\n"
            "attempt('remove', lambda: os.remove('data/train.csv'))\n"
            "attempt('replace', lambda: (open('x.csv', 'w').write('hacked'), os.replace('x.csv', 'data/train.csv')))\n"
            "attempt('new file', lambda: open('data/new.csv', 'w').write('x'))\n")
    run = run_case(tmp_path, sandbox, [
        *script(code),
        act("Python REPL", command="open('data/train.csv', 'w').write('hacked')"),
        *script("import os, shutil\nos.rename('data', 'data_old')\nos.mkdir('data')\n"
                "open('data/train.csv', 'w').write('hacked')\nprint('swapped')\n", "swap.py"),
    ])
    obs, _err = run.step(2)
    assert "DONE write" not in obs and "DONE append" not in obs and "DONE truncate" not in obs, obs
    assert "DONE remove" not in obs and "DONE replace" not in obs, obs
    obs, _err = run.step(3)
    assert "Read-only file system" in obs or "have been restored" in obs, obs
    obs, _err = run.step(5)
    assert "swapped" not in obs or "have been restored: data/train.csv" in obs, obs


# ---- secrets --------------------------------------------------------------------------------------

@parametrize
def test_reading_the_hidden_answers_from_a_script(tmp_path, sandbox):
    answers = answers_path()
    root = str(taskdata.data_root())
    code = ("import os, glob\n"
            f"for p in ({answers!r}, {os.path.dirname(answers)!r}, {root!r}):\n"
            "    try:\n        print('GOT', open(p).read() if os.path.isfile(p) else os.listdir(p))\n"
            "    except OSError as e:\n        print('refused', e.strerror)\n"
            "hits = []\n"
            f"for base in ({os.path.dirname(root)!r}, '/tmp', os.path.expanduser('~'), '/proc/1/root/tmp'):\n"
            "    for folder, dirs, files in os.walk(base):\n"
            "        hits += [os.path.join(folder, f) for f in files if f == 'answers.csv']\n"
            "        if len(hits) > 5: break\n"
            "print('found', hits)\n"
            "for p in hits:\n"
            "    try:\n        print('READ', open(p).read())\n"
            "    except OSError as e:\n        print('refused', e.strerror)\n")
    run = run_case(tmp_path, sandbox, [
        *script(code),
        act("Python REPL", command=f"import os\nos.path.exists({answers!r})"),
    ])
    obs, _err = run.step(2)
    assert "GOT" not in obs and "READ" not in obs and obs.count("refused") >= 3, obs
    assert run.step(3)[0] == "False\n"


@parametrize
def test_reading_harness_environment_variables(tmp_path, sandbox, monkeypatch):
    code = ("import os\n"
            "print(sorted(os.environ))\n"
            "print('leak', any('sk-hostile' in v for v in os.environ.values()))\n"
            "for pid in [p for p in os.listdir('/proc') if p.isdigit()] + ['1']:\n"
            "    try:\n        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
            "        print('pid', pid, 'leak', b'sk-hostile' in data)\n"
            "    except OSError as e:\n        print('pid', pid, 'unreadable')\n")
    run = run_case(tmp_path, sandbox, [
        *script(code), act("Python REPL", command="import os\n[k for k in os.environ if 'KEY' in k or 'TOKEN' in k]"),
    ], monkeypatch=monkeypatch)
    obs, _err = run.step(2)
    assert "leak True" not in obs and "OPENAI_API_KEY" not in obs and "pid 1 " in obs, obs
    assert run.step(3) == ("[]\n", False)


# ---- processes, memory, time ----------------------------------------------------------------------

@pytest.mark.slow
@parametrize
def test_fork_bomb(tmp_path, sandbox):
    bomb = ("import os\nprint('bomb', flush=True)\n"
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    run = run_case(tmp_path, sandbox, [
        *script(bomb),
        *script("import subprocess, time\nsubprocess.run(['bash', '-c', ':(){ :|:& };:'])\n"
                "time.sleep(30)  # bash returns at once; stay alive while its bomb grows\n", "shell.py"),
        act("Python REPL",
            command="import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
        act("List Files", dir_path="."),
    ])
    for i in (2, 4, 5):
        obs, err = run.step(i)
        assert err and (env_error(obs, "more processes or threads than the limit of 64") or
                        env_error(obs, "time limit")), obs
    assert "more processes" in run.step(2)[0]  # the bound, not the timeout, stopped it
    assert not run.step(6)[1]


RESERVE = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
# As CUDA's cuInit does: a large span of address space reserved (PROT_NONE, 0), none of it usable or backed.
at = libc.mmap(None, 64 << 30, 0, 0x02 | 0x20 | 0x4000, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE
print("reserved" if at not in (None, ctypes.c_void_p(-1).value) else "refused", flush=True)
try:
    block = bytearray(1_500_000_000)
    print("allocated", flush=True)
except MemoryError:
    print("MemoryError", flush=True)
"""


@parametrize
def test_reserved_address_space_is_not_memory(tmp_path, sandbox):
    """The memory limit bounds memory a command can write, not address space it reserves: CUDA (and JAX) reserve
    tens of GiB at start, so a limit on address space makes every GPU command fail with "out of memory"."""
    run = run_case(tmp_path, sandbox, script(RESERVE, "reserve.py"), timeout=20)
    obs, _err = run.step(2)
    assert "reserved" in obs and "MemoryError" in obs, obs


@pytest.mark.slow
@parametrize
def test_memory_bomb(tmp_path, sandbox):
    single = "hog = []\nwhile True:\n    hog.append(bytearray(20_000_000))\n"
    many = ("import os, time\n"
            "for i in range(8):\n"
            "    if os.fork() == 0:\n"
            "        block = bytearray(200_000_000)\n"
            "        for j in range(0, len(block), 4096):\n            block[j] = 1\n"
            "        time.sleep(30)\n"
            "        os._exit(0)\n"
            "time.sleep(30)\n")
    # Eight children filling 200 MB each reach the bound slowly on a loaded machine: a timeout well beyond that.
    run = run_case(tmp_path, sandbox, [*script(single), *script(many, "many.py"),
                                       act("Python REPL", command="x = bytearray(4_000_000_000)")], timeout=20)
    for i in (2, 4):
        obs, err = run.step(i)
        assert err and env_error(obs, "hit the memory limit (768 MiB)"), obs
    obs, err = run.step(5)
    assert "MemoryError" in obs


@pytest.mark.slow
@parametrize
def test_infinite_loop(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [*script("print('spin', flush=True)\nwhile True:\n    pass\n"),
                                       act("Python REPL", command="while True: pass")], timeout=1.5)
    obs, err = run.step(2)
    assert err and env_error(obs, "ran past the time limit of 1.5 s and was killed", "spin"), obs
    obs, err = run.step(3)
    assert err and env_error(obs, "REPL command ran past the time limit"), obs


@pytest.mark.slow
@parametrize
def test_cpu_time_limit(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [*script("while True:\n    pass\n")], timeout=10, cpu_seconds=1)
    obs, err = run.step(2)
    assert err and env_error(obs, "used up its CPU time (1 s)"), obs  # the CPU limit, not the 10 s timeout


@pytest.mark.slow
@parametrize
def test_sleeping_after_closing_stdout(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        *script("import os, time\nprint('bye', flush=True)\nos.close(1)\nos.close(2)\ntime.sleep(60)\n")],
        timeout=1.5)
    obs, err = run.step(2)
    assert err and env_error(obs, "time limit", "bye"), obs


@pytest.mark.slow
@parametrize
def test_child_that_daemonizes_and_outlives_the_script(tmp_path, sandbox):
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        fd = os.open(os.devnull, os.O_RDWR)\n"
            "        for i in (0, 1, 2):\n            os.dup2(fd, i)\n"
            "        time.sleep(2)\n"
            "        open('daemon_was_here.txt', 'w').write('yes')\n"
            "        os._exit(0)\n"
            "    os._exit(0)\n"
            "time.sleep(0.2)\nprint('parent done')\n")
    wait = Probe(lambda: time.sleep(2.5))  # long enough for a surviving daemon to write its file
    run = run_case(tmp_path, sandbox, [*script(code), wait, act("List Files", dir_path=".")])
    assert "parent done" in run.step(2)[0]  # a harness that waited for the daemon would have let it write
    assert not (run.ws / "daemon_was_here.txt").exists()


@parametrize
def test_killing_every_process_it_can_see(tmp_path, sandbox):
    code = ("import os, signal\n"
            "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
            "    if pid != os.getpid():\n"
            "        try:\n            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
            "os.kill(-1, signal.SIGKILL)\n")
    run = run_case(tmp_path, sandbox, [*script(code), act("List Files", dir_path=".")])
    assert run.step(3) == ("data/\nevil.py\ntrain.py", False)  # the harness is alive and well


# ---- output ---------------------------------------------------------------------------------------

@pytest.mark.slow
@parametrize
def test_100_mb_of_output(tmp_path, sandbox):
    code = ("import os\nos.write(1, b'FIRST\\n')\nblock = b'y' * 1_000_000\n"
            "for i in range(100):\n    os.write(1, block)\nos.write(1, b'\\nLAST\\n')\n")
    # The output is the subject, not the time limit: 100 MB through docker's pipe beside stress-test's load once
    # took past TIMEOUT (the script cut off before LAST)
    run = run_case(tmp_path, sandbox, [*script(code),
                                       act("Python REPL", command="print('z' * 100_000_000)")], timeout=60)
    obs, err = run.step(2)
    assert not err and obs.startswith("The script ran. Output:\nFIRST") and "LAST" in obs
    assert "bytes of output left out" in obs and len(obs) < 110_000
    obs, err = run.step(3)
    assert "bytes of output left out" in obs and len(obs) < 110_000


@parametrize
def test_binary_and_non_utf8_output_and_files(tmp_path, sandbox):
    code = ("import os, sys\n"
            "sys.stdout.buffer.write(bytes(range(256)) + b'\\ncaf\\xe9 \\xff\\xfe\\n')\n"
            "open('blob.bin', 'wb').write(os.urandom(5000) + b'\\x00')\n"
            "open('latin1.txt', 'wb').write(b'caf\\xe9\\n')\n"
            "open(b'name-\\xff.txt', 'wb').write(b'odd name\\n')\n")
    run = run_case(tmp_path, sandbox, [
        *script(code), act("Read File", file_name="blob.bin"), act("Read File", file_name="latin1.txt"),
        act("List Files", dir_path="."),
        act("Python REPL", command="import sys\nsys.stdout.buffer.write(b'\\xff\\xfe')"),
        act("Inspect Script Lines", script_name="blob.bin", start_line_number=1, end_line_number=3)])
    assert not run.step(2)[1] and "caf\ufffd" in run.step(2)[0]
    assert env_error(run.step(3)[0], "binary file")
    assert run.step(4) == ("caf\ufffd\n", False)
    assert "name-" in run.step(5)[0]
    assert env_error(run.step(7)[0], "binary file")
    # The odd name is kept by the snapshots as it is.
    assert os.fsdecode(b"name-\xff.txt") in SnapshotStore(run.run_dir).manifest("final")


@pytest.mark.slow
@parametrize
def test_one_gb_file(tmp_path, sandbox):
    make = ("f = open('huge.txt', 'wb')\nf.write(b''.join(b'line %d\\n' % i for i in range(1, 3001)))\n"
            "f.truncate(2**30)\nprint('made')\n")
    run = run_case(tmp_path, sandbox, [
        *script(make, "make.py"), act("Read File", file_name="huge.txt"),
        act("Copy File", source="huge.txt", destination="copy.txt"),
        act("Append File", file_name="huge.txt", content="x"),
        act("Understand File", file_name="huge.txt", things_to_look_for="x"),
        act("Inspect Script Lines", script_name="huge.txt", start_line_number=1, end_line_number=2),
        *script("data = open('huge.txt', 'rb').read()\nprint(len(data))\n", "slurp.py"),
        *script("import os\nos.remove('huge.txt')\n", "clean.py"),
    ], file_size_bytes=2 * 2**30)
    assert "made" in run.step(2)[0]
    for i in (3, 4, 5, 6):
        obs, err = run.step(i)
        assert err and env_error(obs, "more than the"), obs
    assert run.step(7)[0].endswith("1: line 1\n2: line 2")
    obs, err = run.step(9)
    assert err and env_error(obs, "hit the memory limit"), obs
    assert not (run.ws / "copy.txt").exists()


# ---- the workspace itself -------------------------------------------------------------------------

@parametrize
def test_deleting_the_workspace_root(tmp_path, sandbox):
    code = ("import os, shutil\nws = os.getcwd()\nshutil.rmtree(ws, ignore_errors=True)\n"
            "for attempt in (lambda: os.rmdir(ws), lambda: os.rename(ws, ws + '_gone')):\n"
            "    try:\n        attempt()\n        print('GONE')\n"
            "    except OSError as e:\n        print('refused', e.strerror)\n")
    run = run_case(tmp_path, sandbox, [*script(code), act("List Files", dir_path="."),
                                       write("submission.csv", "a\nb\n")])
    assert "GONE" not in run.step(2)[0] and run.step(2)[0].count("refused") == 2
    assert run.step(3) == ("data/", False)  # what the agent may delete is gone; the task's data is not
    assert run.trace["final_score"] == 2.0


@pytest.mark.slow
@parametrize
def test_filling_the_disk_quota(tmp_path, sandbox):
    code = ("import os\nos.makedirs('fill', exist_ok=True)\nblock = bytes(4_000_000)\n"
            "for i in range(500):\n    open(f'fill/{i}.bin', 'wb').write(block)\nprint('WROTE ALL')\n")
    run = run_case(tmp_path, sandbox, [*script(code), *script("import shutil\nshutil.rmtree('fill')\n", "clean.py"),
                                       write("after.txt", "the disk has room again\n")], disk_bytes=32 * 2**20)
    obs, err = run.step(2)
    assert err and env_error(obs, "used too much disk space (at most 32 MiB more per command, at least 100 MiB "
                                  "must stay free)"), obs
    assert "WROTE ALL" not in obs
    assert not run.step(5)[1]


@parametrize
def test_snapshot_meets_fifos_sockets_and_loops(tmp_path, sandbox):
    code = ("import os, socket\nos.mkfifo('pipe')\ns = socket.socket(socket.AF_UNIX)\ns.bind('sock')\n"
            "os.symlink('loop_a', 'loop_b')\nos.symlink('loop_b', 'loop_a')\n"
            "d = 'deep'\nfor i in range(150):\n    d = os.path.join(d, 'd')\nos.makedirs(d)\n"
            "open(os.path.join(d, 'bottom.txt'), 'w').write('bottom')\nprint('made')\n")
    run = run_case(tmp_path, sandbox, [*script(code), act("Read File", file_name="pipe"),
                                       act("Read File", file_name="loop_a"),
                                       act("Copy File", source="sock", destination="s")])
    assert "made" in run.step(2)[0]
    for i in (3, 4, 5):
        assert run.step(i)[1] and run.step(i)[0].startswith("EnvError:"), run.step(i)
    manifest = SnapshotStore(run.run_dir).manifest("final")
    assert "pipe" not in manifest and "sock" not in manifest and manifest["loop_a"]["link"] == "loop_b"
    assert any(name.endswith("/bottom.txt") for name in manifest)


@parametrize
def test_tampering_with_the_run_directory(tmp_path, sandbox):
    code = ("import os, glob\n"
            "targets = ['../trace.json', '../config.json', '../snapshots/step_0000.json', '../errors.log']\n"
            "targets += glob.glob('../objects/*/*')[:2]\n"
            "for t in targets:\n"
            "    try:\n        open(t, 'w').write('{}')\n        print('WROTE', t)\n"
            "    except OSError as e:\n        print('refused', t, e.strerror)\n")
    run = run_case(tmp_path, sandbox, [*script(code)])
    # Refused, or written to a private stand-in (the local sandbox's private /tmp holds the folders above a
    # workspace below /tmp): either way the run's own files are intact.
    assert "refused ../trace.json" in run.step(2)[0] or "WROTE ../trace.json" in run.step(2)[0]
    assert json.loads((run.run_dir / "config.json").read_text())["task"] == TASK_NAME
    assert "{}" not in (run.run_dir / "errors.log").read_text() if (run.run_dir / "errors.log").exists() else True
    store = SnapshotStore(run.run_dir)
    assert store.manifest("step_0000") and store.manifest("final")  # still valid manifests
    for manifest in ("step_0000", "final"):
        for entry in store.manifest(manifest).values():
            assert store.read_object(entry["sha256"]) != b"{}"


@parametrize
def test_changing_the_kernel_or_the_mounts(tmp_path, sandbox):
    code = ("import os, glob, subprocess\n"
            "for p in ['/proc/sys/kernel/core_pattern', '/proc/sys/vm/swappiness', '/proc/sysrq-trigger']"
            " + glob.glob('/proc/irq/*/smp_affinity')[:1] + glob.glob('/sys/fs/cgroup/*/cgroup.procs')[:2]"
            " + glob.glob('/sys/fs/cgroup/cgroup.procs'):\n"
            "    try:\n        open(p, 'a').close()\n        print('OPENED', p)\n"  # opening writes nothing
            "    except OSError as e:\n        print('refused', p, e.strerror)\n"
            "for cmd in (['mount', '-t', 'tmpfs', 'x', '/tmp'], ['umount', '-l', os.getcwd()],"
            " ['umount', '-l', 'data/train.csv'], ['mount', '-o', 'remount,rw', '/']):\n"
            "    try:\n        print(cmd[0], 'rc', subprocess.run(cmd, capture_output=True).returncode)\n"
            "    except OSError as e:\n        print(cmd[0], 'missing')\n"
            # A user namespace of its own gives a script capabilities there, not over the mounts it was given.
            "inner = 'umount -l {root}; umount -l {answers}; cat {answers}; umount -l data/train.csv;"
            " echo hacked > data/train.csv && echo WROTE'\n"
            "r = subprocess.run(['unshare', '-rm', 'sh', '-c', inner], capture_output=True, text=True)\n"
            "print('userns', r.returncode, r.stdout, r.stderr[-300:])\n")
    code = code.replace("{root}", str(taskdata.data_root())).replace("{answers}", answers_path())
    run = run_case(tmp_path, sandbox, [*script(code)])
    obs = run.step(2)[0]
    assert "OPENED" not in obs and "rc 0" not in obs and "refused /proc/sys/kernel/core_pattern" in obs, obs
    assert "WROTE" not in obs, obs


@parametrize
def test_network(tmp_path, sandbox):
    if sandbox == "local":
        pytest.skip("the local sandbox does not isolate the network (by design); use bwrap or docker")
    code = ("import socket\n"
            "for host in ('1.1.1.1', '127.0.0.1'):\n"
            "    try:\n        socket.create_connection((host, 80), timeout=2)\n        print('CONNECTED', host)\n"
            "    except OSError as e:\n        print('refused', host)\n"
            "print(sorted(n for _i, n in socket.if_nameindex()))\n")
    run = run_case(tmp_path, sandbox, [*script(code)])
    obs = run.step(2)[0]
    assert "CONNECTED" not in obs and "refused 1.1.1.1" in obs and "['lo']" in obs, obs


@pytest.mark.slow
@parametrize
def test_file_size_limit(tmp_path, sandbox):
    code = ("block = bytes(1_000_000)\n"
            "with open('big.bin', 'wb') as f:\n    for i in range(100):\n        f.write(block)\n")
    run = run_case(tmp_path, sandbox, [*script(code), *script("import os\nos.remove('big.bin')\n", "clean.py")])
    obs, err = run.step(2)
    assert err and env_error(obs, "tried to write a file larger than the limit of 64 MiB"), obs


# ---- malformed agent input ------------------------------------------------------------------------

@parametrize
def test_malformed_and_oversized_action_input(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        Action.model_construct(name="Read File", args="train.py", entries={}, raw_response=None),
        Action.model_construct(name="Read File", args=None, entries={}, raw_response=None),
        Action.model_construct(name="Read File", args=["train.py"], entries={}, raw_response=None),
        write("big.txt", "x" * (MAX_ARG_CHARS + 1)),
        act("Write File", file_name="n.txt", content="y", **{"k" * 5000: "z"}),
        act("Read File", file_name="a/" * 2000),
    ])
    assert all(run.step(i)[1] for i in range(1, 7))
    for i in (1, 2, 3):
        assert env_error(run.step(i)[0], "the action input must be a JSON object")
    assert env_error(run.step(4)[0], f"content is {MAX_ARG_CHARS + 1} characters long")
    assert env_error(run.step(5)[0], "unexpected")
    assert env_error(run.step(6)[0], "at most 1024")
    assert not (run.ws / "big.txt").exists()
    stored = run.steps[3]["action"]["args"]["content"]
    assert len(stored) < 300_000 and "characters left out of the trace" in stored
    assert (run.run_dir / "trace.json").stat().st_size < 2_000_000


@parametrize
def test_unknown_actions(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        act("rm -rf /"), act(""), act("Final  Answer", final_answer="x"), act("read file", file_name="train.py"),
        Action.model_construct(name=None, args={}, entries={}, raw_response=None),
        Action.model_construct(name=42, args={}, entries={}, raw_response=None),
        act("Request Help", request="let me out"),  # only offered when a person attends the run
    ])
    for i in range(1, 8):
        obs, err = run.step(i)
        assert err and env_error(obs, "unknown action", "Valid actions: List Files"), obs


@parametrize
def test_wrong_argument_types(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        act("Read File", file_name=123), act("Read File", file_name=None),
        act("Write File", file_name=["a"], content="x"),
        act("Write File", file_name="a.txt", content={"nested": [1, 2]}),
        act("Inspect Script Lines", script_name="train.py", start_line_number="abc", end_line_number=2),
        act("Inspect Script Lines", script_name="train.py", start_line_number=1.5, end_line_number=2),
        act("Write File", file_name="u.txt", content="lone \ud800 surrogate"),
        act("Read File", file_name="\udcff.txt"),
        act("Write File", file_name=b"bytes.txt", content=float("nan")),
        act("Write File", file_name="o.txt", content=object()),
    ])
    for i in range(1, 11):
        obs, err = run.step(i)
        assert err and obs.startswith("EnvError:") and ("must be" in obs or "not valid Unicode" in obs), obs
    # The trace keeps what the agent sent, made storable.
    assert run.steps[6]["action"]["args"]["content"] == "lone \\ud800 surrogate"
    assert run.steps[9]["action"]["args"]["content"].startswith("<object object at")
    assert not (run.ws / "u.txt").exists()


@parametrize
def test_repl_that_calls_os_exit(tmp_path, sandbox):
    run = run_case(tmp_path, sandbox, [
        act("Python REPL", command="x = 1"), act("Python REPL", command="import os\nos._exit(3)"),
        act("Python REPL", command="x"), act("Python REPL", command="import sys\nsys.exit(4)"),
        act("Python REPL", command="'alive'")])
    obs, err = run.step(2)
    assert err and env_error(obs, "the REPL process exited (code 3) and its variables are lost"), obs
    assert "NameError" in run.step(3)[0]
    assert run.step(4)[0].startswith("SystemExit: 4 (the REPL keeps running)")
    assert run.step(5) == ("'alive'\n", False)


# ---- the harness process and the Python environment -----------------------------------------------

@parametrize
def test_reaching_the_harness_process(tmp_path, sandbox):
    harness = os.getpid()
    with open("/proc/self/cmdline", "rb") as f:
        harness_cmdline = f.read()
    code = ("import os\n"
            "seen = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "harness = []\n"
            "for pid in seen:\n"
            "    try:\n        cmd = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
            "    except OSError:\n        continue\n"
            f"    if cmd == {harness_cmdline!r}:\n        harness.append(pid)\n"
            "print('harness visible', harness)\n"
            f"for pid in ({harness}, 1):\n"
            "    for what in ('mem', 'environ', 'root/etc/hostname'):\n"
            "        try:\n            open(f'/proc/{pid}/{what}', 'rb').read(16)\n"
            "            print('READ', pid, what)\n"
            "        except OSError as e:\n            print('refused', pid, what)\n"
            "print('processes', len(seen))\n")
    run = run_case(tmp_path, sandbox, [*script(code)])
    obs = run.step(2)[0]
    assert "harness visible []" in obs, obs  # its own PID namespace: the script sees only itself
    assert f"READ {harness} " not in obs and "READ 1 mem" not in obs, obs
    assert int(obs.split("processes ")[1].split()[0]) <= 3, obs


@parametrize
def test_no_privileges_to_regain(tmp_path, sandbox):
    code = ("status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)\n"
            "print('CapEff', status['CapEff'].strip(), 'NoNewPrivs', status['NoNewPrivs'].strip())\n"
            "import os\n"
            "for fn in (lambda: os.setuid(0), lambda: os.chroot('/'),\n"
            "           lambda: os.mknod('dev', 0o600 | 0o060000, os.makedev(8, 0))):\n"
            "    try:\n        fn()\n        print('ALLOWED')\n"
            "    except OSError as e:\n        print('refused', e.strerror)\n")
    run = run_case(tmp_path, sandbox, [*script(code)])
    obs = run.step(2)[0]
    assert "CapEff 0000000000000000 NoNewPrivs 1" in obs, obs
    assert obs.count("refused") >= 2 and "refused Operation not permitted" in obs, obs  # chroot, mknod
    assert not (run.ws / "dev").exists()


@parametrize
def test_planting_code_in_the_python_environment(tmp_path, sandbox):
    """The harness imports from its environment (scoring runs task code in-process): a script that could
    write there would run code in the harness."""
    import site
    import sys
    targets = [os.path.join(site.getsitepackages()[0], "mlab_evil.pth"),
               os.path.join(os.path.dirname(os.__file__), "sitecustomize.py"),
               os.path.join(os.path.dirname(sys.executable), "mlab-evil")]
    code = ("import os\n"
            f"for target in {targets!r}:\n"
            "    try:\n        open(target, 'w').write('import os; os.system(\"touch /tmp/pwned\")')\n"
            "        print('PLANTED', target)\n"
            "    except OSError as e:\n        print('refused', e.strerror)\n")
    try:
        run = run_case(tmp_path, sandbox, [*script(code)])
        obs = run.step(2)[0]
        assert "PLANTED" not in obs and obs.count("refused") == 3, obs
    finally:
        for target in targets:
            if os.path.exists(target):
                os.remove(target)


@pytest.mark.slow
@parametrize
def test_a_flood_of_files(tmp_path, sandbox):
    code = ("import os, time\nstarted = time.monotonic()\nos.mkdir('many')\n"
            "for i in range(20_000):\n    open(f'many/f{i:05d}', 'w').close()\n"
            "print('made in', time.monotonic() - started)\n")
    # Making 20,000 files is disk-bound: a loaded machine needs far more than the usual action timeout.
    run = run_case(tmp_path, sandbox, [*script(code), act("List Files", dir_path="many"),
                                       *script("import shutil\nshutil.rmtree('many')\n", "clean.py")], timeout=60)
    assert "made in" in run.step(2)[0]
    obs, err = run.step(3)
    assert not err and obs.endswith("[... and 19000 more entries]")
