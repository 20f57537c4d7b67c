"""`--sandbox docker`: agent code in a Docker container, for users with a Docker engine.

The same contract as the other sandboxes: the workspace and the sandbox home are mounted read-write at their
own paths, the Python environment that runs the code (wherever it lives, /tmp included) and the host's system
folders read-only, the task's hidden files not at all; a private /tmp, no network (unless the task declares it
needs one), no capabilities, a read-only root, bounded processes, memory, file size and CPU time, a REPL frozen
between actions (the engine's pause), and every container removed when its harness dies.

The image only supplies an empty root: MLAB_DOCKER_IMAGE, by default `mlab-empty`, which
`python -m mlab_sandbox_docker build-image` imports offline. Nothing is ever pulled.

One container per plan, one `docker exec` per command. Starting a container costs far more than an exec into a
running one, so a script runs in a container the sandbox keeps for its plan: the mounts of `root_view`, the
network setting, the limits, and the identity of every path mounted or covered (see plan_of). At most MAX_KEPT
are kept; each is removed by `close()`, when the sandbox is collected, or by the engine watchdog when the
harness dies (they carry its label). A changed plan gets a new container, and the old ones go once no command
runs in them: a path replaced on the host (even under the same inode number) would otherwise keep the old mount,
or lose a read-only or covering one (the kernel drops the mounts on a dentry unlinked in another namespace).
What keeps each guarantee of a container per command:

- Who runs what. The container's own process (PID 1: a `sleep` that ignores SIGCHLD, so the kernel reaps the
  orphans it inherits; a shell that reaps them beside its `sleep` where env cannot ignore a signal) runs as
  IDLE_UID, not the harness's user that commands run as: a command can neither signal nor trace it, so nothing
  of a command can live on inside it. The rest of the confinement is as before: no capabilities,
  no-new-privileges, a read-only root, the tmpfs /tmp, no network, the harness's label.
- Limits. The container's cgroup bounds memory and processes (plus PID 1's): one command at a time runs in a
  kept container (a busy one is never shared), so its bounds are the command's. File size and CPU time are the
  container's rlimits, which every exec'd process starts with (per process, as before); the writable memory
  (RLIMIT_DATA, not address space: CUDA reserves tens of GiB) is set by the exec's shell (`ulimit -d`). The bound
  a command hit is what the cgroup's counters gained while it ran.
- The end of a command. The exec's shell runs the command as its child, then SIGKILLs every process it may
  signal (`kill -9 -1`: the command's, never PID 1), so that nothing holds the output pipe and the exec ends at
  once. Then, and on a timeout or a broken limit, the harness stops and kills from the host every process of
  the container's cgroup that is not PID 1's user (each through a pidfd, checked to still be in the container),
  until none is left; if some stay, or the `docker exec` client does not end by itself (its exec might still
  start), the container is killed and not reused. Where the container's cgroup cannot be seen from here (a
  remote engine) none of this can be done: each command then gets a container of its own (`docker run`).
- A fresh /tmp. A mount needs capabilities, so before each command its shell empties, with the command's own
  rights and without crossing into another file system (the workspace, a venv or a covered path mounted below
  /tmp): /tmp, /dev/shm, /dev/mqueue, what a command made in /dev, and the System V IPC objects. Nothing of the
  previous command runs by then; folders it made unreadable are made readable first.
- The REPL (a lasting command, with a stdin pipe) gets a container of its own, started for it and removed with
  it, as before: freezing it between actions is the engine's pause of that container, which freezes no other
  command, and its /tmp is its own for its life.
"""
from __future__ import annotations

import functools
import os
import secrets
import signal
import subprocess
import threading
import time
import weakref

from mlab.core import Command, ExecSpec, ProcessCommand, ProcessSandbox, RootView, root_view
from mlab_sandbox_docker import cgroup, engine
from mlab_sandbox_docker.engine import BUILD_HINT, DEFAULT_IMAGE, IMAGE_VAR, build_image

__all__ = ["BUILD_HINT", "DEFAULT_IMAGE", "IMAGE_VAR", "DockerSandbox", "build_image", "command_for"]

