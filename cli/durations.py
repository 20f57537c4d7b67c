"""Parsing durations such as 90, 90s, 30m, 5h or 1h30m."""
from __future__ import annotations

import re
from typing import Any

import click

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    text = text.strip().lower()
    pos, total = 0, 0.0
    while pos < len(text):
        match = _PART.match(text, pos)
        if not match:
            raise ValueError(text)
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        pos = match.end()
    if not text or total <= 0:
        raise ValueError(text)
    return total


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_duration(value)
        except ValueError:
            self.fail(f"{value!r} is not a duration; use e.g. 90s, 30m, 5h or 1h30m", param, ctx)


def format_duration(seconds: float) -> str:
    """The largest whole unit that fits, as users type durations: 45s, 10m, 3h."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"
