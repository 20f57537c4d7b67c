"""A program agent's command is watched by the one supervisor every command of agent code goes through
(mlab.core.sandbox.supervise, issue 43 item 2): how its end becomes an exit code and a limit hit is the rule a
script's end follows, so a limit the program breaks ends the run as that limit, with the script's exit code."""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import textwrap

import pytest

from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.sandbox.supervise import supervise
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
