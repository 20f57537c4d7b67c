"""`mlab view` of a bench at a glance (issue 34, item 4), in a real headless Chromium: runs grouped by task × agent
× model with success and improvement, sorted by a header and filtered by a box, on a bench of 480 generated run
folders; a single run opens on itself; the score chart has the baseline and a steps axis; a step's action input
is shown once; a running run's header time moves with its step box."""
from __future__ import annotations

import fcntl
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)]

TASKS, AGENTS, SEEDS = ("task-a", "task-b", "task-c", "task-d"), ("agent-x", "agent-y", "agent-z"), 40  # 480 runs


def _one_run(run_dir: Path, **options) -> None:
    from mlab.core.models import RunConfig
    from mlab.core.run.runner import Runner
    from tests.fixtures.bench_plugins import bench_registry

    config = RunConfig(task="fixture/counter", agent="fixture-stepper", max_steps=10, action_timeout_s=60,
                       sandbox="local", agent_options=options)
    Runner(run_dir, config, bench_registry(), warn=lambda _text: None).start()


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("one") / "run"
    _one_run(run, steps=3)
    return run


@pytest.fixture(scope="module")
def big_bench(tmp_path_factory, one_run) -> Path:
    """A bench folder of 480 run folders (copies of one real run, each with its own task, agent and seed in its
    trace) and a results.db judging them: agent-x succeeds on every other seed, the others never."""
    from mlab.core.bench.results import ResultsDB
    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.run.trace_log import STEPS_FILE

    bench = tmp_path_factory.mktemp("big") / "bench"
    trace = read_trace(one_run)
    with ResultsDB(bench / "results.db") as db:
        for task in TASKS:
            for agent in AGENTS:
                for seed in range(SEEDS):
                    key = f"{task}|{agent}|-|s{seed}"
                    rel = f"runs/{task}--{agent}--s{seed}"
                    shutil.copytree(one_run, bench / rel, symlinks=True)
                    (bench / rel / STEPS_FILE).unlink(missing_ok=True)
                    trace.config.task, trace.config.agent, trace.config.seed = task, agent, seed
                    write_trace(bench / rel, trace)
                    db.upsert_run(key, task=task, agent=agent, llm=None, seed=seed, run_dir=rel, status="finished",
                                  steps=3, final_score=1.0 + seed % 2, higher_is_better=1)
    conn = sqlite3.connect(bench / "results.db")
    with conn:
        conn.executemany("INSERT INTO verdicts VALUES (?, 1.0, 'test', 1, ?, ?, NULL)", [
            (f"{task}|{agent}|-|s{seed}", float(seed % 2), int(agent == "agent-x" and seed % 2 == 1))
            for task in TASKS for agent in AGENTS for seed in range(SEEDS)])
        conn.executemany("INSERT OR REPLACE INTO baselines VALUES (?, 1.0, 'test')", [(t,) for t in TASKS])
    conn.close()
    return bench


ROWS = "return Array.prototype.map.call(document.querySelectorAll(arguments[0] + ' tbody tr'), function (tr) {" \
       " return Array.prototype.map.call(tr.children, function (td) { return td.firstChild ? " \
       "td.firstChild.textContent : ''; }); });"


def test_a_bench_of_480_runs_opens_on_its_overview_sorts_by_success_and_filters_by_task(big_bench, tmp_path):
    from mlab.core.view.server import Viewer

    with Viewer(big_bench) as viewer, Browser(tmp_path / "profile") as browser:
        began = time.monotonic()
        browser.open(viewer.url)
        browser.wait_for("return document.querySelectorAll('#groups tbody tr').length === 12 && "
                         "document.querySelectorAll('#runs tbody tr').length === 480;", timeout_s=60)
        print(f"overview of 480 runs drawn {time.monotonic() - began:.2f} s after the page was asked for")
        groups = {row[0]: row for row in browser.run(ROWS, "#groups")}
        assert groups["task-a · agent-x"][1:4] == ["40", "40 finished", "20/40 (50%)"]
        assert groups["task-a · agent-y"][3] == "0/40 (0%)" and groups["task-a · agent-y"][4] == "+50.0%"

        # sort the runs by success: the 80 successes of agent-x first, the other way round on a second click
        browser.run("document.querySelector('#runs th[data-sort=success]').click();")
        column = browser.run("return Array.prototype.map.call(document.querySelectorAll('#runs tbody tr'),"
                             " function (tr) { return tr.children[5].textContent; });")
        assert column == ["yes"] * 80 + ["no"] * 400
        browser.run("document.querySelector('#runs th[data-sort=success]').click();")
        assert browser.run("return document.querySelector('#runs tbody tr').children[5].textContent;") == "no"

        # filter by a task: the list and the overview keep only its runs
        browser.run("var f = document.getElementById('filter'); f.value = 'task-c';"
                    "f.dispatchEvent(new Event('input'));")
        names = [row[0] for row in browser.run(ROWS, "#runs")]
        assert len(names) == 120 and all(n.startswith("runs/task-c--") for n in names)
        assert sorted(row[0] for row in browser.run(ROWS, "#groups")) == [f"task-c · {a}" for a in AGENTS]
        assert browser.text("shown") == "120 of 480 runs"

        # a group row narrows the list to its runs; a run row opens the run
        browser.run("document.querySelector('#groups tbody tr').click();")
        assert len(browser.run(ROWS, "#runs")) == 40
        browser.run("document.querySelector('#runs tbody tr').click();")
        browser.wait_for("var e = document.getElementById('step-action'); return e && e.textContent;")


