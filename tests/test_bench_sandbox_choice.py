"""`--sandbox auto` in a bench: every run keeps the sandbox the bench's runs used, and one that is gone
is said in one line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.bench_cli import REGISTRY
from tests.fixtures.cli import mlab


def _bench_sandboxes(bench: Path) -> dict[str, str]:
    """run folder -> the sandbox its config.json records."""
    return {run.name[-2:]: json.loads((run / "config.json").read_text())["sandbox"]
            for run in sorted((bench / "runs").iterdir())}


@pytest.mark.slow
def test_sandbox_auto_is_the_same_for_every_run_of_a_bench(tmp_path):
    """bubblewrap installed midway (its plugin loaded for the second half): the bench keeps what its runs used."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    bench = tmp_path / "bench"
    args = ("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--agent-option", "steps=2",
            "--bench-dir", bench, "--registry", REGISTRY)
    first = mlab(*args, "--runs", "1", env={"MLAB_LOAD_PLUGINS": "local"})
    assert first.returncode == 0, first.stderr
    second = mlab(*args, "--runs", "2")
    assert second.returncode == 0, second.stderr
    assert _bench_sandboxes(bench) == {"s0": "local", "s1": "local"}, second.stderr
    assert "sandbox" not in second.stderr, second.stderr


@pytest.mark.slow
def test_a_bench_whose_sandbox_is_gone_says_so_in_one_line(tmp_path):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    bench = tmp_path / "bench"
    args = ("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--agent-option", "steps=2",
            "--bench-dir", bench, "--registry", REGISTRY)
    first = mlab(*args, "--runs", "1")
    assert first.returncode == 0, first.stderr
    second = mlab(*args, "--runs", "2", env={"MLAB_LOAD_PLUGINS": "local"})
    assert second.returncode == 0, second.stderr
    assert _bench_sandboxes(bench) == {"s0": "bwrap", "s1": "local"}
    said = [line for line in second.stderr.splitlines() if "sandbox" in line]
    assert len(said) == 1 and "bwrap" in said[0] and "local" in said[0], second.stderr
