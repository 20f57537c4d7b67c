"""Talking to the Docker engine: its HTTP API over the unix socket where DOCKER_HOST names one (a few ms a call,
no client process), else the `docker` command. Also the offline base image and the watchdog that removes a
harness's containers when the harness dies."""
from __future__ import annotations

import functools
import http.client
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import threading
import urllib.parse

IMAGE_VAR = "MLAB_DOCKER_IMAGE"
DEFAULT_IMAGE = "mlab-empty"
HARNESS_LABEL = "mlab.harness"
BUILD_HINT = "python -m mlab_sandbox_docker build-image"
# What the docker client needs from the harness's environment (the command's own environment is spec.env).
CLIENT_VARS = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "PATH")


def image() -> str:
    return os.environ.get(IMAGE_VAR) or DEFAULT_IMAGE


def docker_exe() -> str | None:
    return shutil.which("docker")


def client_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in CLIENT_VARS if k in os.environ}
    env.setdefault("DOCKER_CONFIG", os.path.expanduser("~/.docker"))
    return env


def engine_key() -> tuple[str, str]:
    """Which engine the environment points at (probes and watchdogs are kept per engine)."""
    return os.environ.get("DOCKER_HOST", ""), os.environ.get("DOCKER_CONTEXT", "")


def socket_path() -> str | None:
    """The engine's unix socket when the API can be spoken directly; None means: go through the client."""
    host, context = engine_key()
    if context:
        return None  # a context may point anywhere, with TLS: the client knows how
    host = host or "unix:///var/run/docker.sock"
    return host[len("unix://"):] if host.startswith("unix://") else None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_file = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_file)
        self.sock = sock