# The engine writes these itself.
ENGINE_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
TMP_SIZE = 1 << 30
# The init of a container of one command (the REPL's): a shell that merges stderr into stdout (the engine carries
# them apart, and would lose their order), sets the address-space bound the engine has no flag for, then stays
# PID 1 (no exec) to reap orphans; a command that dies of signal N comes out as 128+N.
INIT = 'exec 2>&1; {ulimit}"$@"'
# How long popen waits for the engine to start the container (its time limit counts from then).
START_WAIT_S = 120.0

# A kept container's PID 1, one process where the host's env can ignore a signal: a sleep that ignores SIGCHLD,
# whose orphans the kernel then reaps itself. Else a shell that reaps them (wait) beside its sleep.
IDLE_ALONE = "exec /usr/bin/env --ignore-signal=CHLD sleep 2147483647"
IDLE_PAIR = "while :; do sleep 2147483647 & wait; done"
# Its user: not the harness's, whose uid the commands run as.
IDLE_UID = 65534 if os.getuid() != 65534 else 65533
MAX_KEPT = 2  # containers kept per sandbox (plans alternate rarely; each holds a shim and its last /tmp)
KILL_WAIT_S = 5.0  # a container whose commands' processes are not all gone by then is removed
CLIENT_GRACE_S = 2.0  # how long a killed command's `docker exec` may take to end by itself
# Device files and links of the engine's /dev that stay; anything else in /dev was made by a command.
ENGINE_DEV_LINKS = ("/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/ptmx", "/dev/core")
SCRATCH = "/tmp /dev/shm /dev/mqueue /dev"
# One command in a kept container, its argv the arguments: first what the previous command left is removed (its
# processes are gone by now), then the command runs as a child, then every process of the command's user here is
# killed.
# The tools by their full paths (the host's, mounted read-only): the command's PATH may name folders it can write.
FIND, CHMOD, IPCRM = "/usr/bin/find", "/bin/chmod", "/usr/bin/ipcrm"
EXEC = ("exec 2>&1\n"
        f"{FIND} {SCRATCH} -xdev -mindepth 1 -type d ! -perm -u=rwx -exec {CHMOD} u+rwx {{}} \\; 2>/dev/null\n"
        f"{FIND} {SCRATCH} -xdev -mindepth 1 ! -type c " + " ".join(f"! -path {p}" for p in ENGINE_DEV_LINKS)
        + " -delete 2>/dev/null\n"
        "for q in shm sem msg; do { read -r _ && read -r _; } </proc/sysvipc/$q 2>/dev/null && "
        f"{{ {IPCRM} -a 2>/dev/null; break; }}; done\n"
        '@ULIMIT@"$@"\n'
        "status=$?\n"
        "kill -9 -1 2>/dev/null\n"
        "exit $status\n")


