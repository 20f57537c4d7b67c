"""The one verdict of a run or a loose submission, whatever shows it (`mlab eval`, `grade`, `runs`, `report`, the
viewer): its score judged (scoring.judge) against the baseline of the place the run belongs to, with the note a
placeholder baseline needs and the figure that discriminates where success does not (the reference ratio).

Where a run's baseline comes from, one rule: a run inside a bench (a results.db above its folder lists it) is
judged against that bench's baseline for its task (results.bench_baselines); any other run, and a loose
submission, against the task's known baseline (its fixed one, else the one `mlab baseline` recorded).

The reference ratio: the score over the task's reference score (reference over score when lower is better), as
`mlab check-task` recorded it; 1.0 is as good as the reference solution, above 1 better. It is MLGym's performance
ratio with the reference as the best method, inverted so higher is better, and needs no floor: a task whose
baseline is a placeholder (house-price's 1e10) and whose starter does not run (as in the original) has no floor
to measure a gap from.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.bench.judged import VERDICT_FIELDS, Judged, judged
from mlab.core.errors import MlabError
from mlab.core.run.scoring import ScoreRule, recorded_reference
from mlab.core.run.task_lookup import task_of_run
from mlab.core.run.task_params import labelled
from mlab.core.run.taskdata import TaskHome
from mlab.core.run.trace_log import read_trace_json
from mlab.core.task import Task

if TYPE_CHECKING:
    from mlab.core.models import Trace


def baseline_hint(task: Task) -> str:
    """The command that measures a task's baseline as a user types it: a folder task by its path, with the -T
    values that change its data (not `folder/name`, which no command takes)."""
    from mlab.core.run.task_lookup import prepare_args

    return f"mlab baseline {prepare_args(task)}"


def success_text(j: Judged, task: Task | None = None) -> str:
    """One line saying what the verdict means, for terminals: the improvement, success by the original's rule,
    and the note a placeholder baseline needs; with `task`, how to measure a baseline it lacks."""
    v = j.verdict
    if v.improvement is None:
        text = f"improvement: none ({v.refused})" if v.refused else "improvement: none"
        if not v.refused and j.baseline is None and task is not None:
            text += f" (no baseline: run {baseline_hint(task)})"
    else:
        outcome = "a success" if v.success else "not a success"
        text = (f"improvement: {v.improvement:+.1%}, {outcome} (success (original): more than "
                f"{j.success_margin:.0%} better than the baseline)")
    if v.note:
        text += f"; {v.note}"
    if j.of_reference is not None:
        text += f"; {j.of_reference:.3g} of the reference score {j.reference:.6g}"
    return text


def spent(trace: Trace) -> dict[str, Any]:
    """What a run spent, as every command shows it beside its verdict: steps, model calls, tokens, cost (None
    when a call had no price) and wall time."""
    return {"steps": len(trace.steps), "llm_calls": trace.usage.calls, "tokens": trace.usage.total_tokens,
            "cost_usd": trace.usage.cost_usd if trace.usage.cost_known else None,
            "time_s": round(trace.total_time_s, 2)}


# ---- where a run's baseline comes from ----------------------------------------------------------------
def bench_holding(run_dir: Path, indexes: dict[Path, dict[Path, str]] | None = None) -> tuple[Path, str] | None:
    """The bench folder whose results.db lists run_dir, and the run's key there; None for a run outside any.
    `indexes` keeps each bench's runs by folder across calls: listing a bench reads its database once, not once
    per run (504 runs: 504 x 504 folders resolved)."""
    run = Path(run_dir).resolve()
    indexes = {} if indexes is None else indexes
    for folder in run.parents:
        if folder not in indexes:
            indexes[folder] = _bench_index(folder)
        key = indexes[folder].get(run)
        if key is not None:
            return folder, key
    return None


def _bench_index(folder: Path) -> dict[Path, str]:
    """The runs a bench folder's results.db lists, by resolved folder; none where there is no database this code
    can read."""
    from mlab.core.bench.results import DB_FILE, ResultsDB

    if not (folder / DB_FILE).is_file():
        return {}
    try:
        with ResultsDB.open_existing(folder, read_only=True) as db:
            return {(folder / str(row["run_dir"])).resolve(): str(row["key"]) for row in db.runs()}
    except Exception:  # not a results database this code can read: not this run's bench
        return {}


class RunJudge:
    """Judges runs by the one rule, each against the baseline of the place it belongs to; benches are read once."""

    def __init__(self, home: TaskHome):
        self.home = home
        self._benches: dict[Path, dict[str, Judged]] = {}
        self._indexes: dict[Path, dict[Path, str]] = {}

    def baseline(self, run_dir: Path, task: Task) -> tuple[float | None, str]:
        """The run's bench's baseline for its task, else the task's known baseline."""
        held = bench_holding(run_dir, self._indexes)
        if held is not None:
            bench, key = held
            if bench not in self._benches:
                from mlab.core.bench.results import ResultsDB, judge_runs

                with ResultsDB.open_existing(bench, read_only=True) as db:
                    self._benches[bench] = judge_runs(db, self.home)
            found = self._benches[bench].get(key)
            if found is not None:
                return found.baseline, found.baseline_source
        return known_baseline(task, self.home, started_at=_started_at(run_dir, task, self.home))

    def judge(self, run_dir: Path, task: Task, score: float | None) -> Judged:
        return judged(score, self.baseline(run_dir, task), ScoreRule.of(task),
                      recorded_reference(self.home, labelled(task)))


def known_baseline(task: Task, home: TaskHome, started_at: float | None = None) -> tuple[float | None, str]:
    from mlab.core.run.baseline import known_baseline as known

    return known(task, home, started_at)


def _started_at(run_dir: Path, task: Task, home: TaskHome) -> float | None:
    """When a run started, read only where a superseded baseline might be the one it is judged against."""
    if not home.superseded_baselines(task):
        return None
    try:
        return float((read_trace_json(run_dir) or {})["started_at"])
    except (MlabError, ValueError, KeyError, TypeError):
        return None


def trace_judge(home: TaskHome | None = None) -> Callable[[Path, Trace], dict[str, Any]]:
    """A run's verdict fields by the one rule, for every command that lists runs (`runs`, the viewer); a run of a
    task that is not installed has none."""
    from mlab.core.plugins.registry import load_registry

    registry = load_registry()
    judge = RunJudge(home or TaskHome.from_env())

    def of(run_dir: Path, trace: Trace) -> dict[str, Any]:
        try:
            task = task_of_run(registry, trace.config)
        except MlabError:
            return {**dict.fromkeys(VERDICT_FIELDS), "baseline_source": "task not installed"}
        return judge.judge(run_dir, task, trace.final_score).fields()

    return of
