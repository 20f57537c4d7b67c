"""Each run's slice of the machine (issue 42 item 1): --cpus-per-run as a CPU set (and a quota) with the thread
variables at the run's CPU count in every sandboxed command; --gpus-per-run as GPUs leased exclusively, only their
device nodes shown and CUDA_VISIBLE_DEVICES naming them. Real benches, real sandboxes, real cgroups where this
machine lets mlab make them; stand-in device nodes where it has no GPU."""
from __future__ import annotations

import json
import os
import shutil
import stat
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
from tests.fixtures.compute_plugins import REGISTRY, THREAD_VARS, compute_registry, probe_of

TASK = "fixture/counter"
CPUS = sorted(os.sched_getaffinity(0))


def bench(out: Path, *args: str, env: dict[str, str] | None = None):
    return mlab("bench", "--tasks", TASK, "--agents", "fixture-compute-probe", "--bench-dir", out,
                "--registry", REGISTRY, *args, env=env, timeout=900)


def traces(out: Path) -> list[dict]:
    return [json.loads((out / r["run_dir"] / "trace.json").read_text()) for r in db_rows(out)]


@pytest.fixture
def stand_in_gpus():
    """Two stand-in GPUs and a control node: character devices with the null device's numbers where this is
    root, else plain files. Outside /tmp: every sandbox gives a command a /tmp of its own."""
    folder = Path(tempfile.mkdtemp(prefix="mlab-gpus-", dir="/var/tmp"))
    nodes = [folder / name for name in ("nvidia0", "nvidia1", "nvidiactl")]
    for node in nodes:
        if os.geteuid() == 0:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        else:
            node.touch()
    try:
        yield [str(n) for n in nodes]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
    held: dict[int, list[tuple[float, float]]] = {}
    cuda: dict[int, str] = {}
    for trace in found:
        probe = probe_of(trace)
        gpus = trace["config"]["compute"]["gpus"]
        assert len(gpus) == 1, trace["config"]["compute"]
        (gpu,) = gpus
        assert probe["seen"] == [stand_in_gpus[gpu], stand_in_gpus[2]]  # its GPU and the control node
        assert trace["devices"] == [stand_in_gpus[gpu], stand_in_gpus[2]]
        assert probe["cuda"] and "," not in probe["cuda"]
        assert cuda.setdefault(gpu, probe["cuda"]) == probe["cuda"]
        held.setdefault(gpu, []).append((probe["t0"], probe["t1"]))
    assert sorted(held) == [0, 1] and cuda[0] != cuda[1]
    for spans in held.values():  # runs of one GPU never held it at once
        spans.sort()
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))


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
