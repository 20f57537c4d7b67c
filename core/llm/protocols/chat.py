"""OpenAI Chat Completions (POST /v1/chat/completions): tools, parallel tool calls, and streams whose chunks carry
text and tool-call deltas, then the usage."""
from __future__ import annotations

from typing import Any

from mlab.core.llm.openai_chat import check_tools, from_openai
from mlab.core.llm.protocols.base import (
    PARAMS,
    ChatRequest,
    EndpointError,
    Protocol,
    bad,
    checked_messages,
    new_id,
    now,
    param,
    sse,
)
from mlab.core.models import Completion


def check_tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
        return choice
    raise bad("tool_choice must be auto, none, required or {'type': 'function', 'function': {'name': ...}}")


def parse(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad("send {'messages': [{'role': ..., 'content': ...}]}")
    try:
        messages = from_openai(body.get("messages"))
        tools = check_tools(body["tools"]) if body.get("tools") else None
    except ValueError as exc:
        raise bad(str(exc)) from None
    params: dict[str, Any] = {}
    for key in PARAMS:
        value = body.get(key)
        if key == "max_completion_tokens":
            value = body.get("max_completion_tokens") or body.get("max_tokens")
        if value is not None and key not in ("tools", "tool_choice"):
            params[key] = param(key, value)
    if tools:
        params["tools"] = param("tools", tools)
        if body.get("tool_choice") is not None:
            params["tool_choice"] = check_tool_choice(body["tool_choice"])
    options = body.get("stream_options")
    return ChatRequest(messages=checked_messages(messages), params=params, stream=body.get("stream") is True,
                       include_usage=isinstance(options, dict) and options.get("include_usage") is True)


def _usage(completion: Completion) -> dict[str, int]:
    return {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.prompt_tokens + completion.completion_tokens}


def _finish(completion: Completion) -> str:
    return completion.finish_reason or ("tool_calls" if completion.tool_calls else "stop")


def _calls(completion: Completion) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in completion.tool_calls]


def reply(completion: Completion, model: str, request: ChatRequest) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.text or None}
    if completion.tool_calls:
        message["tool_calls"] = _calls(completion)
    elif message["content"] is None:
        message["content"] = ""
    return {"id": new_id("chatcmpl-mlab-"), "object": "chat.completion", "created": now(), "model": model,
            "choices": [{"index": 0, "finish_reason": _finish(completion), "message": message}],
            "usage": _usage(completion)}


def stream(completion: Completion, model: str, request: ChatRequest) -> bytes:
    base = {"id": new_id("chatcmpl-mlab-"), "object": "chat.completion.chunk", "created": now(), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if completion.text:
        chunks.append(chunk({"content": completion.text}))
    for i, call in enumerate(completion.tool_calls):  # each call's head, then its arguments
        chunks.append(chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                             "function": {"name": call.name, "arguments": ""}}]}))
        chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": call.arguments}}]}))
    chunks.append(chunk({}, _finish(completion)))
    # the usage chunk has no choices, as OpenAI sends it; sent whether or not stream_options asked for it
    chunks.append({**base, "choices": [], "usage": _usage(completion)})
    return sse([(None, c) for c in chunks] + [(None, "[DONE]")])


def error(exc: EndpointError) -> dict[str, Any]:
    return {"error": {"type": exc.kind, "code": exc.kind, "message": " ".join(str(exc).split())}}


CHAT = Protocol("chat-completions", ("/v1/chat/completions", "/chat/completions"), parse, reply, stream, error)
