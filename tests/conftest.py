"""Shared test set-up: an isolated MLAB_HOME for every test, and the shared-data tier.

Tiers (markers in pyproject.toml): unmarked tests are the fast tier (`make test-fast`, under two minutes on two
cores); `slow` ones train models, run whole bench loops, start a browser, Ray or Docker containers (every
case of the docker sandbox is slow), or stress a sandbox;
`shared_data` ones need ../shared/data and skip with a reason without it; `timing` ones (slow too) time code
under load. `make test` runs them all on pytest-xdist workers: the timing cases on one worker, beside the other
workers' cases, which the scorer must withstand as it withstands a bench's other runs.
"""
from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path, PurePosixPath

import pytest

# Each xdist worker imports, and assertion-rewrites, every test module: with PYTHONDONTWRITEBYTECODE set (as some
# shells and CI images do) it would compile them all afresh each time. The test processes keep their bytecode;
# the commands they start still inherit the variable, so no run's workspace gets a __pycache__ it did not have.
sys.dont_write_bytecode = False

# xdist workers share the cores: a BLAS or torch that starts a thread per core in each worker (and in every script
# a worker's harness runs) oversubscribes them, and spinning threads made cifar10's check-task 2.5-3x slower beside
# one other busy core. Each worker's share of the cores, unless the user chose; the harness passes it to scripts.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, str(_share))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MLAB_SHARED_DIR", REPO.parent / "shared")) / "data"


# The user's own settings that would change what a test's mlab does: its plugins and where its data comes from.
USER_SETTINGS = ("MLAB_LOAD_PLUGINS", "MLAB_DATA_DIR")


@pytest.fixture(scope="session", autouse=True)
def _isolated_session_home(tmp_path_factory):
    """A session-wide MLAB_HOME, set before any module or session fixture runs: a fixture that prepares a task
    or runs an agent for a whole module writes there, never into the user's ~/.cache/mlab."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLAB_HOME", str(tmp_path_factory.mktemp("session-mlab-home")))
        for name in USER_SETTINGS:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(autouse=True)
def _isolated_mlab_home(tmp_path, tmp_path_factory, monkeypatch):
    """Each test gets an MLAB_HOME of its own. The terminal size an xdist worker exports (COLUMNS=80) is dropped
    too: the CLI's output in a test is the piped output a serial run sees. tmp_path comes first so that its removal
    at teardown (a passing case's, pyproject's retention policy) runs after a case's patches of os are undone."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("COLUMNS", "LINES"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLAB_HOME", str(tmp_path_factory.mktemp("mlab-home")))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: a docker case is in the slow tier
def pytest_collection_modifyitems(config, items):
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        group = _worker_group(item)
        if group == "docker":
            item.add_marker(pytest.mark.slow)  # each starts containers on the session's own Docker engine
        if xdist and group:
            item.add_marker(pytest.mark.xdist_group(group))
    if SHARED_DATA.is_dir():
        return
    skip = pytest.mark.skip(reason=f"shared data not found at {SHARED_DATA} (set MLAB_SHARED_DIR)")
    for item in items:
        if "shared_data" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Stops a run whose grouped cases lost their group: pytest 9.2 keeps a node's id where pytest-xdist 3.8
    cannot suffix it, and `--dist loadgroup` then spread docker, Ray and litellm cases over every worker, silently.
    The modules grouped whole (FILE_GROUPS) show it from their ids alone."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    lost = [case for case in ids if "@" not in case and PurePosixPath(case.split("::")[0]).name in FILE_GROUPS]
    if lost:
        pytest.exit(f"--dist loadgroup did not group {lost[0]} (and {len(lost) - 1} more): pytest "
                    f"{pytest.__version__} and this pytest-xdist do not work together", returncode=3)


# Modules whose every case shares one thing: test_bench_ray.py a module's Ray cluster; the others import litellm in
# the worker's own process, which costs 4-7 s the first time in a process, so on one worker it is paid once.
FILE_GROUPS = {"test_bench_ray.py": "ray", "test_cli.py": "litellm", "test_generation_controls.py": "litellm",
               "test_llm_backends.py": "litellm", "test_llm_cli.py": "litellm", "test_tool_calls.py": "litellm"}
# --dist loadgroup hands out the units with the most cases first (a group before any single case), so the timing
# cases (minutes each) start early, not last.


