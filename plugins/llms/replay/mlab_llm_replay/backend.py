"""Replays recorded completions in order: `--llm replay:RUN_DIR` (its llm_calls.jsonl) or `replay:FILE.jsonl`.

A run re-executed this way needs no model and, when the environment is deterministic, repeats the recorded
trace. FILE may be a call log (entries with "completion", "messages", "role", "error"...) or a script: JSON lines
each a string or an object with "completion" (optionally "prompt_tokens", "completion_tokens", "cost_usd").

- Calls that failed in the recording fail the same way (a too-long prompt stays an EnvError observation).
- Where the recording has the prompt, each call's prompt must equal it: a run that diverges stops with the call
  number and the first difference instead of being fed answers to other questions.
- When the roles are split (e.g. `--llm replay:RUN --fast-llm openai/gpt-4o-mini`), the replay serves only the
  recorded calls of its own roles.
- A step that a crash cut short and `--resume` redid is replayed from its redone calls only.
- Running out of recorded calls is an error, never a made-up answer.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlab.core import LLM, Completion, LLMError, Message, ToolCall

LOG_NAME = "llm_calls.jsonl"


def _estimate_tokens(text: str) -> int:
    return max(1, round(len(text.split()) * 4 / 3)) if text else 0


def load_recording(path: Path) -> list[dict[str, Any]]:
    """The calls of a call log or script, in order; log entries that only record a budget stop are skipped."""
    if path.is_dir():
        if not (path / LOG_NAME).is_file():
            raise ValueError(f"{path} has no {LOG_NAME}; give a run directory or a JSONL file")
        path = path / LOG_NAME
    if not path.is_file():
        raise ValueError(f"no such file or run directory: {path}")
    text = path.read_text(encoding="utf-8")
    items: list[Any]
    if text.lstrip().startswith("["):
        items = json.loads(text)
    else:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} line {number} is not JSON: {exc}") from exc
    calls = []
    for item in items:
        entry = {"completion": item} if isinstance(item, str) else dict(item)
        if entry.get("completion") is None and not entry.get("error"):
            raise ValueError(f"{path}: an entry has neither a completion nor an error: {str(item)[:100]}")
        calls.append(entry)
    return _without_interrupted_steps(calls)


def _without_interrupted_steps(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A resumed run redoes the step a crash cut short: keep each step's calls from the last session only."""
    last_session: dict[Any, Any] = {}
    for call in calls:
        if call.get("step") is not None and call.get("session") is not None:
            last_session[call["step"]] = call["session"]
    return [c for c in calls if c.get("step") is None or c.get("session") is None
            or last_session[c["step"]] == c["session"]]


def _first_difference(recorded: list[dict], asked: list[Message]) -> str:
    if len(recorded) != len(asked):
        return f"{len(asked)} messages instead of {len(recorded)}"
    for i, (r, a) in enumerate(zip(recorded, asked, strict=True)):
        if r.get("role") != a.role:
            return f"message {i + 1} has role {a.role!r} instead of {r.get('role')!r}"
        old, new = str(r.get("content", "")), a.content
        if old != new:
            at = next((j for j, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), min(len(old), len(new)))
            return (f"message {i + 1} differs at character {at}: recorded {old[max(0, at - 30):at + 30]!r}, "
                    f"now {new[max(0, at - 30):at + 30]!r}")
    return "no difference"


class ReplayLLM(LLM):
    name = "replay"
    description = "Replays the completions of a recorded run (RUN_DIR or llm_calls.jsonl) or a JSONL script, in order."
    cacheable = False  # answers depend on position in the recording, not only on the prompt
    supports_tools = True  # a recording's tool calls are replayed as they were

    def __init__(self, model: str = "", **options: Any):
        super().__init__(model, **options)
        if not model:
            raise ValueError("replay needs a recording: replay:RUN_DIR or replay:FILE.jsonl")
        self.path = Path(model).expanduser()
        try:
            self.recording = load_recording(self.path)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.path} is not a JSON/JSONL recording: {exc}") from exc
        self.position = 0
        self._calls: list[dict[str, Any]] | None = None

    def _mine(self) -> list[dict[str, Any]]:
        if self._calls is None:
            roles = self.roles
            self._calls = [c for c in self.recording
                           if not roles or "role" not in c or c["role"] in roles]
        return self._calls

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        calls = self._mine()
        if self.position >= len(calls):
            raise LLMError(f"replay of {self.path} is exhausted: the run asked for call {self.position + 1} but "
                           f"the recording has {len(calls)}")
        call = calls[self.position]
        number = self.position + 1
        recorded = call.get("messages")
        if recorded is not None:
            if [(m.get("role"), m.get("content")) for m in recorded] != [(m.role, m.content) for m in messages]:
                raise LLMError(f"replay of {self.path} diverged at call {number} (role {call.get('role', '?')}): "
                               f"{_first_difference(recorded, messages)}")
        self.position += 1
        if call.get("error"):
            # verbatim, so that an observation or end reason made from it is the recorded one
            raise LLMError(str(call["error"]), context_too_long=bool(call.get("context_too_long")))
        text = str(call["completion"])
        prompt = "\n".join(m.content for m in messages)
        tool_calls = [ToolCall(**c) for c in call.get("tool_calls") or [] if isinstance(c, dict)]
        return Completion(text=text, model=f"replay:{call.get('model') or self.path}", tool_calls=tool_calls,
                          finish_reason=call.get("finish_reason"),
                          prompt_tokens=int(call.get("prompt_tokens", _estimate_tokens(prompt)) or 0),
                          completion_tokens=int(call.get("completion_tokens", _estimate_tokens(text)) or 0),
                          cost_usd=call.get("cost_usd"))

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state.get("position", 0))
