"""One way to make rich consoles: tables piped to a file or a CI log are not squeezed into 80 columns."""
from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

PIPED_WIDTH = 160


def make_console(stderr: bool = False, **options: Any) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if "COLUMNS" not in os.environ and not stream.isatty():
        options.setdefault("width", PIPED_WIDTH)
    return Console(soft_wrap=True, stderr=stderr, **options)
