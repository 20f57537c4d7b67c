"""The static HTML report: summary tables, plots and the run viewer, working from a file:// URL with no server.

The viewer is `mlab view`'s own (core/view/assets.py), copied beside index.html with its data: data.js lists the
runs, runs/<file>.js holds each run's detail as `mlab view` serves it (loaded with a script tag when the run is
opened: file:// pages may load scripts, not fetch JSON), so a large bench opens quickly. Bench folders are
untrusted: the page allows only its own files (a Content-Security-Policy in a <meta>), the summary's text is
escaped here, and the viewer builds everything else from data.js as text.
"""
from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.bench.results import Row
from mlab.core.run.trace import json_safe
from mlab.core.view import assets
from mlab.core.view.runs import Catalog

if TYPE_CHECKING:
    from rich.table import Table as RichTable

    from mlab.core.bench.report import ReportData

# The page is package data so editors and linters see it as HTML.
PAGE_FILE = "report_viewer.html"
DATA_FILE = "data.js"
PLACEHOLDER = re.compile(r"%(TITLE|CSP|SUMMARY|FIGURES)%")


def _js(value: object) -> str:
    """JSON as a JavaScript expression (finite numbers, valid strings)."""
    return (json.dumps(json_safe(value, limit=None), allow_nan=False).replace("</", "<\\/")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def fill_page(values: dict[str, str]) -> str:
    """The page with each %NAME% placeholder replaced in one pass, so inserted text (a task name) is never itself
    searched for placeholders."""
    page = resources.files(__package__).joinpath(PAGE_FILE).read_text(encoding="utf-8")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], page)


def catalog_id(data: ReportData, row: Row) -> str:
    """The row's run folder as a path under the report's folder; a folder results.db names outside it is no run
    of it (and so is never read)."""
    given = Path(str(row["run_dir"]))
    if given.is_absolute():
        try:
            given = given.relative_to(data.bench_dir.resolve())
        except ValueError:
            return ""
    return given.as_posix()


def _judged(data: ReportData, row: Row, n: int, found: bool) -> dict[str, Any]:
    """What the report, not the run folder, says of a run: its key, the score it was judged by and the verdict."""
    verdict, full = data.verdicts.get(row["key"]), data.judged.get(row["key"])
    return {"id": f"r{n:04d}", "file": f"r{n:04d}" if found else None, "key": row["key"], "name": row["key"],
            "task": row["task"], "agent": row["agent"], "llm": row["llm"], "seed": row["seed"],
            # the method label as the report's tables name it (--label, or agent (model) without paths)
            "method": next((r.label for r in data.records if r.key == row["key"]), row["agent"]),
            "failure": row["failure"], "final_score": row["final_score"],
            "final_score_error": row["final_score_error"], "baseline": data.baselines.get(row["task"]),
            "improvement": verdict.improvement if verdict else None,
            "success": verdict.success if verdict else None, "baseline_note": verdict.note if verdict else None,
            "of_reference": full.of_reference if full else None}


def write_html(data: ReportData, out_dir: Path, images: list[Path], tables: list[RichTable],
               legend: dict[str, str]) -> Path:
    """The report's page in out_dir, showing the terminal report's own tables and legend (never drifting apart)."""
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(data.bench_dir)
    listed = {r["id"]: r for r in catalog.runs()["runs"] if r["id"] is not None}
    details = catalog.details()
    index = []
    for n, row in enumerate(data.rows, 1):
        rid = catalog_id(data, row)
        judged = _judged(data, row, n, rid in details)
        cost = row["cost_usd"]
        fallback = {"status": row["status"], "steps": row["steps"], "end_reason": row["end_reason"],
                    "cost_text": f"${cost:.4f}" if isinstance(cost, (int, float)) else None}
        index.append({**listed.get(rid, fallback), **judged, "live": None})
        if rid in details:
            detail = details[rid]
            detail["summary"] = {**detail["summary"], **judged, "live": None}
            detail["baseline"] = judged["baseline"]
            (runs_dir / f"{judged['file']}.js").write_text(f"MLAB_RUN({_js(judged['file'])}, {_js(detail)});\n",
                                                          encoding="utf-8")
    (out_dir / DATA_FILE).write_text(f"window.MLAB_DATA = {_js({'runs': index})};\n", encoding="utf-8")
    for name in (assets.SCRIPT, assets.STYLE):
        (out_dir / name).write_bytes(assets.read(name))

    figures = "".join(f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}"></figure>'
                      for p in images)
    page = fill_page({"TITLE": html.escape(f"mlab bench {data.bench_dir.name}"),
                      "CSP": html.escape(assets.CSP, quote=False), "SUMMARY": _summary(data, tables, legend),
                      "FIGURES": figures})
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


def _summary(data: ReportData, tables: list[RichTable], legend: dict[str, str]) -> str:
    """Every table the terminal report prints, then the baselines' sources, an unconfined-run warning when there
    is one, and the legend."""
    parts = [rich_table_html(t) for t in tables]
    if data.baseline_sources:
        parts.append("<p class='baselines'>baselines — " + html.escape(", ".join(
            f"{task}: {source}" for task, source in data.baseline_sources.items())) + "</p>")
    if data.unconfined_runs:
        parts.append(f"<p class='err'>warning: {len(data.unconfined_runs)} run(s) ran agent code unconfined "
                     "(--sandbox unconfined): their scores prove nothing</p>")
    if data.validated_runs:
        parts.append(f"<p>note: {len(data.validated_runs)} run(s) could score predictions on a validation split "
                     "(--allow-validate)</p>")
    if line := data.hardware_line():
        parts.append(f"<p class='hardware'>{html.escape(line)}</p>")
    parts.append("<dl class='legend'>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                                                 for k, v in legend.items()) + "</dl>")
    return "".join(parts)


def _plain(cell: object) -> str:
    """A cell's text without rich markup ("[red]…[/red]"), escaped for HTML."""
    from rich.text import Text

    text = cell.plain if isinstance(cell, Text) else Text.from_markup(cell).plain if isinstance(cell, str) \
        else str(cell)
    return html.escape(text)


def rich_table_html(table: RichTable) -> str:
    """A terminal table as an HTML table: its title as a heading, its caption below it."""
    title = f"<h3>{_plain(table.title)}</h3>" if table.title else ""
    caption = f"<p class='caption'>{_plain(table.caption)}</p>" if table.caption else ""
    headers = [_plain(c.header).replace("\n", " ") for c in table.columns]
    columns = [list(c.cells) for c in table.columns]
    rows = [[_plain(column[i]) if i < len(column) else "" for column in columns] for i in range(table.row_count)]
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"{title}<table class='report'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{caption}"
