"""JSON over HTTP on a unix socket, served from daemon threads: what the model endpoint and the LLM proxy
listen on. A unix socket is reached through the file system, so sandboxed code with no network reaches it
when the folder holding it is shown.

Whoever connects may be hostile: at most MAX_CONNECTIONS are served at once (more wait in the kernel's queue,
costing no thread), each waits at most IDLE_TIMEOUT_S for its next bytes, and anything malformed gets one line
of JSON and an HTTP error, never a traceback on the harness's output. The socket is made, opened up and removed
through its folder's descriptor, so a folder swapped for a link never sends any of it elsewhere."""
from __future__ import annotations

import contextlib
import http.server
import json
import os
import socketserver
import stat
import threading
from pathlib import Path
from typing import Any

from mlab.core.fs.dirfd import opened

MAX_CONNECTIONS = 32
IDLE_TIMEOUT_S = 30.0  # a connection that sends nothing for this long is closed


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that answers JSON and logs nothing (the harness records what it needs)."""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(IDLE_TIMEOUT_S)  # read at each connection, so a test may shorten it

    def address_string(self) -> str:  # a unix socket's peer has no host
        return "sandbox"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (OSError, ValueError):  # the peer went away or timed out
            self.close_connection = True
        except Exception as exc:  # a bug here must not print a traceback nor leave the caller waiting
            self.close_connection = True
            with contextlib.suppress(Exception):
                self._send(500, {"error": {"type": "harness_error", "message": f"{type(exc).__name__}: {exc}"}})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's malformed-request answers, as one line of JSON."""
        self.close_connection = True
        self.request_version = "HTTP/1.0"  # garbage parses as HTTP/0.9, which would get no status line
        text = " ".join((message or self.responses.get(code, ("error",))[0]).split())
        with contextlib.suppress(OSError):
            self._send(code, {"error": {"type": "invalid_request_error", "message": text}})

    def body(self, max_bytes: int) -> bytes:
        """The request's body; BodyError (an HTTP status and why) when it has no usable length."""
        if self.headers.get("Transfer-Encoding"):
            raise BodyError(411, "send the body with a Content-Length, not a Transfer-Encoding")
        given = (self.headers.get("Content-Length") or "").strip()
        if not given.isdigit():
            raise BodyError(411 if not given else 400, f"Content-Length {given[:40]!r} is not a byte count")
        length = int(given)
        if length == 0 or length > max_bytes:
            raise BodyError(413 if length else 400, f"request body of {length} bytes (at most {max_bytes})")
        return self.rfile.read(length)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class BodyError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # connections beyond the served ones wait in the kernel, not in threads

    def __init__(self, *args: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.closing = threading.Event()
        super().__init__(*args)

    def process_request(self, request: Any, client_address: Any) -> None:
        # the accepting thread waits for a slot: more connections queue in the kernel, none costs a thread
        while not self._slots.acquire(timeout=0.1):
            if self.closing.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # what a connection did wrong is its own affair: no traceback on the harness's output


class UnixSocketServer:
    """Serves `handler` on `socket_path` (made anew, open to any user: sandboxed code may run as another)
    from `start` until `stop`; `stop` removes the socket."""

    def __init__(self, socket_path: Path, handler: type[http.server.BaseHTTPRequestHandler], name: str):
        self.socket_path = socket_path
        self.handler = handler
        self.name = name
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._dir_fd: int | None = None

    def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self._dir_fd = os.open(self.socket_path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        name = self.socket_path.name
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self._dir_fd)
        # sun_path holds 108 bytes, and the folder's descriptor is what was checked: bind through it
        self._server = _Server(f"/proc/self/fd/{self._dir_fd}/{name}", self.handler)
        _open_to_all(self._dir_fd, name)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.closing.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._dir_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path.name, dir_fd=self._dir_fd)
            os.close(self._dir_fd)
            self._dir_fd = None


def _open_to_all(dir_fd: int, name: str) -> None:
    """chmod 666 the socket just bound, never what a link put in its place names: through an O_PATH descriptor
    of the entry itself."""
    with opened(os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)) as fd:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise OSError(f"{name} was replaced before it could be opened up")
        os.chmod(f"/proc/self/fd/{fd}", 0o666)

