"""The local web server of `mlab view`: one page, the viewer's script and style (core/view/assets.py) and two JSON
endpoints the page polls.

Bound to 127.0.0.1 only. A URL never names a file: runs are asked for by their id in the catalog (a path
relative to the viewed folder, looked up among the runs found there), so no URL reaches outside it. Everything
is served with a Content-Security-Policy allowing only the viewer's own script and style, and requests whose
Host is not this server's are refused (a web page elsewhere cannot read runs through DNS rebinding).
"""
from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mlab.core.run.trace import json_safe
from mlab.core.view import assets
from mlab.core.view.runs import Catalog

HOST = "127.0.0.1"
POLL_MS = 1000  # how often the page asks for news
PAGE_FILE = "page.html"
CSP = f"{assets.CSP}; frame-ancestors 'none'"


class _Handler(BaseHTTPRequestHandler):
    server: ViewerHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a request a second per open page is not news

    def do_GET(self) -> None:
        if self.headers.get("Host") not in self.server.allowed_hosts:
            return self._send(HTTPStatus.FORBIDDEN, b"unknown host\n", "text/plain")
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            if url.path == "/":
                return self._send(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8")
            if url.path[1:] in self.server.files:
                return self._send(HTTPStatus.OK, self.server.files[url.path[1:]], assets.TYPES[url.path[1:]])
            if url.path == "/api/runs":
                return self._json(self.server.catalog.runs())
            if url.path == "/api/run":
                detail = self.server.catalog.run(query.get("id", ""), _int(query.get("have_steps")),
                                                 _int(query.get("have_calls")), _float(query.get("started")))
                if detail is None:
                    return self._json({"error": "no such run"}, HTTPStatus.NOT_FOUND)
                return self._json(detail)
        except Exception as exc:  # one bad run folder must not take the viewer down
            return self._json({"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.INTERNAL_SERVER_ERROR)
        return self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _json(self, value: object, status: HTTPStatus = HTTPStatus.OK) -> None:
        body = json.dumps(json_safe(value, limit=None), allow_nan=False).encode()
        self._send(status, body, "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(body)


def _int(text: str | None) -> int:
    try:
        return max(0, int(text or 0))
    except ValueError:
        return 0


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


class ViewerHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    catalog: Catalog
    page: bytes
    files: dict[str, bytes]  # the viewer's script and style by name
    allowed_hosts: frozenset[str]


class Viewer:
    """`mlab view`'s server for the runs under root; port 0 picks a free one."""

    def __init__(self, root: Path, port: int = 0):
        self.httpd = ViewerHTTPServer((HOST, port), _Handler)
        self.port = self.httpd.server_address[1]
        self.httpd.catalog = Catalog(root)
        self.httpd.page = assets.read(PAGE_FILE).replace(b"%POLL_MS%", str(POLL_MS).encode())
        self.httpd.files = {name: assets.read(name) for name in assets.TYPES}
        self.httpd.allowed_hosts = frozenset({f"{HOST}:{self.port}", f"localhost:{self.port}"})
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def start(self) -> Viewer:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="mlab-view", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
        self.httpd.server_close()

    def __enter__(self) -> Viewer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
