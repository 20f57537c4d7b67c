"""A person is the model: `--llm human` shows each prompt in the terminal and reads the completion typed or pasted.

For debugging prompts and for interactive research. The answer may span many lines; it ends with a line holding
only a single "." (or with Ctrl-D at the start of a line). A line of ".." stands for a line holding "." itself.
Without a terminal on stdin the backend refuses to start, with one line saying why, instead of waiting forever.

When the call offers tools, they are listed with their parameters, and a line `@tool NAME {JSON arguments}` of
the answer is a call of that tool (the other lines are the answer's text); tool calls and results in the history
are shown as such.
"""
from __future__ import annotations

import json
import sys
from typing import IO, Any

from mlab.core import LLM, Completion, LLMError, Message, ToolCall

END_LINE = "."
RULE = "=" * 78
TOOL_PREFIX = "@tool "


def _estimate_tokens(text: str) -> int:
    return max(1, round(len(text.split()) * 4 / 3)) if text else 0


def read_answer(stream: IO[str]) -> str:
    """Lines up to a line holding only "." (or end of input); raises LLMError when input ends before any text."""
    lines: list[str] = []
    while True:
        line = stream.readline()
        if line == "":  # Ctrl-D, or the terminal went away
            if not lines:
                raise LLMError("the person ended the input without typing an answer")
            break
        bare = line.rstrip("\r\n")
        if bare == END_LINE:
            break
        lines.append("." + "\n" if bare == ".." else bare + "\n")
    return "".join(lines).rstrip("\n")


def terminal_problem(stream: IO[str] | None) -> str | None:
    if stream is None or getattr(stream, "closed", False):
        return "the human backend needs a terminal to read answers from, but there is no stdin"
    try:
        is_tty = stream.isatty()
    except (ValueError, OSError):
        is_tty = False
    if not is_tty:
        return ("the human backend needs a terminal to read answers from, but stdin is not one "
                "(run mlab in a terminal, or use replay:RUN_DIR or scripted:FILE for unattended runs)")
    return None


def split_tool_calls(answer: str, names: set[str], call_number: int) -> tuple[str, list[ToolCall]]:
    """The answer's text and its `@tool NAME {json}` lines as tool calls; ValueError saying what is wrong."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for line in answer.splitlines():
        if not line.startswith(TOOL_PREFIX):
            text.append(line)
            continue
        name, _, arguments = line[len(TOOL_PREFIX):].strip().partition(" ")
        if name not in names:
            raise ValueError(f"no tool named {name!r} is offered ({', '.join(sorted(names)) or 'none'})")
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError as exc:
            raise ValueError(f"the arguments of {name} are not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"the arguments of {name} must be a JSON object")
        calls.append(ToolCall(id=f"call_h{call_number}_{len(calls)}", name=name, arguments=json.dumps(parsed)))
    return "\n".join(text).strip("\n"), calls


def _shown(message: Message) -> str:
    lines = [message.content] if message.content else []
    lines += [f"[image {p.image_url[:60]}]" for p in message.parts if p.type == "image"]
    lines += [f"{TOOL_PREFIX}{c.name} {c.arguments}   (call {c.id})" for c in message.tool_calls]
    return "\n".join(lines)


class HumanLLM(LLM):
    name = "human"
    description = "You are the model: each prompt is shown in the terminal and you type the completion."
    uses_terminal = True  # the CLI turns its live display off so the prompt and your typing stay readable
    supports_tools = True  # offered tools are listed; the person calls one with a line `@tool NAME {json}`

    def __init__(self, model: str = "", **options: Any):
        super().__init__(model, **options)
        problem = terminal_problem(sys.stdin)
        if problem:
            raise ValueError(problem)
        self.calls = 0

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        problem = terminal_problem(sys.stdin)
        if problem:
            raise LLMError(problem)
        self.calls += 1
        out = sys.stderr
        roles = ", ".join(self.roles or ("main",))
        tools = params.get("tools") or []
        shown = {k: v for k, v in params.items() if k not in ("tools", "tool_choice")}
        out.write(f"\n{RULE}\nLLM call {self.calls} (roles: {roles})"
                  + (f", parameters: {shown}" if shown else "") + "\n")
        for message in messages:
            about = f" (result of call {message.tool_call_id})" if message.role == "tool" else ""
            out.write(f"----- {message.role}{about} -----\n{_shown(message)}\n")
        names = {t["function"]["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)}
        if names:
            out.write(f"----- tools (tool_choice: {params.get('tool_choice', 'auto')}) -----\n")
            for tool in tools:
                function = tool["function"]
                out.write(f"{function['name']}: {function.get('description', '')}\n"
                          f"    parameters: {json.dumps(function.get('parameters', {}))}\n")
            out.write(f"Call one with a line: {TOOL_PREFIX}NAME {{JSON arguments}}\n")
        out.write(f"{RULE}\nType or paste the completion. End it with a line holding only \"{END_LINE}\" "
                  f"(or Ctrl-D).\n")
        out.flush()
        while True:
            answer = read_answer(sys.stdin)
            try:
                text, calls = split_tool_calls(answer, names, self.calls)
                break
            except ValueError as exc:
                out.write(f"[{exc}; type the whole answer again]\n")
                out.flush()
        out.write(f"[{len(text)} characters" + (f", {len(calls)} tool calls" if calls else "") + " received]\n")
        out.flush()
        prompt = "\n".join(m.content for m in messages)
        return Completion(text=text, model=f"human:{self.model}" if self.model else "human", tool_calls=calls,
                          finish_reason="tool_calls" if calls else "stop",
                          prompt_tokens=_estimate_tokens(prompt), completion_tokens=_estimate_tokens(text),
                          cost_usd=None)  # a person has no price: unpriced, never a made-up $0

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state.get("calls", 0))
