"""The embedded default sandbox: a child process group with resource limits (and a cgroup of its own where
one can be made, bounding the processes and memory of the whole tree).

Where the kernel allows it (root, or unprivileged user namespaces) the command runs in its own user, mount,
PID, IPC, UTS and network namespaces, on a file system built from nothing as bwrap builds it
(mlab.core.sandbox.rootfs): the workspace and the sandbox home writable, the system folders and the Python
environment read-only, a private /tmp, /dev and /proc, and nothing else. It has a loopback of its own and no
capabilities, even as root. confine.py, run by path with the harness's interpreter, does all that with direct
system calls.

Without namespaces (fallback) the command is only a process group with rlimits; daemonized children are
found by a token in their environment and killed.
"""
from __future__ import annotations

import functools
import importlib.resources
import marshal
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from mlab.core.sandbox.contract import ExecSpec, Sandbox
from mlab.core.sandbox.rootfs import BASIC_DEVICES, RootView, root_view

_TOKEN_VAR = "MLAB_SANDBOX_TOKEN"


@functools.lru_cache(maxsize=1)
def confine_program() -> str:
    """The path of confine.py (next to this module), which the harness's interpreter runs by path."""
    return str(importlib.resources.files(__package__).joinpath("confine.py"))


def plan_of(view: RootView) -> str:
    """The RootView as confine.py reads it."""
    return marshal.dumps({
        "links": view.links, "read_only": view.read_only, "late_read_only": view.late_read_only,
        "devices": view.devices, "basic_devices": list(BASIC_DEVICES), "writable": view.writable,
        "protected": view.protected, "masked_dirs": view.masked_dirs, "masked_files": view.masked_files,
        "network": view.network, "tmp_bytes": view.tmp_bytes}).hex()


@functools.lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The command line that starts confine.py, when it works here; None when namespaces are unavailable."""
    prefix = (sys.executable, "-I", "-S", "-B", confine_program())
    with tempfile.TemporaryDirectory(prefix="mlab-probe-") as folder:
        spec = ExecSpec(cwd=Path(folder))
        try:
            probe = subprocess.run([*prefix, plan_of(root_view(["true"], spec)), "--", "true"],
                                   capture_output=True, timeout=20, cwd=folder)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return prefix if probe.returncode == 0 else None


class LocalSandbox(Sandbox):
    name = "local"
    description = ("namespaces and a file system built from nothing (workspace read-write, system and Python "
                   "read-only, no network), with direct system calls; refuses where the kernel allows none")

    def __init__(self, namespaces: bool = True):
        self.use_namespaces = namespaces  # False forces the fallback (tests of it, or debugging)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if namespace_prefix() is None:
            return False, ("no mount, PID and network namespaces can be made here (unshare failed), so agent code "
                           "could read the hidden answers; use --sandbox bwrap or docker, or --sandbox unconfined "
                           "to run it without confinement anyway")
        return True, ""

    @property
    def confined(self) -> bool:
        return self.use_namespaces and namespace_prefix() is not None

    def limitations(self) -> list[str]:
        notes = []
        if not self.confined:
            who = "root" if os.geteuid() == 0 else "the harness's user"
            why = "turned off" if self.use_namespaces is False and namespace_prefix() else "unshare failed"
            notes.append(f"the local sandbox cannot use mount and PID namespaces here ({why}), so agent code runs "
                         f"as {who} without them: it can read the task's hidden answers and other files the "
                         f"harness can read; use --sandbox bwrap (or docker) for a real benchmark")
        return notes + super().limitations()

    def popen(self, argv: list[str], spec: ExecSpec) -> subprocess.Popen:
        command = list(argv)
        env = dict(spec.env)
        prefix = namespace_prefix() if self.use_namespaces else None
        if prefix is not None:
            command = [*prefix, plan_of(root_view(argv, spec)), "--", *argv]
            token = None
        else:
            token = secrets.token_hex(16)
            env[_TOKEN_VAR] = token
        proc = self.spawn(command, spec, env=env)
        proc.mlab_token = token  # type: ignore[attr-defined]
        return proc

    @property
    def signal_exit_codes(self) -> bool:  # the namespace's init shell tells a death by signal N as 128+N
        return self.confined

    def kill(self, proc: subprocess.Popen) -> None:
        super().kill(proc)
        token = getattr(proc, "mlab_token", None)
        if token:
            _kill_by_token(token)


def _kill_by_token(token: str) -> None:
    """Kill every process whose environment carries token: what escaped the process group by setsid."""
    needle = f"{_TOKEN_VAR}={token}".encode() + b"\x00"
    me = os.getpid()
    for _round in range(3):  # a process may fork while we sweep
        found = False
        try:
            pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return
        for pid in pids:
            if pid == me:
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle not in f.read() + b"\x00":
                        continue
                os.kill(pid, signal.SIGKILL)
                found = True
            except (OSError, ValueError):
                continue
        if not found:
            return


class UnconfinedSandbox(LocalSandbox):
    """Agent code as a plain process group with rlimits: only when the user asks for it by name."""

    name = "unconfined"
    description = "no confinement (a process group with rlimits): agent code can read the hidden answers"

    def __init__(self) -> None:
        super().__init__(namespaces=False)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, ""

    def limitations(self) -> list[str]:
        return ["--sandbox unconfined: agent code runs without confinement and can read the task's hidden answers "
                "and everything the harness's user can; its scores prove nothing"] + Sandbox.limitations(self)
