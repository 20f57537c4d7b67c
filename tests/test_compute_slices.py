"""Each run's slice of the machine (issue 42 item 1): --cpus-per-run as a CPU set (and a quota) with the thread
variables at the run's CPU count in every sandboxed command; --gpus-per-run as GPUs leased exclusively, only their
device nodes shown and CUDA_VISIBLE_DEVICES naming them. Real benches, real sandboxes, real cgroups where this
machine lets mlab make them; stand-in device nodes where it has no GPU."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from mlab.core.sandbox.cgroups import CommandCgroup, cgroup_parents
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox, UnconfinedSandbox
from mlab.core.sandbox.rootfs import GPU_DEVICES_VAR
from mlab.core.task_context import ScoringContext
from tests.fixtures.bench_cli import db_rows
from tests.fixtures.cli import mlab, mlab_in_process
from tests.fixtures.compute_plugins import (
    REGISTRY,
    THREAD_VARS,
    assert_gpus_leased_exclusively,
    compute_registry,
    probe_of,
)
from tests.fixtures.sandboxes import CONFINING, make_sandbox

TASK = "fixture/counter"
CPUS = sorted(os.sched_getaffinity(0))


def bench(out: Path, *args: str, env: dict[str, str] | None = None):
    return mlab("bench", "--tasks", TASK, "--agents", "fixture-compute-probe", "--bench-dir", out,
                "--registry", REGISTRY, *args, env=env, timeout=900)


def traces(out: Path) -> list[dict]:
    return [json.loads((out / r["run_dir"] / "trace.json").read_text()) for r in db_rows(out)]


@pytest.mark.slow
def test_a_bench_with_one_cpu_per_run_gives_each_run_one_cpu_and_one_thread(tmp_path):
    out = tmp_path / "bench"
    result = bench(out, "--runs", "2", "--workers", "2", "--cpus-per-run", "1", "--agent-option", "torch=true")
    assert result.returncode == 0, result.stderr
    found = traces(out)
    assert [t["status"] for t in found] == ["finished", "finished"]
    probes = [probe_of(t) for t in found]
    for trace, probe in zip(found, probes, strict=True):
        assert len(probe["cpus"]) == 1, probe
        assert probe["threads"] == dict.fromkeys(THREAD_VARS, "1")
        assert probe["torch"] == 1
        granted = trace["config"]["compute"]
        assert granted["cpus"] == 1 and granted["cpu_set"] == probe["cpus"]
    if len(CPUS) >= 2:  # the two ran at once: disjoint CPUs
        assert probes[0]["cpus"] != probes[1]["cpus"]


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_gpus_per_run_leases_stand_in_devices_exclusively(tmp_path, stand_in_gpus, sandbox):
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("no bwrap here")
    out = tmp_path / "bench"
    paths = json.dumps(stand_in_gpus)
    # three runs at once for two GPUs: the third waits until one is given back
    result = bench(out, "--runs", "3", "--workers", "3", "--gpus-per-run", "1", "--sandbox", sandbox,
                   "--agent-option", f"paths={paths}", "--agent-option", "hold=2",
                   env={GPU_DEVICES_VAR: ":".join(stand_in_gpus)})
    assert result.returncode == 0, result.stderr
    found = traces(out)
    assert [t["status"] for t in found] == ["finished"] * 3
    assert_gpus_leased_exclusively(found, stand_in_gpus)


def test_more_gpus_per_run_than_the_machine_has_is_refused(tmp_path, stand_in_gpus):
    result = bench(tmp_path / "bench", "--gpus-per-run", "3", env={GPU_DEVICES_VAR: ":".join(stand_in_gpus)})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "mlab: error: --gpus-per-run 3: this machine has 2 GPUs (nvidia0, nvidia1)"]
    assert not (tmp_path / "bench" / "results.db").exists()


PRINT_SLICE = ("import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
               f"'threads': [os.environ.get(n) for n in {THREAD_VARS!r}]}}))")


def test_a_scoring_command_runs_in_the_runs_slice(tmp_path):
    last = CPUS[-1]
    context = ScoringContext(new_sandbox=LocalSandbox, limits=Limits(cpus=1, cpu_set=[last]))
    with context.scratch() as scratch:
        (tmp_path / "sub").mkdir()
        result = context.run([sys.executable, "-c", PRINT_SLICE], tmp_path / "sub", scratch)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"cpus": [last], "threads": ["1"] * len(THREAD_VARS)}


def test_two_cpus_give_two_threads_and_no_slice_changes_nothing(tmp_path):
    sandbox = UnconfinedSandbox()
    from mlab.core.sandbox.spec import ExecSpec

    two = sandbox.run([sys.executable, "-c", PRINT_SLICE], ExecSpec(cwd=tmp_path, limits=Limits(cpus=2.5)))
    assert json.loads(two.output)["threads"] == ["2"] * len(THREAD_VARS)
    on_one = sandbox.run([sys.executable, "-c", PRINT_SLICE],
                         ExecSpec(cwd=tmp_path, limits=Limits(cpus=4, cpu_set=CPUS[:1])))
    assert json.loads(on_one.output) == {"cpus": CPUS[:1], "threads": ["1"] * len(THREAD_VARS)}  # no more than CPUs
    plain = sandbox.run([sys.executable, "-c", PRINT_SLICE], ExecSpec(cwd=tmp_path, env={"OMP_NUM_THREADS": "7"}))
    assert json.loads(plain.output) == {"cpus": CPUS, "threads": ["7"] + [None] * (len(THREAD_VARS) - 1)}


@pytest.mark.skipif("cpuset" not in cgroup_parents() or len(CPUS) < 2, reason="no cpuset cgroup here, or 1 CPU")
def test_the_cpuset_cgroup_holds_when_the_command_widens_its_affinity(tmp_path):
    last = CPUS[-1]
    widen = f"import os; os.sched_setaffinity(0, {CPUS!r}); print(sorted(os.sched_getaffinity(0)))"
    for sandbox in (LocalSandbox(), UnconfinedSandbox()):
        from mlab.core.sandbox.spec import ExecSpec

        result = sandbox.run([sys.executable, "-c", widen], ExecSpec(cwd=tmp_path, limits=Limits(cpu_set=[last])))
        assert (result.exit_code, result.output.strip()) == (0, f"[{last}]"), sandbox.name


@pytest.mark.skipif("cpu" not in cgroup_parents(), reason="no cpu cgroup here")
def test_a_fraction_of_a_cpu_is_a_cgroup_quota():
    made = CommandCgroup.create(Limits(cpus=0.5, cpu_set=[CPUS[0]]))
    assert made is not None
    try:
        folder, version = made.folders["cpu"]
        if version == 1:
            quota = (Path(folder, "cpu.cfs_quota_us").read_text().strip(),
                     Path(folder, "cpu.cfs_period_us").read_text().strip())
        else:
            quota = tuple(Path(folder, "cpu.max").read_text().split())
        assert int(quota[0]) * 2 == int(quota[1])
    finally:
        made.close_fds()
        made.remove()


def test_mlab_run_cpus_is_the_runs_slice(tmp_path):
    result = mlab_in_process("run", "--task", TASK, "--agent", "fixture-compute-probe", "--cpus", "1",
                             "--run-dir", tmp_path / "run", registry=compute_registry)
    assert result.returncode == 0, result.stderr
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert trace["config"]["compute"]["cpus"] == 1
    assert probe_of(trace)["threads"] == dict.fromkeys(THREAD_VARS, "1")
    bad = mlab_in_process("run", "--task", TASK, "--agent", "fixture-compute-probe", "--cpus", "0",
                          "--run-dir", tmp_path / "bad", registry=compute_registry)
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()


def test_cgroup_v2_files_say_the_quota_and_the_set(tmp_path):
    # This machine's v2 hierarchy has no controllers (hybrid): v2's file formats are checked on a plain folder.
    from mlab.core.sandbox.cgroups import _cpu_bounds

    assert _cpu_bounds("cpu", str(tmp_path), 2, str(tmp_path), 1.5, [0, 1])
    assert (tmp_path / "cpu.max").read_text() == "150000 100000"
    assert _cpu_bounds("cpuset", str(tmp_path), 2, str(tmp_path), None, [3, 1])
    assert (tmp_path / "cpuset.cpus").read_text() == "1,3" and not (tmp_path / "cpuset.mems").exists()


# The command waits for this file in its folder (every sandbox binds the folder), so that the test reads the cgroup
# of a process that is still running.
WAIT_FOR_GO = r'''
import json, os, sys, time
os.sched_setaffinity(0, range(os.cpu_count()))  # the cgroup's cpuset, not the affinity alone, must hold it
print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)), "omp": os.environ.get("OMP_NUM_THREADS")}), flush=True)
while not os.path.exists("go"):
    time.sleep(0.01)
'''


def cgroup_files_of(pid: int) -> dict[str, str]:
    """The host's view of pid's cgroups: its CPU quota and period, its CPU set and its memory bound, read from
    the hierarchies (v1 per controller, v2 unified) mounted at their root."""
    mounts: dict[str, str] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if fields[3] != "/" or not tail:
            continue
        if tail[0] == "cgroup2":
            mounts.setdefault("", fields[4])
        elif tail[0] == "cgroup":
            for controller in tail[2].split(","):
                mounts.setdefault(controller, fields[4])
    where: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            if controller in mounts:
                where[controller] = os.path.join(mounts[controller], path.lstrip("/"))

    def read(controller: str, v1: str, v2: str) -> str:
        if controller in where and Path(where[controller], v1).exists():
            return Path(where[controller], v1).read_text().strip()
        return Path(where[""], v2).read_text().strip()

    quota = read("cpu", "cpu.cfs_quota_us", "cpu.max").split()[0]
    period = read("cpu", "cpu.cfs_period_us", "cpu.max").split()[-1]
    return {"cpu": f"{quota}/{period}", "cpuset": read("cpuset", "cpuset.cpus", "cpuset.cpus"),
            "memory": read("memory", "memory.limit_in_bytes", "memory.max")}


def python_with(marker: str) -> list[int]:
    """Host pids of the Python processes whose command line holds marker (not bwrap's, nor docker's client)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv and os.path.basename(argv[0]).startswith(b"python"):
                found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(len(CPUS) < 2 or not {"cpu", "cpuset", "memory"} <= set(cgroup_parents()),
                    reason="fewer than 2 CPUs, or no cpu, cpuset and memory cgroups here")
