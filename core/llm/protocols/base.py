"""What every wire protocol of the model endpoint shares: a request as the run's messages and parameters, an
error answered with an HTTP status, and the shape a protocol fills in."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlab.core.errors import MlabError
from mlab.core.llm.generation import check_param
from mlab.core.models import Completion, Message

# What a program may set per call besides its messages; the model and its server stay the run's.
PARAMS = ("temperature", "top_p", "stop", "seed", "max_completion_tokens", "tools", "tool_choice",
          "parallel_tool_calls")


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
    include_usage: bool = False  # chat completions: stream_options.include_usage
    extra: dict[str, Any] = field(default_factory=dict)  # what a protocol keeps for its answer


@dataclass(frozen=True)
class Protocol:
    """One protocol: the POST paths it answers, how a body becomes a ChatRequest, how a completion becomes its
    JSON answer or its stream of server-sent events, and how it words an error."""

    name: str
    paths: tuple[str, ...]
    parse: Callable[[Any], ChatRequest]
    reply: Callable[[Completion, str, ChatRequest], dict[str, Any]]
    stream: Callable[[Completion, str, ChatRequest], bytes]
    error: Callable[[EndpointError], dict[str, Any]]


def bad(message: str) -> EndpointError:
    return EndpointError(400, "invalid_request_error", message)


def checked_text(text: str, what: str) -> str:
    """text, or a 400 when it is not valid Unicode (a lone surrogate cannot be sent on)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad(f"{what} holds a lone surrogate (not Unicode text)") from None
    return text


def checked_messages(messages: list[Message]) -> list[Message]:
    for m in messages:
        checked_text(m.content, "a message")
        for part in m.parts:
            checked_text(part.text + part.image_url, "a content part")
        for call in m.tool_calls:
            checked_text(call.id + call.name + call.arguments, "a tool call")
        checked_text(m.tool_call_id or "", "a tool_call_id")
    return messages


def param(key: str, value: Any) -> Any:
    """A parameter as the run's client takes it; a 400 naming it when it is out of range."""
    checked_text(json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else value, key)
    if key == "parallel_tool_calls" and not isinstance(value, bool):
        raise bad("parallel_tool_calls must be true or false")
    try:
        return check_param(key, value, key)
    except MlabError as exc:
        raise bad(str(exc)) from None


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    """Server-sent events: (event name or None, JSON data or a literal string)."""
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def new_id(prefix: str) -> str:
    return f"{prefix}{time.time_ns():x}"


def now() -> int:
    """A response's creation time: whole seconds since the epoch."""
    return int(time.time())
