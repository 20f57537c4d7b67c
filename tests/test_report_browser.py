"""The HTML trace viewer in a real headless Chromium, opened from a file:// URL with no server."""
from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from tests.fixtures.bench_cli import REGISTRY
from tests.fixtures.cli import mlab

CHROMIUM = next(filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))), None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium chromium-driver; "
                             "`make test` installs it when run as root)")]


class TextById(HTMLParser):
    """The text inside each element that has an id (script contents excluded)."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []
        self.text: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "meta", "input", "link", "circle", "line", "polyline"):
            return
        self.stack.append((tag, dict(attrs).get("id")))
        if self.stack[-1][1]:
            self.text.setdefault(self.stack[-1][1], "")

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if any(t == "script" for t, _ in self.stack):
            return
        for _tag, ident in self.stack:
            if ident:
                self.text[ident] += data


def dump_dom(url: str, profile) -> TextById:
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
         "--virtual-time-budget=5000", "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    parser = TextById()
    parser.feed(result.stdout)
    return parser


def test_viewer_shows_a_steps_thought_action_observation_and_diff(tmp_path):
    out = tmp_path / "bench"
    built = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,baseline", "--runs", "1",
                 "--intermediate", "--agent-option", "steps=4", "--bench-dir", out, "--registry", REGISTRY)
    assert built.returncode == 0, built.stderr
    reported = mlab("report", out, "--no-plots")
    assert reported.returncode == 0, reported.stderr
    index = (out / "report" / "index.html").resolve().as_uri()

    page = dump_dom(index, tmp_path / "profile1")
    assert "runs" in page.text and "fixture-appender" in page.text["runs"]  # the run list is drawn by the script
    assert page.text.get("viewer", "") == ""

    # runs are listed by task, agent, model, seed: r0001 is the baseline agent, r0002 fixture-appender
    page = dump_dom(f"{index}#run=r0002&step=2", tmp_path / "profile2")
    assert page.text["step-action"] == "Append File"
    assert page.text["step-observation"] == "Appended 7 characters to log.txt."
    assert '"file_name": "log.txt"' in page.text["step-args"]
    assert "adding line 2" in page.text["step-thought"]
    assert "+line 2" in page.text["step-diff"] and "log.txt" in page.text["step-diff"]
    assert "fixture-appender" in page.text["run-title"]
    assert page.text["run-cost"] == "none (no model calls)"  # a model without a price would read "unknown"
    assert "score-chart" in page.text  # the score-over-steps chart

    page = dump_dom(f"{index}#run=r0001&step=1", tmp_path / "profile3")
    assert page.text["step-action"] == "Execute Script"
    assert page.text["step-observation"].startswith("The script ran. Output:") and "count 1" in page.text[
        "step-observation"]
