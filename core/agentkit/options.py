"""An agent's options (`--agent-option KEY=VALUE`): the one check of given values against the agent's Options
model, worded alike for every agent, and the field type and check of options that name actions.

Each check raises MlabError with a one-line message; the CLI shows it as the run's error.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError

from mlab.core.actions import ActionSpec
from mlab.core.agent import AgentOptions
from mlab.core.errors import MlabError

if TYPE_CHECKING:
    from mlab.core.agent import Agent

__all__ = ["ActionNames", "AgentOptions", "RESEARCH_ACTIONS", "check_agent_options", "option_rows", "pick_actions"]

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


def check_agent_options(agent_cls: type[Agent], given: dict[str, Any]) -> AgentOptions:
    """The agent's Options from `--agent-option` values; MlabError in one line naming the valid options when a
    key is unknown or a value does not fit."""
    fields = agent_cls.Options.model_fields
    valid = ", ".join(fields) or "none (it takes no options)"
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise MlabError(f"agent {agent_cls.name!r} has no option {', '.join(unknown)}; options: {valid}")
    try:
        return agent_cls.Options.model_validate(given)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"]) or "options"
        message = str(error["msg"])
        message = message.removeprefix("Value error, ")
        raise MlabError(f"agent {agent_cls.name!r}: option {key}: {message[:1].lower()}{message[1:]} "
                        f"(got {json.dumps(error.get('input'), default=str)[:100]})") from None


def option_rows(agent_cls: type[Agent]) -> list[dict[str, Any]]:
    """The agent's options for listings: name, type, whether required, default and description of each."""
    rows = []
    for name, info in agent_cls.Options.model_fields.items():
        kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
        required = info.is_required()
        rows.append({"name": name, "type": kind, "required": required,
                     "default": None if required else info.get_default(call_default_factory=True),
                     "description": info.description or ""})
    return rows


def pick_actions(names: Any, option: str, actions: dict[str, ActionSpec]) -> list[str]:
    """The action names of a list option, each one the environment offers."""
    if not isinstance(names, list) or not names:
        raise MlabError(f"option {option} must be a list of action names")
    unknown = [n for n in names if n not in actions]
    if unknown:
        raise MlabError(f"unknown action(s) {', '.join(map(repr, unknown))} in option {option}; "
                        f"valid: {', '.join(actions)}")
    return names
