"""Issue 44, item 13: what a cell says is what its header says. `mlab tasks`' baseline is the baseline score (a
duration was shown there); an unpriced group of runs costs "unpriced", not $0.0000; a run still going has no
success yet; the report's cost panel says which agents it leaves out for want of a price."""
from __future__ import annotations

import json

import pytest

from tests.fixtures.cli import mlab_in_process


@pytest.mark.slow  # over 2 s on two cores
def test_tasks_shows_the_baseline_score_under_baseline_and_the_starters_time_apart(tmp_path):
    home = tmp_path / "home"
    measured = mlab_in_process("baseline", "lite/wine", "--runs", "1", "--sandbox", "local", home=home)
    assert measured.returncode == 0, measured.stderr
    score = json.loads(mlab_in_process("tasks", "--json", home=home).stdout)
    wine = next(row for row in score if row["name"] == "lite/wine")
    assert wine["baseline"] is not None and wine["baseline_source"].startswith("measured"), wine
    shown = mlab_in_process("tasks", home=home, env={"COLUMNS": "250"})
    header = next(line for line in shown.stdout.splitlines() if "task" in line and "metric" in line)
    cells = [c.strip() for c in header.strip("┃│ ").split("┃")]
    row = next(line for line in shown.stdout.splitlines() if line.startswith("│ lite/wine "))
    values = dict(zip(cells, (c.strip() for c in row.strip("│ ").split("│")), strict=True))
    assert values["baseline"] == f"{wine['baseline']:.6g}", values
    assert values["starter time"].endswith("s"), values
    digits = next(line for line in shown.stdout.splitlines() if line.startswith("│ lite/digits "))
    assert dict(zip(cells, (c.strip() for c in digits.strip("│ ").split("│")), strict=True))["baseline"] == \
        "not measured"


@pytest.mark.slow  # over 2 s on two cores
def test_the_reports_cost_panel_names_the_agents_it_leaves_out_for_want_of_a_price(tmp_path, monkeypatch):
    import sqlite3

    import matplotlib

    matplotlib.use("Agg")
    from mlab.core.bench import report as rep
    from mlab.core.bench.report_plots import figures
    from tests.fixtures.bench_cli import report_bench

    bench, home = report_bench(tmp_path)
    conn = sqlite3.connect(bench / "results.db")
    with conn:  # fixture-appender's runs called a model without a price
        conn.execute("UPDATE runs SET cost_usd = NULL WHERE agent = 'fixture-appender'")
    conn.close()
    monkeypatch.setenv("MLAB_HOME", home["MLAB_HOME"])
    figure = figures(rep.load_any(bench))["success_vs_cost"]
    labels = [ax.get_xlabel() for ax in figure.axes]
    assert "no price: fixture-appender" in labels[1] and "no price" not in labels[0], labels
