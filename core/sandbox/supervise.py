"""Running a started command to its end: watching its time and limits, killing its tree when one is broken,
and telling which limit it hit. Its end wakes the watcher at once (mlab.core.sandbox.wait); the limits are
looked at every POLL_S meanwhile."""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mlab.core.sandbox.output import CappedOutput, pump
from mlab.core.sandbox.spec import ExecResult, ExecSpec
from mlab.core.sandbox.wait import EndWatch

if TYPE_CHECKING:  # the contract's default `run` is this function
    from mlab.core.sandbox.contract import Sandbox

# A command's pipe stays open while any child holds it; after the command exits, wait this long for EOF.
DRAIN_GRACE_S = 0.5
# How often a running command's cgroup and disk are looked at.
POLL_S = 0.1


def run_to_end(sandbox: Sandbox, argv: list[str], spec: ExecSpec,
               on_output: Callable[[bytes], None] | None = None) -> ExecResult:
    """Start argv in sandbox and watch it until it ends, its time is up or it breaks a limit."""
    started = time.monotonic()
    proc = sandbox.popen(argv, spec)
    output = CappedOutput(spec.limits.output_bytes)
    reader = threading.Thread(target=pump, args=(proc.stdout, output, on_output), daemon=True)
    reader.start()
    limit_hit = None
    # The clock starts once popen returns: a sandbox's start-up (a container's) is not the command's time.
    deadline = time.monotonic() + spec.limits.timeout_s
    watch: EndWatch | None = None
    try:
        watch = EndWatch(proc)
        while True:
            if watch.wait(max(0.0, min(POLL_S, deadline - time.monotonic()))):
                break
            if time.monotonic() >= deadline:
                limit_hit = "timeout"
                break
            limit_hit = sandbox.check(proc, spec)
            if limit_hit:
                break
    finally:
        if limit_hit is None:
            reader.join(timeout=DRAIN_GRACE_S)  # output still in the pipe; no waiting once a limit struck
        sandbox.kill(proc)  # also reaps daemonized children still holding the pipe
        if proc.poll() is None:
            proc.wait()
        reader.join(timeout=DRAIN_GRACE_S)
        if proc.stdout and not reader.is_alive():  # closing under a blocked reader would deadlock
            proc.stdout.close()
        if watch is not None:
            watch.close()
        after = sandbox.check(proc, spec) if limit_hit is None else None  # e.g. the kernel's OOM kill
        sandbox.release(proc)
    text = output.text()
    code = proc.returncode
    if sandbox.signal_exit_codes and code is not None and 128 < code <= 128 + 64:
        code = 128 - code
    if limit_hit is None:
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
