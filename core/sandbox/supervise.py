"""Running a started command to its end: watching its time and limits, killing its tree when one is broken (or
its caller ends it), and telling its exit code and which limit it hit: the one rule for every command of agent code
and of scorers, program agents' included. Its end wakes the watcher at once (mlab.core.sandbox.wait); the limits are
looked at every POLL_S meanwhile."""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from mlab.core.sandbox.output import OutputPump
from mlab.core.sandbox.spec import ExecResult, ExecSpec
from mlab.core.sandbox.wait import EndWatch

if TYPE_CHECKING:
    from mlab.core.sandbox.command import Command
    from mlab.core.sandbox.contract import Sandbox

# A command's pipe stays open while any child holds it; after the command exits, wait this long for EOF.
DRAIN_GRACE_S = 0.5
# How often a running command's cgroup and disk are looked at.
POLL_S = 0.1


def run_to_end(sandbox: Sandbox, argv: list[str], spec: ExecSpec,
               on_output: Callable[[bytes], None] | None = None) -> ExecResult:
    """Start argv in sandbox and watch it until it ends, its time is up or it breaks a limit."""
    return supervise(sandbox, sandbox.popen(argv, spec), spec, on_output)


def supervise(sandbox: Sandbox, proc: Command, spec: ExecSpec, on_output: Callable[[bytes], None] | None = None,
              stop: Callable[[], bool] | None = None, killing: AbstractContextManager[object] | None = None,
              pump: OutputPump | None = None) -> ExecResult:
    """Watch proc, just started in sandbox, until it ends, spec's time (counted from now) is up, it breaks a limit
    or stop() (asked every POLL_S) says to end it; then kill its tree, holding `killing` meanwhile, and release
    it. A command stop() ended has no limit hit. A caller that drains its output itself while it runs (a program
    agent's step) passes the pump of proc's output; on_output is then the pump's."""
    started = time.monotonic()
    if pump is None:
        assert proc.stdout is not None  # the contract: a pipe
        pump = OutputPump(proc.stdout, spec.limits.output_bytes, on_output)
    output = pump.output
    reader = threading.Thread(target=pump.run, daemon=True)
    reader.start()
    limit_hit = None
    ended = False  # by itself: neither a limit nor stop() ended it
    deadline = started + spec.limits.timeout_s
    watch: EndWatch | None = None
    try:
        watch = EndWatch(proc)
        while not (ended := watch.wait(max(0.0, min(POLL_S, deadline - time.monotonic())))):
            limit_hit = "timeout" if time.monotonic() >= deadline else sandbox.check(proc, spec)
            if limit_hit or (stop is not None and stop()):
                break
    finally:
        if ended:
            reader.join(timeout=DRAIN_GRACE_S)  # output still in the pipe; no waiting once it is to be killed
        with killing or nullcontext():
            sandbox.kill(proc)  # also reaps daemonized children still holding the pipe
        if proc.poll() is None:
            proc.wait()
        pump.drain()  # the tree is dead: what it wrote is in the pipe, whether or not the reader has run
        reader.join(timeout=DRAIN_GRACE_S)
        if proc.stdout and not reader.is_alive():  # closing under a blocked reader would deadlock
            proc.stdout.close()
        if watch is not None:
            watch.close()
        after = sandbox.check(proc, spec) if ended else None  # e.g. the kernel's OOM kill
        sandbox.release(proc)
    text = output.text()
    code = proc.returncode
    if sandbox.signal_exit_codes and code is not None and 128 < code <= 128 + 64:
        code = 128 - code
    if ended:
        limit_hit = after or limit_from_outcome(code, text)
    if output.dropped and limit_hit is None:
        limit_hit = "output"
    return ExecResult(
        exit_code=code,
        output=text,
        output_truncated=bool(output.dropped),
        limit_hit=limit_hit,
        duration_s=time.monotonic() - started,
    )


def limit_from_outcome(code: int | None, text: str) -> str | None:
    """The limit a command that ended by itself ran into, told by its exit status and last output."""
    if code == 0:  # a script that prints "MemoryError" and succeeds hit no limit
        return None
    if code == -signal.SIGXCPU:
        return "cpu"
    if code == -signal.SIGXFSZ or "File too large" in text[-2000:]:
        return "file_size"
    if "MemoryError" in text[-2000:] or "Cannot allocate memory" in text[-2000:]:
        return "memory"
    return None