def test_a_single_run_opens_on_itself_with_a_baseline_and_steps_axis(big_bench, tmp_path):
    from mlab.core.view.server import Viewer

    one = tmp_path / "one"
    shutil.copytree(big_bench, one, ignore=shutil.ignore_patterns("task-[bcd]*", "*--agent-[yz]--*", "*--s[1-9]*"))
    assert [p.name for p in (one / "runs").iterdir()] == ["task-a--agent-x--s0"]
    conn = sqlite3.connect(one / "results.db")
    with conn:
        conn.execute("DELETE FROM runs WHERE key != 'task-a|agent-x|-|s0'")
    conn.close()
    with Viewer(one) as viewer, Browser(tmp_path / "profile") as browser:
        browser.open(viewer.url)  # no #run= in the URL: the only run opens
        title = browser.wait_for("var e = document.getElementById('run-title'); return e && e.textContent;")
        assert title == "runs/task-a--agent-x--s0"
        chart = browser.run("var c = document.getElementById('score-chart'); return {"
                            "baseline: c.querySelectorAll('line.baseline').length, "
                            "labels: Array.prototype.map.call(c.querySelectorAll('text'), function (t) {"
                            " return t.textContent; })};")
        assert chart["baseline"] == 1 and "baseline 1.000" in chart["labels"]
        assert {"0", "1", "2", "3", "steps"} <= set(chart["labels"])


def test_a_steps_action_input_is_shown_once(tmp_path):
    """A ReAct agent's response holds the action and its input among its entries: shown under Action input only."""
    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.run.trace_log import STEPS_FILE
    from mlab.core.view.server import Viewer

    run = tmp_path / "runs" / "react"
    _one_run(run, steps=2)
    trace = read_trace(run)
    step = trace.steps[0]
    step.action.entries = {"Thought": "look around", "Action": step.action.name, "Action Input": step.action.args}
    write_trace(run, trace)
    (run / STEPS_FILE).unlink(missing_ok=True)
    with Viewer(tmp_path / "runs") as viewer, Browser(tmp_path / "profile") as browser:
        browser.open(viewer.url + "#run=react&step=1")
        thought = browser.wait_for("var e = document.getElementById('step-thought'); return e && e.textContent;")
        assert thought == "Thoughtlook around"
        assert browser.text("step-args").count(next(iter(step.action.args))) == 1


def test_a_running_runs_header_time_moves_with_its_step(one_run, tmp_path):
    import json

    from mlab.core.run.trace import read_trace, write_trace
    from mlab.core.view.live import LIVE_FILE, RUN_LOCK_FILE
    from mlab.core.view.server import Viewer

    run = tmp_path / "runs" / "going"
    shutil.copytree(one_run, run, symlinks=True)
    trace = read_trace(run)
    now = time.time()
    trace.status, trace.end_reason, trace.started_at = "running", None, now - 40
    write_trace(run, trace)
    (run / LIVE_FILE).write_text(json.dumps({"step": 4, "action": "Execute Script", "args": {}, "started": now - 25,
                                             "output_tail": "", "pid": 1}))
    with open(run / RUN_LOCK_FILE, "w") as lock, Viewer(tmp_path / "runs") as viewer, \
            Browser(tmp_path / "profile") as browser:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        browser.open(viewer.url + "#run=going")
        times = browser.wait_for("var r = document.getElementById('run-time'), s = document.getElementById("
                                 "'live-elapsed'); return r && s && s.textContent && [r.textContent, s.textContent];")

    def seconds(text: str) -> float:
        return float(text.split()[0]) if text.endswith(" s") and " min " not in text else 60 * float(text.split()[0])

    header, step = map(seconds, times)
    assert 40 <= header < 60 and 25 <= step < header  # the run began before its step did
