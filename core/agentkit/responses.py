"""Checking the action a model chose: its name against the actions on offer, its arguments against the spec.

Problems are raised as InvalidResponse with a message written for the model, so an agent can ask again.
"""
from __future__ import annotations

import json
from typing import Any

from mlab.core.actions import ActionSpec


class InvalidResponse(Exception):
    """A model response that cannot be turned into an action; the message tells the model what to fix."""


def args_example(spec: ActionSpec) -> str:
    """The action's arguments as a one-line JSON object of placeholders, for telling a model what to write."""
    return json.dumps({arg: f"<{hint}>" for arg, hint in spec.args.items()})


def check_args(spec: ActionSpec, args: Any) -> dict[str, Any]:
    """The arguments an action needs, exactly; raises InvalidResponse saying what is wrong."""
    if not isinstance(args, dict):
        raise InvalidResponse(f"the input of {spec.name} must be a JSON object like {args_example(spec)}")
    missing = [a for a in spec.args if a not in args and a not in spec.optional]
    unknown = [a for a in args if a not in spec.args]
    if missing or unknown:
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unexpected {', '.join(unknown)}"] if unknown else [])
        raise InvalidResponse(f"wrong arguments for {spec.name} ({'; '.join(problems)}); "
                              f"it takes exactly {args_example(spec)}")
    clean: dict[str, Any] = {}
    for name, value in args.items():
        if name.endswith("_line_number"):
            clean[name] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            clean[name] = str(value)  # a number where text was asked for is harmless
        elif isinstance(value, (dict, list)):
            raise InvalidResponse(f"argument {name} of {spec.name} must be a string, not a JSON "
                                  f"{'object' if isinstance(value, dict) else 'list'}")
        else:
            clean[name] = value
    return clean


def match_name(given: Any, names: list[str]) -> str:
    """The action name a model meant: exact, or differing only in case, quotes or Markdown emphasis."""
    if not isinstance(given, str):
        raise InvalidResponse(f"the action must be a name, one of: {', '.join(names)}")
    cleaned = given.strip().strip("`*\"'").strip()
    for name in names:
        if cleaned.lower() == name.lower():
            return name
    raise InvalidResponse(f"unknown action {cleaned!r}; it must be one of: {', '.join(names)}")
