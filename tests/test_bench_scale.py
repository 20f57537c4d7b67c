"""What lets many runs share a machine: progress over a pipe instead of files, start-up work done once in the
zygote, the driver's database writes batched per tick, and a driver killed -9 losing nothing."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlab.core.bench import progress as progress_module
from mlab.core.bench.driver import PROGRESS_DIR, Bench, BenchSpec, BenchStatus
from mlab.core.bench.engines import _progress_pipe
from mlab.core.bench.evaluate import evaluate_runs
from mlab.core.bench.progress import HostProgress, pipe_sender
from mlab.core.bench.results import ResultsDB
from mlab.core.run.trace_log import load_trace, read_log
from mlab.core.view.live import run_in_progress
from tests.fixtures.bench_cli import REGISTRY, db_rows, start
from tests.fixtures.bench_plugins import PROBE_LOG_ENV, bench_registry
from tests.fixtures.cli import mlab
from tests.fixtures.waiting import wait_until

TASK = "fixture/counter"


def rows_of(bench: Path) -> list[dict]:
    return db_rows(bench, "SELECT * FROM runs ORDER BY seed")


# ---- progress over the pipe ---------------------------------------------------------------------------
def _lines_until(read_end: int, done, deadline_s: float = 60) -> list[dict]:
    """The progress lines read from the pipe until done(lines) (a hang guard, not a timing)."""
    data, lines = b"", []
    deadline = time.monotonic() + deadline_s
    while not done(lines):
        assert time.monotonic() < deadline, lines[-5:]
        if select.select([read_end], [], [], 0.1)[0]:
            data += os.read(read_end, 1 << 16)
            *whole, data = data.split(b"\n")
            lines += [json.loads(line) for line in whole]  # every line whole
    return lines


def test_a_hosts_progress_is_the_latest_line_of_each_run_sent_together_not_a_line_per_step(monkeypatch):
    monkeypatch.setattr(progress_module, "SEND_EVERY_S", 0.2)
    read_end, write_end = os.pipe()
    try:
        progress = HostProgress(pipe_sender(_progress_pipe(write_end)))
        runs = {name: progress.reporter(name) for name in ("run-a", "run-b", "run-c")}
        for step in range(300):
            for report in runs.values():
                report({"step": step, "tokens": 7 * step, "action": "Append File"})
        lines = _lines_until(read_end, lambda got: {(m["progress"], m["step"]) for m in got} >= {
            (name, 299) for name in runs})
    finally:
        os.close(read_end)
        os.close(write_end)
    for name in runs:
        steps = [m["step"] for m in lines if m["progress"] == name]
        assert steps == sorted(set(steps)) and steps[-1] == 299  # in order, the last one always sent
        assert all(m["tokens"] == 7 * m["step"] for m in lines if m["progress"] == name)
    assert len(lines) < 3 * 300  # steps taken between two sends go as one line


def test_a_driver_that_stops_reading_costs_progress_lines_whole_never_a_step(monkeypatch):
    monkeypatch.setattr(progress_module, "SEND_EVERY_S", 0)
    read_end, write_end = os.pipe()
    try:
        fd = _progress_pipe(write_end)
        progress = HostProgress(pipe_sender(fd))
        for run in range(3000):  # far more than a pipe holds: nobody reads while the runs go on
            progress.reporter(f"run-{run}")({"step": 1, "tokens": run, "action": "Append File"})
        wait_until(lambda: not progress._pending, "the sender to take every line")
        progress.close()  # and has ended its last write: the descriptor is no longer in use
        os.close(fd)
        os.close(write_end)
        data = b""
        while chunk := os.read(read_end, 1 << 16):
            data += chunk
    finally:
        os.close(read_end)
    lines = [json.loads(line) for line in data.decode().splitlines()]  # every line whole: none cut by a full pipe
    assert 0 < len(lines) < 3000
    assert all(m["progress"] == f"run-{m['tokens']}" for m in lines)


@pytest.mark.slow
def test_an_ended_runs_unsent_progress_is_dropped_so_none_follows_its_end(monkeypatch):
    monkeypatch.setattr(progress_module, "SEND_EVERY_S", 3)  # the unsent line waits, well past the next statement
    read_end, write_end = os.pipe()
    try:
        progress = HostProgress(pipe_sender(_progress_pipe(write_end)))
        progress.reporter("run-a")({"step": 1})  # sent at once: nothing was sent before
        _lines_until(read_end, lambda got: len(got) == 1)
        progress.reporter("run-a")({"step": 2})  # due with the next send
        progress.forget("run-a")  # the run ends (its end is told next)
        progress.reporter("run-b")({"step": 1})
        lines = _lines_until(read_end, lambda got: any(m["progress"] == "run-b" for m in got))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert [(m["progress"], m["step"]) for m in lines] == [("run-b", 1)]


def test_a_progress_line_longer_than_an_atomic_pipe_write_is_left_out():
    read_end, write_end = os.pipe()
    try:
        progress = HostProgress(pipe_sender(_progress_pipe(write_end)))
        progress.reporter("run-big")({"step": 1, "action": "x" * 5000})
        progress.reporter("run-small")({"step": 1, "action": "Final Answer"})
        lines = _lines_until(read_end, lambda got: any(m["progress"] == "run-small" for m in got))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert [m["progress"] for m in lines] == ["run-small"]


@pytest.mark.slow
def test_driver_sees_each_runs_steps_through_the_pipe_and_no_progress_file_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    spec = BenchSpec(tasks=[TASK], agents=["fixture-llm-stepper"], llms=["fixture-sleepy:0.3"], runs=3, max_steps=9,
                     agent_options={"steps": 5})
    seen: dict[str, set[int]] = {}
    tokens: dict[str, int] = {}

    def on_update(status: BenchStatus) -> None:
        for run in status.running:
            seen.setdefault(run.key, set()).add(run.step)
            tokens[run.key] = max(tokens.get(run.key, 0), run.tokens)

    bench = Bench(tmp_path / "bench", spec, workers=3, registry_factory=REGISTRY)
    status = bench.run(on_update=on_update, tick_s=0.05)
    assert status.done == 3 and not status.running
    assert len(seen) == 3
    for key, steps in seen.items():
        assert len(steps - {0}) >= 3, (key, steps)  # the driver followed the run step by step
        assert tokens[key] >= 3 * 120  # 120 tokens a call: reported with the steps
    assert not list((tmp_path / "bench" / PROGRESS_DIR).iterdir())


# ---- start-up done once ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_sandbox_is_probed_once_per_bench_not_once_per_run(tmp_path):
    probes = tmp_path / "probes.log"
    result = mlab("bench", "--tasks", TASK, "--agents", "fixture-appender", "--runs", "4", "--workers", "4",
                  "--agent-option", "steps=2", "--sandbox", "fixture-probed", "--bench-dir", tmp_path / "bench",
                  "--registry", REGISTRY, env={PROBE_LOG_ENV: str(probes)})
    assert result.returncode == 0, result.stderr
    rows = rows_of(tmp_path / "bench")
    assert [r["status"] for r in rows] == ["finished"] * 4
    assert all(json.loads(r["config"])["sandbox"] == "fixture-probed" for r in rows)
    assert len(probes.read_text().splitlines()) == 1  # by the zygote; its forks inherit what it found


# ---- the driver's database writes --------------------------------------------------------------------
def test_writes_in_a_transaction_are_seen_together_or_not_at_all(tmp_path):
    path = tmp_path / "results.db"
    with ResultsDB(path) as db, ResultsDB(path) as reader:
        with db.transaction():
            db.upsert_run("a", task="t", agent="x", seed=0, run_dir="runs/a", status="running")
            with db.transaction():  # inside another: part of it
                db.upsert_run("b", task="t", agent="x", seed=1, run_dir="runs/b", status="running")
                db.set_plugin_versions("b", {"mlab": "1"})
            assert reader.runs() == []  # nothing committed yet
        assert [r["key"] for r in reader.runs()] == ["a", "b"] and reader.plugin_versions() == {"b": {"mlab": "1"}}
        with pytest.raises(RuntimeError), db.transaction():
            db.upsert_run("a", status="finished", steps=3)
            db.upsert_run("c", task="t", agent="x", seed=2, run_dir="runs/c", status="running")
            raise RuntimeError("the driver stopped part-way")
        assert [(r["key"], r["status"]) for r in reader.runs()] == [("a", "running"), ("b", "running")]


@pytest.mark.slow
def test_a_driver_killed_9_loses_nothing_and_a_rerun_agrees_with_the_traces(tmp_path):
    out = tmp_path / "bench"
    args = ("--tasks", TASK, "--agents", "fixture-stepper", "--runs", "4", "--workers", "4", "--agent-option",
            "steps=6", "--agent-option", "sleep=0.5", "--bench-dir", out, "--registry", REGISTRY)
    proc = start("bench", *args)
    deadline = time.monotonic() + 120
    while True:  # every run has committed a step, none has ended: the kill lands mid-run
        done = [len(read_log(d).steps) if (d / "steps.jsonl").exists() else 0 for d in (out / "runs").glob("*")]
        if len(done) == 4 and min(done) >= 1:
            break
        assert proc.poll() is None and time.monotonic() < deadline, "the bench did not get under way"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while any(run_in_progress(d) for d in (out / "runs").iterdir()):  # a worker holds its run's lock
        assert time.monotonic() < deadline, "workers outlived their killed driver"
        time.sleep(0.1)
    assert {r["status"] for r in rows_of(out)} == {"running"}  # what the killed driver had committed

    resumed = mlab("bench", *args)
    assert resumed.returncode == 0, resumed.stderr
    rows = rows_of(out)
    assert [r["status"] for r in rows] == ["finished"] * 4
    for row in rows:
        trace = load_trace(out / row["run_dir"])
        assert [s.index for s in trace.steps] == list(range(1, 7))
        assert (row["steps"], row["final_score"], row["attempts"]) == (6, trace.final_score, 1)
        executed = sum(s.action.name == "Execute Script" for s in trace.steps)
        log = (out / row["run_dir"] / "workspace" / "log.txt").read_text().splitlines()
        assert log == [f"run {i}" for i in range(executed)]  # every step's effect exactly once
    rescored = evaluate_runs([out / r["run_dir"] for r in rows], registry=bench_registry())  # what `mlab eval` does
    assert [got["final"] for got in rescored] == [(r["final_score"], None) for r in rows]


# ---- the zygote's batches ------------------------------------------------------------------------------
def _jobs(bench_dir: Path, runs: int) -> tuple[Bench, list]:
    spec = BenchSpec(tasks=[TASK], agents=["fixture-appender"], runs=runs, max_steps=5, agent_options={"steps": 2})
    bench = Bench(bench_dir, spec, workers=runs, registry_factory=REGISTRY)
    for sub in ("runs", "logs", ".jobs"):
        (bench.dir / sub).mkdir(parents=True, exist_ok=True)
    with ResultsDB(bench.dir / "results.db") as db:
        bench._prepare_tasks(db)
        jobs, _ = bench.plan(db)
    return bench, [bench._job_dict(job) for job in jobs]


def _state(pid: int) -> str:
    """The process's state letter (S: asleep); "gone" once it has ended and been reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_a_batchs_runs_wait_forked_until_the_zygote_has_forked_them_all(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    bench, jobs = _jobs(tmp_path / "bench", 2)
    code = "from mlab.core.bench.engines import zygote_main; zygote_main()"
    zygote = subprocess.Popen([sys.executable, "-c", code, json.dumps(bench._settings())], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, bufsize=1, cwd=os.getcwd())
    try:
        assert json.loads(zygote.stdout.readline()) == {"ready": True}
        zygote.stdin.write("".join(json.dumps([job]) + "\n" for job in jobs))  # no blank line: the batch is open
        zygote.stdin.flush()
        started = [json.loads(zygote.stdout.readline()) for _ in jobs]
        assert [m["started"] for m in started] == [job["key"] for job in jobs]
        deadline = time.monotonic() + 60
        for message in started:  # asleep before opening its log: waiting for the batch to be let go
            while (state := _state(message["pid"])) != "S":
                assert state not in ("Z", "gone"), "the forked run ran without waiting for its batch"
                assert time.monotonic() < deadline, "the forked run never waited"
                time.sleep(0.02)
        assert not any(Path(job["log"]).exists() or Path(job["run_dir"]).exists() for job in jobs)
        zygote.stdin.write("\n")  # the end of the batch
        zygote.stdin.flush()
        messages = []
        while sum("exited" in m for m in messages) < len(jobs):
            messages.append(json.loads(zygote.stdout.readline()))
        exited = [m for m in messages if "exited" in m]
        assert {m["progress"] for m in messages if "progress" in m} == {Path(j["run_dir"]).name for j in jobs}
        for job in jobs:  # a run's progress never comes after its end
            told = [i for i, m in enumerate(messages) if m.get("progress") == Path(job["run_dir"]).name]
            assert max(told) < next(i for i, m in enumerate(messages) if m.get("ended") == job["key"])
        assert sorted(m["exited"] for m in exited) == sorted(m["pid"] for m in started)
        assert [m["code"] for m in exited] == [0, 0]
        assert sorted((m["ended"], m["code"]) for m in messages if "ended" in m) == sorted((j["key"], 0) for j in jobs)
        for job in jobs:
            assert json.loads(Path(job["result"]).read_text())["status"] == "finished"
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=60)
