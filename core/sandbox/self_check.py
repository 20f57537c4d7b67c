"""The sandbox conformance suite: the contract (mlab.core.sandbox.contract) and the hostile cases, run against
any sandbox class. `mlab check-sandbox NAME` runs it on an installed sandbox; mlab's own tests run it on local,
bwrap, docker, unconfined and a third-party one (tests/test_sandbox_conformance.py).

Every case runs real commands with this interpreter in a fresh workspace under a folder of its own. The
contract cases hold for every sandbox; the confinement cases (hidden files, read-only files, no network) for
those that say they confine (`confined`), and are skipped for the others.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from mlab.core.sandbox.command import Command
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.spec import ExecResult, ExecSpec

SETTLE_S = 1.0  # how long a process that should be dead or stopped is given to show it is not
PY = sys.executable


class CaseFailed(Exception):
    """The sandbox broke the rule a case checks."""


@dataclass
class Outcome:
    case: str
    status: str  # "pass", "fail" or "skip"
    detail: str = ""


class Bench:
    """One case's folders and the sandbox under test."""

    def __init__(self, sandbox: Sandbox, root: Path):
        self.sandbox = sandbox
        self.root = root
        self.ws = root / "workspace"
        self.home = root / "home"
        self.ws.mkdir(parents=True)
        self.home.mkdir()

    def spec(self, **limits: float | int | None) -> ExecSpec:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "MLAB_CHECK": "conformance"}
        return ExecSpec(cwd=self.ws, env=env, writable_paths=[self.home],
                        limits=Limits.model_validate({"timeout_s": 60, **limits}))

    def run(self, code: str, spec: ExecSpec | None = None) -> ExecResult:
        return self.sandbox.run([PY, "-c", code], spec or self.spec())


def expect(ok: bool, detail: str) -> None:
    if not ok:
        raise CaseFailed(detail)


# ---- the contract ---------------------------------------------------------------------------------------

def runs_a_command(b: Bench) -> None:
    """argv runs in spec.cwd with spec.env; stderr comes in the same output as stdout."""
    result = b.run("import os, sys; print('hello', os.getcwd(), os.environ.get('MLAB_CHECK')); "
                   "print('to-stderr', file=sys.stderr)")
    expect(result.exit_code == 0, f"exit code {result.exit_code}: {result.output[-500:]}")
    expect(f"hello {os.path.realpath(b.ws)} conformance" in result.output or f"hello {b.ws} conformance"
           in result.output, f"not run in the workspace with spec.env: {result.output[-500:]!r}")
    expect("to-stderr" in result.output, "stderr missing from the output")
    expect(result.limit_hit is None, f"limit {result.limit_hit} reported for a command that broke none")


def exit_codes(b: Bench) -> None:
    """An exit status comes back as is; a death by signal N as -N."""
    code = b.run("import sys; sys.exit(3)").exit_code
    expect(code == 3, f"sys.exit(3) came back as {code}")
    code = b.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)").exit_code
    expect(code == -signal.SIGKILL, f"a death by SIGKILL came back as {code}, not -9")


def output_cap(b: Bench) -> None:
    """Output past limits.output_bytes is cut and reported as the output limit."""
    result = b.run("import sys\nfor i in range(20000): sys.stdout.write('x' * 99 + '\\n')",
                   b.spec(output_bytes=4000))
    expect(result.output_truncated and result.limit_hit == "output",
           f"2 MB of output under a 4 kB cap: truncated={result.output_truncated}, limit_hit={result.limit_hit}")
    expect(len(result.output) < 8000, f"{len(result.output)} characters kept under a 4 kB cap")


def time_limit(b: Bench) -> None:
    """A command past limits.timeout_s is killed and reported as the timeout."""
    result = b.run("import time; print('started', flush=True); time.sleep(600)", b.spec(timeout_s=1))
    expect(result.limit_hit == "timeout", f"limit_hit={result.limit_hit} for a command past its time")
    expect(result.duration_s < 60, f"the command ran {result.duration_s:.0f} s under a 1 s limit")
    expect("started" in result.output, "the output before the timeout was lost")


