"""A backend that answers with given completions, in order: `--llm scripted:FILE`.

FILE is JSON lines, each either a string or an object with "completion" (and optionally "tool_calls",
"finish_reason", "prompt_tokens", "completion_tokens", "cost_usd"); or a JSON list of those. A tool call is
{"name": ..., "arguments": {...} or its JSON text, "id": optional}. Token counts default to a words-based
estimate.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlab.core import LLM, Completion, LLMError, Message, ToolCall


def load_script(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        items = json.loads(text)
    else:
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [{"completion": item} if isinstance(item, str) else dict(item) for item in items]


def script_tool_calls(calls: Any, position: int) -> list[ToolCall]:
    """A script entry's tool calls; arguments may be given as an object. Ids default to call_<entry>_<n>."""
    if not calls:
        return []
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        raise LLMError(f"scripted entry {position}: tool_calls must be a list of {{'name': ..., 'arguments': ...}}")
    return [ToolCall(id=str(c.get("id") or f"call_{position}_{i}"), name=c["name"],
                     arguments=c["arguments"] if isinstance(c.get("arguments"), str)
                     else json.dumps(c.get("arguments") or {}))
            for i, c in enumerate(calls)]


def estimate_tokens(text: str) -> int:
    return max(1, round(len(text.split()) * 4 / 3)) if text else 0


class ScriptedLLM(LLM):
    name = "scripted"
    description = "Returns completions from a JSONL/JSON script in order; fails when they run out."
    supports_tools = True  # a script's entries may hold tool calls

    def __init__(self, model: str = "", completions: list[Any] | None = None, **options: Any):
        super().__init__(model, **options)
        if completions is not None:
            self.script: list[dict[str, Any]] = [{"completion": c} if isinstance(c, str) else dict(c)
                                                 for c in completions]
        else:
            path = Path(model)
            if not model or not path.is_file():
                raise ValueError(f"scripted backend needs a script file: scripted:PATH (got {model!r})")
            try:
                self.script = load_script(path)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"{path} is not a JSON/JSONL script: {exc}") from exc
        self.position = 0

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        if self.position >= len(self.script):
            raise LLMError(f"scripted backend ran out of completions after {len(self.script)}")
        item = self.script[self.position]
        self.position += 1
        text = str(item.get("completion") or "")
        calls = script_tool_calls(item.get("tool_calls"), self.position - 1)
        prompt = "\n".join(m.content for m in messages)
        return Completion(text=text, model=f"scripted:{self.model}", tool_calls=calls,
                          finish_reason=item.get("finish_reason") or ("tool_calls" if calls else "stop"),
                          prompt_tokens=int(item.get("prompt_tokens", estimate_tokens(prompt))),
                          completion_tokens=int(item.get("completion_tokens", estimate_tokens(text))),
                          cost_usd=item.get("cost_usd"))

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state.get("position", 0))
