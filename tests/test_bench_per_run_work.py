"""Work a bench's run does that is the same for every run is done once, in the zygote its runs are forked from
(issue 42 item 3): a forked run compiles no pattern, reads no machine fact and looks up no task the zygote had
found, runs no nvidia-smi, and syncs (fsync, fdatasync, syncfs) nothing but its own run folder (the result it
hands the driver is not synced: a driver that finds none after a crash reads the run's trace). Counted in a real
forked run of fixture/counter."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core.models import RunConfig
from mlab.core.run.harness import Harness
from mlab.core.run.scoring import Scorer
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.bench_plugins import bench_registry
from tests.fixtures.cli import REPO

# As the zygote does: the run loop imported, _StartUp.warm(job) for the job, then a fork whose child runs it
# (engines._run_host). The child reports what it compiled, which process-wide caches it filled, what it synced.
FORKED_RUN = r"""
import json, os, re, sys
from pathlib import Path
from mlab.core.bench import engines
from mlab.core.bench.evaluate import registry_from
from mlab.core.run import scoring, task_lookup
from mlab.core.run.harness import Harness
from mlab.core.run.readonly import read_only_rule
from mlab.core.sandbox.cgroups import cgroup_parents
import mlab.core.hardware as hardware

job = json.loads(sys.argv[1])
registry = registry_from(job["registry_factory"], job["sys_path"])
from mlab.core.run import runner  # as the zygote: imported before any fork
Harness(registry).ensure_prepared(registry.get("tasks", job["config"]["task"]))  # the driver prepares its tasks
synced = []
for name in ("fsync", "fdatasync"):
    def counted(fd, _real=getattr(os, name)):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return _real(fd)
    setattr(os, name, counted)
from mlab.core.fs import durable
_libc = durable._libc()
class _CountedSyncfs:
    def syncfs(self, fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return _libc.syncfs(fd)
durable._libc = _CountedSyncfs
engines._StartUp(registry).warm(job)

def caches():
    return {"cgroup_parents": cgroup_parents.cache_info().currsize,
            "cpu_model": hardware.cpu_model.cache_info().currsize,
            "nvidia-smi": hardware._gpus_of.cache_info().currsize,
            "read_only_rule": read_only_rule.cache_info().currsize, "tasks": len(task_lookup._FOUND),
            "read_only_files": len(getattr(scoring, "_READ_ONLY_LISTED", ()))}

before, compiled, synced[:] = caches(), set(re._cache), []
batch, (read_end, write_end) = engines._Batch(), os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read_end)
    batch.join()
    code = engines._run_host([job], registry, batch)
    after = caches()
    os.write(write_end, json.dumps({"code": code, "compiled": [str(k) for k in set(re._cache) - compiled],
                                    "filled": {k: after[k] - before[k] for k in after if after[k] != before[k]},
                                    "synced": synced, "shared_flushes": durable._shared is not None and
                                    durable._shared.slot(os.stat(job["run_dir"]).st_dev) is not None}).encode())
    os._exit(0)
os.close(write_end)
engines._Batch.release(batch)
data = b""
while chunk := os.read(read_end, 65536):
    data += chunk
