"""The LLM backend contract."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from mlab.core.models import Completion, Message


class LLM(ABC):
    """A backend completes chat messages and reports token usage.

    A backend is registered as a class; the core builds one per model string with `LLMClass(model, **options)`.
    `--llm NAME:MODEL` picks the backend called NAME; a string with no registered prefix goes to the backend
    whose `handles_unprefixed` is True.
    """

    name: ClassVar[str] = ""
    """The prefix users type in `--llm NAME:MODEL`; required, unique among installed backends."""
    description: ClassVar[str] = ""
    """One line for `mlab list-plugins`."""
    handles_unprefixed: ClassVar[bool] = False
    """True: also take `--llm` strings that start with no registered backend name."""
    cacheable: ClassVar[bool] = True
    """False: the response cache never serves or stores this backend's answers (they depend on more than the
    prompt, e.g. a position in a recording)."""
    uses_terminal: ClassVar[bool] = False
    """True: the backend talks to the user on the terminal, so the CLI turns its live display off."""

    model: str
    """The model string after the backend's prefix (`gpt-4o` of `litellm:gpt-4o`); may be empty."""
    options: dict[str, Any]
    """Options every backend is built with; the core sets only those the user gave: `api_base`, `timeout`."""
    roles: tuple[str, ...] = ()
    """The roles (main, fast, edit) this backend serves in the run; set by the core after building it."""

    def __init__(self, model: str = "", **options: Any):
        """Override to check the model string or options; call `super().__init__(model, **options)`.

        Raises:
            ValueError, LookupError (a model it does not know), OSError, MlabError: shown as one line.
        """
        self.model = model
        self.options = options

    @abstractmethod
    def complete(self, messages: list[Message], **params: Any) -> Completion:
        """Complete messages. Retries, budgets, the response cache and the call log are the core's, not the
        backend's; import heavy client libraries here, never at module level.

        Args:
            messages: the conversation, oldest first.
            params: generation parameters, OpenAI-named (`temperature`, `top_p`, `seed`, `max_completion_tokens`,
                `stop` as a list) plus the user's `-M KEY=VALUE`: send them all on, drop none silently.
        Returns:
            The text with honest token counts, and `cost_usd` when known (None: shown as unknown).
        Raises:
            LLMError: the call failed; `transient=True` for what a retry may mend (rate limits, timeouts),
                `context_too_long=True` when the prompt does not fit, non-transient for a parameter the model
                cannot take.
        """

    def state_dict(self) -> dict[str, Any]:
        """State to save with each step so a resumed run continues where it was (e.g. a replay cursor)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional: no state by default)
        """Take back the state of the last saved step, when a killed run resumes."""
