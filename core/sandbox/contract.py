"""The sandbox contract: what the core asks of a sandbox, and what one command's start and end look like.

Every sandbox runs a command in the workspace with limits, streams its output, kills the whole process tree
on a timeout or a broken limit, and reports the exit status and which limit was hit. The base class declares
everything the core reads from a sandbox, and gives subclasses `spawn` (a new session with rlimits, a
per-command cgroup where the kernel allows, death with the harness) and `run` (watching a command to its end).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from mlab.core.sandbox.cgroups import CommandCgroup, cgroup_parents
from mlab.core.sandbox.disk import disk_limit_hit, disk_usage
from mlab.core.sandbox.limits import Limits, nproc_fallback
from mlab.core.sandbox.spawn import start


class ExecSpec(BaseModel):
    """Everything a sandbox needs to start one command."""

    cwd: Path
    env: dict[str, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    hidden_paths: list[Path] = Field(default_factory=list)  # must not be visible to the command
    read_only_paths: list[Path] = Field(default_factory=list)  # visible but not writable
    writable_paths: list[Path] = Field(default_factory=list)  # besides cwd, e.g. the sandbox home
    stdin_pipe: bool = False
    network: bool = False  # share the host's network (the task declares it needs one); else loopback of its own


LIMIT_NAMES = ("timeout", "memory", "output", "cpu", "file_size", "processes", "disk")


class ExecResult(BaseModel):
    exit_code: int | None
    output: str
    output_truncated: bool = False
    limit_hit: str | None = None  # one of LIMIT_NAMES
    duration_s: float


class Sandbox(ABC):
    """A way of confining commands. `popen` must start the command in a new process group (use `spawn`)."""

    name: str = ""
    """The name `--sandbox` selects it by, unique among installed sandboxes."""

    description: str = ""
    """One line on how it confines commands, for listings."""

    @property
    def confined(self) -> bool:
        """True when a command cannot see hidden paths nor write read-only ones (namespaces, a container);
        False when only the harness's restoring afterwards protects them."""
        return False

    @property
    def signal_exit_codes(self) -> bool:
        """True when the command runs under an init of its own that exits with 128+N when the command dies of
        signal N: such codes are reported as -N, the way Popen does."""
        return False

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(usable on this machine, reason when not)."""
        return True, ""

    def limitations(self) -> list[str]:
        """What this sandbox cannot enforce here; the runner shows and records each as a warning."""
        if os.geteuid() == 0 and "pids" not in cgroup_parents():
            return ["no cgroup for process counts can be made here, and root ignores RLIMIT_NPROC: the number of "
                    "processes an agent's code starts is not bounded (a fork bomb is stopped only by the timeout)"]
        return []

    def close(self) -> None:
        """Let go of what the sandbox keeps between commands (the local sandbox's zygote); the owner of a run's
        sandbox calls it when the run ends. A later command starts afresh."""
        return None

    @abstractmethod
    def popen(self, argv: list[str], spec: ExecSpec) -> subprocess.Popen:
        """Start argv confined per spec, stdout and stderr merged into one pipe."""

    def spawn(self, command: list[str], spec: ExecSpec, env: dict[str, str] | None = None,
              pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
        """Start command in a new session with spec's rlimits, in a cgroup of its own where one can be made,
        getting SIGKILL when the harness dies; pass_fds stay open in it (a plan read from a descriptor). For
        subclasses' `popen`. How, without a Python preexec_fn: mlab.core.sandbox.spawn."""
        cgroup = CommandCgroup.create(spec.limits)
        nproc = None if cgroup is not None else nproc_fallback(spec.limits.max_processes)
        try:
            proc = start(command, spec.cwd, spec.env if env is None else env, spec.stdin_pipe, spec.limits, nproc,
                         cgroup, pass_fds)
        except BaseException:
            if cgroup is not None:
                cgroup.close_fds()
                cgroup.remove()
            raise
        if cgroup is not None:
            cgroup.close_fds()
        proc.mlab_cgroup = cgroup  # type: ignore[attr-defined]
        proc.mlab_disk = disk_usage(spec.cwd)  # type: ignore[attr-defined]
        return proc

    def check(self, proc: subprocess.Popen, spec: ExecSpec) -> str | None:
        """A limit the running command has broken (it is then killed), or None."""
        cgroup: CommandCgroup | None = getattr(proc, "mlab_cgroup", None)
        if cgroup is not None:
            hit = cgroup.limit_hit()
            if hit:
                return hit
        return disk_limit_hit(getattr(proc, "mlab_disk", None), spec.cwd, spec.limits)

    def kill(self, proc: subprocess.Popen) -> None:
        """Kill the command and everything it started."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        cgroup = getattr(proc, "mlab_cgroup", None)
        if cgroup is not None:
            cgroup.kill()

    def freeze(self, proc: subprocess.Popen) -> None:
        """Stop every process of a lasting command (the REPL) between actions, so nothing of the agent runs
        while the harness works: each process of its cgroup, and its process group, gets SIGSTOP until no new
        one appears (a stopped process cannot fork); then wait until every thread of them has really stopped
        (a signal is delivered when the target is next scheduled, which on a loaded machine is later)."""
        signalled = _signal_tree(proc, signal.SIGSTOP, rounds=50)
        _wait_stopped(signalled | _group_members(proc.pid), FREEZE_WAIT_S)

    def thaw(self, proc: subprocess.Popen) -> None:
        """Let a frozen command run again."""
        _signal_tree(proc, signal.SIGCONT, rounds=1)

    def release(self, proc: subprocess.Popen) -> None:
        """Free what the command needed once it is dead (its cgroup)."""
        cgroup = getattr(proc, "mlab_cgroup", None)
        if cgroup is not None:
            cgroup.remove()
            proc.mlab_cgroup = None  # type: ignore[attr-defined]

    def run(self, argv: list[str], spec: ExecSpec,
            on_output: Callable[[bytes], None] | None = None) -> ExecResult:
        """Run argv to its end under spec's limits, showing its output to on_output as it comes."""
        from mlab.core.sandbox.supervise import run_to_end  # here: that module builds on this one

        return run_to_end(self, argv, spec, on_output)


FREEZE_WAIT_S = 5.0  # a process that has not stopped by then is stuck in the kernel (uninterruptible I/O)
_STOPPED_STATES = "TtZX"  # stopped, traced, zombie, dead


def _group_members(pgid: int) -> set[int]:
    """The processes of process group pgid (they may have left the cgroup's view, never the group)."""
    found: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid:
            found.add(int(name))
    return found


def _threads_running(pid: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False  # gone
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0].decode()
        except (OSError, IndexError):
            continue
        if state not in _STOPPED_STATES:
            return True
    return False


def _wait_stopped(pids: set[int], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    pending = {pid for pid in pids if pid != os.getpid()}
    while pending and time.monotonic() < deadline:
        pending = {pid for pid in pending if _threads_running(pid)}
        if pending:
            time.sleep(0.001)


def _signal_tree(proc: subprocess.Popen, sig: int, rounds: int) -> set[int]:
    cgroup: CommandCgroup | None = getattr(proc, "mlab_cgroup", None)
    signalled: set[int] = {proc.pid}
    me = os.getpid()
    for _round in range(rounds):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        members = (cgroup.pids() if cgroup is not None else set()) - {me}
        fresh = members - signalled
        for pid in fresh:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        signalled |= fresh
        if not fresh:
            break
    return signalled
