"""Commands a killed harness left running in a workspace. A harness killed with -9 takes its sandboxes' commands
with it, but through a chain of parent-death signals that a loaded machine may take a while to deliver; a resumed
run must not restore the workspace while one of them can still write to it."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


def _namespace(pid: int | str) -> int | None:
    try:
        return os.stat(PROC / str(pid) / "ns" / "pid").st_ino
    except OSError:
        return None


def _gone(pid: int) -> bool:
    """Exited, or a zombie (it can write nothing more)."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def confined_commands_in(workspace: Path) -> list[int]:
    """Processes in a PID namespace other than this one (sandboxed commands: a user's shell in the workspace is
    in ours) whose working folder is the workspace."""
    try:
        folder = os.stat(workspace)
    except OSError:
        return []
    ours = _namespace("self")
    found = []
    for name in os.listdir(PROC):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = os.stat(PROC / name / "cwd")
        except OSError:  # gone, or not ours to look at
            continue
        if (cwd.st_dev, cwd.st_ino) == (folder.st_dev, folder.st_ino) and _namespace(name) not in (None, ours):
            found.append(int(name))
    return found


def end_leftover_commands(workspace: Path, timeout_s: float = 30.0) -> list[int]:
    """SIGKILL the commands still running in workspace and wait until they are gone; returns their pids. Those
    still there after timeout_s (not ours to kill) are returned too, and the caller decides."""
    pids = confined_commands_in(workspace)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    deadline = time.monotonic() + timeout_s
    while any(not _gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pids
