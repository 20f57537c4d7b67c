"""One way to make rich consoles and fit tables to them: tables piped to a file or a CI log are not squeezed into
80 columns, and a table too wide for a terminal leaves out its least needed columns rather than cutting every
column down to a few letters."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 160
WRAPPED_WIDTH = 12  # the least a column that wraps its cells gets


def make_console(stderr: bool = False, **options: Any) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if "COLUMNS" not in os.environ and not stream.isatty():
        options.setdefault("width", PIPED_WIDTH)
    return Console(soft_wrap=True, stderr=stderr, **options)


def fitted_table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
                 wrapped: Sequence[str] = (), left_out_first: Sequence[str] = ()) -> tuple[Table, list[str]]:
    """A table of `rows` that fits the console: columns other than `wrapped` keep each cell on one line, and
    columns of `left_out_first` are left out, in that order, while the table would not fit. Returns the table and
    the columns left out (for a note that names them)."""
    def width(i: int) -> int:
        longest = max(Text.from_markup(cell).cell_len for cell in [columns[i], *(row[i] for row in rows)])
        # a wrapped column needs room for a few words a line (a longer word is folded)
        return min(WRAPPED_WIDTH, longest) if columns[i] in wrapped else longest

    widths = [width(i) for i in range(len(columns))]
    left_out: list[str] = []
    for column in left_out_first:
        needed = sum(widths[i] + 3 for i, name in enumerate(columns) if name not in left_out) + 1  # padding, border
        if needed <= console.width:
            break
        left_out.append(column)
    table = Table(title=title)
    kept = [i for i, name in enumerate(columns) if name not in left_out]
    for i in kept:
        table.add_column(columns[i], no_wrap=columns[i] not in wrapped, min_width=min(widths[i], WRAPPED_WIDTH),
                         overflow="fold" if columns[i] in wrapped else "ellipsis")
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    return table, left_out


def print_fitted(console: Console, table: Table, left_out: Sequence[str]) -> None:
    console.print(table)
    if left_out:
        console.print(f"[dim]left out at this width: {', '.join(left_out)} (a wider terminal or --json shows "
                      f"them)[/dim]", soft_wrap=False)
