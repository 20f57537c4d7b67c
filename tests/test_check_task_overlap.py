"""`mlab check-task` prepares the task again (to see prepare is reproducible) while the baseline and the reference
run (issue 42 item 4: the second prepare and the digests of both took minutes at 200,000 files, before either
script started). Shown without a clock: the second prepare waits for the baseline's scoring, which, one step after
the other, would only come once it had given up."""
from __future__ import annotations

import threading

import pytest

from mlab.core.run.checktask import REPRODUCIBLE, check_task
from mlab.core.run.harness import Harness
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.harness import ReferenceTask, harness_registry

WAIT_S = 60  # what the second prepare waits for the baseline at most


class WaitingTask(ReferenceTask):
    """Its second prepare writes what the first did only once the baseline has been scored."""

    name = "fixture/waiting-prepare"

    def __init__(self) -> None:
        self.scored = threading.Event()
        self.prepares = 0

    def prepare(self, ctx):
        super().prepare(ctx)
        self.prepares += 1
        if self.prepares > 1:
            seen = self.scored.wait(WAIT_S)
            (ctx.hidden_dir / "seen.txt").write_text("scored" if seen else "not scored")
        else:
            (ctx.hidden_dir / "seen.txt").write_text("scored")

    def evaluate(self, workspace, hidden_dir):
        score = super().evaluate(workspace, hidden_dir)
        self.scored.set()
        return score


@pytest.mark.slow
def test_the_second_prepare_runs_beside_the_baseline(tmp_path):
    task = WaitingTask()
    registry = harness_registry()
    registry.items["tasks"][task.name] = task
    registry.providers["tasks"][task.name] = "tests"
    report = check_task(Harness(registry, TaskHome(tmp_path / "home")), task, timeout_s=60)
    assert report.steps[REPRODUCIBLE] == "ok", report.steps
    assert report.passed, report.reason
    assert list(report.steps) == ["prepare", REPRODUCIBLE, "invalid submission", "baseline", "reference"]
