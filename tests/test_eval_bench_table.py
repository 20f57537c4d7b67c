"""`mlab eval` of a bench at 80 columns: runs that differ only in their seed stay apart, and what they did
stays readable."""
from __future__ import annotations

import re

import pytest

from tests.fixtures.bench_cli import REGISTRY
from tests.fixtures.bench_plugins import bench_registry
from tests.fixtures.cli import mlab, mlab_in_process


@pytest.fixture(scope="module")
def two_seed_bench(tmp_path_factory):
    """A finished bench of two runs that differ only in their seed."""
    out = tmp_path_factory.mktemp("bench") / "bench"
    made = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--runs", "2",
                "--agent-option", "steps=2", "--bench-dir", out, "--registry", REGISTRY)
    assert made.returncode == 0, made.stderr
    return out


def test_eval_of_a_bench_at_80_columns_keeps_runs_apart_by_their_seed(two_seed_bench):
    shown = mlab_in_process("eval", two_seed_bench, registry=bench_registry, env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), shown.stdout
    rows = [line for line in lines if line.startswith("│")]
    names = [row.split("│")[1].strip() for row in rows if row.split("│")[1].strip()]
    assert len(names) == 2 and names[0] != names[1], shown.stdout
    assert [re.search(r"s\d+$", name).group() for name in names] == ["s0", "s1"], shown.stdout
    for column in ("status", "steps", "score"):  # what a run did stays readable, not cut to letters
        assert column in shown.stdout, shown.stdout
