"""Anthropic Messages (POST /v1/messages), as Claude Code speaks it: `system`, messages of content blocks (text,
image, tool_use, tool_result), tools with an input_schema; the answer's content blocks, or their stream of events
(message_start ... message_stop). POST /v1/messages/count_tokens gets a bound (a token a byte)."""
from __future__ import annotations

import json
from typing import Any

from mlab.core.llm.protocols.base import (
    ChatRequest,
    EndpointError,
    Protocol,
    bad,
    checked_messages,
    new_id,
    param,
    sse,
)
from mlab.core.models import Completion, ContentPart, Message, ToolCall

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise bad("a message's content must be a string or a list of content blocks")
    return content


def _image(block: dict[str, Any]) -> ContentPart:
    found = block.get("source")
    source: dict[str, Any] = found if isinstance(found, dict) else {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        raise bad("an image block needs a base64 or url source")
    return ContentPart(type="image", image_url=url)


def _result_text(content: Any) -> str:
    if content is None:
        return ""
    texts = []
    for block in _blocks(content):
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "image":
            texts.append("[an image]")
    return "\n".join(texts)


def _messages(body: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    system = body.get("system")
    if system:
        text = system if isinstance(system, str) else "\n".join(
            str(b.get("text", "")) for b in _blocks(system) if b.get("type") == "text")
        messages.append(Message(role="system", content=text))
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns:
        raise bad("send {'messages': [{'role': 'user', 'content': ...}], 'max_tokens': N}")
    for turn in turns:
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
            raise bad("each message must be {'role': 'user' or 'assistant', 'content': ...}")
        texts: list[str] = []
        parts: list[ContentPart] = []
        calls: list[ToolCall] = []
        for block in _blocks(turn.get("content")):
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
                parts.append(ContentPart(type="text", text=texts[-1]))
            elif kind == "image":
                parts.append(_image(block))
            elif kind == "tool_use" and turn["role"] == "assistant":
                calls.append(ToolCall(id=str(block.get("id", "")), name=str(block.get("name", "")),
                                      arguments=json.dumps(block.get("input") or {})))
            elif kind == "tool_result" and turn["role"] == "user":
                text = _result_text(block.get("content"))
                if block.get("is_error"):
                    text = f"[error] {text}"
                messages.append(Message(role="tool", tool_call_id=str(block.get("tool_use_id", "")), content=text))
            elif kind in ("thinking", "redacted_thinking"):
                continue  # the run's model gives back no thinking to be replayed
            else:
                raise bad(f"content blocks of type {str(kind)[:40]!r} are not supported here")
        if texts or calls or (parts and turn["role"] == "user"):
            messages.append(Message(role=turn["role"], content="\n".join(texts), tool_calls=calls,
                                    parts=parts if any(p.type != "text" for p in parts) else []))
    return messages


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise bad("tools must be a list")
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise bad("each tool must be {'name': ..., 'input_schema': {...}}")
        if "input_schema" not in tool:
            continue  # a server tool (web search, ...) has no equivalent on the run's model: left out
        if not isinstance(tool["input_schema"], dict):
            raise bad(f"tool {tool['name'][:40]!r}: input_schema must be a JSON schema object")
        out.append({"type": "function", "function": {"name": tool["name"],
                                                     "description": str(tool.get("description") or ""),
                                                     "parameters": tool["input_schema"]}})
    return out


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(str(kind), "auto")


def parse(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad("send {'messages': [...], 'max_tokens': N}")
    params: dict[str, Any] = {}
    for key, name in (("temperature", "temperature"), ("top_p", "top_p"), ("max_tokens", "max_completion_tokens"),
                      ("stop_sequences", "stop")):
        if body.get(key) is not None:
            params[name] = param(name, body[key])
    if body.get("tools"):
        tools = _tools(body["tools"])
        if tools:
            params["tools"] = tools
            if body.get("tool_choice") is not None:
                params["tool_choice"] = _tool_choice(body["tool_choice"])
            if isinstance(body.get("tool_choice"), dict) and body["tool_choice"].get("disable_parallel_tool_use"):
                params["parallel_tool_calls"] = False
    return ChatRequest(messages=checked_messages(_messages(body)), params=params, stream=body.get("stream") is True)


def _content(completion: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if completion.text or not completion.tool_calls:
        blocks.append({"type": "text", "text": completion.text})
    for call in completion.tool_calls:
        try:
            given = json.loads(call.arguments or "{}")
        except ValueError:
            given = None
        blocks.append({"type": "tool_use", "id": call.id or new_id("toolu_"), "name": call.name,
                       "input": given if isinstance(given, dict) else {"arguments": call.arguments}})
    return blocks


def _stop(completion: Completion) -> str:
    return _STOP.get(completion.finish_reason or "", "tool_use" if completion.tool_calls else "end_turn")


def reply(completion: Completion, model: str, request: ChatRequest) -> dict[str, Any]:
    return {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": model,
            "content": _content(completion), "stop_reason": _stop(completion), "stop_sequence": None,
            "usage": {"input_tokens": completion.prompt_tokens, "output_tokens": completion.completion_tokens,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def stream(completion: Completion, model: str, request: ChatRequest) -> bytes:
    whole = reply(completion, model, request)
    start = {**whole, "content": [], "stop_reason": None,
             "usage": {**whole["usage"], "output_tokens": 0}}
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(whole["content"]):
        head: dict[str, Any]
        if block["type"] == "text":
            head = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start", {"type": "content_block_start", "index": index, "content_block": head}),
                   ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": index})]
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                                  "usage": {"output_tokens": completion.completion_tokens}}),
               ("message_stop", {"type": "message_stop"})]
    return sse(events)


def error(exc: EndpointError) -> dict[str, Any]:
    kind = {429: "rate_limit_error", 404: "not_found_error", 413: "request_too_large"}.get(exc.status,
                                                                                            "invalid_request_error")
    if exc.status >= 500:
        kind = "api_error"
    return {"type": "error", "error": {"type": kind, "message": " ".join(str(exc).split())}}


def count_tokens(body: Any) -> dict[str, Any]:
    """A bound for /v1/messages/count_tokens: a token a byte of everything the model would read."""
    from mlab.core.llm.client import prompt_texts, prompt_token_bound

    request = parse({**body, "max_tokens": 1} if isinstance(body, dict) else body)
    return {"input_tokens": prompt_token_bound(prompt_texts(request.messages, request.params))}


ANTHROPIC = Protocol("anthropic-messages", ("/v1/messages", "/messages"), parse, reply, stream, error)