# Children that append to a file of their own every 50 ms: one in the command's process group, one that left it.
_BEATING = """
import os, subprocess, sys, time
beat = "import sys, time\\nwhile True:\\n    open(sys.argv[1], 'a').write('.')\\n    time.sleep(0.05)"
subprocess.Popen([sys.executable, "-c", beat, "child.beat"])
subprocess.Popen([sys.executable, "-c", beat, "escaped.beat"], start_new_session=True)
while not (os.path.exists("child.beat") and os.path.exists("escaped.beat")):
    time.sleep(0.01)
print("beating", flush=True)
time.sleep(600)
"""


def _sizes(folder: Path, names: tuple[str, ...]) -> tuple[int, ...]:
    return tuple((folder / name).stat().st_size if (folder / name).exists() else -1 for name in names)


def kills_the_tree(b: Bench) -> None:
    """A timeout kills everything the command started, a child that called setsid included."""
    result = b.run(_BEATING, b.spec(timeout_s=3))
    expect("beating" in result.output, f"the children did not start: {result.output[-500:]}")
    names = ("child.beat", "escaped.beat")
    before = _sizes(b.ws, names)
    time.sleep(SETTLE_S)
    after = _sizes(b.ws, names)
    alive = [name for name, was, now in zip(names, before, after, strict=True) if now != was]
    expect(not alive, f"still running after the command was killed: {', '.join(alive)}")


def _wait_for(check: Callable[[], bool], limit_s: float = 30) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def freezes_between_actions(b: Bench) -> None:
    """freeze stops every process of a lasting command (a child too) until thaw."""
    spec = b.spec().model_copy(update={"stdin_pipe": True})
    command = b.sandbox.popen([PY, "-c", _BEATING.replace("time.sleep(600)", "sys.stdin.read()")], spec)
    names = ("child.beat", "escaped.beat")
    try:
        expect(_wait_for(lambda: all(size > 0 for size in _sizes(b.ws, names))), "the children did not start")
        b.sandbox.freeze(command)
        frozen = _sizes(b.ws, names)
        time.sleep(SETTLE_S)
        moving = [name for name, was, now in zip(names, frozen, _sizes(b.ws, names), strict=True) if now != was]
        expect(not moving, f"still running while frozen: {', '.join(moving)}")
        b.sandbox.thaw(command)
        expect(_wait_for(lambda: all(now > was for was, now in zip(frozen, _sizes(b.ws, names), strict=True))),
               "not running again after thaw")
    finally:
        _end(b.sandbox, command)


def stdin_pipe(b: Bench) -> None:
    """spec.stdin_pipe gives the command a pipe to read; popen returns while it runs."""
    spec = b.spec().model_copy(update={"stdin_pipe": True})
    command = b.sandbox.popen([PY, "-c", "import sys; print('got', sys.stdin.readline().strip(), flush=True)"],
                              spec)
    try:
        expect(command.stdin is not None and command.stdout is not None, "no stdin or stdout pipe")
        assert command.stdin is not None and command.stdout is not None
        command.stdin.write(b"ping\n")
        command.stdin.close()
        out = command.stdout.read().decode(errors="replace")
        expect(command.wait(timeout=60) == 0 and "got ping" in out, f"the command did not read its stdin: {out!r}")
    finally:
        _end(b.sandbox, command)


def _end(sandbox: Sandbox, command: Command) -> None:
    sandbox.kill(command)
    try:
        command.wait(timeout=30)
    finally:
        sandbox.release(command)
        for pipe in (command.stdin, command.stdout):
            if pipe is not None:
                with suppress(OSError):
                    pipe.close()


def cleanup(b: Bench) -> None:
    """After close() a later command starts afresh; what a command left behind it is gone."""
    expect(b.run("print('before')").exit_code == 0, "a command failed before close()")
    b.sandbox.close()
    result = b.run("print('after')")
    expect(result.exit_code == 0 and "after" in result.output, f"no command runs after close(): {result}")


# ---- confinement (sandboxes that say they confine) -------------------------------------------------------

_SECRET = "the-hidden-answer-42"


