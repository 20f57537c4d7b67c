"""A command's process tree as the host sees it: signalling every member (its process group and its cgroup)
until no new one appears, waiting until they have all stopped, and finding those that left both by a token in
their environment. Everything here reads /proc."""
from __future__ import annotations

import os
import signal
import time
from contextlib import suppress

from mlab.core.sandbox.cgroups import CommandCgroup

FREEZE_WAIT_S = 5.0  # a process that has not stopped by then is stuck in the kernel (uninterruptible I/O)
_STOPPED_STATES = "TtZX"  # stopped, traced, zombie, dead
TOKEN_VAR = "MLAB_SANDBOX_TOKEN"


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process /proc shows."""
    found: dict[int, tuple[int, int]] = {}
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
            found[int(name)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return found


def group_members(pgid: int) -> set[int]:
    """The processes of process group pgid (they may have left the cgroup's view, never the group)."""
    return {pid for pid, (_parent, group) in _processes().items() if group == pgid}


def descendants(pid: int) -> set[int]:
    """The processes below pid. In a command's PID namespace every process is below its init, whatever session
    or group it made for itself: an orphan is reparented to the init."""
    children: dict[int, list[int]] = {}
    for child, (parent, _group) in _processes().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        if child not in found:
            found.add(child)
            todo.extend(children.get(child, ()))
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


def wait_stopped(pids: set[int], limit_s: float = FREEZE_WAIT_S) -> None:
    """Until every thread of pids has really stopped (a signal is delivered when the target is next scheduled,
    which on a loaded machine is later), or limit_s has passed."""
    deadline = time.monotonic() + limit_s
    pending = {pid for pid in pids if pid != os.getpid()}
    while pending and time.monotonic() < deadline:
        pending = {pid for pid in pending if _threads_running(pid)}
        if pending:
            time.sleep(0.001)


def signal_tree(leader: int, cgroup: CommandCgroup | None, sig: int, rounds: int) -> set[int]:
    """sig to process group leader and to each process of cgroup (without one: each process below the leader),
    again while new ones appear (a stopped process cannot fork), at most rounds times; the pids signalled."""
    signalled: set[int] = {leader}
    me = os.getpid()
    for _round in range(rounds):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, sig)
        members = (cgroup.pids() if cgroup is not None else descendants(leader)) - {me}
        fresh = members - signalled
        for pid in fresh:
            with suppress(OSError):
                os.kill(pid, sig)
        signalled |= fresh
        if not fresh:
            break
    return signalled


def kill_by_token(token: str) -> None:
    """Kill every process whose environment carries token: what escaped the process group by setsid."""
    needle = f"{TOKEN_VAR}={token}".encode() + b"\x00"
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