@functools.lru_cache(maxsize=1)
def idle() -> tuple[str, int]:
    """(PID 1's script, how many processes it keeps): the container runs the host's env (coreutils 8.31+)."""
    try:
        alone = subprocess.run(["/usr/bin/env", "--ignore-signal=CHLD", "true"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        alone = False
    return (IDLE_ALONE, 1) if alone else (IDLE_PAIR, 2)


def _mount_option(kind: str, target: str, source: str | None = None, readonly: bool = False,
                  extra: str = "") -> list[str]:
    fields = [f"type={kind}"] + ([f"source={source}"] if source else []) + [f"target={target}"]
    # --mount is CSV: a field holding a comma or a quote is quoted.
    text = ",".join(f'"{f.replace(chr(34), chr(34) * 2)}"' if ("," in f or '"' in f) else f for f in fields)
    return ["--mount", text + (",readonly" if readonly else "") + extra]


def _confinement(view: RootView, spec: ExecSpec, idle_processes: int = 0) -> list[str]:
    """The `docker run` options every container of spec gets: privileges, network, bounds and mounts."""
    limits = spec.limits
    cmd = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
           "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,mode=1777,size={TMP_SIZE}", "--log-driver", "none",
           "--ulimit", "core=0"]
    # No network but a loopback of its own, unless the task declares it needs the network at run time: then the
    # host's (whose host name comes with it).
    cmd += ["--network", "host"] if spec.network else ["--network", "none", "--hostname", "mlab-sandbox"]
    for group in sorted(set(os.getgroups()) - {os.getgid()}):
        cmd += ["--group-add", str(group)]
    if limits.max_processes:
        cmd += ["--pids-limit", str(limits.max_processes + idle_processes)]
    if limits.memory_bytes:
        cmd += ["--memory", str(limits.memory_bytes)]
        if engine.swap_limit(engine.engine_key()):  # else the engine ignores it, with a warning in the output
            cmd += ["--memory-swap", str(limits.memory_bytes)]
    if limits.file_size_bytes:
        cmd += ["--ulimit", f"fsize={limits.file_size_bytes}"]
    if limits.cpu_seconds:  # SIGXCPU at the soft limit tells what happened; at the hard one comes SIGKILL
        cmd += ["--ulimit", f"cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}"]
    if limits.cpu_set:  # a run's slice (mlab.core.sandbox.limits); a quota only where the set cannot say it
        cmd += ["--cpuset-cpus", ",".join(map(str, limits.cpu_set))]
    if limits.cpus is not None and (not limits.cpu_set or limits.cpus < len(limits.cpu_set)):
        cmd += ["--cpus", f"{limits.cpus:g}"]
    # A top-level link (/lib64 -> usr/lib64 on merged-/usr systems) is mounted as what it points to: an empty
    # root has no such link, and the dynamic loader is looked up by that path.
    for path, _target in view.links:
        cmd += _mount_option("bind", path, os.path.realpath(path), readonly=True)
    for source, target in [*view.read_only, *view.late_read_only]:
        if target not in ENGINE_FILES:  # the engine mounts deeper paths later: a venv below /tmp stays visible
            cmd += _mount_option("bind", target, source, readonly=True)
    for device in view.devices:  # a folder (/dev/dri): every device in it
        if os.path.exists(device):  # one unplugged since the plan is left out, as bwrap's --dev-bind-try does
            cmd += ["--device", device]
    for path in view.writable:  # a working folder that is itself read-only (a submission being scored): one mount
        cmd += _mount_option("bind", path, path, readonly=path in view.protected)
    for path in view.protected:
        if path not in view.writable:
            cmd += _mount_option("bind", path, path, readonly=True)
    for path in view.masked_dirs:
        cmd += _mount_option("tmpfs", path, readonly=True, extra=",tmpfs-size=4096")
    for path in view.masked_files:
        cmd += _mount_option("bind", path, "/dev/null", readonly=True)
    return cmd


def _env_options(spec: ExecSpec) -> list[str]:
    cmd: list[str] = []
    for key in spec.env:
        # Values come from the client's environment, not its command line; one the client needs for itself
        # (PATH) is given on the command line instead.
        clash = key in engine.CLIENT_VARS and os.environ.get(key) != spec.env[key]
        cmd += ["-e", f"{key}={spec.env[key]}" if clash else key]
    return cmd


def _ulimit(spec: ExecSpec) -> str:
    memory = spec.limits.memory_bytes
    return f"ulimit -d {memory // 1024} || exit 125; " if memory else ""


def command_for(argv: list[str], spec: ExecSpec, name: str, label: str = "") -> list[str]:
    """The `docker run` command line that runs argv confined per spec in a container called name."""
    view = root_view(argv, spec, named_too=True)
    cmd = [engine.docker_exe() or "docker", "run", "--name", name, "--pull", "never", *_confinement(view, spec),
           "--user", f"{os.getuid()}:{os.getgid()}"]
    if label:
        cmd += ["--label", label]
    if spec.stdin_pipe:
        cmd.append("-i")
    cmd += _env_options(spec)
    cmd += ["--workdir", view.writable[0], engine.image(), "/bin/sh", "-c", INIT.format(ulimit=_ulimit(spec)),
            "mlab-init"]
    return cmd + list(argv)


def _client_env(spec: ExecSpec) -> dict[str, str]:
    """The environment of a docker client for spec: the command's (what `-e NAME` passes on) and the client's."""
    env = dict(spec.env)
    env.update(engine.client_env())
    return env


def _create(run_line: list[str], spec: ExecSpec) -> bool:
    """`docker create` with the options of run_line (a command_for line), in the environment its client gets
    (`-e NAME` takes the value from there); whether the container was made."""
    try:
        made = subprocess.run([run_line[0], "create", *run_line[2:]], stdin=subprocess.DEVNULL,
                              capture_output=True, env=_client_env(spec), timeout=START_WAIT_S)
    except (OSError, subprocess.SubprocessError):
        return False
    return made.returncode == 0


def _identity(path: str, settled: bool) -> tuple:
    """What must stay the same for a kept container's mount of path to still be the one a new container would
    make: the file itself, and for a path shown read-only or covered also its change time (a file replaced by
    a new one under a reused inode number is newer)."""
    try:
        st = os.lstat(path)
    except OSError:
        return (path, None)
    return (path, st.st_dev, st.st_ino, st.st_ctime_ns if settled else 0)


def plan_of(argv: list[str], spec: ExecSpec) -> tuple[tuple, list[str], str]:
    """(key, `docker run` options, workspace) of the kept container argv runs in per spec: commands whose keys
    are equal may share one."""
    view = root_view(argv, spec, named_too=True)
    options = _confinement(view, spec, idle()[1])
    writable = set(view.writable)
    paths = [p for pair in view.links for p in pair] + [p for pair in (*view.read_only, *view.late_read_only)
                                                         for p in pair]
    paths += [*view.devices, *view.writable, *view.protected, *view.masked_dirs, *view.masked_files]
    identities = tuple(_identity(p, p not in writable) for p in paths)
    key = (tuple(options), engine.image(), os.getuid(), os.getgid(), identities)
    return key, options, view.writable[0]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _uid_and_state(pid: int) -> tuple[int, str] | None:
    text = _read(f"/proc/{pid}/status")
    if text is None:
        return None
    uid, state = None, ""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
        elif line.startswith("State:"):
            state = line.split()[1]
    return (uid, state) if uid is not None else None


def _start_time(pid: int) -> str | None:
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return None if len(fields) < 20 or fields[0] in "ZX" else fields[19]


class _Kept:
    """A container kept for the commands of one plan: its name, its PID 1 and its cgroup as the host sees them."""

    def __init__(self, name: str, key: tuple, cid: str, pid: int, started: str,
                 folders: dict[str, tuple[str, int]], procs: str):
        self.name, self.key, self.cid, self.pid, self.started = name, key, cid, pid, started
        self.folders, self.procs = folders, procs
        self.busy = True
        self.broken = False  # not to be used again
        self.used = time.monotonic()

    @classmethod
    def start(cls, key: tuple, options: list[str]) -> tuple[_Kept | None, bool]:
        """(a running kept container, whether its cgroup is visible here at all)."""
        name = f"mlab-{os.getpid()}-{secrets.token_hex(6)}"
        made = engine.cli("run", "-d", "--name", name, "--pull", "never", *options,
                          "--user", f"{IDLE_UID}:{IDLE_UID}", "--label", engine.harness_label(), "--workdir", "/",
                          engine.image(), "/bin/sh", "-c", idle()[0], timeout=START_WAIT_S)
        if made is None or made.returncode != 0:
            engine.remove_later(name)  # `run -d` may have created it before failing
            return None, True
        info = engine.inspect(name) or {}
        state = info.get("State") or {}
        cid, pid = str(info.get("Id") or ""), int(state.get("Pid") or 0)
        text = _read(f"/proc/{pid}/cgroup") if pid > 0 else None
        started = _start_time(pid) if pid > 0 else None
        folders = cgroup.folders_of(pid) if text and cid and cid in text else {}
        procs = cgroup.procs_file(folders)
        if not state.get("Running") or started is None or procs is None or not os.path.exists(procs):
            engine.remove_later(name)
            # Running but out of sight: another machine's engine, or another PID namespace's.
            return None, not state.get("Running")
        return cls(name, key, cid, pid, started, folders, procs), True

    def alive(self) -> bool:
        return not self.broken and _start_time(self.pid) == self.started and os.path.exists(self.procs)

    def _in_container(self, pid: int) -> bool:
        text = _read(f"/proc/{pid}/cgroup")
        found = _uid_and_state(pid)
        return text is not None and self.cid in text and found is not None and found[0] != IDLE_UID

    def members(self) -> set[int] | None:
        """The live processes of commands in the container (None when its cgroup is gone)."""
        text = _read(self.procs)
        if text is None:
            return None
        found = set()
        for line in text.split():
            pid = int(line)
            state = _uid_and_state(pid)
            if state is not None and state[0] != IDLE_UID and state[1] not in "ZX":
                found.add(pid)
        return found

    def signal(self, pid: int, sig: int) -> None:
        """sig to pid if it is still a command's process of this container (the pidfd pins it while checked)."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except OSError:  # no pidfds (a kernel before 5.3): checked, then signalled by number
            try:
                if self._in_container(pid):
                    os.kill(pid, sig)
            except OSError:
                pass
            return
        try:
            if self._in_container(pid):
                signal.pidfd_send_signal(fd, sig)
        except OSError:
            pass
        finally:
            os.close(fd)

    def kill_commands(self) -> bool:
        """SIGKILL every command's process until none is left (or the container is gone); False when some stay.
        Stopped first: a shell whose child dies first would still print "Killed" into the output."""
        self.signal_commands(signal.SIGSTOP)
        deadline = time.monotonic() + KILL_WAIT_S
        delay = 0.001
        while True:
            pids = self.members()
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in pids:  # a process forking meanwhile is met in the next round; the bound keeps it finite
                self.signal(pid, signal.SIGKILL)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def signal_commands(self, sig: int) -> None:
        """sig to every command's process, until no new one appears (a stopped process cannot fork)."""
        done: set[int] = set()
        for _round in range(50):
            fresh = (self.members() or set()) - done
            if not fresh:
                return
            for pid in fresh:
                self.signal(pid, sig)
            done |= fresh

    def counts(self) -> tuple[int, int]:
        return cgroup.counts(self.folders)


class _Exec:
    """One command exec'd into a kept container, and the container's counters when it started."""

    def __init__(self, kept: _Kept):
        self.kept = kept
        self.since = kept.counts()
        self.hit: str | None = None


class _Container:
    """What the harness knows of one command's container."""

    def __init__(self, name: str):
        self.name = name
        self.cgroups: dict[str, tuple[str, int]] = {}
        self.looked = False  # the engine was asked where its cgroups are
        self.ended_hit: str | None = None
        self.ended_checked = False

    def wait_running(self, proc: Command) -> None:
        """Until the engine runs it (or the client gave up), so that start-up is not the command's time."""
        if engine.socket_path() is None:
            return  # no cheap way to ask: the time limit then includes the start-up
        deadline = time.monotonic() + START_WAIT_S
        delay = 0.01
        while proc.poll() is None and time.monotonic() < deadline:
            info = engine.inspect(self.name)
            state = (info or {}).get("State") or {}
            if state.get("Status") not in (None, "created"):
                self._found(state)
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)

    def _found(self, state: dict) -> None:
        self.looked = True
        if state.get("Running") and state.get("Pid"):
            self.cgroups = cgroup.folders_of(int(state["Pid"]))

    def running_hit(self) -> str | None:
        if not self.looked:
            info = engine.inspect(self.name)
            if info is None:
                return None
            self._found(info.get("State") or {})
        return cgroup.limit_hit(self.cgroups)

    def end_hit(self) -> str | None:
        """The bound an ended container hit: its cgroup is gone with it, the engine remembers an OOM kill."""
        if not self.ended_checked:
            self.ended_checked = True
            self.ended_hit = cgroup.limit_hit(self.cgroups)  # rarely still there, but exact when it is
            if self.ended_hit is None:
                info = engine.inspect(self.name)
                if info is not None and (info.get("State") or {}).get("OOMKilled"):
                    self.ended_hit = "memory"
        return self.ended_hit


