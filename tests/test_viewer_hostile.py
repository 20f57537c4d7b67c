"""Run and bench folders are untrusted (issue 31, items 1 and 2): every text field of a bench's results.db and of
a run folder carries markup, script and style payloads, and the static report (`mlab report`, opened from a
file:// URL) and `mlab view` show each one as text in a real headless Chromium: no script runs, nothing is
restyled, and no request leaves the page for the listener the payloads name."""
from __future__ import annotations

import fcntl
import html
import json
import os
import re
import shutil
import sqlite3
import threading
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fixtures.bench_cli import REGISTRY
from tests.fixtures.cli import mlab
from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)]

TITLE_SET = "PWNED"
STEPS = 3


def payload(hit: str, tag: str) -> str:
    """Markup that, inserted as HTML, runs script (three ways), makes requests to `hit`, and restyles the page."""
    return (f'{tag}<img src=x onerror="window.pwned=1;document.title=\'{TITLE_SET}\';fetch(\'{hit}/onerror\')">'
            f'<script>window.pwned=2;document.title="{TITLE_SET}"</script><svg onload="window.pwned=3"></svg>'
            f'<img src="{hit}/img"><style>body{{background:red}}</style>"\'><b style="color:red">FAKE</b>')


@pytest.fixture
def listener():
    """A web server on 127.0.0.1 that records every request it gets: the payloads' target."""
    hits: list[str] = []

    class Record(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Record)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def hostile_bench(root: Path, hit: str, numbers_too: bool = True) -> tuple[Path, Path, dict[str, str]]:
    """A real bench of one run, then every text it holds replaced with a payload naming where it came from;
    numbers_too: results.db's number columns (seed, steps) as well (`mlab report` skips such rows as unreadable,
    `mlab view` lists them as the database has them)."""
    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.run.trace_log import STEPS_FILE

    bench = root / "bench"
    built = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--runs", "1", "--intermediate",
                 "--sandbox", "local", "--agent-option", f"steps={STEPS}", "--bench-dir", bench, "--registry", REGISTRY,
                 env={"MLAB_HOME": str(root / "home")})
    assert built.returncode == 0, built.stderr
    p = {name: payload(hit, name) for name in (
        "key", "agent", "llm", "seed", "steps", "failure", "end_reason", "score_error", "orphan_key", "orphan_steps",
        "action", "arg_name", "arg_value", "observation", "entry_name", "entry_value", "trace_end", "warning",
        "errors_log", "call_role", "call_model", "call_content", "completion", "call_error", "config_agent",
        "config_llm", "live_action", "live_arg", "live_output")}
    (old,) = (bench / "runs").iterdir()
    run = bench / "runs" / 'run<img src=x onerror="window.pwned=5">'  # a folder name is text too
    old.rename(run)

    trace = read_trace(run)
    for step in trace.steps:
        step.action.name, step.action.args = p["action"], {p["arg_name"]: p["arg_value"]}
        step.action.entries = {p["entry_name"]: p["entry_value"]}
        step.observation = p["observation"]
    trace.end_reason, trace.errors = p["trace_end"], [p["warning"]]
    trace.config.agent, trace.config.llm = p["config_agent"], p["config_llm"]
    write_trace(run, trace)
    (run / STEPS_FILE).unlink()  # trace.json is the whole trace now
    (run / "errors.log").write_text(p["errors_log"])
    (run / "llm_calls.jsonl").write_text(json.dumps({
        "step": 1, "role": p["call_role"], "model": p["call_model"], "prompt_tokens": 3, "completion_tokens": 2,
        "messages": [{"role": p["call_role"], "content": p["call_content"]}], "completion": p["completion"],
        "error": p["call_error"]}) + "\n")

    conn = sqlite3.connect(bench / "results.db")
    with conn:
        (key,) = conn.execute("SELECT key FROM runs").fetchone()
        conn.execute("UPDATE runs SET key=?, agent=?, llm=?, failure=?, end_reason=?, final_score_error=?, run_dir=?",
                     (p["key"], p["agent"], p["llm"], p["failure"], p["end_reason"], p["score_error"],
                      f"runs/{run.name}"))
        if numbers_too:
            conn.execute("UPDATE runs SET seed=?, steps=?", (p["seed"], p["steps"]))
        conn.execute("UPDATE step_scores SET run_key=?, error=?", (p["key"], p["score_error"]))
        # a run the database lists whose folder is not there: the viewers list it from the database alone
        conn.execute("INSERT INTO runs (key, task, agent, llm, seed, run_dir, status, steps, final_score) "
                     "VALUES (?, 'fixture/counter', ?, ?, ?, 'runs/gone', 'finished', ?, 1.0)",
                     (p["orphan_key"], p["agent"], p["llm"], p["seed"] if numbers_too else 1,
                      p["orphan_steps"] if numbers_too else 2))
    conn.close()
    return bench, run, p