def hides_hidden_paths(b: Bench) -> None:
    """spec.hidden_paths cannot be read, nor listed."""
    answers = b.ws / "answers"
    answers.mkdir()
    (answers / "test.csv").write_text(_SECRET)
    spec = b.spec().model_copy(update={"hidden_paths": [answers]})
    result = b.run("import os\nfor p in ('answers/test.csv', os.path.abspath('answers/test.csv')):\n"
                   "    try: print(open(p).read())\n    except OSError as e: print('refused', e.errno)\n"
                   "try: print(os.listdir('answers'))\nexcept OSError as e: print('refused', e.errno)", spec)
    expect(_SECRET not in result.output and "test.csv" not in result.output,
           f"a hidden file was seen: {result.output[-500:]!r}")


def protects_read_only_paths(b: Bench) -> None:
    """spec.read_only_paths can be read but not written, replaced, removed or have their mode changed."""
    data = b.ws / "data"
    data.mkdir()
    train = data / "train.csv"
    train.write_text("a,b\n1,2\n")
    spec = b.spec().model_copy(update={"read_only_paths": [train]})
    result = b.run(
        "import os\nprint('read', open('data/train.csv').read().count(','))\n"
        "attempts = [lambda: open('data/train.csv', 'a').write('3,4\\n'), lambda: open('data/train.csv', 'w'),\n"
        "            lambda: os.chmod('data/train.csv', 0o777), lambda: os.truncate('data/train.csv', 0)]\n"
        "for attempt in attempts:\n    try: attempt(); print('changed')\n    except OSError: pass\n"
        "for attempt in (lambda: os.remove('data/train.csv'), lambda: os.rename('data/train.csv', 'x.csv')):\n"
        "    try: attempt(); print('moved')\n    except OSError: pass\n", spec)
    expect("read 2" in result.output, f"a read-only file could not be read: {result.output[-500:]!r}")
    intact = train.exists() and train.read_text() == "a,b\n1,2\n" and train.stat().st_mode & 0o777 != 0o777
    expect(intact and "changed" not in result.output and "moved" not in result.output,
           f"a read-only file was changed: {result.output[-500:]!r}")


def no_network(b: Bench) -> None:
    """Without spec.network the command cannot reach the host's network, its loopback services included."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    accepted: list[bool] = []

    def serve() -> None:
        with suppress(OSError):
            conn, _ = server.accept()
            accepted.append(True)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        result = b.run(f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
                       "    print('connected')\nexcept OSError as e:\n    print('refused', e)")
    finally:
        server.close()
    expect("connected" not in result.output and not accepted,
           f"the command reached a service on the host's loopback: {result.output[-300:]!r}")


CONTRACT: tuple[Callable[[Bench], None], ...] = (
    runs_a_command, exit_codes, output_cap, time_limit, kills_the_tree, freezes_between_actions, stdin_pipe, cleanup)
CONFINEMENT: tuple[Callable[[Bench], None], ...] = (hides_hidden_paths, protects_read_only_paths, no_network)


def check_sandbox(make: Callable[[], Sandbox], folder: Path | None = None,
                  only: Callable[[str], bool] = lambda _name: True) -> list[Outcome]:
    """Every case (those `only` keeps) against a sandbox made by make (its class, or a function), each with a
    fresh instance closed afterwards. folder: where the cases' workspaces go (default: a temporary folder,
    removed afterwards). Never raises for a sandbox's failure: that is the case's outcome."""
    outcomes = []
    scratch = Path(tempfile.mkdtemp(prefix="mlab-check-sandbox-", dir=folder))
    try:
        for case in (*CONTRACT, *CONFINEMENT):
            if not only(case.__name__):
                continue
            outcomes.append(_run_case(make, case, scratch / case.__name__))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return outcomes


def _run_case(make: Callable[[], Sandbox], case: Callable[[Bench], None], root: Path) -> Outcome:
    sandbox = make()
    try:
        if case in CONFINEMENT and not sandbox.confined:
            return Outcome(case.__name__, "skip", "the sandbox does not confine (confined is False)")
        case(Bench(sandbox, root))
        return Outcome(case.__name__, "pass")
    except CaseFailed as exc:
        return Outcome(case.__name__, "fail", str(exc))
    except Exception as exc:  # a sandbox that raises breaks the contract too
        return Outcome(case.__name__, "fail", f"{type(exc).__name__}: {exc}")
    finally:
        sandbox.close()
