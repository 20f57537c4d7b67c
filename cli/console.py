"""One way to make rich consoles and fit tables to them: tables piped to a file or a CI log are not squeezed into
80 columns, and a table too wide for a terminal leaves out its least needed columns rather than cutting every
column down to a few letters."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 160
WRAPPED_WIDTH = 12  # the least a column that wraps its cells gets
TAIL_KEPT_WIDTH = 16  # the least a column whose cells keep their ends gets


def make_console(stderr: bool = False, **options: Any) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if "COLUMNS" not in os.environ and not stream.isatty():
        options.setdefault("width", PIPED_WIDTH)
    return Console(soft_wrap=True, stderr=stderr, **options)


def fitted_table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
                 wrapped: Sequence[str] = (), left_out_first: Sequence[str] = (),
                 tail_kept: str | None = None) -> tuple[Table, list[str]]:
    """A table of `rows` that fits the console: columns other than `wrapped` keep each cell on one line, and
    columns of `left_out_first` are left out, in that order, while the table would not fit. The cells of the
    `tail_kept` column (plain text, not markup) are cut from the front to the width left, keeping their ends (where
    a run's name has its seed). Returns the table and the columns left out (for a note that names them)."""
    tail_index = columns.index(tail_kept) if tail_kept in columns else -1

    def cell_width(markup: str) -> int:  # its longest line (headers may have two)
        return max(line.cell_len for line in Text.from_markup(markup).split())

    def width(i: int) -> int:
        cells = [row[i] for row in rows]
        longest = max([cell_width(columns[i]), *(Text(cell).cell_len if i == tail_index else cell_width(cell)
                                                 for cell in cells)])
        if i == tail_index:
            return min(TAIL_KEPT_WIDTH, longest)
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
    room = max(TAIL_KEPT_WIDTH, console.width - 1 - sum(widths[i] + 3 for i in kept if i != tail_index) - 3)
    cells = [[cut_front(row[i], room) if i == tail_index else row[i] for i in range(len(columns))] for row in rows]
    for i in kept:
        if i == tail_index:
            table.add_column(columns[i], no_wrap=True, min_width=max(len(row[i]) for row in cells) if cells else None)
        else:
            table.add_column(columns[i], no_wrap=columns[i] not in wrapped, min_width=min(widths[i], WRAPPED_WIDTH),
                             overflow="fold" if columns[i] in wrapped else "ellipsis")
    for row in cells:
        table.add_row(*(escape(row[i]) if i == tail_index else row[i] for i in kept))
    return table, left_out


def cut_front(text: str, width: int) -> str:
    """`text` in at most `width` cells, cut from the front when longer: the end stays (…nollm--s1)."""
    if len(text) <= width:
        return text
    return "…" + text[len(text) - width + 1:]


def print_fitted(console: Console, table: Table, left_out: Sequence[str]) -> None:
    console.print(table)
    if left_out:
        names = ", ".join(name.replace("\n", " ") for name in left_out)
        console.print(f"[dim]left out at this width: {names} (a wider terminal or --json shows "
                      f"them)[/dim]", soft_wrap=False)