def api(method: str, path: str, timeout: float = 30) -> tuple[int, bytes] | None:
    """(status, body) of one API call, or None when there is no socket to call or it failed."""
    where = socket_path()
    if where is None:
        return None
    conn = _UnixConnection(where, timeout)
    try:
        conn.request(method, path, headers={"Content-Length": "0"} if method == "POST" else {})
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def cli(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess | None:
    exe = docker_exe()
    if exe is None:
        return None
    try:
        return subprocess.run([exe, *args], input=stdin, capture_output=True, timeout=timeout, env=client_env())
    except (OSError, subprocess.TimeoutExpired):
        return None


def _last_line(data: bytes) -> str:
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def inspect(name: str) -> dict | None:
    """The engine's record of a container, or None when it has none (or cannot be asked)."""
    answer = api("GET", f"/containers/{name}/json")
    if answer is not None:
        status, body = answer
        return json.loads(body) if status == 200 else None
    result = cli("inspect", "--type", "container", "--format", "{{json .}}", name)
    if result is None or result.returncode != 0:
        return None
    return json.loads(result.stdout)


def kill(name: str) -> None:
    """SIGKILL to the container's init: the kernel then kills everything in its PID namespace."""
    if api("POST", f"/containers/{name}/kill") is None:
        cli("kill", name)


def pause(name: str) -> None:
    """Freeze every process of the container (the engine's freezer cgroup) until unpause."""
    if api("POST", f"/containers/{name}/pause") is None:
        cli("pause", name)


def unpause(name: str) -> None:
    if api("POST", f"/containers/{name}/unpause") is None:
        cli("unpause", name)


def remove(name: str) -> None:
    if api("DELETE", f"/containers/{name}?force=1") is None:
        cli("rm", "-f", name)


def remove_later(name: str) -> None:
    """Remove a container that has ended without making the harness wait; should the harness die first, its
    watchdog removes it."""
    threading.Thread(target=remove, args=(name,), daemon=True, name=f"docker-rm-{name}").start()


@functools.lru_cache(maxsize=16)
def probe(key: tuple[str, str], wanted: str) -> tuple[bool, str]:
    """(usable, why not) for engine key and image wanted."""
    if docker_exe() is None:
        return False, "the docker command is not installed (Debian/Ubuntu: apt-get install docker.io)"
    answer = api("GET", f"/images/{urllib.parse.quote(wanted, safe='/:@')}/json", timeout=20)
    if answer is not None:
        found = answer[0] == 200
        missing = answer[0] == 404
    else:
        result = cli("image", "inspect", "--format", "{{.Id}}", wanted, timeout=20)
        if result is None:
            return False, "the docker command does not answer"
        found = result.returncode == 0
        missing = b"No such image" in result.stderr
        if not found and not missing:
            return False, f"no Docker engine is reachable: {_last_line(result.stderr) or result.returncode}"
    if found:
        return True, ""
    if missing:
        return False, (f"the Docker engine has no image {wanted}: make the empty root it needs (offline) with "
                       f"`{BUILD_HINT}`, or set {IMAGE_VAR} to an image of yours")
    version = cli("version", "--format", "{{.Server.Version}}", timeout=20)
    why = _last_line(version.stderr) if version is not None else "the docker command does not answer"
    return False, f"no Docker engine is reachable: {why or 'no answer on ' + str(socket_path())}"


@functools.lru_cache(maxsize=16)
def swap_limit(key: tuple[str, str]) -> bool:
    """Whether engine `key` can bound swap. One that cannot (cgroup v1 without swap accounting; v2 with the
    daemon in the root cgroup) ignores --memory-swap and says so on the client's stderr, which is the command's
    output. Unknown: True, as the engine decides then."""
    answer = api("GET", "/info", timeout=20)
    if answer is not None and answer[0] == 200:
        try:
            return bool(json.loads(answer[1]).get("SwapLimit", True))
        except ValueError:
            return True
    result = cli("info", "--format", "{{.SwapLimit}}", timeout=20)
    return result is None or result.returncode != 0 or result.stdout.strip() != b"false"


def empty_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass
    return buffer.getvalue()


def build_image(name: str = DEFAULT_IMAGE) -> str:
    """Import an empty root as image name (nothing is pulled: the sandbox mounts the host's system folders).
    Returns the image id; raises RuntimeError with the engine's reason."""
    result = cli("import", "--message", "mlab: an empty root for the docker sandbox", "-", name, stdin=empty_tar())
    if result is None:
        raise RuntimeError("the docker command is not installed or does not answer")
    if result.returncode != 0:
        raise RuntimeError(_last_line(result.stderr) or f"docker import exited {result.returncode}")
    probe.cache_clear()
    return result.stdout.decode().strip()


# The watchdog: it waits for end of file on a pipe only the harness holds, which comes when the harness exits
# however it dies, then removes the harness's containers (twice: one may have been starting).
_WATCHDOG = """
while read -r _; do :; done
for round in 1 2; do
  ids=$("$0" ps -aq --filter "label=$1")
  [ -n "$ids" ] && "$0" rm -f $ids >/dev/null 2>&1
  [ "$round" = 2 ] || sleep 2
done
"""
_watchdogs: dict[tuple, str] = {}
_watchdog_lock = threading.Lock()


def harness_label() -> str:
    """label=value carried by every container of this harness process; its watchdog is started on first use."""
    key = (os.getpid(), *engine_key())
    with _watchdog_lock:
        label = _watchdogs.get(key)
        if label is not None:
            return label
        label = f"{HARNESS_LABEL}={os.getpid()}-{secrets.token_hex(4)}"
        exe = docker_exe() or "docker"
        read_end, write_end = os.pipe()  # both ends close-on-exec: no other child of the harness holds it
        try:
            subprocess.Popen(["/bin/sh", "-c", _WATCHDOG, exe, label], stdin=read_end, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=client_env(), start_new_session=True)
        except OSError:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        _watchdog_fds.append(write_end)  # kept open for the life of this process
        _watchdogs[key] = label
        return label


_watchdog_fds: list[int] = []
