"""Reading a running container's cgroup from the host: which bound (processes, memory) it hit, and which
processes it holds.

The engine enforces the bounds; the harness only needs to tell which one stopped a command, while it runs (a
fork bomb blocked by pids.max keeps running until killed), and, for a kept container, which processes are left
to kill when a command ends. Where the container's cgroup is not visible here (a remote engine), nothing is
read and the engine's record (OOMKilled) is all there is.
"""
from __future__ import annotations

import functools
import os


def _unescape(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


@functools.lru_cache(maxsize=1)
def _mounts() -> tuple[dict[str, str], str | None]:
    """(cgroup v1 controller -> mount point, cgroup v2 mount point) of hierarchies mounted at their root."""
    v1: dict[str, str] = {}
    v2 = None
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return v1, v2
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or fields[3] != "/":
            continue
        if tail[0] == "cgroup2" and v2 is None:
            v2 = _unescape(fields[4])
        elif tail[0] == "cgroup":
            for controller in ("pids", "memory"):
                if controller in tail[2].split(","):
                    v1.setdefault(controller, _unescape(fields[4]))
    return v1, v2


def folders_of(pid: int) -> dict[str, tuple[str, int]]:
    """controller ('pids', 'memory') -> (cgroup folder, version) of host process pid, where visible here."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    v1, v2 = _mounts()
    found: dict[str, tuple[str, int]] = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            if v2 is not None:
                folder = os.path.join(v2, parts[2].lstrip("/"))
                for controller in ("pids", "memory"):
                    found.setdefault(controller, (folder, 2))
            continue
        for controller in parts[1].split(","):
            if controller in ("pids", "memory") and controller in v1:
                found[controller] = (os.path.join(v1[controller], parts[2].lstrip("/")), 1)
    return {c: (f, v) for c, (f, v) in found.items() if os.path.isdir(f) and f.rstrip("/") != v1.get(c, v2)}


def _counter(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
    except (OSError, ValueError):
        pass
    return 0


def counts(folders: dict[str, tuple[str, int]]) -> tuple[int, int]:
    """(forks refused at the process bound, OOM kills) so far: a kept container's counters only grow, so a
    command is judged by how much they grew while it ran."""
    refused = _counter(os.path.join(folders["pids"][0], "pids.events"), "max") if "pids" in folders else 0
    oom = 0
    if "memory" in folders:
        folder, version = folders["memory"]
        oom = _counter(os.path.join(folder, "memory.oom_control" if version == 1 else "memory.events"), "oom_kill")
    return refused, oom


def limit_hit(folders: dict[str, tuple[str, int]], since: tuple[int, int] = (0, 0)) -> str | None:
    """The bound hit since the counters stood at `since` (see counts)."""
    refused, oom = counts(folders)
    if refused > since[0]:
        return "processes"
    if oom > since[1]:
        return "memory"
    return None


def procs_file(folders: dict[str, tuple[str, int]]) -> str | None:
    """The file that lists every process of the cgroup (the pids hierarchy's, or the unified one's)."""
    for controller in ("pids", "memory"):
        if controller in folders:
            return os.path.join(folders[controller][0], "cgroup.procs")
    return None
