"""Per-command cgroups: where this process may make them (cgroup v1 or a delegated v2 subtree), and one cgroup
per command that bounds the processes and memory of its whole tree (and, for a run's slice, its CPUs), tells which
bound was hit, and kills it."""
from __future__ import annotations

import errno
import functools
import os
import secrets
import signal
import time
from contextlib import suppress
from pathlib import Path

from mlab.core.sandbox.limits import Limits

_CGROUP_PREFIX = "mlab-"
CONTROLLERS = ("pids", "memory", "cpu", "cpuset")
_OPTIONAL = ("cpu", "cpuset")  # a slice's CPUs: affinity still holds the command where these cannot be made
CPU_PERIOD_US = 100_000


@functools.lru_cache(maxsize=1)
def cgroup_parents() -> dict[str, tuple[str, int]]:
    """controller (one of CONTROLLERS) -> (this process's cgroup folder in which to make children, version),
    for the controllers that can be used here (root, or a delegated cgroup v2 subtree)."""
    try:
        own_lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return {}
    own_v1: dict[str, str] = {}
    own_v2 = None
    for line in own_lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            own_v2 = parts[2]
        else:
            for controller in parts[1].split(","):
                own_v1[controller] = parts[2]
    found: dict[str, tuple[str, int]] = {}
    v2_mount = None
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point = _unescape(fields[3]), _unescape(fields[4])
        fstype, options = tail[0], tail[2].split(",")
        if fstype == "cgroup2":
            v2_mount = (root, mount_point)
        elif fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options and controller in own_v1 and controller not in found:
                    folder = _folder_of(root, mount_point, own_v1[controller])
                    if folder and os.access(folder, os.W_OK):
                        found[controller] = (folder, 1)
    if v2_mount and own_v2 is not None and len(found) < len(CONTROLLERS):
        folder = _folder_of(v2_mount[0], v2_mount[1], own_v2)
        if folder and os.access(folder, os.W_OK):
            for controller in CONTROLLERS:
                if controller not in found and _enable_v2(folder, controller):
                    found[controller] = (folder, 2)
    return found


