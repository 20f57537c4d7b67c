"""A program agent's command is watched by the one supervisor every command of agent code goes through
(mlab.core.sandbox.supervise, issue 43 item 2): how its end becomes an exit code and a limit hit is the rule a
script's end follows, so a limit the program breaks ends the run as that limit, with the script's exit code."""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import textwrap
import threading

import pytest

from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.sandbox.supervise import supervise
from tests.fixtures.asking_program import ASK
from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer
from tests.fixtures.sandboxes import make_sandbox

MEMORY = 256 * 2**20
# Asks for four times its memory limit: Python raises MemoryError, prints it and exits 1.
HOG = textwrap.dedent('''
    print("allocating", flush=True)
    block = bytearray(4 * MEMORY)
    print("never here")
''')


def test_a_caller_ends_a_command_by_stop_and_holds_its_context_while_the_tree_is_killed(tmp_path):
    sandbox = make_sandbox("local")
    spec = ExecSpec(cwd=tmp_path)
    chunks: list[bytes] = []
    held: list[str] = []

    @contextlib.contextmanager
    def killing():
        held.append("enter")
        yield
        held.append("exit")

    try:
        proc = sandbox.popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"], spec)
        result = supervise(sandbox, proc, spec, chunks.append, lambda: b"up" in b"".join(chunks), killing())
    finally:
        sandbox.close()
    assert held == ["enter", "exit"]
    assert result.exit_code == -signal.SIGKILL and result.limit_hit is None and result.output == "up\n", result


@pytest.mark.slow
def test_a_memory_limit_the_program_breaks_is_told_as_for_a_script(tmp_path):
    (tmp_path / "hog.py").write_text(f"MEMORY = {MEMORY}\n" + HOG)
    sandbox = make_sandbox("local")
    try:
        script = sandbox.run([sys.executable, "hog.py"], ExecSpec(cwd=tmp_path, limits=Limits(memory_bytes=MEMORY)))
    finally:
        sandbox.close()
    assert script.limit_hit == "memory" and script.exit_code == 1, script

    with FakeLLMServer(lambda body: "unused") as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option", "command=python hog.py",
                    "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", "local",
                    "--memory", str(MEMORY), "--max-steps", "3", "--run-dir", tmp_path / "run", cwd=tmp_path,
                    env={"OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 0, done.stderr + done.stdout
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert trace["end_reason"] == f"agent program stopped by its {script.limit_hit} limit", trace["end_reason"]
    last = trace["steps"][-1]
    assert last["action"]["args"] == {"exit_code": str(script.exit_code)}
    assert "MemoryError" in last["observation"]


# Prints at its start, asks, prints a line, asks again and ends: the line belongs to the first call's step.
ASKS_TWICE = ASK + textwrap.dedent('''

    print("started", flush=True)
    ask("first")
    print("AFTER THE FIRST CALL", flush=True)
    ask("second")
''')


@pytest.mark.slow
def test_a_step_holds_the_output_printed_before_the_next_call_however_late_it_is_read(tmp_path, monkeypatch):
    """Stress run 3 (session 11): smolagents' step lacked the line it printed just before its next call; the
    reader thread had not read it when the call's step was taken. Here the reader lags on purpose."""
    from mlab.core import RunConfig
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.live import LiveStep
    from mlab.core.run.runner import Runner

    shown = LiveStep.output

    def lagging(self, chunk: bytes) -> None:
        shown(self, chunk)
        if b"started" in chunk:
            threading.Event().wait(3.0)  # the reader is late: the program asks twice meanwhile

    monkeypatch.setattr(LiveStep, "output", lagging)
    program = tmp_path / "asks_twice.py"
    program.write_text(ASKS_TWICE)
    script = tmp_path / "replies.jsonl"
    script.write_text('"one"\n"two"\n')
    config = RunConfig(task="lite/wine", agent="command", agent_options={"command": f"python {program}"},
                       llm=f"scripted:{script}", sandbox="local", max_steps=5)
    trace = Runner(tmp_path / "run", config, load_registry()).start()
    observations = [step.observation for step in trace.steps]
    assert len(observations) == 2, observations
    assert "AFTER THE FIRST CALL" in observations[0], observations[0]
