"""The LLM backend contract."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from mlab.core.models import Completion, Message


class LLM(ABC):
    """Completes chat messages and reports token usage. Registered as a class; the core builds one per model string,
    `LLMClass(model, **options)`. `--llm NAME:MODEL` picks the backend called NAME; a string with no registered
    prefix goes to the one whose `handles_unprefixed` is True."""

    name: ClassVar[str] = ""  # the NAME of `--llm NAME:MODEL`; required, unique among installed backends
    description: ClassVar[str] = ""  # one line for `mlab list-plugins`
    handles_unprefixed: ClassVar[bool] = False  # also take `--llm` strings without a registered prefix
    cacheable: ClassVar[bool] = True  # False: answers depend on more than the prompt; never cache them
    uses_terminal: ClassVar[bool] = False  # talks to the user on the terminal: the CLI turns its live display off
    supports_tools: ClassVar[bool] = False  # takes tools, tool calls and results, images; else gets text only

    model: str  # MODEL (`gpt-4o` of `litellm:gpt-4o`); may be empty
    options: dict[str, Any]  # the core passes only those the user gave: `api_base`, `timeout`
    roles: tuple[str, ...] = ()  # the roles (main, fast, edit) it serves in the run; set by the core

    def __init__(self, model: str = "", **options: Any):
        """Check the model string and options after `super().__init__(model, **options)`. Raises ValueError,
        LookupError (an unknown model), OSError or MlabError, shown as one line."""
        self.model = model
        self.options = options

    @classmethod  # noqa: B027 (optional: nothing to load by default)
    def preload(cls) -> None:
        """Import the heavy client libraries `complete` needs. A bench calls it once in the process its runs are
        forked from, before the first fork of a run with this backend, so that no run imports them again. Only
        imports: a thread, connection or open file made here would be shared by every forked run."""

    @abstractmethod
    def complete(self, messages: list[Message], **params: Any) -> Completion:
        """The reply to messages (oldest first), with honest token counts and `cost_usd` when known (None: shown as
        unknown). params are OpenAI-named (`temperature`, `top_p`, `seed`, `max_completion_tokens`, `stop` list;
        `tools`, `tool_choice` if supports_tools) and the user's `-M KEY=VALUE`: send all on, drop none silently.
        Retries, budgets, cache and call log are the core's; import heavy client libraries here, not at import. Raises
        LLMError: `transient=True` for what a retry may mend (rate limits, timeouts), `context_too_long=True` when
        the prompt does not fit; non-transient for a parameter the model cannot take."""

    def state_dict(self) -> dict[str, Any]:
        """State saved with each step so a resumed run continues where it was (e.g. a replay cursor)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional: no state by default)
        """Take back the state of the last saved step, when a killed run resumes."""