# What every page must end as: no payload ran, restyled or drew anything, and the text is there as text.
CHECK = """
var shown = document.body.textContent;
var styled = Array.prototype.filter.call(document.querySelectorAll('*'), function (e) {
  return e.hasAttribute('style') || e.tagName.toLowerCase() === 'style'; }).length;
var fake = Array.prototype.filter.call(document.querySelectorAll('b'), function (b) {
  return b.textContent === 'FAKE'; });
return {pwned: typeof window.pwned, title: document.title,
        images: document.querySelectorAll('#runs img, #viewer img').length,
        svgs: document.querySelectorAll('#runs svg, #viewer svg:not(.chart)').length, styled: styled, bold: fake.length,
        background: getComputedStyle(document.body).backgroundColor, shown: shown};
"""


class Inline(HTMLParser):
    """What a page written by mlab holds that a strict policy would stop: <style>, style="", on*="" and <script>
    without src (each as it was found)."""

    def __init__(self, page: str):
        super().__init__()
        self.found: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        names = [name for name, _value in attrs]
        if tag == "style" or (tag == "script" and "src" not in names):
            self.found.append(tag)
        self.found.extend(f"{tag} {name}" for name in names if name == "style" or name.startswith("on"))


def assert_inert(browser: Browser, hits: list[str], title: str, expected: list[str]) -> None:
    time.sleep(0.5)  # let any request a payload made arrive
    seen = browser.run(CHECK)
    shown = seen.pop("shown")
    assert seen == {"pwned": "undefined", "title": title, "images": 0, "svgs": 0, "styled": 0, "bold": 0,
                    "background": "rgba(0, 0, 0, 0)"}
    assert hits == []
    missing = [text[:40] for text in expected if text not in shown]
    assert not missing, f"not shown as text: {missing}"


def visit_every_step(browser: Browser, base: str, run_id: str, p: dict[str, str]) -> list[str]:
    """Open each step of the run, open every <details>, and return the texts seen on the way."""
    seen = []
    for step in range(1, STEPS + 1):
        browser.open(f"{base}#run={urllib.parse.quote(run_id, safe='')}&step={step}")
        browser.wait_for("var e = document.getElementById('step'); return e && e.getAttribute('data-step') === "
                         "arguments[0] && document.getElementById('step-action').textContent === arguments[1];",
                         str(step), p["action"])
        browser.run("document.querySelectorAll('details').forEach(function (d) { d.open = true; });")
        seen.append(browser.run("return document.body.textContent;"))
    return seen


