"""ProcessSandbox: the base for sandboxes whose commands are processes of this machine (local, bwrap, docker's
client), and ProcessCommand, one such command with what the sandbox keeps for it.

A subclass overrides `popen` and starts its command line with `spawn`: a new session with the spec's rlimits,
a cgroup of its own where the kernel allows one (bounding the whole tree's processes and memory), and death
with the harness (how, without a Python preexec_fn: mlab.core.sandbox.spawn). The rest of the contract comes
from here: `run` watches a command to its end (mlab.core.sandbox.supervise), `check` reads the cgroup's counters
and the disk, `kill` kills the process group, the cgroup and the processes carrying the command's token, `freeze`
and `thaw` signal the whole tree (mlab.core.sandbox.tree), and `release` removes the cgroup.
"""
from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, TypeVar, overload

from mlab.core.sandbox.cgroups import CommandCgroup, cgroup_parents
from mlab.core.sandbox.command import Command
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.disk import disk_limit_hit, disk_usage
from mlab.core.sandbox.limits import nproc_fallback
from mlab.core.sandbox.spawn import start
from mlab.core.sandbox.spec import ExecResult, ExecSpec
from mlab.core.sandbox.supervise import run_to_end
from mlab.core.sandbox.tree import TOKEN_VAR, group_members, kill_by_token, signal_tree, wait_stopped


class ProcessCommand:
    """A command a ProcessSandbox started: its process (a Popen, or an object that behaves as one) and what
    the sandbox keeps for it until `release`. Subclass it for more per-command state (see `spawn`'s kind)."""

    def __init__(self, process: subprocess.Popen[bytes], cgroup: CommandCgroup | None = None,
                 disk: tuple[int, int] | None = None, token: str | None = None):
        self.process = process
        self.cgroup = cgroup  # removed by release
        self.disk = disk  # (used, free) bytes of the workspace's file system at the start
        self.token = token  # carried in the environment of everything it starts: found even after a setsid
        self._pidfd: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stdin(self) -> IO[bytes] | None:
        return self.process.stdin

    @property
    def stdout(self) -> IO[bytes] | None:
        return self.process.stdout

    @property
    def returncode(self) -> int | None:
        code: int | None = self.process.returncode
        return code

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def end_fd(self) -> int | None:
        """A descriptor readable once the command has ended (mlab.core.sandbox.wait): the process's own, else
        a pidfd of this process's child, kept until release; None where neither can be had."""
        own = getattr(self.process, "end_fd", None)
        if callable(own):
            fd: int | None = own()
            return fd
        if self._pidfd is None and self.process.returncode is None and hasattr(os, "pidfd_open") \
                and getattr(self.process, "_child_created", False):
            try:  # not reaped yet (returncode is None): the pid is still this child's
                self._pidfd = os.pidfd_open(self.process.pid)
            except OSError:
                return None
        return self._pidfd

    def begin(self, cwd: Path) -> None:
        """A command started ahead of its work (a container made ahead) begins it now: the disk is counted from
        here, not from what the harness wrote in between."""
        self.disk = disk_usage(cwd)

    def kill_tree(self) -> None:
        """SIGKILL to its process group, its cgroup and whatever carries its token."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()
        if self.token:
            kill_by_token(self.token)

    def let_go(self) -> None:
        """Remove its cgroup and close its end descriptor: what `release` does once it has ended."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        self.close_end_fd()

    def close_end_fd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


C = TypeVar("C", bound=ProcessCommand)


class ProcessSandbox(Sandbox):
    """A sandbox whose commands are process trees here. `popen` may also return a bare Popen started in a
    session of its own: the process group is then all that `kill`, `freeze` and `thaw` reach."""

    def limitations(self) -> list[str]:
        if os.geteuid() == 0 and "pids" not in cgroup_parents():
            return ["no cgroup for process counts can be made here, and root ignores RLIMIT_NPROC: the number of "
                    "processes an agent's code starts is not bounded (a fork bomb is stopped only by the timeout)"]
        return []

    @overload
    def spawn(self, command: list[str], spec: ExecSpec, env: dict[str, str] | None = None,
              pass_fds: tuple[int, ...] = (), *, mark: bool = False) -> ProcessCommand: ...

    @overload
    def spawn(self, command: list[str], spec: ExecSpec, env: dict[str, str] | None = None,
              pass_fds: tuple[int, ...] = (), *, mark: bool = False, kind: type[C]) -> C: ...

    def spawn(self, command: list[str], spec: ExecSpec, env: dict[str, str] | None = None,
              pass_fds: tuple[int, ...] = (), *, mark: bool = False,
              kind: type[ProcessCommand] = ProcessCommand) -> ProcessCommand:
        """Start command for `popen`: in a new session with spec's rlimits, in a cgroup of its own where one can
        be made, getting SIGKILL when the harness dies.

        Args:
            command: the full command line (the sandbox's wrapper, then the command's argv).
            spec: the cwd, stdin and limits; its env unless env is given.
            env: the environment of the command line, when not spec.env (a container client's).
            pass_fds: descriptors that stay open in it (a plan read from a descriptor).
            mark: put a token in its environment, so that `kill` finds what it starts that leaves the process
                group and the cgroup (setsid where no cgroup can be made).
            kind: the ProcessCommand subclass to return, for a sandbox that keeps more per command.

        Raises:
            FileNotFoundError, PermissionError: command[0] cannot be executed.
        """
        environ = dict(spec.env if env is None else env)
        token = os.urandom(16).hex() if mark else None
        if token is not None:
            environ[TOKEN_VAR] = token
        cgroup = CommandCgroup.create(spec.limits)
        nproc = None if cgroup is not None else nproc_fallback(spec.limits.max_processes)
        try:
            process = start(command, spec.cwd, environ, spec.stdin_pipe, spec.limits, nproc, cgroup, pass_fds)
        except BaseException:
            if cgroup is not None:
                cgroup.close_fds()
                cgroup.remove()
            raise
        if cgroup is not None:
            cgroup.close_fds()
        return kind(process, cgroup, disk_usage(spec.cwd), token)

    def run(self, argv: list[str], spec: ExecSpec, on_output: Callable[[bytes], None] | None = None) -> ExecResult:
        return run_to_end(self, argv, spec, on_output)

    def check(self, command: Command, spec: ExecSpec) -> str | None:
        if not isinstance(command, ProcessCommand):
            return None
        if command.cgroup is not None:
            hit = command.cgroup.limit_hit()
            if hit:
                return hit
        return disk_limit_hit(command.disk, spec.cwd, spec.limits)

    def kill(self, command: Command) -> None:
        if isinstance(command, ProcessCommand):
            command.kill_tree()
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(command.pid, signal.SIGKILL)

    def freeze(self, command: Command) -> None:
        """SIGSTOP to each process of the command's cgroup and its process group until no new one appears (a
        stopped process cannot fork), then wait until every thread of them has really stopped."""
        signalled = signal_tree(command.pid, _cgroup_of(command), signal.SIGSTOP, rounds=50)
        wait_stopped(signalled | group_members(command.pid))

    def thaw(self, command: Command) -> None:
        signal_tree(command.pid, _cgroup_of(command), signal.SIGCONT, rounds=1)

    def release(self, command: Command) -> None:
        if isinstance(command, ProcessCommand):
            command.let_go()


def _cgroup_of(command: Command) -> CommandCgroup | None:
    return command.cgroup if isinstance(command, ProcessCommand) else None
