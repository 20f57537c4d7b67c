"""The sandbox contract: start a command confined to a workspace, and run it to the end under limits."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path

from pydantic import BaseModel, Field


class Limits(BaseModel):
    timeout_s: float = 3600.0
    memory_bytes: int | None = 16 * 2**30  # address space; torch reserves a lot of it up front
    cpu_seconds: int | None = None
    file_size_bytes: int | None = 4 * 2**30
    max_processes: int | None = None  # RLIMIT_NPROC counts all of the user's processes, so off by default
    output_bytes: int = 1_000_000


class ExecSpec(BaseModel):
    """Everything a sandbox needs to start one command."""

    cwd: Path
    env: dict[str, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    hidden_paths: list[Path] = Field(default_factory=list)  # must not be visible to the command
    read_only_paths: list[Path] = Field(default_factory=list)  # visible but not writable
    writable_paths: list[Path] = Field(default_factory=list)  # besides cwd, e.g. the sandbox home
    stdin_pipe: bool = False


class ExecResult(BaseModel):
    exit_code: int | None
    output: str
    output_truncated: bool = False
    limit_hit: str | None = None  # "timeout", "memory", "output", "cpu", "file_size"
    duration_s: float


class Sandbox(ABC):
    """A way of confining commands. `popen` must start the command in a new process group."""

    name: str = ""
    description: str = ""

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(usable on this machine, reason when not)."""
        return True, ""

    @abstractmethod
    def popen(self, argv: list[str], spec: ExecSpec) -> subprocess.Popen:
        """Start argv confined per spec, stdout and stderr merged into one pipe."""

    def kill(self, proc: subprocess.Popen) -> None:
        """Kill the command and everything it started."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def run(self, argv: list[str], spec: ExecSpec) -> ExecResult:
        return run_to_end(self, argv, spec)


class _CappedOutput:
    """Keeps the head and tail of a stream within a byte budget, and counts what it drops."""

    def __init__(self, cap: int):
        self.head_cap = cap * 3 // 4
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                excess = len(self.tail) - self.tail_cap
                self.dropped += excess
                del self.tail[:excess]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.dropped:
            return head + self.tail.decode("utf-8", errors="replace")
        marker = f"\n[... {self.dropped} bytes of output left out ...]\n"
        return head + marker + self.tail.decode("utf-8", errors="replace")


# A command's pipe stays open while any child holds it; after the command exits, wait this long for EOF.
_DRAIN_GRACE_S = 0.5


def run_to_end(sandbox: Sandbox, argv: list[str], spec: ExecSpec) -> ExecResult:
    started = time.monotonic()
    proc = sandbox.popen(argv, spec)
    output = _CappedOutput(spec.limits.output_bytes)
    reader = threading.Thread(target=_pump, args=(proc.stdout, output), daemon=True)
    reader.start()
    limit_hit = None
    try:
        proc.wait(timeout=spec.limits.timeout_s)
    except subprocess.TimeoutExpired:
        limit_hit = "timeout"
    finally:
        if limit_hit is None:
            reader.join(timeout=_DRAIN_GRACE_S)  # output still in the pipe; no waiting once timed out
        sandbox.kill(proc)  # also reaps daemonized children still holding the pipe
        if proc.poll() is None:
            proc.wait()
        reader.join(timeout=_DRAIN_GRACE_S)
        if proc.stdout and not reader.is_alive():  # closing under a blocked reader would deadlock
            proc.stdout.close()
    text = output.text()
    code = proc.returncode
    if limit_hit is None:
        limit_hit = _limit_from_outcome(code, text)
    if output.dropped and limit_hit is None:
        limit_hit = "output"
    return ExecResult(
        exit_code=code,
        output=text,
        output_truncated=bool(output.dropped),
        limit_hit=limit_hit,
        duration_s=time.monotonic() - started,
    )


def _pump(stream, output: _CappedOutput) -> None:
    try:
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            output.feed(chunk)
    except (OSError, ValueError):
        return


def _limit_from_outcome(code: int | None, text: str) -> str | None:
    if code == 0:  # a script that prints "MemoryError" and succeeds hit no limit
        return None
    if code == -signal.SIGXCPU:
        return "cpu"
    if code == -signal.SIGXFSZ or "File too large" in text[-2000:]:
        return "file_size"
    if "MemoryError" in text[-2000:] or "Cannot allocate memory" in text[-2000:]:
        return "memory"
    return None
