"""The local sandbox's per-run zygote, harness side: one confine.py process per run (per file system plan) that
has built the namespaces and the root once and forks each command from there (see confine.py), so a command
costs a fork and a few mounts instead of an interpreter start-up and some fifty mounts.

The harness talks to it over a socket pair: a request carries the command (argv, environment, directory,
rlimits, the protected files; past REQUEST_BYTES, in a memfd sent last) and, as descriptors, the command's
output pipe, its stdin, its cgroup and a socket of its own, on which the command's init says it started (the
kernel adds its pid as the harness sees it) and its watcher later sends the wait status. Closing the socket (or
the harness dying) ends the zygote, and with it, as PID 1 of the run's namespaces, every command. A zygote idle
for IDLE_S with no command running ends by itself (a sandbox dropped but not yet collected keeps no process);
the next command starts another.
"""
from __future__ import annotations

import array
import errno
import marshal
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import weakref
from collections.abc import Sequence
from typing import IO

from mlab.core.sandbox.cgroups import CommandCgroup
from mlab.core.sandbox.confine import MAX_FDS, REQUEST_BYTES, REQUEST_IN_FD
from mlab.core.sandbox.limits import nproc_fallback, rlimit_values
from mlab.core.sandbox.spec import ExecSpec

IDLE_S = 300.0  # longer than an agent's usual thinking between two commands; a rebuild costs one start-up
READY_TIMEOUT_S = 20.0  # building a root takes tens of milliseconds; this is for a machine under heavy load
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


class ZygoteGone(Exception):
    """The zygote did not take the request (it died, or never got ready): start another."""


class RootNotBuilt(ZygoteGone):
    """The zygote ended before it was ready: it cannot build this plan's root here."""


class NotForZygote(Exception):
    """A request the zygote cannot take (more descriptors than one message carries): the command runs with a
    root of its own instead."""


def plan_sources(plan: dict) -> list[str]:
    """The host paths a built root pins by inode: one replaced on the host (a new workspace, a hidden folder
    swapped in, /etc/hosts renamed over) is no longer what the root shows, so the zygote must be rebuilt."""
    paths: list[str] = [source for source, _ in plan["read_only"] + plan["late_read_only"]]
    return [*paths, *plan["writable"], *plan["devices"], *plan["masked_dirs"], *plan["masked_files"]]


def plan_descriptor(plan: dict) -> int:
    """A descriptor holding the plan as confine.py reads it (`fd:N`): a plan with thousands of paths does not
    fit a command line. Close-on-exec here; pass_fds hands it to confine.py alone."""
    return bytes_descriptor("mlab-plan", marshal.dumps(plan))


