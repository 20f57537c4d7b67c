"""The viewer shows what the terminal says of a verdict (issue 44 item 2): a placeholder baseline's note ("any valid
submission succeeds") and the reference ratio ("of reference"), for a folder of runs, a bench and the static report;
its score chart is not scaled to a placeholder (1e10), where the run's scores would sit on the floor."""
from __future__ import annotations

import functools
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import cli
from tests.fixtures.cli import cli_env
from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

mlab = functools.partial(cli.mlab, entry=cli.entry("tests.fixtures.verdict_tasks"))
NOTE = "fixed baseline 1e+10: any valid submission succeeds"


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A run on a task with a placeholder baseline (1e10, lower is better) and one on a task with a recorded
    reference score (5 lines; the run writes 2)."""
    root = tmp_path_factory.mktemp("shown")
    home = root / "home"
    ok(mlab("baseline", "fixture/with-reference", "--runs", "1", home=home))
    ok(mlab("check-task", "fixture/with-reference", "--home", home, home=home))
    runs = root / "runs"
    for task, where in (("fixture/placeholder", "placeholder"), ("fixture/with-reference", "measured")):
        ok(mlab("run", "--task", task, "--agent", "fixture-appender", "--run-dir", runs / where, "--max-steps", 10,
                "--agent-option", "steps=3", home=home))
    return home, runs


class View:
    """`mlab view FOLDER` with the verdict tasks installed, in a subprocess."""

    def __init__(self, runs: Path, home: Path):
        self.proc = subprocess.Popen([*cli.entry("tests.fixtures.verdict_tasks"), "view", str(runs)],
                                     env=cli_env(home=home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.url = next((line.split()[1] for line in self.proc.stdout if line.startswith("open http://")), None)
        assert self.url, self.proc.stderr.read()

    def __enter__(self) -> View:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


CHART = ("var c = document.getElementById('score-chart'); return c && c.querySelectorAll('text').length && {"
         "baselines: c.querySelectorAll('line.baseline').length, labels: Array.prototype.map.call("
         "c.querySelectorAll('text'), function (t) { return t.textContent; })};")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)
def test_the_viewer_shows_a_placeholders_note_the_reference_ratio_and_charts_the_scores(folder, tmp_path):
    home, runs = folder
    with View(runs, home) as view, Browser(tmp_path / "profile") as browser:
        browser.open(view.url + "#run=placeholder")
        note = browser.wait_for("var e = document.getElementById('run-baseline-note'); return e && e.textContent;")
        assert NOTE in note
        chart = browser.wait_for(CHART)
        # the axis spans the run's scores (a few lines), not the placeholder: it is named, not drawn
        assert chart["baselines"] == 0 and any("1.000e+10" in t and "off the chart" in t for t in chart["labels"])
        assert max(float(t) for t in chart["labels"][-4:-2]) < 100, chart["labels"]
        # the run list marks the success as the placeholder's
        cell = browser.run("var tr = document.querySelector('#runs tr[data-id=\"placeholder\"]');"
                           "var td = tr.children[5]; return [td.textContent, td.getAttribute('title')];")
        assert cell == ["yes*", NOTE]

        browser.open(view.url + "#run=measured")
        ratio = browser.wait_for("var e = document.getElementById('run-of-reference'); return e && e.textContent;")
        assert ratio == "0.400"
        assert browser.text("run-baseline-note") is None


def test_a_benchs_rows_carry_the_note_and_the_reference_ratio(tmp_path, monkeypatch):
    """`mlab view` of a bench reads its verdicts from results.db: the note follows from the stored baseline and the
    ratio from the reference check-task recorded, as the report has them."""
    from mlab.core.bench.results import ResultsDB
    from mlab.core.run.scoring import reference_path
    from mlab.core.run.taskdata import TaskHome
    from mlab.core.view.runs import Catalog

    home = tmp_path / "home"
    monkeypatch.setenv("MLAB_HOME", str(home))
    bench = tmp_path / "bench"
    with ResultsDB(bench / "results.db") as db:
        for task, higher, score in (("t-placeholder", 0, 3.0), ("t-ref", 1, 2.0)):
            db.upsert_run(f"{task}|a|-|s0", task=task, agent="a", llm=None, seed=0, run_dir=f"runs/{task}",
                          status="finished", steps=3, final_score=score, higher_is_better=higher)
    conn = sqlite3.connect(bench / "results.db")
    with conn:
        conn.executemany("INSERT INTO verdicts VALUES (?, ?, 'fixed', 1, ?, 1, NULL)",
                         [("t-placeholder|a|-|s0", 1e10, 1.0), ("t-ref|a|-|s0", 1.0, 1.0)])
    conn.close()
    rows = {r["task"]: r for r in Catalog(bench).runs()["runs"]}
    assert rows["t-placeholder"]["baseline_note"] == NOTE and rows["t-ref"]["baseline_note"] is None
    assert rows["t-ref"]["of_reference"] is None
    reference = reference_path(TaskHome(home), "t-ref")  # as check-task records it
    reference.parent.mkdir(parents=True)
    reference.write_text(json.dumps({"task": "t-ref", "score": 5.0, "sandbox": "local"}))
    rows = {r["task"]: r for r in Catalog(bench).runs()["runs"]}
    assert rows["t-ref"]["of_reference"] == pytest.approx(2 / 5)


@pytest.mark.slow
def test_the_static_reports_runs_carry_the_note_and_the_reference_ratio(folder, tmp_path):
    home, runs = folder
    ok(mlab("report", runs, "--no-plots", "--out", tmp_path / "report", home=home))
    data = (tmp_path / "report" / "data.js").read_text()
    listed = {r["key"]: r for r in json.loads(data.split("=", 1)[1].strip().rstrip(";"))["runs"]}
    assert listed["placeholder"]["baseline_note"] == NOTE and listed["placeholder"]["of_reference"] is None
    assert listed["measured"]["of_reference"] == pytest.approx(2 / 5) and listed["measured"]["baseline_note"] is None