os.waitpid(pid, 0)
print(data.decode())
"""


@pytest.fixture(scope="module")
def forked_run(tmp_path_factory) -> tuple[dict, Path, Path]:
    tmp = tmp_path_factory.mktemp("forked")
    smi = tmp / "bin" / "nvidia-smi"  # a stand-in that says each time it runs
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\necho ran >> {tmp / 'smi.log'}\necho '0, 3, GPU-aaa, NVIDIA H200, 570.86.15, 143771'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    bench = tmp / "bench"
    for sub in ("runs", "logs", ".jobs"):
        (bench / sub).mkdir(parents=True)
    name = "fixture__counter--fixture-llm-stepper--s0"
    config = RunConfig(task="fixture/counter", agent="fixture-llm-stepper", llm="fixture-sleepy:0", max_steps=8,
                       agent_options={"steps": 3})
    job = {"registry_factory": "tests.fixtures.bench_plugins:bench_registry", "sys_path": [str(REPO)], "env": {},
           "key": "fixture/counter|fixture-llm-stepper|fixture-sleepy:0|s0", "mode": "start",
           "config": config.model_dump(), "run_dir": str(bench / "runs" / name),
           "result": str(bench / ".jobs" / f"{name}.result.json"), "log": str(bench / "logs" / f"{name}.log"),
           "intermediate": False, "compute": None}
    env = {**os.environ, "MLAB_HOME": str(tmp / "home"), "PATH": f"{smi.parent}:{os.environ['PATH']}"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", FORKED_RUN, json.dumps(job)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])  # after the run's progress lines (the pipe is its stdout)
    assert report["code"] == 0, Path(job["log"]).read_text()
    assert json.loads(Path(job["result"]).read_text())["status"] == "finished"
    return report, bench, tmp / "smi.log"


@pytest.mark.slow
def test_a_forked_run_compiles_no_pattern_the_zygote_had_compiled(forked_run):
    report, _, _ = forked_run
    assert report["compiled"] == []  # the hardware line's, the task's read-only rule, the GPU device globs


@pytest.mark.slow
def test_a_forked_run_fills_no_cache_of_what_the_zygote_found(forked_run):
    report, _, smi_log = forked_run
    # where cgroups can be made, the CPU model, the GPUs, the task and its read-only rule and files
    assert report["filled"] == {}
    assert smi_log.read_text().splitlines() == ["ran"]  # by the zygote: nvidia-smi once per bench, not per run


@pytest.mark.slow
def test_the_result_handed_to_the_driver_is_not_synced_and_final_is_a_second_name(forked_run):
    report, bench, _ = forked_run
    synced = report["synced"]
    assert synced and all(path.startswith(str(bench / "runs")) for path in synced), synced  # its own folder only
    assert not any(path.endswith("final.json") for path in synced)  # a link to the last step's, its folder synced
    run = next((bench / "runs").iterdir())
    final, last = run / "snapshots" / "final.json", run / "snapshots" / "step_0003.json"
    assert final.read_bytes() == last.read_bytes() and final.stat().st_ino == last.stat().st_ino


@pytest.mark.slow
def test_a_forked_runs_flushes_are_shared_with_the_other_hosts_of_its_bench(forked_run):
    """The zygote named the runs' file system before forking (durable.share_flushes): each step's syncfs there
    serves the steps of every host that asked while the one before it ran."""
    report, _, _ = forked_run
    assert report["shared_flushes"] is True


def test_runs_of_a_task_list_its_read_only_files_once_until_it_is_prepared_again(tmp_path, monkeypatch):
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    registry = bench_registry()
    harness = Harness(registry)
    task = harness.task("fixture/counter")
    harness.ensure_prepared(task)
    public = harness.home.public_dir(task)
    listed: list[str] = []
    real_scandir = os.scandir

    def scandir(path=".", *args):
        if not isinstance(path, int) and Path(os.fsdecode(path)).is_relative_to(public):
            listed.append(os.fsdecode(path))
        return real_scandir(path, *args)

    monkeypatch.setattr(os, "scandir", scandir)
    home = TaskHome.from_env()
    found = [Scorer(home)._read_only_files(task) for _ in range(3)]  # three runs' scorers
    assert found[0] == found[1] == found[2] == [public / "data" / "big.bin"]
    first = len(listed)
    assert first > 0
    Scorer(home)._read_only_files(task)
    assert len(listed) == first  # listed by the first run's scorer only
    harness.prepare(task, force=True)  # a new prepared folder: listed again
    assert Scorer(home)._read_only_files(task) == [public / "data" / "big.bin"] and len(listed) > first
    assert RunConfig(task="fixture/counter", agent="x").task == "fixture/counter"


def test_the_live_block_formats_the_running_runs_a_terminal_shows_not_every_one():
    import io
    import time

    from rich.console import Console

    from mlab.cli.view import BenchView
    from mlab.core.bench.driver import BenchStatus, RunProgress

    status = BenchStatus(total=1024, running=[RunProgress(key=f"fixture/counter|fixture-llm-stepper|-|s{seed}", step=3,
                                                          max_steps=25, action="Append File", started=time.time())
                                              for seed in range(1024)])
    view = BenchView("bench b")
    view.console = Console(file=io.StringIO(), width=120, height=30, force_terminal=True, color_system=None)
    view.status = status
    view.console.print(view._render())  # 4 times a second, and at every driver tick, while the bench runs
    lines = view.console.file.getvalue().splitlines()
    assert len(lines) <= 30, len(lines)  # 1,026 lines before: every running run formatted, the terminal cropping
    shown = [line.split()[0] for line in lines[2:-1]]  # below the counts and the header, the first runs
    assert shown == [f"fixture/counter|fixture-llm-stepper|-|s{seed}" for seed in range(len(shown))]
    assert "1024 running" in lines[0] and lines[-1].strip() == f"... and {1024 - len(shown)} more running"
