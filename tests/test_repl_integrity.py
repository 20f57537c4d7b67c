"""Nothing of the agent runs between actions, and agent code cannot end a REPL command by printing a marker.

Through the Environment's Python REPL action in each sandbox that can run here."""
from __future__ import annotations

import time

import pytest

from mlab.core import Action
from tests.fixtures.sandboxes import CONFINING
from tests.test_sandbox import make_env

SANDBOXES = [*CONFINING, "fallback"]  # every registered sandbox that confines, and the fallback


def repl(env, code: str):
    return env.execute(Action(name="Python REPL", args={"command": code}))


def repl_env(tmp_path, sandbox: str):
    # commands poll with their own deadlines: the action timeout only bounds a hang
    return make_env(tmp_path, timeout=60.0, sandbox=None if sandbox == "fallback" else sandbox,
                    namespaces=sandbox != "fallback")


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.slow
def test_a_background_thread_and_child_do_not_run_between_commands(tmp_path, sandbox):
    env = repl_env(tmp_path, sandbox)
    try:
        out, error = repl(env, (
            "import os, threading, time, subprocess, sys\n"
            "def tick():\n"
            "    n = 0\n"
            "    while True:\n"
            "        n += 1\n"
            "        open('thread.tmp', 'w').write(str(n)); os.replace('thread.tmp', 'thread.txt')\n"
            "        time.sleep(0.01)\n"
            "threading.Thread(target=tick, daemon=True).start()\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import os, time\\nn=0\\nwhile True:\\n    n+=1\\n"
            "    open(\"child.tmp\",\"w\").write(str(n)); os.replace(\"child.tmp\", \"child.txt\")\\n"
            "    time.sleep(0.01)'])\n"
            "deadline = time.monotonic() + 30\n"
            "while time.monotonic() < deadline and not all(map(os.path.exists, ['thread.txt', 'child.txt'])):\n"
            "    time.sleep(0.01)\n"
            "print('started')"))
        assert not error and "started" in out, out
        ws = env.workspace
        first = ((ws / "thread.txt").read_text(), (ws / "child.txt").read_text())
        time.sleep(1.0)  # the harness at work between two actions
        assert ((ws / "thread.txt").read_text(), (ws / "child.txt").read_text()) == first
        # the next command waits (up to a deadline) for both to move on: they run while a command does
        out, error = repl(env, (
            "import time\n"
            "deadline = time.monotonic() + 30\n"
            f"while time.monotonic() < deadline and not (int(open('thread.txt').read() or 0) > {int(first[0])} and "
            f"int(open('child.txt').read() or 0) > {int(first[1])}):\n"
            "    time.sleep(0.01)\n"
            "print('again')"))
        assert not error and "again" in out
        later = (int((ws / "thread.txt").read_text()), int((ws / "child.txt").read_text()))
        assert later[0] > int(first[0]) and later[1] > int(first[1])  # they ran during the command
    finally:
        env.close()


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_printing_an_end_marker_does_not_end_the_command_or_shift_outputs(tmp_path, sandbox):
    env = repl_env(tmp_path, sandbox)
    try:
        # every form an agent could try: the marker prefix, with the previous command's text, a guessed nonce
        out, error = repl(env, (
            "import sys, os\n"
            "m = b'\\x00MLAB-REPL-END '\n"
            "sys.stdout.buffer.write(m + b'0' * 32 + b'\\n'); sys.stdout.flush()\n"
            "os.write(1, m + b'deadbeef' * 4 + b'\\n')\n"
            # the old attack: the marker's token was on the command line
            "for arg in open('/proc/self/cmdline', 'rb').read().split(b'\\0'):\n"
            "    os.write(1, m + arg + b'\\n')\n"
            "print('after the forged markers')"))
        assert not error and "after the forged markers" in out, out
        out2, _ = repl(env, "print('second command')")
        assert "second command" in out2 and "forged" not in out2
    finally:
        env.close()
