"""The static HTML report shows every table the terminal report prints, with the same cells."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from tests.fixtures.bench_cli import mlab, report_bench


class Tables(HTMLParser):
    """Each <table> of a page as its heading (the <h3> before it) and its rows of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.heading = ""
        self.in_heading = False
        self.row: list[str] | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "h3":
            self.in_heading, self.heading = True, ""
        elif tag == "table":
            self.tables[self.heading] = []
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "h3":
            self.in_heading = False
        elif tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append("".join(self.cell))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables[self.heading].append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.in_heading:
            self.heading += data
        if self.cell is not None:
            self.cell.append(data)


def table(tables: Tables, title_start: str) -> list[list[str]]:
    (title,) = [t for t in tables.tables if t.startswith(title_start)]
    return tables.tables[title]


@pytest.mark.slow
def test_html_report_has_the_threshold_overall_and_failure_tables_of_the_terminal(tmp_path):
    out, home = report_bench(tmp_path)
    result = mlab("report", out, "--no-plots", "--compare", "fixture-appender", "baseline", extra_env=home)
    assert result.returncode == 0, result.stderr
    terminal_titles = ("Runs per task and agent", "Success rate by improvement threshold", "Overall",
                       "Performance ratios", "Why runs have no valid final submission", "Paired comparison")
    page = Tables()
    page.feed((out / "report" / "index.html").read_text())
    for title in terminal_titles:
        assert title in result.stdout
        assert any(t.startswith(title) for t in page.tables), (title, list(page.tables))

    thresholds = table(page, "Success rate by improvement threshold")
    from mlab.core.bench.metrics import THRESHOLDS

    assert thresholds[0] == ["task", "agent", *(f">{t:.0%}" for t in THRESHOLDS)]
    appender = dict(zip(thresholds[0], next(r for r in thresholds if r[1] == "fixture-appender"), strict=True))
    assert appender[">10%"] == "100% (44-100)"  # 3 of 3 runs, the terminal's Wilson interval
    failures = table(page, "Why runs have no valid final submission")
    header, rows = failures[0], {r[0]: dict(zip(failures[0], r, strict=True)) for r in failures[1:]}
    assert {"invalid_format", "out_of_memory", "no_submission"} <= set(header)
    assert (rows["fixture-scenario"]["invalid_format"], rows["fixture-scenario"]["out_of_memory"],
            rows["fixture-scenario"]["no_submission"]) == ("1", "1", "1")
    overall = {r[0]: r for r in table(page, "Overall")[1:]}
    assert set(overall) == {"baseline", "fixture-appender", "fixture-scenario"}
    assert re.fullmatch(r"1", overall["fixture-appender"][7])  # AUP, as in the terminal
    # cells are text, never markup: nothing of rich's "[red]" survives, and table captions come along
    assert "[red]" not in str(page.tables) and "comparable to the paper" in (out / "report" / "index.html").read_text()
