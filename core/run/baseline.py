"""A task's baseline, one definition: the task's fixed value (with its source), else the mean over starter runs
with a valid score, measured in fresh sandboxed workspaces and recorded with n, spread, sandbox and machine."""
from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from mlab.core.errors import MlabError
from mlab.core.models import BaselineMeasured
from mlab.core.run.harness import Harness
from mlab.core.run.scoring import baseline_refusal, is_valid
from mlab.core.run.taskdata import TaskHome
from mlab.core.task import Task


def machine() -> dict[str, Any]:
    """Where a baseline was measured: run-time baselines (vectorization's seconds) depend on it."""
    return {"host": platform.node(), "arch": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "system": platform.platform(terse=True)}


def peak_child_memory_mb() -> float:
    """Peak resident memory of the largest process this one has waited for (the starter runs: a baseline is
    measured by its own command), in MB."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)  # Linux reports KiB


def measured_costs(record: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(mean seconds of a starter run, peak memory in MB) from a baseline record; None where not measured."""
    if not record:
        return None, None
    seconds = [s for s in record.get("seconds") or [] if isinstance(s, (int, float))]
    peak = record.get("peak_memory_mb")
    return (statistics.fmean(seconds) if seconds else None), (float(peak) if isinstance(peak, (int, float)) else None)


def summarize(scores: list[float | None]) -> dict[str, Any]:
    """A measured baseline from per-run scores: the mean over valid runs only (the original's rule)."""
    valid = [s for s in scores if is_valid(s)]
    if not valid:
        raise MlabError(f"none of the {len(scores)} starter runs produced a valid score, so there is no baseline "
                        "to measure; the task needs a fixed baseline or a starter that submits")
    return {"score": statistics.fmean(valid), "n": len(valid), "runs": len(scores),
            "stdev": statistics.stdev(valid) if len(valid) > 1 else None, "scores": scores}


def measure_baseline(harness: Harness, task: Task, runs: int = 1, timeout_s: float = 7200.0,
                     record: bool = True, on_progress: Callable[[str], None] | None = None) -> list[float | None]:
    """Run the starter `runs` times in the harness's sandbox; record the mean valid score in the task home.
    Returns each run's score (None for a run without a valid one). `on_progress` is told each run's start and end
    in a line."""
    scores: list[float | None] = []
    errors: list[str] = []
    seconds: list[float] = []
    for i in range(1, runs + 1):
        if on_progress:
            on_progress(f"{task.name}: run {i}/{runs} started")
        started = time.monotonic()
        outcome = harness.run_script_fresh(task, timeout_s)
        seconds.append(round(time.monotonic() - started, 3))
        scores.append(outcome.score if is_valid(outcome.score) else None)
        if not is_valid(outcome.score):
            crashed = f"the starter crashed (exit code {outcome.exit_code}); " if outcome.exit_code else ""
            errors.append(crashed + (outcome.error or f"score {outcome.score} is not valid"))
        if on_progress:
            result = f"{task.metric.name} {outcome.score:.6g}" if scores[-1] is not None else f"no score ({errors[-1]})"
            on_progress(f"{task.name}: run {i}/{runs} ended: {result} in {seconds[-1]:.1f} s")
    try:
        summary = summarize(scores)
    except MlabError as exc:
        if task.fixed_baseline is not None:  # nothing to measure, and nothing needed: say what judges runs
            raise MlabError(
                f"{task.name}: none of the {len(scores)} starter run(s) gave a valid score ({errors[-1]}), so "
                f"nothing was measured or recorded; runs are judged against the task's fixed baseline "
                f"{task.metric.name} = {task.fixed_baseline:.6g} ({task.fixed_baseline_source})") from None
        raise MlabError(f"{task.name}: {exc} ({errors[-1]})") from None
    summary.update(sandbox=harness.sandbox_name, machine=machine(), measured_at=time.time(), seconds=seconds,
                   peak_memory_mb=peak_child_memory_mb(),
                   inputs=harness.home.inputs_fingerprint(task))  # prepare --force keeps it while they match
    if record:
        harness.home.record_baseline(task, summary)
    harness.notify("baseline_measured", BaselineMeasured(
        task=task.name, sandbox=harness.sandbox_name, scores=scores, baseline=summary["score"], recorded=record))
    return scores


def known_baseline(task: Task, home: TaskHome, started_at: float | None = None) -> tuple[float | None, str]:
    """The baseline a task's scores are judged against outside a bench: the task's fixed one, else the one
    `mlab baseline` recorded; for a run that started before `prepare --force` changed the data (started_at),
    the one recorded on the data it ran on. Returns (value, where it came from)."""
    if task.fixed_baseline is not None:
        return float(task.fixed_baseline), f"fixed: {task.fixed_baseline_source}"
    if started_at is not None:
        for old in home.superseded_baselines(task):
            if started_at < old["superseded_at"] and isinstance(old.get("score"), (int, float)):
                until = time.strftime("%Y-%m-%d %H:%M", time.localtime(old["superseded_at"]))
                return float(old["score"]), f"measured on the data prepared before {until} ({old['path']})"
    record = home.baseline_record(task)
    if record is not None and record.get("score") is not None:
        n, runs = record.get("n"), record.get("runs")
        count = f"{n} of {len(runs)} runs valid" if isinstance(n, int) and isinstance(runs, list) else "recorded"
        return float(record["score"]), f"measured ({count}, sandbox {record.get('sandbox', '?')})"
    return None, "missing"


def bench_baseline(known: tuple[float | None, str],
                   baseline_agent_scores: list[float | None]) -> tuple[float | None, str]:
    """Within a bench: the known baseline, else the mean valid final score of the bench's own `baseline`
    agent runs (the original's definition)."""
    if known[0] is not None:
        return known
    valid = [s for s in baseline_agent_scores if is_valid(s)]
    if valid:
        return statistics.fmean(valid), f"measured (baseline agent, {len(valid)} of {len(baseline_agent_scores)} " \
            "runs valid)"
    return None, "missing"


def check_fixed_baseline(task: Task) -> str | None:
    """What is wrong with a task's declared fixed baseline, or None."""
    if task.fixed_baseline is None:
        return None
    why = baseline_refusal(float(task.fixed_baseline))
    if why:
        return f"{task.name}: fixed {why}"
    if not task.fixed_baseline_source.strip():
        return f"{task.name}: a fixed baseline needs fixed_baseline_source (where the number comes from)"
    return None
