"""pytest plugin: each worker (pytest-xdist's, or the one pytest process) in a CPU-accounting cgroup of its own, and
each case's CPU time, with every process it started (sandboxed commands a zygote reaps included), as the report
property `cgroup_cpu_seconds`. The suite's own per-case figure (tests/conftest.py) counts only the processes a case
waited for. Needs root and cgroup v1's cpuacct or cgroup v2; elsewhere it records nothing and says so."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

PARENT = "mlab-suite-cpu"
_usage_file: Path | None = None
_started: dict[str, float] = {}


def _cgroup_root() -> tuple[Path, str] | None:
    """(where this plugin's cgroups go, the file of a cgroup's CPU time), or None."""
    v1 = Path("/sys/fs/cgroup/cpuacct")
    if (v1 / "cpuacct.usage").exists():
        return v1 / PARENT, "cpuacct.usage"
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return Path("/sys/fs/cgroup") / PARENT, "cpu.stat"
    return None


def _seconds(path: Path) -> float:
    text = path.read_text()
    if path.name == "cpu.stat":  # v2: usage_usec
        return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("usage_usec")) / 1e6
    return int(text) / 1e9  # v1: nanoseconds


def pytest_configure(config: pytest.Config) -> None:
    global _usage_file
    if config.pluginmanager.hasplugin("dsession"):  # the xdist controller: its workers measure
        return
    found = _cgroup_root()
    if found is None:
        warnings.warn("suite_cpu: no cgroup CPU accounting here; nothing recorded", stacklevel=1)
        return
    root, usage = found
    group = root / os.environ.get("PYTEST_XDIST_WORKER", "main")
    try:
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        warnings.warn(f"suite_cpu: cannot make a cgroup ({exc}); nothing recorded", stacklevel=1)
        return
    _usage_file = group / usage


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if _usage_file is not None:
        _started[item.nodeid] = _seconds(_usage_file)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if _usage_file is not None and call.when == "teardown" and item.nodeid in _started:
        report.user_properties.append(
            ("cgroup_cpu_seconds", round(_seconds(_usage_file) - _started.pop(item.nodeid), 3)))
    return report
