"""Actions as native tools: each ActionSpec as an OpenAI function tool, a model's tool call read back into an
Action, and asking until a call is usable, each bad call answered by a correction as its tool result."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from mlab.core.actions import ActionSpec
from mlab.core.agentkit.asking import MAX_ATTEMPTS, Attempts
from mlab.core.agentkit.lenient_json import loads_lenient
from mlab.core.agentkit.named_entries import ACTION, ACTION_INPUT
from mlab.core.agentkit.responses import InvalidResponse, check_args
from mlab.core.errors import MlabError
from mlab.core.llm.client import LLMClient
from mlab.core.models import Action, Message, ToolCall

TOOL_CALL_ID = "tool_call_id"  # the Action entry holding the id of the call it came from


def tool_name(name: str) -> str:
    """A name as a tool name providers take ([a-z0-9_], at most 64): "Edit Script (AI)" -> "edit_script_ai"."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:64] or "tool"


def _schema(arg: str, hint: str) -> dict[str, str]:
    # line numbers are the one kind of argument check_args keeps as given
    return {"type": "integer" if arg.endswith("_line_number") else "string", "description": hint}


def action_tools(actions: dict[str, ActionSpec], fields: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The actions as OpenAI function tools. `fields` (entry name -> description) are required string arguments
    every tool takes before its own (e.g. a thought), named by tool_name; read back by parse_tool_call."""
    extra = {tool_name(n): {"type": "string", "description": d} for n, d in (fields or {}).items()}
    tools = []
    for spec in actions.values():
        clash = sorted(set(extra) & set(spec.args))
        if clash:
            raise ValueError(f"fields {clash} clash with arguments of {spec.name}")
        properties = {**extra, **{arg: _schema(arg, hint) for arg, hint in spec.args.items()}}
        required = [*extra, *(a for a in spec.args if a not in spec.optional)]
        tools.append({"type": "function", "function": {
            "name": tool_name(spec.name), "description": spec.description,
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False}}})
    return tools


def _action_named(name: str, actions: dict[str, ActionSpec]) -> str:
    by_tool = {tool_name(n): n for n in actions}
    for candidate in (name, name.strip().lower()):
        if candidate in by_tool:
            return by_tool[candidate]
    for action in actions:  # the action's own name, as the text format writes it
        if name.strip().lower() == action.lower():
            return action
    raise InvalidResponse(f"unknown tool {name!r}; the tools are: {', '.join(by_tool)}")


def parse_tool_call(call: ToolCall, actions: dict[str, ActionSpec], fields: list[str] | None = None) -> Action:
    """The Action a tool call asks for: its entries hold each field (by entry name), Action, Action Input and the
    call's id (TOOL_CALL_ID); raises InvalidResponse, worded for the model, for a call that cannot be used."""
    name = _action_named(call.name, actions)
    spec = actions[name]
    try:
        given = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        try:
            given = loads_lenient(call.arguments, keys=[*map(tool_name, fields or []), *spec.args])
        except ValueError as exc:
            raise InvalidResponse(f"the arguments of {call.name} are not a JSON object ({exc})") from exc
    if not isinstance(given, dict):
        raise InvalidResponse(f"the arguments of {call.name} must be a JSON object")
    entries: dict[str, Any] = {}
    missing = []
    for field in fields or []:
        value = given.pop(tool_name(field), None)
        if not isinstance(value, str):
            value = "" if value is None else json.dumps(value, ensure_ascii=False)
        if not value.strip():
            missing.append(tool_name(field))
        entries[field] = value.strip()
    if missing:
        raise InvalidResponse(f"the call lacks {', '.join(missing)} (every tool takes them, filled in, besides "
                              "its own arguments)")
    args = check_args(spec, given)
    entries.update({ACTION: name, ACTION_INPUT: args, TOOL_CALL_ID: call.id})
    return Action(name=name, args=args, entries=entries, raw_response=call_text(call))


def call_text(call: ToolCall, text: str = "") -> str:
    """A reply with a tool call as one text, for logs and traces: its text, then the call as JSON."""
    shown = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{text}\n{shown}" if text else shown


def require_tools(llm: LLMClient, agent: str, why: str, role: str = "main") -> None:
    """MlabError in one line when the role's model takes no tools (a text-only backend): for an agent's __init__,
    so the run is refused before it starts."""
    backend = llm.backends[role]
    if not getattr(backend, "supports_tools", False):
        raise MlabError(f"agent {agent!r} with {why} needs a model that takes tools; the {role} model "
                        f"({llm.model_name(role)}) is text-only (litellm models take them)")


def ask_until_called(llm: LLMClient, messages: list[Message], tools: list[dict[str, Any]],
                     parse: Callable[[ToolCall], Any], correction: Callable[[str], str],
                     attempts: int = MAX_ATTEMPTS, role: str = "main", **params: Any) -> Attempts:
    """Ask with tools and parse the reply's first tool call; a call that parse refuses (InvalidResponse) is
    answered with correction(problem) as its tool result, a reply without a call by a user message, and the
    model asked again. As ask_until_valid, only the latest bad reply stays in the retry; Attempts.tool_call is
    the call that was used."""
    result = Attempts()
    retry: list[Message] = []
    for _ in range(attempts):
        completion = llm.complete(messages + retry, role=role, tools=tools, **params)
        calls = completion.tool_calls
        text = call_text(calls[0], completion.text) if calls else completion.text
        try:
            if not calls:
                raise InvalidResponse("the reply called no tool: call exactly one of the tools")
            result.value, result.text, result.tool_call = parse(calls[0]), text, calls[0]
            return result
        except InvalidResponse as exc:
            result.failures.append({"response": text, "problem": str(exc)})
            retry = [Message(role="assistant", content=completion.text, tool_calls=calls)]
            # every call of the reply needs its result, so each gets the correction
            retry += ([Message(role="tool", tool_call_id=c.id, content=correction(str(exc))) for c in calls]
                      or [Message(role="user", content=correction(str(exc)))])
    return result
