"""The ReAct-style response format: named entries ("Thought: ...") in order, ending with Action and Action Input."""
from __future__ import annotations

import re
from typing import Any

from mlab.core.actions import ActionSpec
from mlab.core.agentkit.lenient_json import loads_lenient
from mlab.core.agentkit.responses import InvalidResponse, args_example, check_args, match_name
from mlab.core.models import Action

ACTION, ACTION_INPUT = "Action", "Action Input"
# Stop sequences for formats where the environment, not the model, writes the Observation: a model that goes on
# to write one invents the result of its own action (and pays for the tokens).
OBSERVATION_STOP = ["\nObservation:"]


def _header_pattern(names: list[str]) -> re.Pattern[str]:
    # Longest names first so "Action Input" is never read as "Action"; tolerate Markdown (#, **, >). Numbered
    # lines are not headers: a plan step like "2. Action: ..." must not pass for the Action entry.
    alternatives = "|".join(re.escape(n) for n in sorted(set(names) | {"Observation"}, key=len, reverse=True))
    return re.compile(
        r"^[ \t>]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?[ \t]*(" + alternatives + r")[ \t]*(?:\*\*|__)?[ \t]*:"
        r"[ \t]*(?:\*\*|__)?",
        re.IGNORECASE | re.MULTILINE)


def split_named_entries(text: str, names: list[str]) -> dict[str, str]:
    """Each named entry's text. The first occurrence of a name wins; an "Observation:" the model wrote itself
    ends the response (the model imagining the result of its own action)."""
    canonical = {n.lower(): n for n in names}
    matches = list(_header_pattern(names).finditer(text))
    entries: dict[str, str] = {}
    for n, match in enumerate(matches):
        label = match.group(1).lower()
        if label == "observation":
            break
        name = canonical[label]
        if name in entries:
            continue
        end = matches[n + 1].start() if n + 1 < len(matches) else len(text)
        if name == ACTION_INPUT:
            # JSON may contain lines that look like headers; the object's own end is found by the decoder.
            following = [m for m in matches[n + 1 :] if m.group(1).lower() == "observation"]
            end = following[0].start() if following else len(text)
        entries[name] = text[match.end() : end].strip()
        if name == ACTION_INPUT:
            break
    return entries


def parse_named_entries(text: str, names: list[str], actions: dict[str, ActionSpec]) -> Action:
    """Turn a response into an Action holding its entries; raise InvalidResponse saying what is wrong.

    `names` must include ACTION and ACTION_INPUT; `actions` are those the model may choose from."""
    entries = split_named_entries(text, names)
    missing = [n for n in names if n not in entries]
    if missing:
        raise InvalidResponse(f"the response lacks the entr{'y' if len(missing) == 1 else 'ies'} "
                              f"{', '.join(missing)} (each must start a line with its name and a colon)")
    empty = [n for n in names if n != ACTION_INPUT and not entries[n]]
    if empty:
        raise InvalidResponse(f"the entr{'y' if len(empty) == 1 else 'ies'} {', '.join(empty)} "
                              f"{'is' if len(empty) == 1 else 'are'} empty")
    action_line = entries[ACTION].strip().splitlines()[0] if entries[ACTION].strip() else ""
    name = match_name(action_line, list(actions))
    spec = actions[name]
    try:
        args = loads_lenient(entries[ACTION_INPUT], keys=list(spec.args))
    except ValueError as exc:
        raise InvalidResponse(f"the Action Input of {name} could not be read as JSON ({exc}); "
                              f"write one JSON object like {args_example(spec)}") from exc
    args = check_args(spec, args)
    shown: dict[str, Any] = {n: entries[n] for n in names}
    shown[ACTION] = name
    shown[ACTION_INPUT] = args
    return Action(name=name, args=args, entries=shown, raw_response=text)