def test_the_static_report_shows_a_hostile_bench_as_text_under_a_strict_csp(tmp_path, listener):
    hit, hits = listener
    bench, _run, p = hostile_bench(tmp_path, hit, numbers_too=False)
    reported = mlab("report", bench, "--no-plots", env={"MLAB_HOME": str(tmp_path / "home")})
    assert reported.returncode == 0, reported.stderr
    out = bench / "report"
    page = (out / "index.html").read_text()
    # the page itself: a strict policy first in <head>, no inline script or style for it to allow
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert policy and page.index(policy.group(0)) < page.index("<title>")
    rules = {r.split()[0]: r.split()[1:] for r in policy.group(1).split(";") if r.strip()}
    assert rules["default-src"] == ["'none'"] and rules["script-src"] == ["'self'"]
    assert rules["style-src"] == ["'self'"]
    assert Inline(page).found == []  # the summary tables hold the payloads as text
    assert p["key"] not in page and html.escape(p["agent"]) in page

    url = out.joinpath("index.html").resolve().as_uri()
    with Browser(tmp_path / "profile") as browser:
        browser.open(url)
        title = browser.run("return document.title;")
        browser.wait_for("return document.querySelectorAll('#runs tr[data-id]').length === 2;")
        assert_inert(browser, hits, title, [p["key"], p["agent"], p["llm"], p["failure"], p["orphan_key"]])
        run_id = browser.run("return document.querySelector('#runs tr[data-id]').getAttribute('data-id');")
        texts = visit_every_step(browser, url, run_id, p)
        assert_inert(browser, hits, title, [
            p["action"], json.dumps(p["arg_name"]), json.dumps(p["arg_value"]), p["observation"], p["entry_name"],
            p["entry_value"], p["errors_log"], p["call_content"], p["completion"], p["call_model"], p["call_error"]])
        assert all(p["observation"] in text for text in texts)


def test_mlab_view_shows_a_hostile_bench_as_text_under_a_strict_csp(tmp_path, listener):
    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.view.live import LIVE_FILE, RUN_LOCK_FILE
    from mlab.core.view.server import Viewer

    hit, hits = listener
    bench, run, p = hostile_bench(tmp_path, hit)
    # the run is going on (a process holds its lock) and its live step carries payloads as well
    trace = read_trace(run)
    trace.status, trace.end_reason = "running", None
    write_trace(run, trace)
    (run / LIVE_FILE).write_text(json.dumps({"step": STEPS + 1, "action": p["live_action"],
                                             "args": {"x": p["live_arg"]}, "started": time.time() - 25,
                                             "output_tail": p["live_output"], "pid": os.getpid()}))
    with open(run / RUN_LOCK_FILE, "w") as lock, Viewer(bench) as viewer, Browser(tmp_path / "profile") as browser:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        browser.open(viewer.url)
        title = browser.run("return document.title;")
        browser.wait_for("return document.querySelectorAll('#runs tr').length >= 2;")
        run_id = f"runs/{run.name}"
        visit_every_step(browser, viewer.url, run_id, p)
        browser.wait_for("var e = document.getElementById('live-action'); return e && e.textContent;")
        assert_inert(browser, hits, title, [
            p["action"], json.dumps(p["arg_name"]), json.dumps(p["arg_value"]), p["observation"], p["entry_name"],
            p["entry_value"], p["warning"], p["errors_log"], p["call_content"], p["completion"], p["call_model"],
            p["call_error"],
            p["config_agent"], p["config_llm"], p["live_action"], p["live_output"], p["failure"],
            p["orphan_steps"], run.name])
        # the page and its assets: no inline script or style anywhere, and a policy that would stop them
        with urllib.request.urlopen(viewer.url, timeout=30) as response:
            csp, body = response.headers["Content-Security-Policy"], response.read()
        assert "style-src 'self';" in csp + ";" and "unsafe-inline" not in csp
        assert Inline(body.decode()).found == []


def test_the_report_copies_no_run_folder_outside_the_bench(tmp_path, listener):
    """results.db naming a run_dir outside the bench: the report's viewer shows no trace from there."""
    hit, _hits = listener
    bench, run, _p = hostile_bench(tmp_path, hit, numbers_too=False)
    outside = tmp_path / "outside-run"
    shutil.copytree(run, outside, symlinks=True)
    (outside / "errors.log").write_text("SECRET-FROM-OUTSIDE")
    shutil.rmtree(run)
    conn = sqlite3.connect(bench / "results.db")
    with conn:
        conn.execute("UPDATE runs SET run_dir=? WHERE run_dir LIKE 'runs/run%'", (f"../{outside.name}",))
    conn.close()
    reported = mlab("report", bench, "--no-plots", env={"MLAB_HOME": str(tmp_path / "home")})
    assert reported.returncode == 0, reported.stderr
    written = "".join(f.read_text(errors="replace") for f in (bench / "report").rglob("*") if f.is_file())
    assert "SECRET-FROM-OUTSIDE" not in written