class DockerCommand(ProcessCommand):
    """A command's `docker` client, and the container it runs in: a kept one (job) or its own (box)."""

    job: _Exec | None = None
    box: _Container | None = None


def _remove_all(kept: list[_Kept], owner: int, wait: bool) -> None:
    """Remove the kept containers (only in the process that made them: a forked child has copies)."""
    if os.getpid() != owner:
        return
    gone, kept[:] = list(kept), []
    if not wait:
        for box in gone:
            engine.remove_later(box.name)
        return
    threads = [threading.Thread(target=engine.remove, args=(box.name,), daemon=True) for box in gone]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)


class DockerSandbox(ProcessSandbox):
    name = "docker"
    description = "a Docker container: the workspace read-write, the Python environment read-only, no network"
    confined = True  # the command sees only what is bound into its container
    signal_exit_codes = True  # the container's shell exits with 128+N when the command dies of signal N

    def __init__(self) -> None:
        self._kept: list[_Kept] = []
        self._lock = threading.Lock()
        # False without the tools that empty /tmp, or once a kept container proved out of sight (a remote engine)
        self._reuse = all(os.access(tool, os.X_OK) for tool in (FIND, CHMOD, IPCRM))
        # At exit the engine watchdog removes them (threads can no longer be started then).
        weakref.finalize(self, _remove_all, self._kept, os.getpid(), False).atexit = False

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return engine.probe(engine.engine_key(), engine.image())

    def limitations(self) -> list[str]:
        return []  # the engine bounds processes and memory itself, for root too

    def close(self) -> None:
        """Remove the kept containers; a later command starts a new one."""
        with self._lock:
            kept = list(self._kept)
            self._kept.clear()
        _remove_all(kept, os.getpid(), True)

    def popen(self, argv: list[str], spec: ExecSpec) -> DockerCommand:
        if not spec.stdin_pipe and self._reuse:
            key, options, workspace = plan_of(argv, spec)
            kept = self._acquire(key, options)
            if kept is not None:
                return self._exec(kept, argv, spec, workspace)
        return self._run(argv, spec)

    def _client(self, command: list[str], spec: ExecSpec) -> DockerCommand:
        env = _client_env(spec)
        # The limits go to the container; the client itself must not be starved by them.
        client = spec.model_copy(update={"limits": spec.limits.model_copy(update={
            "memory_bytes": None, "cpu_seconds": None, "file_size_bytes": None, "max_processes": None,
            "cpus": None, "cpu_set": None})})
        return self.spawn(command, client, env=env, kind=DockerCommand)

    def _run(self, argv: list[str], spec: ExecSpec) -> DockerCommand:
        """A container of the command's own: the REPL's, or any command's on a remote engine. Made first (`docker
        create`), then started attached: what the engine warns of while making it (an engine that cannot bound
        swap, at every container with a memory bound) is not the command's output. Where making it fails,
        `docker run` makes the engine's answer the output, as the command's own error."""
        name = f"mlab-{os.getpid()}-{secrets.token_hex(6)}"
        line = command_for(argv, spec, name, engine.harness_label())
        if _create(line, spec):
            line = [line[0], "start", "--attach", *(["--interactive"] if spec.stdin_pipe else []), name]
        else:
            engine.remove_later(name)  # in case it was made before the failure
            name = f"mlab-{os.getpid()}-{secrets.token_hex(6)}"
            line = command_for(argv, spec, name, engine.harness_label())
        proc = self._client(line, spec)
        box = _Container(name)
        proc.box = box
        try:
            box.wait_running(proc)
        except BaseException:
            self.kill(proc)
            raise
        return proc

    def _exec(self, kept: _Kept, argv: list[str], spec: ExecSpec, workspace: str) -> DockerCommand:
        command = [engine.docker_exe() or "docker", "exec", "--user", f"{os.getuid()}:{os.getgid()}",
                   "--workdir", workspace, *_env_options(spec), kept.name,
                   "/bin/sh", "-c", EXEC.replace("@ULIMIT@", _ulimit(spec)), "mlab-exec", *argv]
        try:
            job = _Exec(kept)
            proc = self._client(command, spec)
        except BaseException:
            self._give_back(kept, retire=False)
            raise
        proc.job = job
        return proc

    def _acquire(self, key: tuple, options: list[str]) -> _Kept | None:
        """An idle kept container of this plan, else a new one (None: the command gets a container of its own)."""
        stale: list[_Kept] = []
        with self._lock:
            found = None
            for kept in sorted(self._kept, key=lambda k: -k.used):
                if kept.key == key and not kept.busy:
                    if kept.alive():
                        found = kept
                        break
                    stale.append(kept)
            for kept in stale:
                self._kept.remove(kept)
            if found is not None:
                found.busy, found.used = True, time.monotonic()
        for kept in stale:
            engine.remove_later(kept.name)
        if found is not None:
            return found
        made, visible = _Kept.start(key, options)
        if made is None:
            if not visible:
                self._reuse = False
            return None
        with self._lock:
            self._kept.append(made)
            idle = sorted((k for k in self._kept if not k.busy), key=lambda k: k.used)
            extra = idle[:max(0, len(self._kept) - MAX_KEPT)]
            for kept in extra:
                self._kept.remove(kept)
        for kept in extra:
            engine.remove_later(kept.name)
        return made

    def _give_back(self, kept: _Kept, retire: bool) -> None:
        with self._lock:
            kept.busy = False
            kept.used = time.monotonic()
            if retire or not kept.alive():
                kept.broken = True
                if kept in self._kept:
                    self._kept.remove(kept)
                retire = True
        if retire:
            engine.kill(kept.name)  # now: a command the harness lost track of must not outlive its action
            engine.remove_later(kept.name)

    def check(self, proc: Command, spec: ExecSpec) -> str | None:
        hit = super().check(proc, spec)
        if hit:
            return hit
        job = proc.job if isinstance(proc, DockerCommand) else None
        if job is not None:
            job.hit = job.hit or cgroup.limit_hit(job.kept.folders, job.since)
            return job.hit
        box = proc.box if isinstance(proc, DockerCommand) else None
        if box is None:
            return None
        return box.running_hit() if proc.poll() is None else box.end_hit()

    def kill(self, proc: Command) -> None:
        job = proc.job if isinstance(proc, DockerCommand) else None
        if job is not None:
            running = proc.poll() is None
            if not job.kept.kill_commands():
                # Processes out of the harness's reach (another user's, as under a rootless engine) or stuck:
                # this container goes, and later commands get containers of their own.
                job.kept.broken = True
                self._reuse = False
            if running:
                # The client ends by itself once the exec it started is dead. One that does not may not have
                # started it yet (the engine would start it later, unwatched): that container is not reused.
                try:
                    proc.wait(timeout=CLIENT_GRACE_S)
                except subprocess.TimeoutExpired:
                    job.kept.broken = True
        box = proc.box if isinstance(proc, DockerCommand) else None
        if box is not None and proc.poll() is None:
            engine.kill(box.name)
        super().kill(proc)

    def freeze(self, proc: Command) -> None:
        """The engine's pause: every process of the container stops at once (its freezer cgroup), which no
        signal to the client's process group would do. A command exec'd into a kept container (never lasting
        today) gets SIGSTOP in each of its processes instead: the container is not all its own."""
        job = proc.job if isinstance(proc, DockerCommand) else None
        if job is not None:
            job.kept.signal_commands(signal.SIGSTOP)
            return
        box = proc.box if isinstance(proc, DockerCommand) else None
        if box is not None and proc.poll() is None:
            engine.pause(box.name)

    def thaw(self, proc: Command) -> None:
        job = proc.job if isinstance(proc, DockerCommand) else None
        if job is not None:
            job.kept.signal_commands(signal.SIGCONT)
            return
        box = proc.box if isinstance(proc, DockerCommand) else None
        if box is not None and proc.poll() is None:
            engine.unpause(box.name)

    def release(self, proc: Command) -> None:
        if isinstance(proc, DockerCommand):
            job, box, proc.job, proc.box = proc.job, proc.box, None, None
            if job is not None:
                # 126: the engine could not start the exec (its folder cannot be entered: a command may have
                # made the folders leading to it unusable); a container that may be damaged is not reused.
                self._give_back(job.kept, retire=job.kept.broken or proc.returncode == 126)
            if box is not None:
                engine.remove_later(box.name)
        super().release(proc)