def _worker_group(item: pytest.Item) -> str | None:
    """Cases that share one thing run on one xdist worker (with `--dist loadgroup`): the docker sandbox's cases
    share the worker session's Docker engine, the Ray cases a module's cluster, the litellm cases its import, and
    the timing cases a CPU load."""
    if item.path.name in FILE_GROUPS:
        return FILE_GROUPS[item.path.name]
    if item.get_closest_marker("timing"):  # one at a time: neither times code beside the other's load
        return "timing"
    if "docker_sandbox" in getattr(item, "fixturenames", ()):  # test_docker_exec.py's cases that start containers
        return "docker"
    params = getattr(item, "callspec", None)
    if params and any(isinstance(value, str) and value == "docker" for value in params.params.values()):
        return "docker"
    return None


# Where the suite's time goes: each case's CPU time (its process's and that of the processes it waited for: a CLI's;
# not a sandbox zygote's reaped later, nor a daemon's or container's) is a property of its report (in --junitxml
# too), and the run ends with their sum beside the machine's busy share, the figure that says whether more workers
# would help (96% in a quiet make test: only cheaper cases would). benchmarks/suite_cpu counts a case's whole work.
def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine since boot (/proc/stat; idle and iowait are not busy)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]  # user..steal (guest time is in user already)
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


_CPU_START, _WALL_START = pytest.StashKey[float](), pytest.StashKey[float]()
_MACHINE_START = pytest.StashKey[tuple[int, int]]()
_cases_cpu: list[float] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_START] = _cpu_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        report.user_properties.append(("cpu_seconds", round(_cpu_seconds() - item.stash[_CPU_START], 2)))
    return report


def pytest_runtest_logreport(report):
    _cases_cpu.extend(value for name, value in report.user_properties if name == "cpu_seconds")


def pytest_sessionstart(session):
    session.config.stash[_WALL_START] = time.monotonic()
    if not os.environ.get("PYTEST_XDIST_WORKER") and os.path.exists("/proc/stat"):
        session.config.stash[_MACHINE_START] = _machine_ticks()



def pytest_terminal_summary(terminalreporter, config):
    if not _cases_cpu or _MACHINE_START not in config.stash:
        return
    wall = time.monotonic() - config.stash[_WALL_START]
    (busy0, all0), (busy1, all1) = config.stash[_MACHINE_START], _machine_ticks()
    cores = len(os.sched_getaffinity(0))
    terminalreporter.write_line(
        f"CPU time: {sum(_cases_cpu):,.0f} s in {len(_cases_cpu)} cases and the processes they waited for, over "
        f"{wall:,.0f} s on {cores} cores; the machine was {(busy1 - busy0) / max(1, all1 - all0):.0%} busy")


@pytest.fixture
def stand_in_gpu(monkeypatch):
    """A character device named like an NVIDIA node (the null device's numbers: this machine has no GPU), in a
    folder of /dev of the case's own, and MLAB_GPU_DEVICES naming it alone: no other process's sandboxes (another
    worker's, whose plans and zygotes would change) see it, and no other case's node is passed along with it."""
    import shutil
    import stat
    import uuid

    folder = f"/dev/mlab-test-gpu-{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(folder, 0o755)
        os.mknod(f"{folder}/nvidia0", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"cannot make a stand-in character device in /dev here: {exc}")
    monkeypatch.setenv("MLAB_GPU_DEVICES", f"{folder}/nvidia*")
    yield f"{folder}/nvidia0"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def stand_in_gpus():
    """Two stand-in GPUs and a control node: character devices with the null device's numbers where this is
    root, else plain files. Outside /tmp: every sandbox gives a command a /tmp of its own."""
    import shutil
    import stat
    import tempfile

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


@pytest.fixture(scope="session", autouse=True)
def _docker_engine_stopped_at_the_end():
    """The docker sandbox's cases start a Docker engine of the session's own on first use
    (tests/fixtures/docker_engine.py); it is stopped, and its data removed, when the session ends."""
    yield
    from tests.fixtures import docker_engine

    docker_engine.stop()


@pytest.fixture
def entered(monkeypatch):
    """The folders each snapshot walk lists (Scanner.scan), by prefix: what a step cost the store."""
    from mlab.core.fs import tree_index

    found: list[str] = []
    real_scan = tree_index.Scanner.scan

    def scan(self, fd, prefix, folder, depth):
        found.append(prefix)
        return real_scan(self, fd, prefix, folder, depth)

    monkeypatch.setattr(tree_index.Scanner, "scan", scan)
    return found
