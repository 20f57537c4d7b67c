"""`--sandbox docker`: agent code in a Docker container, for users with a Docker engine.

The same contract as the other sandboxes: the workspace and the sandbox home are mounted read-write at their
own paths, the Python environment that runs the code and the host's system libraries read-only, the task's
hidden files not at all; no network, no capabilities, a read-only root, bounded processes, memory, file size
and CPU time. The image only supplies an empty root (MLAB_DOCKER_IMAGE, default debian:bookworm-slim).
"""
from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import sys

from mlab.core import ExecSpec, Sandbox, hookimpl

IMAGE_VAR = "MLAB_DOCKER_IMAGE"
DEFAULT_IMAGE = "debian:bookworm-slim"
SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "localtime",
               "ssl", "ca-certificates", "alternatives", "mime.types", "fonts")
_CLIENT_VARS = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "PATH")


def _docker() -> str | None:
    return shutil.which("docker")


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    exe = _docker()
    if exe is None:
        return False, "the docker command is not installed"
    try:
        probe = subprocess.run([exe, "version", "--format", "{{.Server.Version}}"], capture_output=True,
                               timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"docker does not answer: {exc}"
    if probe.returncode != 0:
        lines = probe.stderr.decode(errors="replace").strip().splitlines()
        return False, f"no Docker engine is reachable: {lines[-1] if lines else probe.returncode}"
    return True, ""


def _inside(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _python_dirs(python: str) -> list[str]:
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    if os.path.isabs(python):
        for exe in (python, os.path.realpath(python)):
            dirs.add(os.path.dirname(os.path.dirname(exe)))
    return sorted(d for d in dirs if d != "/" and os.path.isdir(d))


def command_for(argv: list[str], spec: ExecSpec, name: str) -> list[str]:
    limits = spec.limits
    cmd = [_docker() or "docker", "run", "--name", name, "--init", "--network", "none", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges", "--read-only", "--tmpfs", "/tmp:size=1g",
           "--user", f"{os.getuid()}:{os.getgid()}", "--ulimit", "core=0", "--log-driver", "none"]
    if spec.stdin_pipe:
        cmd.append("-i")
    if limits.max_processes:
        cmd += ["--pids-limit", str(limits.max_processes)]
    if limits.memory_bytes:
        cmd += ["--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes)]
    if limits.file_size_bytes:
        cmd += ["--ulimit", f"fsize={limits.file_size_bytes}"]
    if limits.cpu_seconds:
        cmd += ["--ulimit", f"cpu={limits.cpu_seconds}"]
    shown: list[str] = []

    def mount(path: str, mode: str, source: str | None = None) -> None:
        nonlocal cmd
        source = source or path
        cmd += ["--mount", f"type=bind,source={source},target={path}" + (",readonly" if mode == "ro" else "")]
        shown.append(os.path.realpath(path))

    for path in SYSTEM_DIRS:
        if os.path.isdir(path) and not os.path.islink(path):
            mount(path, "ro")
    for entry in ETC_ENTRIES:
        path = os.path.join("/etc", entry)
        if os.path.exists(path):  # a link (/etc/localtime) is mounted as what it points to
            mount(path, "ro", source=os.path.realpath(path))
    for path in _python_dirs(argv[0]) if argv else []:
        if not any(_inside(s, path) for s in shown):
            mount(path, "ro")
    workspace = os.path.realpath(spec.cwd)
    mount(workspace, "rw")
    for folder in spec.writable_paths:
        if os.path.isdir(folder) and not os.path.islink(folder):
            mount(os.path.realpath(folder), "rw")
    for protected in spec.read_only_paths:
        if (os.path.lexists(protected) and not os.path.islink(protected)
                and _inside(workspace, os.path.realpath(protected))):
            mount(os.path.realpath(protected), "ro")
    for hidden in spec.hidden_paths:
        real = os.path.realpath(hidden)
        if any(_inside(s, real) for s in shown):
            if os.path.isdir(real):
                cmd += ["--tmpfs", f"{real}:ro,size=4k"]
            elif os.path.exists(real):
                cmd += ["--mount", f"type=bind,source=/dev/null,target={real},readonly"]
    for key in spec.env:
        cmd += ["-e", key]  # the value comes from the client's environment, not the command line
    cmd += ["--workdir", workspace, os.environ.get(IMAGE_VAR, DEFAULT_IMAGE), *argv]
    return cmd


class DockerSandbox(Sandbox):
    name = "docker"
    description = "a Docker container: the workspace read-write, the Python environment read-only, no network"
    confined = True  # the command sees only what is bound into its container
    signal_exit_codes = True  # `docker run` exits with 128+N when the command dies of signal N

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return _probe()

    def limitations(self) -> list[str]:
        return []  # the engine bounds processes and memory itself

    def popen(self, argv: list[str], spec: ExecSpec) -> subprocess.Popen:
        name = f"mlab-{os.getpid()}-{secrets.token_hex(6)}"
        env = {k: os.environ[k] for k in _CLIENT_VARS if k in os.environ}
        env.setdefault("DOCKER_CONFIG", os.path.expanduser("~/.docker"))
        env.update(spec.env)
        # The limits go to the container; the client itself must not be starved by them.
        client = spec.model_copy(update={"limits": spec.limits.model_copy(update={
            "memory_bytes": None, "cpu_seconds": None, "file_size_bytes": None, "max_processes": None})})
        proc = self.spawn(command_for(argv, spec, name), client, env=env)
        proc.mlab_container = name  # type: ignore[attr-defined]
        return proc

    def _docker(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run([_docker() or "docker", *args], capture_output=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None

    def check(self, proc: subprocess.Popen, spec: ExecSpec) -> str | None:
        hit = super().check(proc, spec)
        if hit or proc.poll() is None:  # asking the engine every poll would be slow: only once it ended
            return hit
        name = getattr(proc, "mlab_container", None)
        result = self._docker("inspect", "--format", "{{.State.OOMKilled}}", name) if name else None
        if result is not None and result.stdout.strip() == b"true":
            return "memory"
        return None

    def kill(self, proc: subprocess.Popen) -> None:
        name = getattr(proc, "mlab_container", None)
        if name and proc.poll() is None:
            self._docker("kill", name)
        super().kill(proc)

    def release(self, proc: subprocess.Popen) -> None:
        name = getattr(proc, "mlab_container", None)
        if name:
            self._docker("rm", "-f", name)
            proc.mlab_container = None  # type: ignore[attr-defined]
        super().release(proc)


@hookimpl
def register_sandboxes(register):
    register(DockerSandbox)
