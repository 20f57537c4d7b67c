"""OpenAI Responses (POST /v1/responses), as Codex CLI speaks it: `instructions` and `input` items (messages,
function calls and their outputs, custom tool calls), function and custom tools; the answer's output items, or
their stream of events (response.created ... response.completed). Nothing is stored: a request must carry its
whole conversation (`previous_response_id` is refused)."""
from __future__ import annotations

import json
from typing import Any

from mlab.core.llm.openai_chat import parts_of
from mlab.core.llm.protocols.base import (
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
from mlab.core.models import Completion, Message, ToolCall

CUSTOM_INPUT = "input"  # a custom (free-text) tool is offered to the run's model as a function of one string


def _text_of(content: Any) -> tuple[str, list]:
    try:
        return parts_of(content)
    except ValueError as exc:
        raise bad(str(exc)) from None


def _tools(tools: Any) -> tuple[list[dict[str, Any]], set[str]]:
    """Function tools in the chat shape, and the names of custom (free-text) tools among them."""
    if not isinstance(tools, list):
        raise bad("tools must be a list")
    out, custom = [], set()
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            if isinstance(tool, dict) and tool.get("type") not in ("function", "custom"):
                continue  # hosted tools (web search, ...) have no equivalent on the run's model: left out
            raise bad("each tool must be {'type': 'function', 'name': ..., 'parameters': {...}}")
        kind = tool.get("type", "function")
        if kind == "function":
            parameters = tool.get("parameters") or {"type": "object", "properties": {}}
            if not isinstance(parameters, dict):
                raise bad(f"tool {tool['name'][:40]!r}: parameters must be a JSON schema object")
            out.append({"type": "function", "function": {"name": tool["name"],
                                                         "description": str(tool.get("description") or ""),
                                                         "parameters": parameters}})
        elif kind == "custom":
            custom.add(tool["name"])
            out.append({"type": "function", "function": {
                "name": tool["name"], "description": str(tool.get("description") or ""),
                "parameters": {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
                               "required": [CUSTOM_INPUT]}}})
    return out, custom


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    text, _parts = _text_of(output)
    return text


def _messages(body: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    if body.get("instructions"):
        if not isinstance(body["instructions"], str):
            raise bad("instructions must be a string")
        messages.append(Message(role="system", content=body["instructions"]))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad("send {'input': 'text' or [items]}")
    for item in items:
        if not isinstance(item, dict):
            raise bad("each input item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = {"developer": "system"}.get(str(item.get("role")), str(item.get("role")))
            if role not in ("system", "user", "assistant"):
                raise bad(f"unknown role {role[:40]!r}")
            text, parts = _text_of(item.get("content"))
            messages.append(Message(role=role, content=text, parts=parts))  # type: ignore[arg-type]
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments") if kind == "function_call" else json.dumps(
                {CUSTOM_INPUT: str(item.get("input", ""))})
            call = ToolCall(id=str(item.get("call_id") or item.get("id") or ""), name=str(item.get("name") or ""),
                            arguments=arguments if isinstance(arguments, str) else json.dumps(arguments))
            if messages and messages[-1].role == "assistant":
                messages[-1].tool_calls.append(call)  # parallel calls, or a call after the assistant's text
            else:
                messages.append(Message(role="assistant", tool_calls=[call]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(Message(role="tool", tool_call_id=str(item.get("call_id") or ""),
                                    content=_output_text(item.get("output", ""))))
        elif kind == "reasoning":
            continue  # the run's model gives no reasoning items back to be replayed
        else:
            raise bad(f"input items of type {str(kind)[:40]!r} are not supported")
    return messages


def parse(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad("send {'input': ..., 'model': ...}")
    if body.get("previous_response_id"):
        raise bad("previous_response_id is not supported: this endpoint stores nothing, send the whole input")
    params: dict[str, Any] = {}
    for key, name in (("temperature", "temperature"), ("top_p", "top_p"),
                      ("max_output_tokens", "max_completion_tokens"), ("parallel_tool_calls", "parallel_tool_calls")):
        if body.get(key) is not None:
            params[name] = param(name, body[key])
    custom: set[str] = set()
    if body.get("tools"):
        tools, custom = _tools(body["tools"])
        if tools:
            params["tools"] = tools
            choice = body.get("tool_choice")
            if choice in ("auto", "none", "required"):
                params["tool_choice"] = choice
            elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
                params["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    return ChatRequest(messages=checked_messages(_messages(body)), params=params, stream=body.get("stream") is True,
                       extra={"custom_tools": custom})


def _items(completion: Completion, request: ChatRequest) -> list[dict[str, Any]]:
    custom = request.extra.get("custom_tools", set())
    items: list[dict[str, Any]] = []
    if completion.text or not completion.tool_calls:
        items.append({"type": "message", "id": new_id("msg_"), "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": completion.text, "annotations": []}]})
    for call in completion.tool_calls:
        if call.name in custom:
            try:
                given = json.loads(call.arguments).get(CUSTOM_INPUT, "")
            except (ValueError, AttributeError):
                given = call.arguments
            items.append({"type": "custom_tool_call", "id": new_id("ctc_"), "status": "completed",
                          "call_id": call.id, "name": call.name, "input": str(given)})
        else:
            items.append({"type": "function_call", "id": new_id("fc_"), "status": "completed", "call_id": call.id,
                          "name": call.name, "arguments": call.arguments})
    return items


def _response(completion: Completion, model: str, request: ChatRequest, items: list, status: str) -> dict[str, Any]:
    incomplete = completion.finish_reason == "length"
    return {"id": request.extra.setdefault("response_id", new_id("resp_")), "object": "response",
            "created_at": now(), "status": "incomplete" if incomplete and status == "completed" else status,
            "model": model, "output": items, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "parallel_tool_calls": True, "tool_choice": request.params.get("tool_choice", "auto"), "tools": [],
            "usage": {"input_tokens": completion.prompt_tokens, "output_tokens": completion.completion_tokens,
                      "total_tokens": completion.prompt_tokens + completion.completion_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def reply(completion: Completion, model: str, request: ChatRequest) -> dict[str, Any]:
    return _response(completion, model, request, _items(completion, request), "completed")


def stream(completion: Completion, model: str, request: ChatRequest) -> bytes:
    items = _items(completion, request)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(completion, model, request, [], "in_progress")},
        {"type": "response.in_progress", "response": _response(completion, model, request, [], "in_progress")}]
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events += [
                {"type": "response.output_item.added", "output_index": index,
                 "item": {**item, "status": "in_progress", "content": []}},
                {"type": "response.content_part.added", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}},
                {"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "delta": text},
                {"type": "response.output_text.done", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "text": text},
                {"type": "response.content_part.done", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "part": item["content"][0]}]
        else:  # a function call's arguments, or a custom tool call's input, streamed alike
            field, events_of = (("arguments", "response.function_call_arguments") if item["type"] == "function_call"
                                else ("input", "response.custom_tool_call_input"))
            events += [
                {"type": "response.output_item.added", "output_index": index,
                 "item": {**item, "status": "in_progress", field: ""}},
                {"type": f"{events_of}.delta", "item_id": item["id"], "output_index": index, "delta": item[field]},
                {"type": f"{events_of}.done", "item_id": item["id"], "output_index": index, field: item[field]}]
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    done = _response(completion, model, request, items, "completed")
    events.append({"type": "response.completed" if done["status"] == "completed" else "response.incomplete",
                   "response": done})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return sse([(e["type"], e) for e in events])


def error(exc: EndpointError) -> dict[str, Any]:
    return {"error": {"type": exc.kind, "code": exc.kind, "message": " ".join(str(exc).split()), "param": None}}


RESPONSES = Protocol("responses", ("/v1/responses", "/responses"), parse, reply, stream, error)
