"""mlab's messages in OpenAI's chat-completions shape and back: what litellm takes for every provider, and what
the endpoint's chat protocol reads and writes. Malformed input raises ValueError naming what is wrong."""
from __future__ import annotations

import json
from typing import Any

from mlab.core.models import ContentPart, Message, ToolCall

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
          "function": "tool"}


def to_openai(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as OpenAI chat messages (a text-only message stays {role, content})."""
    out = []
    for m in messages:
        entry: dict[str, Any] = {"role": m.role}
        if m.parts and not all(p.type == "text" for p in m.parts):
            entry["content"] = [{"type": "text", "text": p.text} if p.type == "text"
                                else {"type": "image_url", "image_url": {"url": p.image_url}} for p in m.parts]
        else:
            entry["content"] = m.content if (m.content or not m.tool_calls) else None
        if m.tool_calls:
            entry["tool_calls"] = [{"id": c.id, "type": "function",
                                    "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        if m.role == "tool":
            entry["tool_call_id"] = m.tool_call_id or ""
        out.append(entry)
    return out


def parts_of(content: Any) -> tuple[str, list[ContentPart]]:
    """(text, parts) of an OpenAI content: a string, or a list of text and image_url parts."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise ValueError("a message's content must be a string or a list of parts")
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(ContentPart(type="text", text=part))
            continue
        if not isinstance(part, dict):
            raise ValueError("each content part must be an object")
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            parts.append(ContentPart(type="text", text=_string(part.get("text", ""), "a text part")))
        elif kind in ("image_url", "input_image"):
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            parts.append(ContentPart(type="image", image_url=_string(url or "", "an image part")))
        else:
            raise ValueError(f"content parts of type {str(kind)[:40]!r} are not supported")
    text = "\n".join(p.text for p in parts if p.type == "text")
    return text, (parts if any(p.type != "text" for p in parts) else [])


def tool_calls_of(calls: Any) -> list[ToolCall]:
    """ToolCalls from OpenAI's tool_calls list (function calls)."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise ValueError("tool_calls must be a list")
    found = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise ValueError("each tool call must be {'id', 'type': 'function', 'function': {'name', 'arguments'}}")
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        found.append(ToolCall(id=_string(call.get("id") or "", "a tool call's id"),
                              name=_string(function.get("name") or "", "a tool call's name"), arguments=arguments))
    return found


def from_openai(messages: Any) -> list[Message]:
    """OpenAI chat messages as mlab's."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("send {'messages': [{'role': ..., 'content': ...}]}")
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object")
        role = _ROLES.get(str(m.get("role", "user")))
        if role is None:
            raise ValueError(f"unknown role {str(m.get('role'))[:40]!r}")
        text, parts = parts_of(m.get("content"))
        out.append(Message(role=role, content=text, parts=parts,  # type: ignore[arg-type]
                           tool_calls=tool_calls_of(m.get("tool_calls")) if role == "assistant" else [],
                           tool_call_id=_string(m.get("tool_call_id") or m.get("name") or "", "a tool_call_id")
                           if role == "tool" else None))
    return out


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """OpenAI function tools, checked: [{'type': 'function', 'function': {'name', 'description', 'parameters'}}]."""
    if not isinstance(tools, list):
        raise ValueError("tools must be a list")
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError("each tool must be {'type': 'function', 'function': {'name': ..., 'parameters': {...}}}")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise ValueError(f"tool {function['name'][:40]!r}: parameters must be a JSON schema object")
    return tools


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    return value
