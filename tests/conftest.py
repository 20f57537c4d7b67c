"""Shared test set-up: an isolated MLAB_HOME for every test, and the shared-data tier.

Tiers (markers in pyproject.toml): unmarked tests are the fast tier (`make test-fast`, under two minutes on two
cores); `slow` ones train models, run whole bench loops, start a browser or Ray, or stress a sandbox;
`shared_data` ones need ../shared/data and skip with a reason without it. `make test` runs all three, on
pytest-xdist workers, and then the `timing` cases alone (they time code beside a CPU load of their own, and
another worker's tests would be load they do not control).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MLAB_SHARED_DIR", REPO.parent / "shared")) / "data"


@pytest.fixture(autouse=True)
def _isolated_mlab_home(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's ~/.cache/mlab. The terminal size an xdist worker exports (COLUMNS=80)
    is dropped too: the CLI's output in a test is the piped output a serial run sees."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("COLUMNS", "LINES"):
            monkeypatch.delenv(name, raising=False)
    if "MLAB_HOME" not in os.environ or not os.environ["MLAB_HOME"].startswith(str(tmp_path_factory.getbasetemp())):
        monkeypatch.setenv("MLAB_HOME", str(tmp_path_factory.mktemp("mlab-home")))


def pytest_collection_modifyitems(config, items):
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            if group := _worker_group(item):
                item.add_marker(pytest.mark.xdist_group(group))
    if SHARED_DATA.is_dir():
        return
    skip = pytest.mark.skip(reason=f"shared data not found at {SHARED_DATA} (set MLAB_SHARED_DIR)")
    for item in items:
        if "shared_data" in item.keywords:
            item.add_marker(skip)


# Cases that make a stand-in GPU node in the host's /dev for a while: every sandbox passes /dev/nvidia* through.
MAKE_STAND_IN_GPU_NODES = ("test_gpu_device_nodes_pass_into_every_sandbox",
                           "test_the_trace_records_the_gpu_devices_the_run_saw")


def _worker_group(item: pytest.Item) -> str | None:
    """Cases that share one thing run on one xdist worker (with `--dist loadgroup`): the docker sandbox's cases
    share the worker session's Docker engine, and the Ray cases a module's cluster."""
    if item.path.name == "test_bench_ray.py":
        return "ray"
    if getattr(item, "originalname", None) in MAKE_STAND_IN_GPU_NODES:
        return "docker"  # a stand-in node in the host's /dev, deleted mid-case, would be passed to docker's --device
    params = getattr(item, "callspec", None)
    if params and any(isinstance(value, str) and value == "docker" for value in params.params.values()):
        return "docker"
    return None


@pytest.fixture(scope="session", autouse=True)
def _docker_engine_stopped_at_the_end():
    """The docker sandbox's cases start a Docker engine of the session's own on first use
    (tests/fixtures/docker_engine.py); it is stopped, and its data removed, when the session ends."""
    yield
    from tests.fixtures import docker_engine

    docker_engine.stop()
