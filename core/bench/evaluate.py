"""`mlab eval`: score runs' final and intermediate snapshots in parallel, through the harness's scorer, and judge
them against the same baselines the report uses."""
from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypedDict

from mlab.core.bench.results import DB_FILE, ResultsDB, classify, judge_runs
from mlab.core.bench.run_folders import runs_in
from mlab.core.bench.verdict import Judged, RunJudge, baseline_hint, spent
from mlab.core.errors import MlabError
from mlab.core.models import Trace
from mlab.core.plugins.registry import Registry
from mlab.core.run.checktask import reference_hint
from mlab.core.run.harness import Harness
from mlab.core.run.scoring import Score, judge
from mlab.core.run.task_lookup import task_of_run
from mlab.core.run.trace import read_trace
from mlab.core.task import Task

MAX_INTERMEDIATE = 50  # snapshots scored per run, as in the original


def registry_from(factory: str | None = None, sys_path: list[str] | None = None) -> Registry:
    """The plugin registry; `factory` ("module:function") builds one programmatically, e.g. with test plugins."""
    for entry in reversed(sys_path or []):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if not factory:
        from mlab.core.plugins.registry import load_registry

        return load_registry()
    module, _, name = factory.partition(":")
    try:
        registry: Registry = getattr(importlib.import_module(module), name or "registry")()
    except (ImportError, AttributeError) as exc:
        raise MlabError(f"registry factory {factory!r} cannot be loaded: {exc}") from exc
    return registry


def intermediate_steps(trace: Trace, limit: int = MAX_INTERMEDIATE) -> list[tuple[int, str]]:
    """(step, snapshot) of the steps to score: all of them, or `limit` evenly spaced ones ending with the last."""
    steps = [(s.index, s.snapshot) for s in trace.steps]
    if len(steps) <= limit:
        return steps
    picks = sorted({round(i * (len(steps) - 1) / (limit - 1)) for i in range(limit)})
    return [steps[i] for i in picks]


_worker_harness: Harness | None = None  # set before the pool forks, so workers share the parent's registry
_worker_tasks: list[Task] = []  # each job's task (a folder's, or one with parameters, has no registered name)


def _score_chunk(job: int, run_dir: str, snapshots: list[str]) -> list[Score]:
    assert _worker_harness is not None
    task = _worker_tasks[job]
    return [_worker_harness.scorer.score_snapshot(task, Path(run_dir), snap) for snap in snapshots]


def score_many(jobs: list[tuple[str | Task, Path, list[str]]], harness: Harness, workers: int = 1, chunk: int = 10,
               on_done: Callable[[int], None] | None = None) -> list[list[Score]]:
    """Scores of each (task, run_dir, snapshots) job, computed by `workers` forked processes in chunks.

    Forked workers inherit the harness as built here, plugins registered in-process included; observer hooks
    are told here, in this process, once every score is in."""
    global _worker_harness, _worker_tasks
    pieces = [(j, i, str(folder), snaps[i:i + chunk])
              for j, (_task, folder, snaps) in enumerate(jobs) for i in range(0, len(snaps), chunk)]
    out: list[list[Score]] = [[(None, None)] * len(snaps) for _t, _r, snaps in jobs]
    _worker_harness = harness
    _worker_tasks = [task if isinstance(task, Task) else harness.task(task) for task, _r, _s in jobs]
    if workers <= 1 or len(pieces) <= 1:
        for j, i, folder, snaps in pieces:
            out[j][i:i + len(snaps)] = _score_chunk(j, folder, snaps)
            if on_done:
                on_done(len(snaps))
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(pieces)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(_score_chunk, j, folder, snaps): (j, i)
                       for j, i, folder, snaps in pieces}
            for future in as_completed(futures):
                j, i = futures[future]
                result = future.result()
                out[j][i:i + len(result)] = result
                if on_done:
                    on_done(len(result))
    for (_task, run_dir, snaps), task, scores in zip(jobs, _worker_tasks, out, strict=True):
        for snap, score in zip(snaps, scores, strict=True):
            harness.scored(task, score, run_dir, snap)
    return out


class Evaluated(TypedDict):
    """One scored run: its final snapshot's (score, error) and, when asked for, its steps' scores."""

    run_dir: Path
    trace: Trace
    task: Task
    final: Score
    steps: list[tuple[int, str, float | None, str | None]]  # (step, snapshot, score, error)


def evaluate_runs(run_dirs: list[Path], intermediate: bool = False, workers: int | None = None,
                  registry: Registry | None = None, on_done: Callable[[int], None] | None = None,
                  harness: Harness | None = None, on_skip: Callable[[str], None] | None = None) -> list[Evaluated]:
    """Score each run's final snapshot and, with `intermediate`, up to 50 step snapshots, in parallel. A run that
    cannot be read (or whose task is not installed) raises, or with `on_skip` is left out and told to it."""
    harness = harness or Harness(registry or registry_from())
    workers = workers or os.cpu_count() or 1
    plans = []
    for run_dir in run_dirs:
        try:
            trace = read_trace(Path(run_dir))
            task = task_of_run(harness.registry, trace.config)  # a folder's task too, with the run's parameters
        except MlabError as exc:
            if on_skip is None:
                raise
            on_skip(f"{run_dir}: skipped: {exc}")
            continue
        final = trace.final_snapshot or (trace.steps[-1].snapshot if trace.steps else "step_0000")
        steps = intermediate_steps(trace) if intermediate else []
        plans.append((Path(run_dir), trace, task, final, steps))
    jobs: list[tuple[str | Task, Path, list[str]]] = [(task, run_dir, [final] + [snap for _i, snap in steps])
                                                      for run_dir, _t, task, final, steps in plans]
    scores = score_many(jobs, harness, workers=workers, on_done=on_done)
    # the answers a run is scored against lie in the home it was made in: in another (a shell without its
    # MLAB_HOME) scoring fails on a missing file, which says nothing of the run
    missing = sorted({task.name for (_r, _t, task, _f, _s), got in zip(plans, scores, strict=True)
                      if got[0][0] is None and not harness.home.is_prepared(task)})
    if missing:
        raise MlabError(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not prepared in this task home "
                        f"({harness.home.root}): set MLAB_HOME to the home the runs were made in, or prepare "
                        f"{'it' if len(missing) == 1 else 'them'} here (mlab prepare {missing[0]})")
    results: list[Evaluated] = []
    for (run_dir, trace, task, _final, steps), got in zip(plans, scores, strict=True):
        results.append({"run_dir": run_dir, "trace": trace, "task": task, "final": got[0],
                        "steps": [(i, snap, s, e) for (i, snap), (s, e) in zip(steps, got[1:], strict=True)]})
    return results


