"""Runs that share a host process (issue 42 item 3): a bench starting more runs at once than the machine has cores
for puts several in one process forked from its zygote, each in a thread of its own. Each run still has its own log,
result and resumable stop; a crash of the process ends its runs as harness errors, which --retry-errors reruns.

The benches run under `taskset -c 0`, so the machine they see has one core: 8 runs started together make hosts of
two."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from mlab.core.bench.engines import HOST_FLUSH_GATHER_S, RUNS_PER_HOST, hosts
from tests.fixtures.bench_cli import db_rows, start
from tests.fixtures.cli import MLAB, mlab
from tests.test_bench_local import steps_done, wait_for

TASK = "fixture/counter"
REGISTRY = "tests.fixtures.host_plugins:host_registry"
ONE_CORE = ("taskset", "-c", "0", *MLAB)
RUNS = ("--tasks", TASK, "--registry", REGISTRY, "--agents", "fixture-host-reporter", "--runs", "8", "--workers", "8")


def run_logs(bench_dir: Path) -> dict[str, list[str]]:
    """Each run's log (logs/ but the zygote's workers.log): the lines the agent printed."""
    return {path.name: [line for line in path.read_text().splitlines() if line.startswith("seed ")]
            for path in (bench_dir / "logs").glob("*.log") if path.name != "workers.log"}


def test_runs_started_together_are_spread_over_hosts_per_core():
    jobs = [{"key": str(i)} for i in range(RUNS_PER_HOST * 250)]
    assert [len(h) for h in hosts(jobs[:8], cores=2)] == [1] * 8  # no more than 4 hosts a core: one run each
    assert [len(h) for h in hosts(jobs[:12], cores=2)] == [2] * 6
    assert [len(h) for h in hosts(jobs[:9], cores=1)] == [3, 3, 3]
    assert [len(h) for h in hosts(jobs, cores=2)] == [RUNS_PER_HOST] * 250  # never more a host
    assert [len(h) for h in hosts(jobs[:32], cores=64)] == [1] * 32
    assert [job for host in hosts(jobs, cores=2) for job in host] == jobs  # every run once, in order


@pytest.mark.slow
def test_runs_sharing_a_host_each_keep_their_own_log_and_result(tmp_path):
    out = tmp_path / "bench"
    result = mlab("bench", *RUNS, "--bench-dir", out, entry=ONE_CORE, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = db_rows(out)
    assert [(r["seed"], r["status"], r["final_score"]) for r in rows] == [(s, "finished", 3.0) for s in range(8)]
    logs = run_logs(out)
    assert len(logs) == 8
    pids = set()
    for name, lines in logs.items():
        seeds = {line.split()[1] for line in lines}
        assert len(seeds) == 1, (name, lines)  # only its own run's lines
        [seed] = seeds
        assert f"seed {seed} on stderr" in lines and len(lines) == 8  # 4 steps, stdout and stderr
        pids |= {line.split()[3] for line in lines if " pid " in line}
        # runs sharing a process share its flushes over a window, as their steps end together
        assert {line.split()[-1] for line in lines if " pid " in line} == {str(HOST_FLUSH_GATHER_S)}
    assert len(pids) == 4  # 8 runs in hosts of 2


@pytest.mark.slow
def test_a_run_alone_in_its_process_flushes_its_steps_at_once(tmp_path):
    out = tmp_path / "bench"
    two = [*RUNS[:-4], "--runs", "2", "--workers", "2"]
    result = mlab("bench", *two, "--bench-dir", out, entry=ONE_CORE, timeout=300)
    assert result.returncode == 0, result.stderr
    logs = run_logs(out)
    assert len(logs) == 2
    for lines in logs.values():  # no window: nothing else in its process would share the flush
        assert {line.split()[-1] for line in lines if " pid " in line} == {"0.0"}


@pytest.mark.slow
def test_ctrl_c_stops_every_run_of_every_host_resumably_and_a_rerun_finishes_them(tmp_path):
    out = tmp_path / "bench"
    # 24 steps of 0.5 s: every run under way at once with steps left, however far apart a loaded machine starts them
    args = (*RUNS, "--agent-option", "steps=24", "--agent-option", "sleep=0.5", "--bench-dir", out)
    proc = start("bench", *args, prefix=("taskset", "-c", "0"))
    wait_for(lambda: (out / "results.db").exists() and len(rows := db_rows(out)) == 8 and all(
        1 <= steps_done(out, r["run_dir"]) <= 18 for r in rows), "every run a step or more under way", proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    rows = db_rows(out)
    assert [r["status"] for r in rows] == ["interrupted"] * 8, rows
    for r in rows:
        trace = json.loads((out / r["run_dir"] / "trace.json").read_text())
        assert trace["status"] == "running" and len(trace["steps"]) < 25

    resumed = mlab("bench", *args, entry=ONE_CORE, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    for r in db_rows(out):
        assert r["status"] == "finished" and r["final_score"] == 24.0, r
        log = (out / r["run_dir"] / "workspace" / "log.txt").read_text().splitlines()
        assert log == [f"line {i}" for i in range(1, 25)]  # every step's effect exactly once


@pytest.mark.slow
def test_a_host_that_crashes_fails_its_runs_alone_and_retry_errors_reruns_them(tmp_path):
    out = tmp_path / "bench"
    marker = tmp_path / "crashed-once"
    # seed 0 kills their host once the run beside it has stepped (a trace begun), which then waits 2 s a step
    result = mlab("bench", *RUNS, "--bench-dir", out, "--agent-option", f"crash_marker={marker}",
                  "--agent-option", "sleep=2", "--retry-errors", "1", entry=ONE_CORE, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = db_rows(out)
    assert [(r["status"], r["final_score"]) for r in rows] == [("finished", 3.0)] * 8
    # seed 0 killed its host: the run beside it in that host was retried with it, no other run was
    assert sorted(r["attempts"] for r in rows) == [1] * 6 + [2] * 2
    [retried] = [r["value"] for r in db_rows(out, "SELECT value FROM meta WHERE key = 'retried'")]
    reasons = [entry["end_reason"] for entry in json.loads(retried)]
    assert len(reasons) == 2 and all("worker process died (killed by signal 9)" in why for why in reasons), reasons
    for attempt in (out / "attempts").iterdir():  # its process died mid-run: the trace had not ended
        assert json.loads((attempt / "trace.json").read_text())["status"] == "running"
