"""A run's method label (--label) in `mlab view` and the report's page."""
from __future__ import annotations

import pytest

from tests.fixtures.cli import entry, mlab

GATED = entry("tests.fixtures.gated_run", "mlab")  # the CLI with the bench fixtures and fixture-gated registered


@pytest.mark.slow
def test_the_viewer_shows_a_runs_method_label_in_its_header_and_the_overview(tmp_path):
    """A run started with --label names its method in `mlab view` (run header, overview) and in the report's page."""
    from mlab.core.view.server import Viewer
    from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(MISSING)
    runs, home = tmp_path / "runs", tmp_path / "home"
    for name, label in (("labelled", ["--label", "My method"]), ("plain", [])):
        done = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", runs / name,
                    "--sandbox", "local", *label, entry=GATED, home=home)
        assert done.returncode == 0, done.stderr
    with Viewer(runs) as viewer, Browser(tmp_path / "profile") as browser:
        browser.open(viewer.url)
        browser.wait_for("return document.querySelectorAll('#groups tbody tr').length === 2;", timeout_s=60)
        methods = browser.run("return Array.prototype.map.call(document.querySelectorAll('#groups tbody tr'),"
                              " function (tr) { return tr.querySelector('td.method').textContent; });")
        assert sorted(methods) == ["My method", "fixture-appender"], methods
        browser.open(viewer.url + "#run=labelled")
        shown = browser.wait_for("var e = document.getElementById('run-method'); return e && e.textContent;")
        assert shown == "method My method", shown
    report = mlab("report", runs, "--no-plots", entry=GATED, home=home)
    assert report.returncode == 0, report.stderr
    with Browser(tmp_path / "profile2") as browser:
        browser.open((runs / "report" / "index.html").as_uri() + "#run=labelled")
        shown = browser.wait_for("var e = document.getElementById('run-method'); return e && e.textContent;")
        assert shown == "method My method", shown