def eval_rows(paths: list[Path], intermediate: bool = False, workers: int | None = None,
              registry: Registry | None = None, on_done: Callable[[int], None] | None = None,
              on_skip: Callable[[str], None] | None = None, tags: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """`mlab eval`: score run folders, or every completed run of a bench folder (storing the scores in its
    database); one row per run, with the best step when `intermediate`. A run folder that cannot be read is told to
    `on_skip` and left out (with no `on_skip`, it raises); none readable raises."""
    harness = Harness(registry or registry_from())
    run_dirs: list[Path] = []
    bench_of: dict[Path, tuple[Path, str]] = {}
    for path in map(Path, paths):
        if (path / DB_FILE).is_file():
            with ResultsDB(path / DB_FILE) as db:
                for row in db.runs():
                    run_dir = path / row["run_dir"]
                    if row["status"] in ("finished", "failed") and (run_dir / "trace.json").is_file():
                        run_dirs.append(run_dir)
                        bench_of[run_dir] = (path, row["key"])
        else:
            run_dirs.extend(runs_in(path))  # one run, or every run in a folder of runs (runs/demo)
    if tags:  # only the runs started with every tag (mlab run --tag)
        run_dirs = [run_dir for run_dir in run_dirs if set(tags) <= set(_tags_of(run_dir))]
        if not run_dirs:
            raise MlabError(f"no run in {', '.join(map(str, paths))} is tagged {' and '.join(tags)}")
    skipped: list[str] = []
    results = evaluate_runs(run_dirs, intermediate, workers, on_done=on_done, harness=harness,
                            on_skip=skipped.append if on_skip else None)
    if run_dirs and not results:
        raise MlabError("no run could be read: " + "; ".join(skipped))
    if on_skip is not None:
        for line in skipped:
            on_skip(line)
    for res in results:
        if res["run_dir"] in bench_of:
            bench, key = bench_of[res["run_dir"]]
            trace = res["trace"]
            trace.final_score, trace.final_score_error = res["final"]
            with ResultsDB(bench / DB_FILE) as db:
                db.upsert_run(key, final_score=res["final"][0], final_score_error=res["final"][1],
                              failure=classify(trace))
                if intermediate:
                    db.set_step_scores(key, res["steps"])
    # Baselines once every score is stored: a bench's own baseline-agent runs count with their new scores.
    judged: dict[Path, dict[str, Judged]] = {}
    for bench in {b for b, _k in bench_of.values()}:
        with ResultsDB(bench / DB_FILE) as db:
            judged[bench] = judge_runs(db, harness.home, store=True)
    rows = []
    loose = RunJudge(harness.home)  # a run given by its folder: its bench's baseline if a bench holds it
    for res in results:
        if res["run_dir"] in bench_of:
            bench, key = bench_of[res["run_dir"]]
            verdict = judged[bench][key]  # judged after this scoring was stored
        else:
            verdict = loose.judge(res["run_dir"], res["task"], res["final"][0])
        rows.append(_row(res, verdict, intermediate))
    return rows


def _tags_of(run_dir: Path) -> list[str]:
    """The tags in a run's config.json; none when it cannot be read."""
    try:
        tags = json.loads((Path(run_dir) / "config.json").read_text()).get("tags")
    except (OSError, ValueError, AttributeError):
        return []
    return [tag for tag in tags if isinstance(tag, str)] if isinstance(tags, list) else []


def _row(res: Evaluated, verdict: Judged, intermediate: bool) -> dict[str, Any]:
    trace, task = res["trace"], res["task"]
    (score, error), steps = res["final"], res["steps"]
    trace.final_score, trace.final_score_error = score, error
    valid = [(i, s) for i, _snap, s, _e in steps if s is not None and judge(s, None, task).valid]
    pick = max if task.metric.higher_is_better else min
    best = pick(valid, key=lambda p: p[1]) if valid else None
    row = {"run_dir": str(res["run_dir"]), "task": task.name, "agent": trace.config.agent, "status": trace.status,
           "metric": task.metric.name, "higher_is_better": task.metric.higher_is_better,
           "score": score, "error": error, **verdict.fields(), "failure": classify(trace),
           **spent(trace), "allow_validate": trace.config.allow_validate,
           # what measures the missing baseline, as typed (a task folder by its path)
           "baseline_hint": baseline_hint(task) if verdict.baseline is None else None,
           # what records the reference score "of reference" needs, while none is recorded
           "reference_hint": reference_hint(task) if verdict.reference is None else None}
    if intermediate:
        row.update({"best_step": best[0] if best else None, "best_score": best[1] if best else None,
                    "step_scores": [{"step": i, "score": s, "error": e} for i, _snap, s, e in steps]})
    return row
