"""Parsing sizes such as 512M, 16G, 1.5GiB or a number of bytes."""
from __future__ import annotations

import re
from typing import Any

import click

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """Bytes of "16G", "512MiB", "1.5g" or "1000000" (binary units: memory is sized so)."""
    found = _SIZE.fullmatch(text.strip().lower())
    if not found:
        raise ValueError(text)
    size = int(float(found.group(1)) * _UNITS[found.group(2)])
    if size <= 0:
        raise ValueError(text)
    return size


class Size(click.ParamType):
    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError:
            self.fail(f"{value!r} is not a size; use e.g. 512M, 16G or 1.5GiB", param, ctx)