@pytest.mark.parametrize("name", ["unconfined", *CONFINING])
def test_a_runs_cpus_quota_and_memory_are_its_commands_cgroup_in_every_sandbox(tmp_path, name):
    """A run's slice is enforced by the kernel in every sandbox (docker's --cpuset-cpus, --cpus and --memory
    included): the command's own cgroup, read from the host while it runs, has the run's CPU, half a CPU's quota
    and its memory; widening its affinity changes nothing; its thread variables say one."""
    import secrets
    import threading

    from mlab.core.sandbox.spec import ExecSpec

    box = UnconfinedSandbox() if name == "unconfined" else make_sandbox(name)
    last, marker = CPUS[-1], f"mlab-slice-{secrets.token_hex(4)}"
    folder = Path(tempfile.mkdtemp(prefix="mlab-slice-", dir="/var/tmp"))  # not /tmp: each sandbox has its own
    results = []
    ran = threading.Thread(target=lambda: results.append(box.run(
        [sys.executable, "-c", WAIT_FOR_GO, marker],
        ExecSpec(cwd=folder, limits=Limits(cpus=0.5, cpu_set=[last], memory_bytes=1 << 30, timeout_s=300)))))
    ran.start()
    try:
        for _ in range(30_000):  # a hang guard: it waits on the process, not on time
            if python_with(marker) or not ran.is_alive():
                break
            threading.Event().wait(0.01)
        pids = python_with(marker)
        assert pids, results
        for pid in pids:
            assert cgroup_files_of(pid) == {"cpu": "50000/100000", "cpuset": str(last), "memory": str(1 << 30)}
    finally:
        (folder / "go").touch()
        ran.join()
        box.close()
        shutil.rmtree(folder, ignore_errors=True)
    (result,) = results
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"cpus": [last], "omp": "1"}
