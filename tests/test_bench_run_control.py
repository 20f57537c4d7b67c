"""Run control of `mlab bench` (issue 34 item 8): --max-connections bounds the model requests in flight over all
runs (separate worker processes) against a real HTTP server; --retry-errors runs an errored run again, keeping
the errored attempt; --fail-fast stops the bench at the first errored run, leaving no process behind."""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.fixtures.bench_cli import REGISTRY, db_rows
from tests.fixtures.bench_plugins import SCENARIOS
from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer

TASK = "fixture/counter"
# no provider key of the developer's reaches the runs: a model on --llm-api-base needs none
KEYS = dict.fromkeys(("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY"))
ERRORED = SCENARIOS.index("agent_error")  # the seed whose run crashes, every time


def bench(bench_dir: Path, *args: str, env: dict | None = None, timeout: float = 240):
    return mlab("bench", "--tasks", TASK, "--bench-dir", bench_dir, "--registry", REGISTRY, *args,
                env={**KEYS, **(env or {})}, timeout=timeout)


class ConcurrencyCounter:
    """A responder that counts the requests in flight. Each waits (at most hold_s) until `together` are in flight
    or every expected request has come, so runs that can overlap do, however loaded the machine."""

    def __init__(self, together: int, hold_s: float, expected: int):
        self.together, self.hold_s, self.expected = together, hold_s, expected
        self.lock = threading.Condition()
        self.in_flight = self.seen = self.most = 0

    def __call__(self, body: dict) -> str:
        with self.lock:
            self.in_flight += 1
            self.seen += 1
            self.most = max(self.most, self.in_flight)
            self.lock.notify_all()
            deadline = time.monotonic() + self.hold_s
            while (self.in_flight < self.together and self.seen < self.expected
                   and time.monotonic() < deadline):
                self.lock.wait(deadline - time.monotonic())
        time.sleep(0.05)  # still on the wire while the others look
        with self.lock:
            self.in_flight -= 1
        return "go on"


def most_in_flight(tmp_path: Path, together: int, hold_s: float, *extra: str) -> int:
    counter = ConcurrencyCounter(together, hold_s, expected=4 * 2)
    with FakeLLMServer(counter) as server:
        result = bench(tmp_path / f"bench{len(extra)}", "--agents", "fixture-llm-stepper", "--llm",
                       "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--runs", "4", "--workers", "4",
                       "--agent-option", "steps=2", *extra)
        assert result.returncode == 0, result.stderr
        assert len(server.requests) == 4 * 2  # every run asked its model at each of its 2 steps
    rows = db_rows(tmp_path / f"bench{len(extra)}")
    assert [r["status"] for r in rows] == ["finished"] * 4, [r["end_reason"] for r in rows]
    return counter.most


@pytest.mark.slow
def test_max_connections_bounds_requests_in_flight_over_all_runs(tmp_path):
    # a request waits for two more: without a limit, four runs in four processes get there
    assert most_in_flight(tmp_path, 3, 30) >= 3
    # a request waits for one more (at most 10 s: the last of one run has none): two slots let two go together,
    # never a third
    assert most_in_flight(tmp_path, 2, 10, "--max-connections", "2") == 2
    meta = sqlite3.connect(tmp_path / "bench2" / "results.db").execute(
        "SELECT value FROM meta WHERE key = 'run_control'").fetchone()
    assert json.loads(meta[0])["max_connections"] == 2


@pytest.mark.slow
def test_retry_errors_reruns_only_errored_runs_and_keeps_their_attempts(tmp_path):
    out = tmp_path / "bench"
    result = bench(out, "--agents", "fixture-scenario", "--runs", str(len(SCENARIOS)), "--workers", "2",
                   "--max-steps", "3", "--action-timeout", "1s", "--retry-errors", "2")
    assert result.returncode == 0, result.stderr
    rows = db_rows(out)
    assert [r["failure"] for r in rows] == SCENARIOS
    # only the crashed run ran again (twice, crashing each time); runs that merely did not improve ran once
    assert [r["attempts"] for r in rows] == [3 if i == ERRORED else 1 for i in range(len(SCENARIOS))]
    crashed = rows[ERRORED]
    assert crashed["status"] == "failed" and (out / crashed["run_dir"] / "trace.json").is_file()
    name = Path(crashed["run_dir"]).name
    assert sorted(p.name for p in (out / "attempts").iterdir()) == [f"{name}.1", f"{name}.2"]
    for attempt in (out / "attempts").iterdir():
        trace = json.loads((attempt / "trace.json").read_text())
        assert trace["status"] == "failed" and "the agent crashed" in trace["end_reason"]
    assert "retried: 2 errored attempt(s)" in result.stdout and "attempts" in result.stdout
    meta = sqlite3.connect(out / "results.db").execute("SELECT value FROM meta WHERE key = 'retried'").fetchone()
    assert [(e["key"], e["retry"], e["kept_in"]) for e in json.loads(meta[0])] == [
        (crashed["key"], 1, f"attempts/{name}.1"), (crashed["key"], 2, f"attempts/{name}.2")]


