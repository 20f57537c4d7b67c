"""JSON over HTTP on a unix socket, served from a daemon thread: what the model endpoint and the LLM proxy
listen on. A unix socket is reached through the file system, so sandboxed code with no network reaches it
when the folder holding it is shown."""
from __future__ import annotations

import http.server
import json
import os
import socketserver
import threading
from pathlib import Path
from typing import Any

SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; a longer path is bound through /proc/self/fd


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that answers JSON and logs nothing (the harness records what it needs)."""

    def address_string(self) -> str:  # a unix socket's peer has no host
        return "sandbox"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


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
        folder = self.socket_path.parent
        folder.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(self.socket_path):
            self.socket_path.unlink()
        address = str(self.socket_path)
        if len(address.encode()) > SOCKET_PATH_MAX:
            self._dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            address = f"/proc/self/fd/{self._dir_fd}/{self.socket_path.name}"
        self._server = _Server(address, self.handler)
        os.chmod(self.socket_path, 0o666)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        try:
            self.socket_path.unlink()
        except OSError:
            pass
