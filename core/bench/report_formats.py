"""The report's tables as data, and the ways they are written out: a terminal table, CSV (numbers, for analysis),
LaTeX (booktabs, for a paper) and JSON. Each table is built once (report.report_tables) and only rendered here,
so every format shows the same rows."""
from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mlab.core.bench.formatting import num, pct, pvalue, ratio, sem_pct, signed_pct
from mlab.core.bench.metrics import Estimate

if TYPE_CHECKING:
    from rich.table import Table

Kind = Literal["text", "int", "pct", "signed_pct", "num", "sem_pct", "ratio", "p"]
FORMATS = ("table", "csv", "latex", "json")


@dataclass(frozen=True)
class Column:
    """One column, defined once: its header, its machine key, how it is shown and which field of a row's item
    it shows (`value`; by default the item's entry or attribute named `key`)."""

    header: str  # as shown to people (may hold a line break)
    key: str  # as written for machines: a CSV header, a JSON key
    kind: Kind = "text"
    fmt: str = ",.0f"  # for kind "num"
    value: Callable[[Any], Any] | None = None
    machine: bool = False  # only in CSV and JSON: not on the terminal nor in LaTeX

    def cell(self, item: Any) -> Any:
        if self.value is not None:
            return self.value(item)
        return item.get(self.key) if isinstance(item, Mapping) else getattr(item, self.key)


@dataclass
class ReportTable:
    key: str  # names the table's file: per_task.csv
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)  # cells by column key: str, int, float, None, Estimate
    caption: str = ""

    def add(self, item: Any) -> None:
        """A row: each column's field of item."""
        self.rows.append({c.key: c.cell(item) for c in self.columns})

    def cells(self, row: dict[str, Any]) -> list[tuple[Column, Any]]:
        return [(c, row.get(c.key)) for c in self.columns]

    @property
    def shown(self) -> list[Column]:
        """The columns people read (terminal, LaTeX); a table without any is for machines only."""
        return [c for c in self.columns if not c.machine]

    def visible_cells(self, row: dict[str, Any]) -> list[tuple[Column, Any]]:
        return [(c, row.get(c.key)) for c in self.shown]


def cell_text(column: Column, value: Any) -> str:
    """A cell as people read it: an estimate with its interval, a p-value, a count."""
    if value is None:
        return "-"
    if isinstance(value, Estimate):
        if column.kind == "pct":
            return pct(value)
        if column.kind == "signed_pct":
            return signed_pct(value)
        if column.kind == "sem_pct":
            return sem_pct(value)
        return num(value, column.fmt)
    if column.kind == "ratio":
        return ratio(float(value))
    if column.kind == "p":
        return pvalue(float(value))
    if column.kind == "pct":
        return f"{float(value):.0%}"
    if column.kind == "signed_pct":
        return f"{float(value):+.1%}"
    if column.kind == "num" and isinstance(value, float):
        return f"{value:{column.fmt}}"
    return str(value)


def _machine_cells(column: Column, value: Any) -> dict[str, Any]:
    """A cell as numbers: an estimate becomes its mean and interval ends (proportions as fractions, not %);
    a standard error column its standard error."""
    if isinstance(value, Estimate):
        if column.kind == "sem_pct":
            return {column.key: value.sem}
        return {column.key: value.mean, f"{column.key}_lo": value.lo, f"{column.key}_hi": value.hi}
    return {column.key: value}


def machine_rows(table: ReportTable) -> list[dict[str, Any]]:
    return [{k: v for column, value in table.cells(row) for k, v in _machine_cells(column, value).items()}
            for row in table.rows]


def to_rich(table: ReportTable) -> Table:
    from rich.markup import escape
    from rich.table import Table

    # names in a table come from a results.db (untrusted): shown as text, never read as rich markup
    out = Table(title=escape(table.title), caption=escape(table.caption) if table.caption else None)
    rows = [[cell_text(c, v) for c, v in table.visible_cells(row)] for row in table.rows]
    for i, column in enumerate(table.shown):
        # as wide as its longest word: a cell wraps between words, never inside one ("improvem|ent")
        words = [w for text in (column.header, *(row[i] for row in rows)) for w in text.split()]
        out.add_column(escape(column.header), overflow="fold", min_width=max(map(len, words), default=1))
    for row in rows:
        out.add_row(*map(escape, row))
    return out


def to_csv(table: ReportTable) -> str:
    rows = machine_rows(table)
    present = {k for row in rows for k in row}
    fields = [k for c in table.columns for k in (c.key, f"{c.key}_lo", f"{c.key}_hi") if k in present or
              (k == c.key and not rows)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, restval="", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def to_json(tables: list[ReportTable]) -> str:
    return json.dumps({t.key: {"title": t.title, "caption": t.caption,
                               "columns": [{"key": c.key, "header": " ".join(c.header.split()), "kind": c.kind}
                                           for c in t.columns],
                               "rows": machine_rows(t)} for t in tables}, indent=1, default=str)


_LATEX_SPECIAL = re.compile(r"([&%$#_{}~^\\])")
_LATEX_REPLACEMENTS = {"~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def latex_escape(text: str) -> str:
    text = _LATEX_SPECIAL.sub(lambda m: _LATEX_REPLACEMENTS.get(m.group(1), "\\" + m.group(1)), text)
    for plain, math in (("±", r"$\pm$"), ("−", "--"), ("≤", r"$\le$"), ("τ", r"$\tau$"), (">", "$>$"), ("<", "$<$")):
        text = text.replace(plain, math)  # text-mode < and > print as other glyphs in LaTeX's default encoding
    return text


def _latex_cell(column: Column, value: Any) -> str:
    text = latex_escape(cell_text(column, value))
    # an interval's dash is a range: an en dash in print
    return re.sub(r"(\d)-(\d)", r"\1--\2", text) if column.kind in ("pct", "num") else text


LATEX_MAX_COLUMNS = 6  # what fits one column of a two-column paper in \small


def to_latex(table: ReportTable) -> str:
    """Booktabs tables (\\usepackage{booktabs}) labelled tab:mlab-KEY. A table wider than LATEX_MAX_COLUMNS is
    split into parts (tab:mlab-KEY-1, -2, ...), each repeating the leading name columns (task, method), so every
    part fits a paper column."""
    shown = table.shown
    keys: list[Column] = []
    for c in shown:
        if c.kind != "text" or len(keys) >= 2:
            break
        keys.append(c)
    rest = [c for c in shown if c not in keys]
    per_part = max(1, LATEX_MAX_COLUMNS - len(keys))
    if len(shown) <= LATEX_MAX_COLUMNS:
        return _latex_float(table, shown, table.key, table.title)
    parts = [rest[i:i + per_part] for i in range(0, len(rest), per_part)]
    return "\n".join(_latex_float(table, keys + part, f"{table.key}-{n}", f"{table.title} ({n} of {len(parts)})")
                     for n, part in enumerate(parts, 1))


def _latex_float(table: ReportTable, columns: list[Column], key: str, title: str) -> str:
    align = "".join("l" if c.kind == "text" else "r" for c in columns)
    head = " & ".join(latex_escape(" ".join(c.header.split())) for c in columns)
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{latex_escape(title)}}}", rf"\label{{tab:mlab-{key.replace('_', '-')}}}",
             rf"\begin{{tabular}}{{{align}}}", r"\toprule", head + r" \\", r"\midrule"]
    lines += [" & ".join(_latex_cell(c, row.get(c.key)) for c in columns) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if table.caption:
        lines.append(rf"\par\smallskip\footnotesize {latex_escape(table.caption)}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