def processes_with(marker: str, folder: Path) -> list[int]:
    """The bench's processes and everything it started: those whose environment holds marker, or (agent code in
    a sandbox, whose environment is its own) whose working folder is inside folder."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes() or Path(
                    os.readlink(f"/proc/{pid}/cwd")).is_relative_to(folder):
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_fail_fast_stops_the_bench_at_the_first_errored_run(tmp_path):
    out = tmp_path / "bench"
    marker = f"MLAB_TEST_FAIL_FAST={uuid.uuid4().hex}"
    name, value = marker.split("=")
    # seeds 0-4 of fixture-scenario end at once (seed 4 crashes); fixture-stepper's runs would take 2 min (60 steps
    # of 2 s): on a loaded machine too they are still running when the crash stops the bench
    result = bench(out, "--agents", "fixture-scenario,fixture-stepper", "--runs", str(ERRORED + 1), "--workers",
                   str(ERRORED + 3), "--agent-option", "fixture-stepper:steps=60",
                   "--agent-option", "fixture-stepper:sleep=2", "--retry-errors", "1", "--fail-fast",
                   env={name: value})
    assert result.returncode == 1, result.stderr
    crashed = f"{TASK}|fixture-scenario|-|s{ERRORED}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fail-fast: run {crashed} (agent error") and "crashed" in lines[0]
    rows = {r["key"]: r for r in db_rows(out)}
    assert rows[crashed]["status"] == "failed" and rows[crashed]["attempts"] == 2  # after its retry
    steppers = [r for r in rows.values() if r["agent"] == "fixture-stepper"]
    assert steppers and all(r["status"] == "interrupted" for r in steppers)  # stopped part-way, resumable
    deadline = time.monotonic() + 60
    while processes_with(marker, out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker, out) == []  # no worker, zygote or agent script outlives the bench


def test_run_control_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, fragment in ((("--max-connections", "0"), "--max-connections"),
                           (("--retry-errors", "-1"), "--retry-errors")):
        result = bench(tmp_path / "b", "--agents", "fixture-scenario", *args)
        assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr


HOLDER = """
import sys, time
from mlab.core.llm.connections import ConnectionSlots
with ConnectionSlots(sys.argv[1], int(sys.argv[2])).held():
    print("holding", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def test_connection_slots_hold_across_processes_and_die_with_their_holder(tmp_path):
    """The mechanism itself: N slots bound processes that share only a folder; a holder killed with SIGKILL
    gives its slot back (the kernel drops its lock)."""
    import subprocess
    import sys

    from mlab.core.llm.connections import ConnectionSlots

    slots = tmp_path / "slots"
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, str(slots), "2", "600"], stdout=subprocess.PIPE,
                                text=True) for _ in range(2)]
    try:
        for holder in holders:
            assert holder.stdout.readline().strip() == "holding"
        third = subprocess.Popen([sys.executable, "-c", HOLDER, str(slots), "2", "0"], stdout=subprocess.PIPE,
                                 text=True)
        time.sleep(1.0)
        assert third.poll() is None  # both slots are held: it waits
        holders[0].kill()
        holders[0].wait()
        assert third.communicate(timeout=30)[0].strip() == "holding"  # the killed holder's slot came back
        with ConnectionSlots(slots, 2).held():  # and a thread of this process gets the freed one too
            pass
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


@pytest.mark.slow
def test_retry_errors_gives_a_run_that_crashed_once_its_result(tmp_path):
    out = tmp_path / "bench"
    marker = tmp_path / "crashed-once"
    result = mlab("bench", "--tasks", TASK, "--bench-dir", out, "--registry",
                  "tests.fixtures.run_control_plugins:run_control_registry", "--agents", "fixture-flaky", "--runs", "1",
                  "--agent-option", f"marker={marker}", "--retry-errors", "3", env=KEYS, timeout=240)
    assert result.returncode == 0, result.stderr
    [row] = db_rows(out)
    assert row["status"] == "finished" and row["failure"] is None and row["attempts"] == 2  # one retry was enough
    assert row["final_score"] == 1.0
    [kept] = (out / "attempts").iterdir()
    assert kept.name == f"{Path(row['run_dir']).name}.1"
    assert "a transient crash" in json.loads((kept / "trace.json").read_text())["end_reason"]
    assert "1 finished, 0 failed" in result.stdout and "retried: 1 errored attempt(s)" in result.stdout
