"""`mlab prepare TASK --force` loses no baseline (issue 34, item 2): one measured on inputs that did not change
is kept; one whose inputs changed is kept beside the new preparation, runs from before are still judged against
it, and prepare says which runs use which."""
from __future__ import annotations

import functools
import json
import os

import pytest

from mlab.core import RunConfig
from mlab.core.bench.verdict import RunJudge
from mlab.core.run.baseline import known_baseline, measure_baseline
from mlab.core.run.harness import Harness
from mlab.core.run.runner import Runner
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.bench_plugins import bench_registry
from tests.fixtures.cli import entry, mlab, mlab_in_process
from tests.fixtures.gated_run import gated_registry
from tests.fixtures.harness import CounterTask

BENCH = entry("tests.fixtures.gated_run", "mlab")
# prepare and eval with the same plugins, where the process is not what a case is about
in_process = functools.partial(mlab_in_process, registry=gated_registry)


@pytest.mark.slow
def test_prepare_force_keeps_a_baseline_whose_inputs_did_not_change(tmp_path):
    home = tmp_path / "home"
    assert in_process("prepare", "fixture/counter", home=home).returncode == 0
    measured = mlab("baseline", "fixture/counter", "--sandbox", "local", entry=BENCH, home=home)
    assert measured.returncode == 0, measured.stderr
    run = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", tmp_path / "run",
               "--sandbox", "local", entry=BENCH, home=home)
    assert run.returncode == 0, run.stderr
    before = json.loads(in_process("eval", tmp_path / "run", "--json", home=home).stdout)[0]
    assert before["baseline"] is not None and before["improvement"] is not None

    forced = in_process("prepare", "fixture/counter", "--force", home=home)
    assert forced.returncode == 0, forced.stderr
    assert "kept the recorded baseline" in forced.stdout + forced.stderr
    after = json.loads(in_process("eval", tmp_path / "run", "--json", home=home).stdout)[0]
    assert (after["baseline"], after["improvement"]) == (before["baseline"], before["improvement"])


class VersionedTask(CounterTask):
    """fixture/counter whose starter prints a version read at prepare time: a change of the prepared inputs."""

    name = "fixture/versioned"
    version = "1"

    def prepare(self, ctx):
        super().prepare(ctx)
        (ctx.public_dir / "data" / "version.txt").write_text(self.version)


@pytest.fixture
def versioned(tmp_path):
    registry = bench_registry()
    task = VersionedTask()
    registry.items["tasks"][task.name] = task
    registry.providers["tasks"][task.name] = "tests"
    yield registry, task, Harness(registry, TaskHome(tmp_path / "home"), sandbox="local")
    del registry.items["tasks"][task.name], registry.providers["tasks"][task.name]


def test_prepare_force_on_changed_inputs_keeps_the_old_baseline_for_the_runs_that_used_it(tmp_path, versioned,
                                                                                           monkeypatch):
    registry, task, harness = versioned
    monkeypatch.setenv("MLAB_HOME", str(harness.home.root))
    harness.ensure_prepared(task)
    measure_baseline(harness, task, runs=1, timeout_s=60)  # the starter appends one line: baseline 1
    old_value = harness.home.recorded_baseline(task)
    config = RunConfig(task=task.name, agent="fixture-appender", max_steps=10, sandbox="local")
    old_run = Runner(tmp_path / "old-run", config, registry).start()

    said: list[str] = []
    task.version = "2"
    assert harness.home.prepare(task, force=True, log=said.append)
    assert (harness.home.public_dir(task) / "data" / "version.txt").read_text() == "2"
    assert any("changed" in line and "no longer applies" in line and "runs started before" in line for line in said)
    # new runs have no baseline until it is measured again; the old run keeps the one measured on its data
    assert known_baseline(task, harness.home) == (None, "missing")
    judge = RunJudge(harness.home)
    value, source = judge.baseline(tmp_path / "old-run", task)
    assert value == old_value and "before" in source
    assert judge.judge(tmp_path / "old-run", task, old_run.final_score).verdict.improvement is not None
    kept = harness.home.superseded_baselines(task)
    assert len(kept) == 1 and os.path.exists(kept[0]["path"]) and kept[0]["score"] == old_value

    # measured again: new runs use the new one, the old run still the old one
    measure_baseline(harness, task, runs=1, timeout_s=60)
    new_run = Runner(tmp_path / "new-run", config, registry).start()
    assert new_run.final_score is not None
    assert RunJudge(harness.home).baseline(tmp_path / "new-run", task)[1].startswith("measured (")
    assert RunJudge(harness.home).baseline(tmp_path / "old-run", task)[0] == old_value
