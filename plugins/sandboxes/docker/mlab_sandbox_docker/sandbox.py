"""`--sandbox docker`: agent code in a Docker container, for users with a Docker engine.

The same contract as the other sandboxes: the workspace and the sandbox home are mounted read-write at their
own paths, the Python environment that runs the code (wherever it lives, /tmp included) and the host's system
folders read-only, the task's hidden files not at all; a private /tmp, no network (unless the task declares it
needs one), no capabilities, a read-only root, bounded processes, memory, file size and CPU time, a REPL frozen
between actions (the engine's pause), and every container removed when its harness dies.

The image only supplies an empty root: MLAB_DOCKER_IMAGE, by default `mlab-empty`, which
`python -m mlab_sandbox_docker build-image` imports offline. Nothing is ever pulled.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import time

from mlab.core import ExecSpec, Sandbox, root_view
from mlab_sandbox_docker import cgroup, engine
from mlab_sandbox_docker.engine import BUILD_HINT, DEFAULT_IMAGE, IMAGE_VAR, build_image

__all__ = ["BUILD_HINT", "DEFAULT_IMAGE", "IMAGE_VAR", "DockerSandbox", "build_image", "command_for"]

# The engine writes these itself.
ENGINE_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
TMP_SIZE = 1 << 30
# The container's init: a shell that merges stderr into stdout (the engine carries them apart, and would lose
# their order), sets the address-space bound the engine has no flag for, then stays PID 1 (no exec) to reap
# orphans; a command that dies of signal N comes out as 128+N.
INIT = 'exec 2>&1; {ulimit}"$@"'
# How long popen waits for the engine to start the container (its time limit counts from then).
START_WAIT_S = 120.0


def _mount_option(kind: str, target: str, source: str | None = None, readonly: bool = False,
                  extra: str = "") -> list[str]:
    fields = [f"type={kind}"] + ([f"source={source}"] if source else []) + [f"target={target}"]
    # --mount is CSV: a field holding a comma or a quote is quoted.
    text = ",".join(f'"{f.replace(chr(34), chr(34) * 2)}"' if ("," in f or '"' in f) else f for f in fields)
    return ["--mount", text + (",readonly" if readonly else "") + extra]


def command_for(argv: list[str], spec: ExecSpec, name: str, label: str = "") -> list[str]:
    """The `docker run` command line that runs argv confined per spec in a container called name."""
    limits = spec.limits
    cmd = [engine.docker_exe() or "docker", "run", "--name", name, "--pull", "never",
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
           "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,mode=1777,size={TMP_SIZE}", "--log-driver", "none",
           "--user", f"{os.getuid()}:{os.getgid()}", "--ulimit", "core=0"]
    # No network but a loopback of its own, unless the task declares it needs the network at run time: then the
    # host's (whose host name comes with it).
    cmd += ["--network", "host"] if spec.network else ["--network", "none", "--hostname", "mlab-sandbox"]
    for group in sorted(set(os.getgroups()) - {os.getgid()}):
        cmd += ["--group-add", str(group)]
    if label:
        cmd += ["--label", label]
    if spec.stdin_pipe:
        cmd.append("-i")
    if limits.max_processes:
        cmd += ["--pids-limit", str(limits.max_processes)]
    if limits.memory_bytes:
        cmd += ["--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes)]
    if limits.file_size_bytes:
        cmd += ["--ulimit", f"fsize={limits.file_size_bytes}"]
    if limits.cpu_seconds:  # SIGXCPU at the soft limit tells what happened; at the hard one comes SIGKILL
        cmd += ["--ulimit", f"cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}"]
    view = root_view(argv, spec, named_too=True)
    # A top-level link (/lib64 -> usr/lib64 on merged-/usr systems) is mounted as what it points to: an empty
    # root has no such link, and the dynamic loader is looked up by that path.
    for path, _target in view.links:
        cmd += _mount_option("bind", path, os.path.realpath(path), readonly=True)
    for source, target in [*view.read_only, *view.late_read_only]:
        if target not in ENGINE_FILES:  # the engine mounts deeper paths later: a venv below /tmp stays visible
            cmd += _mount_option("bind", target, source, readonly=True)
    for device in view.devices:  # a folder (/dev/dri): every device in it
        cmd += ["--device", device]
    for path in view.writable:
        cmd += _mount_option("bind", path, path)
    for path in view.protected:
        cmd += _mount_option("bind", path, path, readonly=True)
    for path in view.masked_dirs:
        cmd += _mount_option("tmpfs", path, readonly=True, extra=",tmpfs-size=4096")
    for path in view.masked_files:
        cmd += _mount_option("bind", path, "/dev/null", readonly=True)
    workspace = view.writable[0]
    for key in spec.env:
        # Values come from the client's environment, not its command line; one the client needs for itself
        # (PATH) is given on the command line instead.
        clash = key in engine.CLIENT_VARS and os.environ.get(key) != spec.env[key]
        cmd += ["-e", f"{key}={spec.env[key]}" if clash else key]
    ulimit = f"ulimit -v {limits.memory_bytes // 1024} || exit 125; " if limits.memory_bytes else ""
    cmd += ["--workdir", workspace, engine.image(), "/bin/sh", "-c", INIT.format(ulimit=ulimit), "mlab-init"]
    return cmd + list(argv)


class _Container:
    """What the harness knows of one command's container."""

    def __init__(self, name: str):
        self.name = name
        self.cgroups: dict[str, tuple[str, int]] = {}
        self.looked = False  # the engine was asked where its cgroups are
        self.ended_hit: str | None = None
        self.ended_checked = False

    def wait_running(self, proc: subprocess.Popen) -> None:
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