def bytes_descriptor(name: str, content: bytes) -> int:
    """A close-on-exec memfd holding content."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        data = memoryview(content)
        while data:
            data = data[os.write(fd, data):]
    except BaseException:
        os.close(fd)
        raise
    return fd


def identity(paths: Sequence[str]) -> tuple[tuple[int, int] | None, ...]:
    found: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
            found.append((st.st_dev, st.st_ino))
        except OSError:
            found.append(None)
    return tuple(found)


class ConfinedCommand(subprocess.Popen):
    """A command the zygote started, looked after as a Popen: pid is its init's (the leader of its process
    group), and its end comes as a message from its watcher rather than from waitpid: `end_fd()` is the socket
    it comes on, readable from that moment (mlab.core.sandbox.wait sleeps on it)."""

    def __init__(self, argv: list[str], pid: int, channel: socket.socket, stdin: IO[bytes] | None,
                 stdout: IO[bytes], zygote: Zygote):
        # Popen.__init__ is not called: this process is the zygote's grandchild, not ours.
        self.args = argv
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = None
        self.returncode = None
        self._child_created = False  # Popen's __del__ must not try to reap it
        self._channel: socket.socket | None = channel
        self._lock = threading.Lock()
        self._zygote = zygote

    def end_fd(self) -> int | None:
        """A descriptor that becomes readable when the command ends; None once its end has been read."""
        channel = self._channel
        return channel.fileno() if channel is not None and self.returncode is None else None

    def _collect(self, timeout: float | None) -> int | None:
        if not self._lock.acquire(blocking=timeout != 0):  # another thread is waiting for the end: not yet
            return self.returncode
        try:
            if self.returncode is not None or self._channel is None:
                return self.returncode
            # poll, not select: a harness running many commands has descriptors past select's 1024
            waiting = select.poll()
            waiting.register(self._channel.fileno(), select.POLLIN)
            if not waiting.poll(None if timeout is None else int(max(0.0, timeout) * 1000 + 0.999)):
                return None
            try:
                message = self._channel.recv(64)
            except OSError:
                message = b""
            if message.startswith(b"exit "):
                status = int(message[5:])
                self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            else:  # the watcher was killed with its zygote, and the command with it
                self.returncode = -signal.SIGKILL
            self._channel.close()
            self._channel = None
            self._zygote.command_ended()
            return self.returncode
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class Zygote:
    """One run's zygote for one file system plan."""

    def __init__(self, prefix: Sequence[str], shown_identity: tuple, plan: dict, idle_s: float = IDLE_S):
        self.identity = shown_identity  # taken before the build: a change during it is seen next time
        self.live = 0  # commands started and not yet ended
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        plan_fd = plan_descriptor(plan)
        try:
            self.proc = subprocess.Popen(
                [*prefix, "--serve", str(theirs.fileno()), repr(idle_s), f"fd:{plan_fd}"],
                pass_fds=[theirs.fileno(), plan_fd], cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)  # the terminal's Ctrl-C reaches the harness, which ends it
        finally:
            theirs.close()
            os.close(plan_fd)
        self.control = ours
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * REQUEST_BYTES)  # room for the largest request
        # Dropped without close() (its sandbox collected): the zygote still sees its socket close.
        weakref.finalize(self, ours.close)
        ours.settimeout(READY_TIMEOUT_S)
        slow = False
        try:
            ready = ours.recv(16)
        except TimeoutError:  # still building: a machine under very heavy load, not a root that cannot be built
            ready, slow = b"", True
        except OSError:
            ready = b""
        ours.settimeout(None)
        if ready != b"ready":
            self.close()
            raise (ZygoteGone if slow else RootNotBuilt)("the sandbox's zygote could not build the root")

    def current(self, shown_identity: tuple) -> bool:
        """Alive, and every host path it shows (as identity() of plan_sources() now) still the one it built
        its root from."""
        return self.proc.poll() is None and shown_identity == self.identity

    def command_ended(self) -> None:
        with self._lock:
            self.live -= 1

    def start(self, argv: list[str], spec: ExecSpec,
              protected: list[str]) -> tuple[ConfinedCommand, CommandCgroup | None]:
        """Start argv per spec (its rlimits, cgroup and stdin) through the zygote; the command and its cgroup."""
        cgroup = CommandCgroup.create(spec.limits)
        nproc = None if cgroup is not None else nproc_fallback(spec.limits.max_processes)
        request = marshal.dumps({
            "argv": list(argv), "env": dict(spec.env), "cwd": os.path.realpath(spec.cwd),
            "protected": protected, "stdin": spec.stdin_pipe, "rlimits": rlimit_values(spec.limits, nproc),
            "cpu_set": spec.limits.cpu_set})
        in_fd = len(request) > REQUEST_BYTES  # a bigger request travels in a memfd, the last descriptor
        if len(cgroup.fds if cgroup is not None else []) > MAX_FDS - 3 - in_fd:
            if cgroup is not None:
                cgroup.close_fds()
                cgroup.remove()
            raise NotForZygote("the request carries more descriptors than the zygote takes")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the kernel adds the sender's pid
        out_read, out_write = os.pipe()
        in_read, in_write = os.pipe() if spec.stdin_pipe else (-1, -1)
        # Ours to close once sent; the cgroup's are closed by cgroup.close_fds() alone (a second close could
        # hit a descriptor another thread opened under the same number meanwhile).
        head = [theirs.detach(), out_write] + ([in_read] if spec.stdin_pipe else [])
        owned = list(head)
        started = False
        try:
            tail = [bytes_descriptor("mlab-request", request)] if in_fd else []
            owned += tail
            request = REQUEST_IN_FD if in_fd else request
            sent = head + (cgroup.fds if cgroup is not None else []) + tail
            with self._lock:
                try:
                    self.control.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", sent))])
                except OSError as exc:
                    if exc.errno == errno.EMSGSIZE:
                        raise NotForZygote("the request is bigger than the zygote's socket takes") from exc
                    raise ZygoteGone(f"the sandbox's zygote is gone ({exc})") from exc
                self.live += 1
            for fd in owned:
                os.close(fd)
            owned = []
            pid = _started_pid(ours)
            if pid is None:
                self.command_ended()
                raise ZygoteGone("the sandbox's zygote did not start the command")
            started = True
        finally:
            for fd in owned:
                os.close(fd)
            if cgroup is not None:
                cgroup.close_fds()
            if not started:
                ours.close()
                for fd in (out_read, in_write):
                    if fd >= 0:
                        os.close(fd)
                if cgroup is not None:
                    cgroup.remove()
        stdin = os.fdopen(in_write, "wb") if spec.stdin_pipe else None
        proc = ConfinedCommand(list(argv), pid, ours, stdin, os.fdopen(out_read, "rb"), self)
        return proc, cgroup

    def close(self) -> None:
        """End the zygote and wait for it (every command it started ends with it)."""
        try:
            self.control.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=READY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _started_pid(channel: socket.socket) -> int | None:
    """The pid (as this process sees it) of the command's init, from the credentials of its first message."""
    channel.settimeout(READY_TIMEOUT_S)
    try:
        data, ancillary, _flags, _addr = channel.recvmsg(16, socket.CMSG_SPACE(_CREDENTIALS.size))
    except OSError:
        return None
    finally:
        channel.settimeout(None)
    if data != b"started":
        return None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= _CREDENTIALS.size:
            pid: int = _CREDENTIALS.unpack(payload[:_CREDENTIALS.size])[0]
            return pid
    return None
