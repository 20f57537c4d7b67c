"""The embedded default sandbox: a child process group with resource limits.

Where the kernel allows it (root, or unprivileged user namespaces) the command also gets its own mount and
PID namespaces: hidden paths are covered by an empty tmpfs, read-only paths are bind-mounted read-only (which
holds even for root, unlike file modes), /proc shows only the command's own processes, and every process the
command started dies with it.
"""
from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess

from .sandbox import ExecSpec, Sandbox

# Runs inside the new namespaces before the command: -h PATH hides, -r PATH makes read-only.
_CONFINE_SCRIPT = r"""
while [ "$1" != "--" ]; do
  case "$1" in
    -h) mount -t tmpfs -o size=4k,mode=000 mlab-hidden "$2" || exit 121 ;;
    -r) { mount --bind "$2" "$2" && mount -o remount,bind,ro "$2" "$2"; } || exit 122 ;;
  esac
  shift 2
done
shift
exec "$@"
"""


@functools.lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The unshare command line that works here, or None when namespaces are unavailable."""
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    base = [unshare, "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private"]
    candidates = [base] if os.geteuid() == 0 else []
    candidates.append(base[:1] + ["--map-root-user"] + base[1:])
    for prefix in candidates:
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return tuple(prefix)
    return None


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """If the harness is killed, its children must not live on and keep writing to the workspace."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _apply_limits(spec: ExecSpec) -> None:
    _die_with_parent()
    limits = spec.limits
    pairs = [
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NPROC, limits.max_processes),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in pairs:
        if value is not None:
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass


class LocalSandbox(Sandbox):
    name = "local"
    description = "child process group with rlimits; mount and PID namespaces where the kernel allows"

    @property
    def confined(self) -> bool:
        return namespace_prefix() is not None

    def popen(self, argv: list[str], spec: ExecSpec) -> subprocess.Popen:
        command = list(argv)
        prefix = namespace_prefix()
        if prefix is not None:
            mounts: list[str] = []
            for path in spec.hidden_paths:
                if os.path.isdir(path):
                    mounts += ["-h", str(path)]
            for path in spec.read_only_paths:
                if os.path.exists(path):
                    mounts += ["-r", str(path)]
            command = [*prefix, "/bin/sh", "-c", _CONFINE_SCRIPT, "mlab-confine", *mounts, "--", *argv]
        return subprocess.Popen(
            command,
            cwd=spec.cwd,
            env=spec.env,
            stdin=subprocess.PIPE if spec.stdin_pipe else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: _apply_limits(spec),
        )