class DockerSandbox(Sandbox):
    name = "docker"
    description = "a Docker container: the workspace read-write, the Python environment read-only, no network"
    confined = True  # the command sees only what is bound into its container
    signal_exit_codes = True  # the container's init shell exits with 128+N when the command dies of signal N

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return engine.probe(engine.engine_key(), engine.image())

    def limitations(self) -> list[str]:
        return []  # the engine bounds processes and memory itself, for root too

    def popen(self, argv: list[str], spec: ExecSpec) -> subprocess.Popen:
        name = f"mlab-{os.getpid()}-{secrets.token_hex(6)}"
        command = command_for(argv, spec, name, engine.harness_label())
        env = dict(spec.env)
        env.update(engine.client_env())
        # The limits go to the container; the client itself must not be starved by them.
        client = spec.model_copy(update={"limits": spec.limits.model_copy(update={
            "memory_bytes": None, "cpu_seconds": None, "file_size_bytes": None, "max_processes": None})})
        proc = self.spawn(command, client, env=env)
        box = _Container(name)
        proc.mlab_container = box  # type: ignore[attr-defined]
        try:
            box.wait_running(proc)
        except BaseException:
            self.kill(proc)
            raise
        return proc

    def check(self, proc: subprocess.Popen, spec: ExecSpec) -> str | None:
        hit = super().check(proc, spec)
        box: _Container | None = getattr(proc, "mlab_container", None)
        if hit or box is None:
            return hit
        return box.running_hit() if proc.poll() is None else box.end_hit()

    def kill(self, proc: subprocess.Popen) -> None:
        box: _Container | None = getattr(proc, "mlab_container", None)
        if box is not None and proc.poll() is None:
            engine.kill(box.name)
        super().kill(proc)

    def freeze(self, proc: subprocess.Popen) -> None:
        """The engine's pause: every process of the container stops at once (its freezer cgroup), which no
        signal to the client's process group would do."""
        box: _Container | None = getattr(proc, "mlab_container", None)
        if box is not None and proc.poll() is None:
            engine.pause(box.name)

    def thaw(self, proc: subprocess.Popen) -> None:
        box: _Container | None = getattr(proc, "mlab_container", None)
        if box is not None and proc.poll() is None:
            engine.unpause(box.name)

    def release(self, proc: subprocess.Popen) -> None:
        box: _Container | None = getattr(proc, "mlab_container", None)
        if box is not None:
            engine.remove_later(box.name)
            proc.mlab_container = None  # type: ignore[attr-defined]
        super().release(proc)
