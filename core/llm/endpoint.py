"""The model endpoint a program agent calls: OpenAI's chat-completions shape on a unix socket, each request
answered by a callback of the harness (the run's LLM client). A unix socket is reached through the file system,
so a sandbox with no network reaches it when the folder holding it is shown; the forwarder (endpoint_forwarder.py,
run inside the sandbox) makes it an http://127.0.0.1 URL there, as agents expect one.

Only text goes through: a message's content as a string or as text parts; the model is the run's, whatever the
request names. A stream request gets the whole answer as one chunk, then [DONE]. The caller may be hostile: a
malformed request (its length, its JSON, text that is not Unicode, a parameter out of range) is answered with
one line and a 4xx before anything reaches the model.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlab.core.errors import MlabError
from mlab.core.llm.generation import check_param
from mlab.core.llm.unix_http import BodyError, JsonHandler, UnixSocketServer
from mlab.core.models import Message

MAX_BODY_BYTES = 8 * 2**20  # a request larger than this is refused unread (each connection may send one)
SOCKET_NAME = "llm.sock"
# Roles an agent may send that the run's Message has no name for: said to the model as the nearest one.
_ROLE_AS = {"developer": "system", "tool": "user", "function": "user"}
# What the program may set per call; anything else (the model, tools) stays the run's.
_PARAMS = ("temperature", "top_p", "stop", "seed")


class EndpointError(Exception):
    """A request the endpoint answers with an error: HTTP status, error type and message."""

    def __init__(self, status: int, kind: str, message: str, retry: bool = False):
        super().__init__(message)
        self.status, self.kind, self.retry = status, kind, retry


@dataclass
class ChatRequest:
    messages: list[Message]
    params: dict[str, Any] = field(default_factory=dict)
    stream: bool = False


@dataclass
class ChatReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""


def _checked(text: str, what: str) -> str:
    """text, or EndpointError(400) when it is not valid Unicode (a lone surrogate cannot be sent on)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise EndpointError(400, "invalid_request_error", f"{what} holds a lone surrogate (not Unicode text)") from None
    return text


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # text parts; an image part is named, not sent
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')} not supported by this endpoint]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    raise EndpointError(400, "invalid_request_error", "a message's content must be a string or a list of parts")


def parse_request(body: Any) -> ChatRequest:
    """A chat-completions body as the run's messages and parameters; EndpointError(400) when malformed."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise EndpointError(400, "invalid_request_error", "send {'messages': [{'role': ..., 'content': ...}]}")
    messages = []
    for m in body["messages"]:
        if not isinstance(m, dict):
            raise EndpointError(400, "invalid_request_error", "each message must be an object")
        role = _checked(str(m.get("role", "user")), "a role")
        role = _ROLE_AS.get(role, role)
        if role not in ("system", "user", "assistant"):
            raise EndpointError(400, "invalid_request_error", f"unknown role {role[:40]!r}")
        text = _text(m.get("content"))
        if m.get("tool_calls"):  # an assistant's earlier tool calls, kept as text
            text += "\n" + json.dumps(m["tool_calls"])
        messages.append(Message(role=role, content=_checked(text, "a message")))  # type: ignore[arg-type]
    params = {}
    for key in _PARAMS:
        if body.get(key) is not None:
            params[key] = _param(key, body[key])
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    if cap is not None:
        params["max_completion_tokens"] = _param("max_completion_tokens", cap)
    return ChatRequest(messages=messages, params=params, stream=body.get("stream") is True)


def _param(key: str, value: Any) -> Any:
    if isinstance(value, str):
        _checked(value, key)
    elif isinstance(value, list):
        for item in value:
            _checked(str(item), key)
    try:
        return check_param(key, value, key)
    except MlabError as exc:
        raise EndpointError(400, "invalid_request_error", str(exc)) from None


def reply_payload(reply: ChatReply) -> dict[str, Any]:
    return {"id": f"chatcmpl-mlab-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": reply.model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply.text}}],
            "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens}}


def stream_chunks(reply: ChatReply) -> list[dict[str, Any]]:
    base = {"id": f"chatcmpl-mlab-{time.time_ns()}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": reply.model}
    return [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": reply.text},
                                  "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                       "total_tokens": reply.prompt_tokens + reply.completion_tokens}}]


Serve = Callable[[ChatRequest], ChatReply]


class _Handler(JsonHandler):
    protocol_version = "HTTP/1.1"
    serve: Serve  # set on the per-endpoint subclass

    def _error(self, exc: EndpointError) -> None:
        # x-should-retry: false stops the openai package's own retries of a 429 (a spent budget stays spent)
        self._send(exc.status, {"error": {"type": exc.kind, "code": exc.kind, "message": " ".join(str(exc).split())}},
                   {"x-should-retry": "true" if exc.retry else "false"})

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": "mlab", "object": "model", "owned_by": "mlab"}]})
        else:
            self._send(404, {"error": {"message": f"no such endpoint {self.path[:200]}"}})

    def do_POST(self) -> None:
        try:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self.close_connection = True
                raise EndpointError(404, "not_found", f"no such endpoint {self.path[:200]}; POST /v1/chat/completions")
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
            request = parse_request(body)
            reply = type(self).serve(request)
        except EndpointError as exc:
            self._error(exc)
            return
        if not request.stream:
            self._send(200, reply_payload(reply))
            return
        data = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in stream_chunks(reply))
        data += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ModelEndpoint:
    """The endpoint's server in a thread while the block runs; `socket_path` is where it listens."""

    def __init__(self, serve: Serve, folder: Path, folder_fd: int | None = None):
        self.serve = serve
        self.folder = Path(folder)
        self.socket_path = self.folder / SOCKET_NAME
        handler = type("EndpointHandler", (_Handler,), {"serve": staticmethod(serve)})
        self._server = UnixSocketServer(self.socket_path, handler, "mlab-model-endpoint", folder_fd)

    def __enter__(self) -> ModelEndpoint:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


def forwarder_source() -> str:
    """The forwarder's code, written beside the program for the sandbox's Python to run (the harness's own
    packages are hidden from agent code)."""
    return (Path(__file__).with_name("endpoint_forwarder.py")).read_text(encoding="utf-8")
