"""A task made ready for many episodes at once, before they start: its data prepared and its baseline known
(measured as `mlab baseline` measures it, where the task fixes none and none is recorded), so that episodes in
parallel neither race to prepare it nor start without the baseline their reward is judged against."""
from __future__ import annotations

from typing import Any

from mlab.core.plugins.registry import Registry, load_registry
from mlab.core.run.baseline import known_baseline, measure_baseline
from mlab.core.run.harness import Harness


def prepare_task(task: str, *, baseline: bool = True, baseline_runs: int = 1, sandbox: str = "auto",
                 timeout_s: float = 7200.0, task_params: dict[str, Any] | None = None,
                 registry: Registry | None = None) -> tuple[float | None, str]:
    """Prepare `task` in the task home (MLAB_HOME) unless it is, and with `baseline`, measure its baseline unless one
    is known; returns the baseline and where it comes from, as runs are judged outside a bench."""
    harness = Harness(registry or load_registry(), sandbox=sandbox)
    found = harness.task(task, task_params)
    found.check_runnable()
    harness.ensure_prepared(found)
    known = known_baseline(found, harness.home)
    if baseline and known[0] is None:
        measure_baseline(harness, found, runs=baseline_runs, timeout_s=timeout_s)
        known = known_baseline(found, harness.home)
    return known
