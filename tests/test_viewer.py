"""The static HTML report shows every table the terminal report prints, with the same cells."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.fixtures.bench_cli import REGISTRY, REPO, report_bench
from tests.fixtures.cli import mlab, mlab_in_process
from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser


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
    result = mlab("report", out, "--no-plots", "--compare", "fixture-appender", "baseline", env=home)
    assert result.returncode == 0, result.stderr
    terminal_titles = ("Runs per task and agent", "Success rate by improvement threshold", "Overall",
                       "Performance ratios", "Why runs have no valid final submission", "Paired comparison")
    page = Tables()
    page.feed((out / "report" / "index.html").read_text())
    for title in terminal_titles:
        assert title in result.stdout
        assert any(t.startswith(title) for t in page.tables), (title, list(page.tables))

    # the cells are the terminal's: the same numbers, formatted the same way (report.json holds them)
    from mlab.core.bench.formatting import pct
    from mlab.core.bench.metrics import THRESHOLDS, Estimate

    groups = {g["label"]: g for g in json.loads((out / "report" / "report.json").read_text())["groups"]}
    thresholds = table(page, "Success rate by improvement threshold")
    assert thresholds[0] == ["task", "agent", *(f">{t:.0%}" for t in THRESHOLDS)]
    for row in thresholds[1:]:
        success = groups[row[1]]["success"]
        assert row[2:] == [pct(Estimate(**success[str(round(t * 100))])) for t in THRESHOLDS], row
    failures = table(page, "Why runs have no valid final submission")
    header, rows = failures[0], {r[0]: dict(zip(failures[0], r, strict=True)) for r in failures[1:]}
    from mlab.core.bench.results import FAILURES

    assert header[0] == "agent" and header[1:] and set(header[1:]) <= set(FAILURES)
    assert set(rows) == {label for label, g in groups.items() if g["failures"]}
    for label, counts in rows.items():
        assert {k: int(v) for k, v in counts.items() if k != "agent" and v != "0"} == groups[label]["failures"]
    overall = {r[0]: r for r in table(page, "Overall")[1:]}
    assert set(overall) == {"baseline", "fixture-appender", "fixture-scenario"}
    # cells are text, never markup: nothing of rich's "[red]" survives, and table captions come along
    assert "[red]" not in str(page.tables) and "comparable to the paper" in (out / "report" / "index.html").read_text()


# ---- mlab view: the server ------------------------------------------------------------------------------
def _get(url: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _run(run_dir: Path, agent: str = "fixture-stepper", llm: str | None = None, **options) -> None:
    from mlab.core.models import RunConfig
    from mlab.core.run.runner import Runner
    from tests.fixtures.bench_plugins import bench_registry

    config = RunConfig(task="fixture/counter", agent=agent, llm=llm, max_steps=10, action_timeout_s=60,
                       agent_options=options)
    Runner(run_dir, config, bench_registry(), warn=lambda _text: None).start()


@pytest.fixture(scope="module")
def runs_folder(tmp_path_factory):
    """runs/plain (4 steps), runs/nested/llm (model calls, one without a price), and hostile folders."""
    root = tmp_path_factory.mktemp("view") / "runs"
    _run(root / "plain", steps=4)
    replies = root.parent / "replies.jsonl"
    replies.write_text("\n".join(json.dumps(r) for r in (
        {"completion": "first", "prompt_tokens": 11, "completion_tokens": 3, "cost_usd": 0.002},
        {"completion": "second", "prompt_tokens": 13, "completion_tokens": 4},  # a model without a price
        {"completion": "done", "prompt_tokens": 17, "completion_tokens": 5, "cost_usd": 0.001})) + "\n")
    _run(root / "nested" / "llm", agent="fixture-llm-stepper", llm=f"scripted:{replies}", steps=3)
    secret = root.parent / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    # a run elsewhere reached through a link, and a run whose trace is a link: neither is listed
    _run(root.parent / "elsewhere", steps=2)
    (root / "linked").symlink_to(root.parent / "elsewhere")
    (root / "fake").mkdir()
    (root / "fake" / "trace.json").symlink_to(root.parent / "elsewhere" / "trace.json")
    return root, secret


def test_view_lists_runs_found_recursively_and_not_through_links(runs_folder):
    from mlab.core.view.runs import find_runs

    root, _secret = runs_folder
    assert list(find_runs(root)) == ["nested/llm", "plain"]
    assert list(find_runs(root / "plain")) == ["."]  # one run


def test_view_shows_model_calls_with_tokens_and_unknown_cost(runs_folder):
    from mlab.core.view.server import Viewer

    root, _secret = runs_folder
    with Viewer(root) as viewer:
        status, _headers, body = _get(viewer.url + "api/runs")
        assert status == 200
        runs = {r["id"]: r for r in json.loads(body)["runs"]}
        assert runs["plain"]["status"] == "finished" and runs["plain"]["steps"] == 4
        llm = runs["nested/llm"]
        # 3 answered calls, one unpriced: the run's cost is the priced part plus an unknown, never "$0"
        assert (llm["calls"], llm["unpriced_calls"], llm["cost_usd"]) == (3, 1, pytest.approx(0.003))
        assert llm["cost_text"].startswith("$0.0030 + unknown") and runs["plain"]["cost_text"] == "-"
        status, _headers, body = _get(viewer.url + "api/run?id=nested/llm")
        detail = json.loads(body)
        calls = detail["calls"]
        assert [(c["step"], c["prompt_tokens"], c["completion_tokens"], c["cost_usd"]) for c in calls] == [
            (1, 11, 3, 0.002), (2, 13, 4, None), (3, 17, 5, 0.001)]
        assert calls[0]["completion"] == "first" and "step 1" in calls[0]["messages"][-1]["content"]
        assert [s["entries"] for s in detail["steps"][:2]] == [{"thought": "first"}, {"thought": "second"}]
        # the page asks only for what it does not have
        status, _headers, body = _get(viewer.url + f"api/run?id=nested/llm&have_steps=2&have_calls=3"
                                                   f"&started={detail['summary']['started_at']}")
        again = json.loads(body)
        assert (again["steps_from"], len(again["steps"]), again["calls"]) == (2, 1, [])


@pytest.mark.parametrize("path", [
    "api/run?id=../../etc", "api/run?id=%2e%2e%2f%2e%2e%2fetc", "api/run?id=/etc", "api/run?id=linked",
    "api/run?id=fake", "../../secret.txt", "%2e%2e/%2e%2e/secret.txt", "..%2f..%2fsecret.txt", "viewer.js/../../x",
    "runs/plain/trace.json", "plain/trace.json", "/etc/passwd"])
def test_view_urls_never_reach_outside_the_runs(runs_folder, path):
    from mlab.core.view.server import Viewer

    root, _secret = runs_folder
    with Viewer(root) as viewer:
        status, _headers, body = _get(viewer.url + path)
    assert status == 404 and b"TOP-SECRET" not in body and b"fixture/counter" not in body


def test_view_refuses_other_hosts_and_forbids_inline_scripts(runs_folder):
    from mlab.core.view.server import Viewer

    root, _secret = runs_folder
    with Viewer(root) as viewer:
        assert viewer.url.startswith("http://127.0.0.1:")
        status, headers, body = _get(viewer.url)
        assert status == 200 and b'<script src="/viewer.js">' in body
        policy = headers["Content-Security-Policy"]  # injected inline script or style never applies
        assert "script-src 'self';" in policy and "style-src 'self';" in policy and "unsafe" not in policy
        # a page of another site that points a name at 127.0.0.1 (DNS rebinding) is refused
        status, _headers, body = _get(viewer.url + "api/runs", host="evil.example:80")
        assert status == 403 and b"plain" not in body


def test_view_reads_snapshots_as_untrusted(runs_folder, tmp_path):
    """A run folder that names files outside it (object names, snapshot names, links) shows none of them."""
    from mlab.core.models import Trace
    from mlab.core.run.trace import write_trace
    from mlab.core.view.server import Viewer

    root, secret = runs_folder
    run = tmp_path / "runs" / "hostile"
    shutil.copytree(root / "plain", run, symlinks=True)
    snapshots = run / "snapshots"
    for name in ("step_0001.json", "step_0002.json"):
        (snapshots / name).unlink()
    linked = "a" * 64
    (run / "objects" / "aa").mkdir(exist_ok=True)
    (run / "objects" / "aa" / linked).symlink_to(secret)
    (snapshots / "step_0001.json").write_text(json.dumps({
        "up.txt": {"sha256": "../../../../" + str(secret), "size": 10, "mode": 420},
        "linked.txt": {"sha256": linked, "size": 10, "mode": 420},
        "sub": {"tree": "../../../secret"}}))
    (snapshots / "step_0002.json").symlink_to(secret)
    trace = Trace.model_validate_json((run / "trace.json").read_text())
    trace.steps[2].snapshot = "../../../secret"
    write_trace(run, trace)
    with Viewer(tmp_path / "runs") as viewer:
        status, _headers, body = _get(viewer.url + "api/run?id=hostile")
    assert status == 200 and b"TOP-SECRET" not in body
    steps = json.loads(body)["steps"]
    # the malformed entries are dropped, the linked object is not followed, step.py is gone from the snapshot
    assert [(c["file"], c["change"]) for c in steps[0]["changes"]] == [("linked.txt", "added"), ("step.py", "deleted")]
    assert "unreadable" in steps[0]["changes"][0]["diff"]
    assert steps[1]["changes"] == [] and steps[2]["changes"] == []  # a linked or outside snapshot: nothing read


def test_view_checks_packed_objects_against_their_digest_and_never_follows_a_linked_index(runs_folder, tmp_path):
    """A pack a crash tore shows as unreadable, not as the torn bytes; an index or pack that is a link is not read."""
    from mlab.core.run.snapshot import SnapshotStore
    from mlab.core.view.server import Viewer

    root, secret = runs_folder
    run = tmp_path / "runs" / "torn"
    shutil.copytree(root / "plain", run, symlinks=True)
    store = SnapshotStore(run)
    digest = store.manifest("step_0002")["log.txt"]["sha256"]  # step 2 ran step.py, which wrote log.txt
    found = store.objects.location(digest)
    assert found is not None and found[0].suffix == ".pack"
    path, offset, size = found
    outside = tmp_path / "outside.pack"  # the object's true bytes, outside the run: reachable only through links
    outside.write_bytes(store.read_object(digest))
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"TORN-BYTES".ljust(size, b"!")[:size])
    # a later index (names sort by time: it would win) placing that object in a pack that is a link out of the run
    fake = tmp_path / "fake.idx"
    fake.write_text(f"{digest} 0 {size}\n")
    later = f"{'9' * 20}-1-abcdef01"
    (path.parent / f"{later}.idx").symlink_to(fake)
    (path.parent / f"{later}.pack").symlink_to(outside)
    with Viewer(tmp_path / "runs") as viewer:
        status, _headers, body = _get(viewer.url + "api/run?id=torn")
    assert status == 200 and b"TOP-SECRET" not in body and b"TORN-BYTES" not in body
    steps = json.loads(body)["steps"]  # steps[i] is step i + 1
    step2 = {c["file"]: c["diff"] for c in steps[1]["changes"]}
    assert "unreadable" in step2["log.txt"] and "+" in step2["counter.txt"]  # the intact file is still diffed
    assert [c["file"] for c in steps[0]["changes"]] == ["sleep.txt"] and "+" in steps[0]["changes"][0]["diff"]


# ---- mlab view in a real browser, following a run in progress ---------------------------------------------
def _start(*args: object, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.fixtures.gated_run", "mlab", *map(str, args)], cwd=REPO,
                            text=True, **popen)


def _viewer_url(proc: subprocess.Popen) -> str:
    for line in proc.stdout:
        if line.startswith("open http://"):
            return line.split()[1]
    raise AssertionError(f"mlab view printed no URL: {proc.stderr.read()}")


def _wait_file(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)
def test_viewer_follows_a_run_in_progress_in_chromium(tmp_path, monkeypatch):
    from tests.fixtures.gated_run import GATES_VARIABLE, MARKUP

    runs, gates = tmp_path / "runs", tmp_path / "gates"
    runs.mkdir()
    gates.mkdir()
    monkeypatch.setenv(GATES_VARIABLE, str(gates))
    name = 'run<img src=x onerror="window.pwned = 3">'  # a folder name is shown as text, like everything else
    run_dir = runs / name
    run = _start("run", "--task", "fixture/counter", "--agent", "fixture-gated", "--run-dir", run_dir,
                 "--max-steps", "10", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    view = _start("view", runs, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = _viewer_url(view)
        assert url.startswith("http://127.0.0.1:")
        with Browser(tmp_path / "profile") as browser:
            _wait_file(run_dir / "live.json")
            browser.open(url + "#run=" + urllib.parse.quote(name, safe=""))
            browser.wait_for("var e = document.getElementById('live-action');"
                             "return e && e.textContent === 'waiting for the agent';")
            browser.run("window.marker = 'the same page';")
            assert browser.text("no-steps") == "No steps yet."

            (gates / "step1").touch()  # the agent writes show.py
            browser.wait_for("var e = document.getElementById('step-action');"
                             "return e && e.textContent === 'Write File';")
            assert "write a script that prints <b>markup</b>" in browser.text("step-thought")
            assert "+print(" in browser.text("step-diff") and "show.py" in browser.text("step-diff")

            (run_dir / "workspace" / "hold.txt").write_text("1")  # show.py waits for release.txt
            (gates / "step2").touch()
            output = browser.wait_for("var a = document.getElementById('live-action'),"
                                      " o = document.getElementById('live-output');"
                                      "return a && o && a.textContent.indexOf('Execute Script (script_name=show.py)')"
                                      " === 0 && o.textContent.indexOf('epoch 3') >= 0 && o.textContent;")
            assert MARKUP in output  # the running script's output, as text
            assert browser.wait_for("var e = document.getElementById('live-elapsed'); return e && e.textContent;")

            (run_dir / "workspace" / "release.txt").write_text("1")
            observation = browser.wait_for(
                "var e = document.getElementById('step-action'), o = document.getElementById('step-observation');"
                "return e && e.textContent === 'Execute Script' && o.textContent;")
            assert observation.startswith("The script ran. Output:") and MARKUP in observation

            (gates / "step3").touch()
            (gates / "step4").touch()
            browser.wait_for("var e = document.getElementById('run-status');"
                             "return e && e.textContent.indexOf('finished: final answer') === 0;")
            assert browser.text("run-score") == "1.0000"
            assert browser.run("return document.querySelectorAll('#steps button').length;") == 4
            assert browser.run("return document.getElementById('live') === null;")
            # no reload happened, and nothing from the run ran as code
            assert browser.run("return [window.marker, typeof window.pwned, document.images.length];") == [
                "the same page", "undefined", 0]
            assert browser.run("return document.querySelector('#runs td.name').firstChild.textContent;") == name
        assert run.wait(timeout=120) == 0, run.stderr.read()
    finally:
        for proc in (run, view):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                stream.close()


def test_view_command_bad_input_is_one_line_with_exit_code_2(tmp_path):
    import socket

    (tmp_path / "a-file").write_text("x")  # a folder not made yet is waited for; a file is no folder
    not_a_folder = mlab_in_process("view", tmp_path / "a-file")
    assert not_a_folder.returncode == 2 and not_a_folder.stderr.count("\n") == 1
    assert "is a file" in not_a_folder.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = mlab_in_process("view", tmp_path, "--port", taken.getsockname()[1])
    assert busy.returncode == 2 and busy.stderr.count("\n") == 1
    assert "is in use; leave --port out to use a free one" in busy.stderr


def test_view_tells_a_stopped_run_from_one_going_on(runs_folder, tmp_path):
    """A trace still "running" is going on only while a process holds the run's lock; else it was interrupted."""
    import fcntl

    from mlab.core.models import Trace
    from mlab.core.run.trace import write_trace
    from mlab.core.view.live import RUN_LOCK_FILE
    from mlab.core.view.runs import Catalog

    root, _secret = runs_folder
    run = tmp_path / "runs" / "stopped"
    shutil.copytree(root / "plain", run, symlinks=True)
    trace = Trace.model_validate_json((run / "trace.json").read_text())
    trace.status, trace.end_reason = "running", None
    write_trace(run, trace)
    catalog = Catalog(tmp_path / "runs")
    assert catalog.runs()["runs"][0]["status"] == "interrupted"
    with open(run / RUN_LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert catalog.runs()["runs"][0]["status"] == "running"


@pytest.mark.slow
def test_view_of_a_bench_shows_its_failures_and_step_scores(tmp_path):
    from mlab.core.view.server import Viewer

    bench = tmp_path / "bench"
    built = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,fixture-scenario", "--runs", "1",
                 "--intermediate", "--bench-dir", bench, "--registry", REGISTRY,
                 env={"MLAB_HOME": str(tmp_path / "home")})
    assert built.returncode == 0, built.stderr
    with Viewer(bench) as viewer:
        listed = json.loads(_get(viewer.url + "api/runs")[2])
        assert listed["bench"] is True
        runs = {r["agent"]: r for r in listed["runs"]}
        assert set(runs) == {"fixture-appender", "fixture-scenario"}
        assert runs["fixture-scenario"]["failure"] == "invalid_format"  # seed 0's failure, from results.db
        appender = runs["fixture-appender"]
        assert appender["id"].startswith("runs/") and appender["status"] == "finished"
        detail = json.loads(_get(viewer.url + "api/run?id=" + urllib.parse.quote(appender["id"]))[2])
    scores = [s["score"] for s in detail["steps"]]
    assert scores[:3] == [1.0, 2.0, 3.0]  # each step's score, as `--intermediate` stored it
