"""Exceptions shared by the core, the CLI and plugins."""
from __future__ import annotations

from typing import Any


class MlabError(Exception):
    """Bad input from the user: the CLI prints it as one line and exits with code 2."""


class InvalidSubmission(Exception):
    """Raised by Task.evaluate when the workspace holds no usable submission."""


class EnvError(Exception):
    """An agent action failed; the message becomes an observation starting with 'EnvError:'."""


class LLMError(Exception):
    """An LLM backend failed for good (after any retries)."""

    retries: list[dict[str, Any]]
    """The retried tries, one dict each; set by call_with_retries on the error it raises."""

    def __init__(self, message: str, *, transient: bool = False, context_too_long: bool = False,
                 retry_after: float | None = None):
        super().__init__(message)
        self.transient = transient
        self.context_too_long = context_too_long
        self.retry_after = retry_after  # seconds the server asked to wait (Retry-After), if it said


class BudgetExceeded(Exception):
    """A run limit (tokens, cost) was reached; the run ends cleanly with this reason."""
