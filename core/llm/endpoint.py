"""The model endpoint a program agent calls, on a unix socket: OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages (mlab.core.llm.protocols), each request answered by a callback of the harness (the run's LLM
client) whatever model it names. A unix socket is reached through the file system, so a sandbox with no network
reaches it when the folder holding it is shown; the forwarder (endpoint_forwarder.py, run inside the sandbox)
makes it an http://127.0.0.1 URL there, as agents expect one.

Tools, tool calls, tool results and images go through; a stream request gets the whole answer as the protocol's
events, sent at once. The caller may be hostile: a malformed request (its length, its JSON, text that is not
Unicode, a parameter out of range) is answered with one line and a 4xx before anything reaches the model.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mlab.core.llm.protocols import CHAT, ChatRequest, EndpointError, Protocol, count_tokens, protocol_for
from mlab.core.llm.unix_http import BodyError, JsonHandler, UnixSocketServer
from mlab.core.models import Completion

MAX_BODY_BYTES = 8 * 2**20  # a request larger than this is refused unread (each connection may send one)
SOCKET_NAME = "llm.sock"
MODEL_NAME = "mlab"  # what the endpoint lists; any name a request gives gets the run's model

Serve = Callable[[ChatRequest], Completion]


class _Handler(JsonHandler):
    protocol_version = "HTTP/1.1"
    serve: Serve  # set on the per-endpoint subclass

    def _error(self, exc: EndpointError, protocol: Protocol) -> None:
        # x-should-retry: false stops the OpenAI and Anthropic clients' own retries (a spent budget stays spent)
        self._send(exc.status, protocol.error(exc), {"x-should-retry": "true" if exc.retry else "false"})

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "has_more": False, "data": [
                {"id": MODEL_NAME, "object": "model", "type": "model", "owned_by": "mlab", "display_name": "mlab"}]})
        else:
            self._send(404, {"error": {"message": f"no such endpoint {self.path[:200]}"}})

    def do_POST(self) -> None:
        bare = self.path.split("?", 1)[0].rstrip("/")
        protocol = protocol_for(self.path) or CHAT
        try:
            if protocol_for(self.path) is None and not bare.endswith("/messages/count_tokens"):
                self.close_connection = True
                raise EndpointError(404, "not_found", f"no such endpoint {self.path[:200]}; POST /v1/chat/completions, "
                                                      "/v1/responses or /v1/messages")
            try:
                raw = self.body(MAX_BODY_BYTES)
            except BodyError as exc:
                self.close_connection = True
                raise EndpointError(exc.status, "invalid_request_error", str(exc)) from None
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise EndpointError(400, "invalid_request_error",
                                    f"the body is not JSON: {' '.join(str(exc).split())[:200]}") from None
            if bare.endswith("/messages/count_tokens"):
                self._send(200, count_tokens(body))
                return
            request = protocol.parse(body)
            completion = type(self).serve(request)
        except EndpointError as exc:
            self._error(exc, protocol)
            return
        model = completion.model or MODEL_NAME
        if not request.stream:
            self._send(200, protocol.reply(completion, model, request))
            return
        data = protocol.stream(completion, model, request)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ModelEndpoint:
    """The endpoint's server in a thread while the block runs; `socket_path` is where it listens."""

    def __init__(self, serve: Serve, folder: Path):
        self.serve = serve
        self.folder = Path(folder)
        self.socket_path = self.folder / SOCKET_NAME
        handler = type("EndpointHandler", (_Handler,), {"serve": staticmethod(serve)})
        self._server = UnixSocketServer(self.socket_path, handler, "mlab-model-endpoint")

    def __enter__(self) -> ModelEndpoint:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


def forwarder_source() -> str:
    """The forwarder's code, written beside the program for the sandbox's Python to run (the harness's own
    packages are hidden from agent code)."""
    return (Path(__file__).with_name("endpoint_forwarder.py")).read_text(encoding="utf-8")
