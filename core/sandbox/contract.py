"""The sandbox contract: start a command confined to a workspace, and run it to the end under limits.

Every sandbox runs a command in the workspace with limits, streams its output, kills the whole process tree
on a timeout or a broken limit, and reports the exit status and which limit was hit. The base class gives
subclasses `spawn` (a new session with rlimits, a per-command cgroup where the kernel allows, death with the
harness) and `run` (the loop that watches a command to its end).
"""
from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import secrets
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field


class Limits(BaseModel):
    timeout_s: float = 3600.0
    memory_bytes: int | None = 16 * 2**30  # address space per process; also the whole tree's memory in a cgroup
    cpu_seconds: int | None = None
    file_size_bytes: int | None = 4 * 2**30
    # Processes and threads of the whole tree; a cgroup's pids.max where one can be made (RLIMIT_NPROC binds no
    # root and counts every process of the user, so it is only a fallback).
    max_processes: int | None = 4096
    output_bytes: int = 1_000_000
    disk_bytes: int | None = None  # how much the command may add to the used space of the workspace's disk
    min_free_disk_bytes: int | None = 100 * 2**20  # the command is stopped when it leaves less free than this


class ExecSpec(BaseModel):
    """Everything a sandbox needs to start one command."""

    cwd: Path
    env: dict[str, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    hidden_paths: list[Path] = Field(default_factory=list)  # must not be visible to the command
    read_only_paths: list[Path] = Field(default_factory=list)  # visible but not writable
    writable_paths: list[Path] = Field(default_factory=list)  # besides cwd, e.g. the sandbox home
    stdin_pipe: bool = False


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
    description: str = ""
    # True when the command runs under an init of its own that exits with 128+N when the command dies of
    # signal N: such codes are reported as -N, the way Popen does.
    signal_exit_codes: bool = False

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

    @abstractmethod
    def popen(self, argv: list[str], spec: ExecSpec) -> subprocess.Popen:
        """Start argv confined per spec, stdout and stderr merged into one pipe."""

    def spawn(self, command: list[str], spec: ExecSpec, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start command in a new session with spec's rlimits, in a cgroup of its own where one can be made,
        getting SIGKILL when the harness dies. For subclasses' `popen`."""
        cgroup = CommandCgroup.create(spec.limits)
        nproc = None if cgroup is not None else _nproc_fallback(spec.limits.max_processes)
        parent = os.getpid()

        def prepare() -> None:  # in the child, before exec
            if cgroup is not None:
                cgroup.join()  # first: every later fork is counted
            _apply_limits(spec.limits, nproc)
            _die_with(parent)

        try:
            proc = subprocess.Popen(
                command, cwd=spec.cwd, env=spec.env if env is None else env,
                stdin=subprocess.PIPE if spec.stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=prepare)
        except BaseException:
            if cgroup is not None:
                cgroup.close_fds()
                cgroup.remove()
            raise
        if cgroup is not None:
            cgroup.close_fds()
        proc.mlab_cgroup = cgroup  # type: ignore[attr-defined]
        proc.mlab_disk = _disk_usage(spec.cwd)  # type: ignore[attr-defined]
        return proc

    def check(self, proc: subprocess.Popen, spec: ExecSpec) -> str | None:
        """A limit the running command has broken (it is then killed), or None."""
        cgroup = getattr(proc, "mlab_cgroup", None)
        if cgroup is not None:
            hit = cgroup.limit_hit()
            if hit:
                return hit
        return _disk_limit_hit(getattr(proc, "mlab_disk", None), spec)

    def kill(self, proc: subprocess.Popen) -> None:
        """Kill the command and everything it started."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        cgroup = getattr(proc, "mlab_cgroup", None)
        if cgroup is not None:
            cgroup.kill()

    def release(self, proc: subprocess.Popen) -> None:
        """Free what the command needed once it is dead (its cgroup)."""
        cgroup = getattr(proc, "mlab_cgroup", None)
        if cgroup is not None:
            cgroup.remove()
            proc.mlab_cgroup = None  # type: ignore[attr-defined]

    def run(self, argv: list[str], spec: ExecSpec,
            on_output: Callable[[bytes], None] | None = None) -> ExecResult:
        return run_to_end(self, argv, spec, on_output)


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
        if not chunk:
            return
        if len(chunk) >= self.tail_cap:  # a big chunk replaces the whole tail at once
            self.dropped += len(self.tail) + len(chunk) - self.tail_cap
            self.tail = bytearray(chunk[len(chunk) - self.tail_cap:]) if self.tail_cap else bytearray()
            return
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
# How often a running command's cgroup and disk are looked at.
_POLL_S = 0.1


def run_to_end(sandbox: Sandbox, argv: list[str], spec: ExecSpec,
               on_output: Callable[[bytes], None] | None = None) -> ExecResult:
    started = time.monotonic()
    proc = sandbox.popen(argv, spec)
    output = _CappedOutput(spec.limits.output_bytes)
    reader = threading.Thread(target=_pump, args=(proc.stdout, output, on_output), daemon=True)
    reader.start()
    limit_hit = None
    deadline = started + spec.limits.timeout_s
    try:
        while True:
            try:
                proc.wait(timeout=max(0.0, min(_POLL_S, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= deadline:
                limit_hit = "timeout"
                break
            limit_hit = sandbox.check(proc, spec)
            if limit_hit:
                break
    finally:
        if limit_hit is None:
            reader.join(timeout=_DRAIN_GRACE_S)  # output still in the pipe; no waiting once a limit struck
        sandbox.kill(proc)  # also reaps daemonized children still holding the pipe
        if proc.poll() is None:
            proc.wait()
        reader.join(timeout=_DRAIN_GRACE_S)
        if proc.stdout and not reader.is_alive():  # closing under a blocked reader would deadlock
            proc.stdout.close()
        after = sandbox.check(proc, spec) if limit_hit is None else None  # e.g. the kernel's OOM kill
        sandbox.release(proc)
    text = output.text()
    code = proc.returncode
    if sandbox.signal_exit_codes and code is not None and 128 < code <= 128 + 64:
        code = 128 - code
    if limit_hit is None:
        limit_hit = after or _limit_from_outcome(code, text)
    if output.dropped and limit_hit is None:
        limit_hit = "output"
    return ExecResult(
        exit_code=code,
        output=text,
        output_truncated=bool(output.dropped),
        limit_hit=limit_hit,
        duration_s=time.monotonic() - started,
    )


def _pump(stream, output: _CappedOutput, on_output: Callable[[bytes], None] | None) -> None:
    try:
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            output.feed(chunk)
            if on_output is not None:
                try:
                    on_output(chunk)
                except Exception:  # an observer's bug must not stop the command's output
                    on_output = None
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


# ---- resolving --sandbox ------------------------------------------------------------------------

AUTO = "auto"
AUTO_ORDER = ("bwrap", "local")  # what `--sandbox auto` tries, strongest first


def resolve_sandbox(registry: Any, name: str) -> type[Sandbox]:
    """The sandbox class for a `--sandbox` name; `auto` is the first of AUTO_ORDER usable here."""
    from mlab.core.errors import MlabError

    if name != AUTO:
        cls = registry.get("sandboxes", name)
        ok, why = cls.available()
        if not ok:
            raise MlabError(f"sandbox {name!r} is not available here: {why}")
        return cls
    reasons = []
    for candidate in AUTO_ORDER:
        cls = registry.items["sandboxes"].get(candidate)
        if cls is None:
            reasons.append(f"{candidate}: not installed")
            continue
        ok, why = cls.available()
        if ok:
            return cls
        reasons.append(f"{candidate}: {why}")
    raise MlabError(f"no sandbox is available here ({'; '.join(reasons)})")


# ---- limits in the child ------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
try:  # looked up here: loading a library between fork and exec can deadlock
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def _apply_limits(limits: Limits, nproc: int | None) -> None:
    pairs = [
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in pairs:
        if value is not None:
            # CPU: SIGXCPU at the soft limit tells what happened; at the hard one the kernel sends SIGKILL.
            hard = value + 1 if which == resource.RLIMIT_CPU else value
            try:
                resource.setrlimit(which, (value, hard))
            except (ValueError, OSError):
                pass


def _die_with(parent: int) -> None:
    """In the child before exec: get SIGKILL when the harness dies, so a killed run leaves no script running
    (it would write into a workspace that resuming has just restored)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the harness died before prctl took effect
            os._exit(1)


def _nproc_fallback(max_processes: int | None) -> int | None:
    """RLIMIT_NPROC when no cgroup can count the tree: it counts every task of the user, so the user's
    current tasks are added. Root is not bound by it at all."""
    if max_processes is None or os.geteuid() == 0:
        return None
    uid = str(os.geteuid())
    tasks = 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if fields.get("Uid", "").split()[:1] == [uid]:
                tasks += int(fields.get("Threads", "1"))
        except (OSError, ValueError):
            continue
    return tasks + max_processes


# ---- disk ---------------------------------------------------------------------------------------

def _disk_usage(path: Path) -> tuple[int, int] | None:
    """(used, free) bytes of the file system holding path; free as an unprivileged user sees it."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_bavail * st.f_frsize


def _disk_limit_hit(start: tuple[int, int] | None, spec: ExecSpec) -> str | None:
    limits = spec.limits
    if start is None or (limits.disk_bytes is None and limits.min_free_disk_bytes is None):
        return None
    now = _disk_usage(spec.cwd)
    if now is None:
        return None
    grown = now[0] - start[0]
    if limits.disk_bytes is not None and grown > limits.disk_bytes:
        return "disk"
    # Only a command that is itself using space is stopped for a disk that was nearly full already.
    if limits.min_free_disk_bytes is not None and now[1] < limits.min_free_disk_bytes and now[1] < start[1]:
        return "disk"
    return None


# ---- cgroups ------------------------------------------------------------------------------------

_CGROUP_PREFIX = "mlab-"


@functools.lru_cache(maxsize=1)
def cgroup_parents() -> dict[str, tuple[str, int]]:
    """controller ('pids', 'memory') -> (this process's cgroup folder in which to make children, version),
    for the controllers that can be used here (root, or a delegated cgroup v2 subtree)."""
    try:
        with open("/proc/self/cgroup") as f:
            own_lines = f.read().splitlines()
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
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
            for controller in ("pids", "memory"):
                if controller in options and controller in own_v1 and controller not in found:
                    folder = _folder_of(root, mount_point, own_v1[controller])
                    if folder and os.access(folder, os.W_OK):
                        found[controller] = (folder, 1)
    if v2_mount and own_v2 is not None and len(found) < 2:
        folder = _folder_of(v2_mount[0], v2_mount[1], own_v2)
        if folder and os.access(folder, os.W_OK):
            for controller in ("pids", "memory"):
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
        with open(os.path.join(folder, "cgroup.controllers")) as f:
            if controller not in f.read().split():
                return False
        with open(os.path.join(folder, "cgroup.subtree_control")) as f:
            if controller in f.read().split():
                return True
        with open(os.path.join(folder, "cgroup.subtree_control"), "w") as f:
            f.write(f"+{controller}")  # refused (EBUSY) when this cgroup holds processes and is not the root
        return True
    except OSError:
        return False


class CommandCgroup:
    """A cgroup per command (one folder per controller hierarchy) bounding the processes and memory of its
    whole tree, telling which bound was hit, and killing everything in it."""

    def __init__(self, folders: dict[str, tuple[str, int]]):
        self.folders = folders  # controller -> (folder, version)
        self.fds: list[int] = []

    @classmethod
    def create(cls, limits: Limits) -> "CommandCgroup | None":
        wanted = {"pids": limits.max_processes, "memory": limits.memory_bytes}
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
                if controller == "pids":
                    _write(os.path.join(folder, "pids.max"), str(limits.max_processes))
                elif version == 1:
                    _write(os.path.join(folder, "memory.limit_in_bytes"), str(limits.memory_bytes))
                else:
                    _write(os.path.join(folder, "memory.max"), str(limits.memory_bytes))
                    _write(os.path.join(folder, "memory.swap.max"), "0", required=False)
            for folder in {f for f, _v in folders.values()}:
                made.fds.append(os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            made.close_fds()
            made.remove()
            return None
        return made

    def join(self) -> None:
        """In the child before exec: move itself into the cgroup."""
        for fd in self.fds:
            try:
                os.write(fd, b"0")
            except OSError:
                pass

    def close_fds(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []

    def _read(self, controller: str, filename: str) -> str:
        entry = self.folders.get(controller)
        if entry is None:
            return ""
        try:
            with open(os.path.join(entry[0], filename)) as f:
                return f.read()
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
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
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


def _write(path: str, value: str, required: bool = True) -> bool:
    try:
        with open(path, "w") as f:
            f.write(value)
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
        if not owner.isdigit() or _alive(int(owner)):
            continue
        try:
            os.rmdir(os.path.join(parent, name))
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