def _unescape(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _folder_of(mount_root: str, mount_point: str, own: str) -> str | None:
    if mount_root == "/":
        rel = own
    elif own == mount_root or own.startswith(mount_root.rstrip("/") + "/"):
        rel = own[len(mount_root):]
    else:
        return None
    folder = os.path.join(mount_point, rel.lstrip("/"))
    return folder if os.path.isdir(folder) else None


def _enable_v2(folder: str, controller: str) -> bool:
    try:
        if controller not in Path(folder, "cgroup.controllers").read_text().split():
            return False
        if controller not in Path(folder, "cgroup.subtree_control").read_text().split():
            # refused (EBUSY) when this cgroup holds processes and is not the root
            Path(folder, "cgroup.subtree_control").write_text(f"+{controller}")
        return True
    except OSError:
        return False


class CommandCgroup:
    """A cgroup per command (one folder per controller hierarchy) bounding the processes and memory of its
    whole tree (and the CPUs of a slice), telling which bound was hit, and killing everything in it."""

    def __init__(self, folders: dict[str, tuple[str, int]]):
        self.folders = folders  # controller -> (folder, version)
        self.fds: list[int] = []

    @classmethod
    def create(cls, limits: Limits) -> CommandCgroup | None:
        # a quota only where the CPU set cannot say it: a fraction of a CPU, or fewer CPUs than the set has
        quota = limits.cpus if limits.cpus is not None and (
            not limits.cpu_set or limits.cpus < len(limits.cpu_set)) else None
        wanted = {"pids": limits.max_processes, "memory": limits.memory_bytes, "cpu": quota,
                  "cpuset": limits.cpu_set or None}
        parents = {c: p for c, p in cgroup_parents().items() if wanted.get(c) is not None}
        if not parents:
            return None
        name = f"{_CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        folders: dict[str, tuple[str, int]] = {}
        made = cls(folders)
        try:
            for parent in {p for p, _v in parents.values()}:
                _sweep_stale(parent)
            for controller, (parent, version) in parents.items():
                folder = os.path.join(parent, name)
                if not any(f == folder for f, _v in folders.values()):
                    os.mkdir(folder)
                folders[controller] = (folder, version)
                if controller in _OPTIONAL:
                    if not _cpu_bounds(controller, folder, version, parent, quota, limits.cpu_set or []):
                        del folders[controller]
                        if not any(f == folder for f, _v in folders.values()):
                            os.rmdir(folder)
                elif controller == "pids":
                    _write(os.path.join(folder, "pids.max"), str(limits.max_processes))
                elif version == 1:
                    _write(os.path.join(folder, "memory.limit_in_bytes"), str(limits.memory_bytes))
                else:
                    _write(os.path.join(folder, "memory.max"), str(limits.memory_bytes))
                    _write(os.path.join(folder, "memory.swap.max"), "0", required=False)
            if not folders:
                return None
            for path in made.join_files():
                made.fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            made.close_fds()
            made.remove()
            return None
        return made

    def join_files(self) -> list[str]:
        """The files a single-threaded process writes "0" into to join the cgroup. cgroup v1: `tasks`, which
        moves the writer's one thread without the kernel's global threadgroup lock: cgroup.procs (or a pid
        written from outside) takes it, and waits for an RCU grace period, several ms a command. v2 has only
        cgroup.procs."""
        return [os.path.join(folder, "tasks" if version == 1 else "cgroup.procs")
                for folder, version in sorted(set(self.folders.values()))]

    def join(self) -> None:
        """In the child before exec, single-threaded (as after fork): move itself into the cgroup."""
        for fd in self.fds:
            with suppress(OSError):
                os.write(fd, b"0")

    def close_fds(self) -> None:
        for fd in self.fds:
            with suppress(OSError):
                os.close(fd)
        self.fds = []

    def _read(self, controller: str, filename: str) -> str:
        entry = self.folders.get(controller)
        if entry is None:
            return ""
        try:
            return Path(entry[0], filename).read_text()
        except OSError:
            return ""

    def limit_hit(self) -> str | None:
        if _counter(self._read("pids", "pids.events"), "max") > 0:
            return "processes"
        version = self.folders.get("memory", ("", 0))[1]
        events = self._read("memory", "memory.oom_control" if version == 1 else "memory.events")
        if _counter(events, "oom_kill") > 0:
            return "memory"
        return None

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder, _v in set(self.folders.values()):
            try:
                with open(os.path.join(folder, "cgroup.procs")) as f:
                    found.update(int(line) for line in f if line.strip())
            except (OSError, ValueError):
                continue
        return found

    def kill(self) -> None:
        for folder, version in set(self.folders.values()):
            if version == 2 and _write(os.path.join(folder, "cgroup.kill"), "1", required=False):
                return
        me = os.getpid()
        for _round in range(200):  # members may fork while being killed; the process bound keeps this finite
            pids = self.pids() - {me}
            if not pids:
                return
            for pid in pids:
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def remove(self) -> None:
        for folder in {f for f, _v in self.folders.values()}:
            for attempt in range(50):  # exiting members leave the cgroup a moment after SIGKILL
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        break
                    if attempt == 10:
                        self.kill()
                    time.sleep(0.01)
        self.folders = {}


def _cpu_bounds(controller: str, folder: str, version: int, parent: str, quota: float | None,
               cpu_set: list[int]) -> bool:
    """Write a slice's CPU quota or CPU set into the command's cgroup; False where the kernel refuses it (a CPU
    outside this process's own cpuset, a controller in use elsewhere)."""
    if controller == "cpu" and quota is not None:
        us = max(1000, round(quota * CPU_PERIOD_US))  # the kernel's least quota is 1 ms
        if version == 1:
            return (_write(os.path.join(folder, "cpu.cfs_period_us"), str(CPU_PERIOD_US), required=False)
                    and _write(os.path.join(folder, "cpu.cfs_quota_us"), str(us), required=False))
        return _write(os.path.join(folder, "cpu.max"), f"{us} {CPU_PERIOD_US}", required=False)
    if controller == "cpuset" and cpu_set:
        if version == 1:  # a v1 cpuset takes no task until it has memory nodes: its parent's
            try:
                mems = Path(parent, "cpuset.mems").read_text().strip()
            except OSError:
                return False
            if not _write(os.path.join(folder, "cpuset.mems"), mems, required=False):
                return False
        return _write(os.path.join(folder, "cpuset.cpus"), ",".join(map(str, sorted(cpu_set))), required=False)
    return False


def _write(path: str, value: str, required: bool = True) -> bool:
    try:
        Path(path).write_text(value)
        return True
    except OSError:
        if required:
            raise
        return False


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            try:
                return int(parts[1])
            except ValueError:
                return 0
    return 0


def _sweep_stale(parent: str) -> None:
    """Remove cgroups left by harness processes that died before cleaning up."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(_CGROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        owner = name[len(_CGROUP_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or pid_alive(int(owner)):
            continue
        with suppress(OSError):
            os.rmdir(os.path.join(parent, name))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
