"""The static HTML report: summary tables, plots and a trace viewer that works from a file:// URL, no server.

index.html holds the summary and the viewer; each run's steps are in runs/<id>.js, loaded with a script tag
when the run is opened (file:// pages may load scripts, not fetch JSON), so a large bench opens quickly.
"""
from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.bench.results import Row
from mlab.core.run.trace import read_trace
from mlab.core.view.runs import errors_log, step_payloads

if TYPE_CHECKING:
    from rich.table import Table as RichTable

    from mlab.core.bench.report import ReportData

# The page and its script are package data so editors and linters see them as HTML and JavaScript.
PAGE_FILE = "report_viewer.html"
SCRIPT_FILE = "report_viewer.js"
PLACEHOLDER = re.compile(r"%(TITLE|SUMMARY|FIGURES|DATA|SCRIPT)%")


def _js(value: object) -> str:
    """JSON safe to put inside a <script> element."""
    return (json.dumps(value, default=str).replace("</", "<\\/").replace("\u2028", "\\u2028")
            .replace("\u2029", "\\u2029"))


def run_data(run_dir: Path, row: Row, scores: list[Row]) -> dict[str, Any]:
    """Everything the viewer shows of one run; its steps as `mlab view` shows them."""
    trace = read_trace(run_dir)
    steps = step_payloads(run_dir, trace, {s["step"]: (s["score"], s["error"]) for s in scores})
    return {"key": row["key"], "status": trace.status, "end_reason": trace.end_reason,
            "final_score": row["final_score"], "final_score_error": row["final_score_error"], "steps": steps,
            "usage": trace.usage.model_dump(), "cost_text": trace.usage.cost_text(), "time_s": trace.total_time_s,
            "errors_log": errors_log(run_dir)}


def _package_text(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def fill_page(values: dict[str, str]) -> str:
    """The page with each %NAME% placeholder replaced in one pass, so inserted text (a task name, the run
    data) is never itself searched for placeholders."""
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], _package_text(PAGE_FILE))


def write_html(data: ReportData, out_dir: Path, images: list[Path]) -> Path:
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    index = []
    for n, row in enumerate(data.rows, 1):
        rid = f"r{n:04d}"
        run_dir = data.bench_dir / row["run_dir"]
        has_trace = (run_dir / "trace.json").is_file()
        if has_trace:
            payload = run_data(run_dir, row, data.step_scores.get(row["key"], []))
            (runs_dir / f"{rid}.js").write_text(f"MLAB_LOADED({_js(rid)}, {_js(payload)});\n", encoding="utf-8")
        verdict = data.verdicts.get(row["key"])
        imp = verdict.improvement if verdict else None
        index.append({"id": rid, "key": row["key"], "task": row["task"], "agent": row["agent"], "llm": row["llm"],
                      "seed": row["seed"], "status": row["status"], "failure": row["failure"],
                      "end_reason": row["end_reason"], "final_score": row["final_score"], "improvement": imp,
                      "steps": row["steps"], "tokens": (row["prompt_tokens"] or 0) + (row["completion_tokens"] or 0),
                      "cost_usd": row["cost_usd"], "time_s": row["time_s"], "has_trace": has_trace,
                      "baseline": data.baselines.get(row["task"]),
                      "higher_is_better": (bool(row["higher_is_better"]) if row["higher_is_better"] is not None
                                           else True)})

    summary = _summary(data)
    figures = "".join(f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}"></figure>'
                      for p in images)
    page = fill_page({"TITLE": html.escape(f"mlab bench {data.bench_dir.name}"), "SUMMARY": summary,
                      "FIGURES": figures, "DATA": _js({"runs": index}), "SCRIPT": _package_text(SCRIPT_FILE)})
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


def _summary(data: ReportData) -> str:
    """Every table the terminal report prints (the same rich Tables, so the two never drift apart), then the
    baselines' sources, an unconfined-run warning when there is one, and the legend."""
    from mlab.core.bench.report import LEGEND, tables

    parts = [rich_table_html(t) for t in tables(data)]
    if data.baseline_sources:
        parts.append("<p class='baselines'>baselines — " + html.escape(", ".join(
            f"{task}: {source}" for task, source in data.baseline_sources.items())) + "</p>")
    if data.unconfined_runs:
        parts.append(f"<p class='err'>warning: {len(data.unconfined_runs)} run(s) ran agent code unconfined "
                     "(--sandbox unconfined): their scores prove nothing</p>")
    if data.validated_runs:
        parts.append(f"<p>note: {len(data.validated_runs)} run(s) could score predictions on a validation split "
                     "(--allow-validate)</p>")
    parts.append("<dl class='legend'>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
                                                 for k, v in LEGEND.items()) + "</dl>")
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
