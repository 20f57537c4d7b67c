"""Asking a model until its response is usable: each bad response goes back to it with what was wrong."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlab.core.agentkit.responses import InvalidResponse
from mlab.core.llm.client import LLMClient
from mlab.core.models import Message, ToolCall

MAX_ATTEMPTS = 5


@dataclass
class Attempts:
    """The outcome of asking with retries: the parsed value, or the failures that used up the attempts."""

    value: Any = None
    text: str = ""
    failures: list[dict[str, str]] = field(default_factory=list)  # {"response": ..., "problem": ...} each
    tool_call: ToolCall | None = None  # the call the value came from (ask_until_called)

    @property
    def ok(self) -> bool:
        return self.value is not None


def ask_until_valid(llm: LLMClient, messages: list[Message], parse: Callable[[str], Any],
                    correction: Callable[[str], str], attempts: int = MAX_ATTEMPTS, role: str = "main",
                    **params: Any) -> Attempts:
    """Ask, parse, and on InvalidResponse ask again with the bad response and what was wrong with it.

    Only the latest bad response is kept in the retry prompt, so retries do not pile up context. `params` go
    with every call (e.g. `stop` sequences the response format needs).
    """
    result = Attempts()
    for _ in range(attempts):
        asked = messages
        if result.failures:
            last = result.failures[-1]
            asked = messages + [Message(role="assistant", content=last["response"]),
                                Message(role="user", content=correction(last["problem"]))]
        text = llm.complete(asked, role=role, **params).text
        try:
            result.value, result.text = parse(text), text
            return result
        except InvalidResponse as exc:
            result.failures.append({"response": text, "problem": str(exc)})
    return result
