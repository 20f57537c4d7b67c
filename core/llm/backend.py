"""The LLM backend contract."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from mlab.core.models import Completion, Message


class LLM(ABC):
    """A backend completes chat messages and reports token usage.

    A backend is registered as a class; the core builds one per model string with `LLMClass(model, **options)`.
    `--llm NAME:MODEL` picks the backend called NAME; a string with no registered prefix goes to the backend
    whose `handles_unprefixed` is True.
    """

    name: str = ""
    description: str = ""
    handles_unprefixed: bool = False

    def __init__(self, model: str = "", **options: Any):
        self.model = model
        self.options = options

    @abstractmethod
    def complete(self, messages: list[Message], **params: Any) -> Completion:
        """Return the completion of messages; raise LLMError on failure."""

    def state_dict(self) -> dict[str, Any]:
        """State to save with each step so a resumed run continues where it was (e.g. a replay cursor)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
