"""A task's baseline: its fixed value, or its starter run in fresh sandboxed workspaces and scored like any run."""
from __future__ import annotations

import statistics

from mlab.core.errors import MlabError
from mlab.core.models import BaselineMeasured
from mlab.core.run.harness import Harness
from mlab.core.run.scoring import is_valid
from mlab.core.run.taskdata import TaskHome
from mlab.core.task import Task


def measure_baseline(harness: Harness, task: Task, runs: int = 1, timeout_s: float = 7200.0,
                     record: bool = True) -> list[float]:
    """Run the starter `runs` times in the harness's sandbox; record the mean in the task home."""
    scores = []
    for _ in range(runs):
        outcome = harness.run_script_fresh(task, timeout_s)
        if outcome.score is None:
            raise MlabError(f"{task.name}: the starter produced no valid submission: {outcome.error}")
        scores.append(outcome.score)
    if record:
        harness.home.record_baseline(task, scores, harness.sandbox_name)
    harness.notify("baseline_measured", BaselineMeasured(
        task=task.name, sandbox=harness.sandbox_name, scores=scores, baseline=statistics.fmean(scores),
        recorded=record))
    return scores


def known_baseline(task: Task, home: TaskHome) -> tuple[float | None, str]:
    """The baseline a task's scores are judged against outside a bench: the task's fixed one, else the one
    `mlab baseline` recorded. Returns (value, where it came from)."""
    if task.fixed_baseline is not None:
        return float(task.fixed_baseline), "fixed"
    recorded = home.recorded_baseline(task)
    if recorded is not None:
        return recorded, "recorded"
    return None, "missing"


def bench_baseline(known: tuple[float | None, str],
                   baseline_agent_scores: list[float | None]) -> tuple[float | None, str]:
    """Within a bench: the known baseline, else the mean valid final score of the bench's own `baseline`
    agent runs (the original's definition)."""
    if known[0] is not None:
        return known
    valid = [s for s in baseline_agent_scores if is_valid(s)]
    if valid:
        return statistics.fmean(valid), f"baseline agent, {len(valid)} runs"
    return None, "missing"
