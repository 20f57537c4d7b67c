"""Checking an agent's options (`--agent-option KEY=VALUE`), so every agent words its option errors alike.

Each check raises MlabError with a one-line message; the CLI shows it as the run's error.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from mlab.core.actions import ActionSpec
from mlab.core.agent import AgentOptions
from mlab.core.errors import MlabError

__all__ = ["ActionNames", "AgentOptions", "RESEARCH_ACTIONS", "bool_option", "check_option_names", "int_option",
           "pick_actions", "positive_int_option"]

# The actions the original research agent was shown: a sensible default for an agent's list of actions.
RESEARCH_ACTIONS = ["List Files", "Copy File", "Undo Edit Script", "Execute Script", "Final Answer",
                    "Understand File", "Inspect Script Lines", "Edit Script (AI)"]


def _names(value: Any) -> Any:
    """A list option may also be written as comma-separated text: actions="List Files,Execute Script"."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return value


# A field type for options that name actions: a non-empty list, or comma-separated text. Check the names
# against ctx.actions with pick_actions.
ActionNames = Annotated[list[str], BeforeValidator(_names), Field(min_length=1)]


def check_option_names(agent: str, options: dict[str, Any], allowed: Iterable[str]) -> None:
    """Reject options the agent does not have, naming those it does."""
    allowed = list(allowed)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise MlabError(f"agent {agent!r} has no option {', '.join(unknown)}; options: {', '.join(allowed)}")


def pick_actions(names: Any, option: str, actions: dict[str, ActionSpec]) -> list[str]:
    """The action names of a list option, each one the environment offers."""
    if not isinstance(names, list) or not names:
        raise MlabError(f"option {option} must be a list of action names")
    unknown = [n for n in names if n not in actions]
    if unknown:
        raise MlabError(f"unknown action(s) {', '.join(map(repr, unknown))} in option {option}; "
                        f"valid: {', '.join(actions)}")
    return names


def positive_int_option(options: dict[str, Any], name: str, default: int) -> int:
    """A whole-number option of at least 1, given as a JSON number."""
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MlabError(f"option {name} must be a positive whole number, not {value!r}")
    return value


def bool_option(options: dict[str, Any], name: str, default: bool) -> bool:
    """A yes/no option: a JSON boolean, or true/false, yes/no, 1/0 written as text."""
    value = options.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    raise MlabError(f"option {name} must be true or false, not {value!r}")


def int_option(options: dict[str, Any], name: str, default: int, minimum: int) -> int:
    """A whole-number option of at least minimum; text holding a number is accepted."""
    value = options.get(name, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise MlabError(f"option {name} must be a whole number, not {value!r}") from None
    if number < minimum:
        raise MlabError(f"option {name} must be at least {minimum}")
    return number
