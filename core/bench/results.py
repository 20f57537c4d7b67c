"""A bench's results database (SQLite in the bench folder, no server) and what goes into it from a run's trace."""
from __future__ import annotations

import importlib
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from mlab.core.run import taskdata
from mlab.core.errors import InvalidSubmission, MlabError
from mlab.core.bench.metrics import RunRecord, is_valid
from mlab.core.models import Trace
from mlab.core.run.readonly import is_read_only
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.task import Task

DB_FILE = "results.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY, task TEXT NOT NULL, agent TEXT NOT NULL, llm TEXT, seed INTEGER NOT NULL,
    run_dir TEXT NOT NULL, status TEXT NOT NULL, end_reason TEXT, failure TEXT, incidents TEXT,
    attempts INTEGER NOT NULL DEFAULT 0, started_at REAL, updated_at REAL, time_s REAL, steps INTEGER,
    prompt_tokens INTEGER, completion_tokens INTEGER, cost_usd REAL, final_score REAL, final_score_error TEXT,
    metric TEXT, higher_is_better INTEGER, config TEXT);
CREATE TABLE IF NOT EXISTS step_scores (
    run_key TEXT NOT NULL, step INTEGER NOT NULL, snapshot TEXT NOT NULL, score REAL, error TEXT,
    PRIMARY KEY (run_key, step));
CREATE TABLE IF NOT EXISTS plugin_versions (
    run_key TEXT NOT NULL, distribution TEXT NOT NULL, version TEXT, PRIMARY KEY (run_key, distribution));
CREATE TABLE IF NOT EXISTS baselines (task TEXT PRIMARY KEY, score REAL, source TEXT);
"""

RUN_FIELDS = ("task", "agent", "llm", "seed", "run_dir", "status", "end_reason", "failure", "incidents", "attempts",
              "started_at", "updated_at", "time_s", "steps", "prompt_tokens", "completion_tokens", "cost_usd",
              "final_score", "final_score_error", "metric", "higher_is_better", "config")

# ---- the failure taxonomy ------------------------------------------------------------------------
FAILURES = ("harness_error", "llm_error", "invalid_format", "out_of_memory", "timeout", "limits_reached",
            "no_submission")
_OOM = re.compile(r"hit the memory limit|MemoryError|out of memory|std::bad_alloc")
_TIMEOUT = re.compile(r"ran past the time limit")
_INVALID_FORMAT = re.compile(r"invalid|format|pars(e|ing)|malformed", re.I)
_LIMITS = ("max steps reached", "time limit reached", "budget reached")
_RUNS_CODE = ("Execute Script", "Python REPL")


def incidents(trace: Trace) -> list[str]:
    """Problems seen along the way, oldest first: code that ran out of memory or past its time limit."""
    found = []
    for step in trace.steps:
        if step.action.name not in _RUNS_CODE:
            continue
        if _OOM.search(step.observation):
            found.append("out_of_memory")
        elif step.is_error and _TIMEOUT.search(step.observation):
            found.append("timeout")
    return found


def classify(trace: Trace) -> str | None:
    """Why a run has nothing to show, or None when it ended with a valid final submission."""
    reason = trace.end_reason or ""
    if trace.status == "failed":
        return "llm_error" if reason.startswith("llm error") else "harness_error"
    if is_valid(trace.final_score):
        return None
    if reason.startswith("agent stopped") and _INVALID_FORMAT.search(reason):
        return "invalid_format"
    seen = incidents(trace)
    if seen:
        return seen[-1]
    if reason.startswith(_LIMITS):
        return "limits_reached"
    return "no_submission"


def summarize(trace: Trace, task: Task) -> dict:
    """The runs-table fields a trace determines."""
    return {"status": trace.status, "end_reason": trace.end_reason, "failure": classify(trace),
            "incidents": ",".join(incidents(trace)) or None, "started_at": trace.started_at,
            "time_s": trace.total_time_s, "steps": len(trace.steps), "prompt_tokens": trace.usage.prompt_tokens,
            "completion_tokens": trace.usage.completion_tokens, "cost_usd": trace.usage.cost_usd,
            "final_score": trace.final_score, "final_score_error": trace.final_score_error,
            "metric": task.metric.name, "higher_is_better": int(task.metric.higher_is_better),
            "config": trace.config.model_dump_json()}


# ---- the database --------------------------------------------------------------------------------
class ResultsDB:
    """One writer (the bench or eval process); readers such as `mlab report` may look in while it runs."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SCHEMA)

    @classmethod
    def open_existing(cls, bench_dir: Path) -> "ResultsDB":
        path = Path(bench_dir) / DB_FILE
        if not path.is_file():
            raise MlabError(f"{str(bench_dir)!r} is not a bench folder (no {DB_FILE})")
        return cls(path)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # writing
    def set_meta(self, key: str, value) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def upsert_run(self, key: str, **fields) -> None:
        unknown = set(fields) - set(RUN_FIELDS)
        if unknown:
            raise ValueError(f"unknown run fields {sorted(unknown)}")
        fields["updated_at"] = time.time()
        with self.conn:
            exists = self.conn.execute("SELECT 1 FROM runs WHERE key = ?", (key,)).fetchone()
            if exists:
                sets = ", ".join(f"{name} = ?" for name in fields)
                self.conn.execute(f"UPDATE runs SET {sets} WHERE key = ?", (*fields.values(), key))
            else:
                names = ", ".join(["key", *fields])
                marks = ", ".join("?" * (len(fields) + 1))
                self.conn.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", (key, *fields.values()))

    def set_step_scores(self, key: str, scores: list[tuple[int, str, float | None, str | None]]) -> None:
        with self.conn:
            self.conn.execute("DELETE FROM step_scores WHERE run_key = ?", (key,))
            self.conn.executemany("INSERT INTO step_scores VALUES (?, ?, ?, ?, ?)",
                                  [(key, step, snap, score, error) for step, snap, score, error in scores])

    def set_plugin_versions(self, key: str, versions: dict[str, str]) -> None:
        with self.conn:
            self.conn.execute("DELETE FROM plugin_versions WHERE run_key = ?", (key,))
            self.conn.executemany("INSERT INTO plugin_versions VALUES (?, ?, ?)",
                                  [(key, dist, version) for dist, version in sorted(versions.items())])

    def set_baseline(self, task: str, score: float | None, source: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO baselines VALUES (?, ?, ?)", (task, score, source))

    # reading
    def meta(self, key: str, default=None):
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def run(self, key: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM runs WHERE key = ?", (key,)).fetchone()
        return dict(row) if row else None

    def runs(self) -> list[dict]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY task, agent, llm, seed")]

    def step_scores(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.conn.execute("SELECT * FROM step_scores ORDER BY run_key, step"):
            out.setdefault(r["run_key"], []).append(dict(r))
        return out

    def plugin_versions(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for r in self.conn.execute("SELECT * FROM plugin_versions"):
            out.setdefault(r["run_key"], {})[r["distribution"]] = r["version"]
        return out

    def baselines(self) -> dict[str, float | None]:
        return {r["task"]: r["score"] for r in self.conn.execute("SELECT * FROM baselines")}

    def records(self) -> list[RunRecord]:
        steps = self.step_scores()
        return [RunRecord(key=r["key"], task=r["task"], agent=r["agent"], llm=r["llm"], seed=r["seed"],
                          status=r["status"], final_score=r["final_score"],
                          higher_is_better=bool(r["higher_is_better"]) if r["higher_is_better"] is not None else True,
                          failure=r["failure"], tokens=(r["prompt_tokens"] or 0) + (r["completion_tokens"] or 0),
                          cost_usd=r["cost_usd"] or 0.0, time_s=r["time_s"] or 0.0, steps=r["steps"] or 0,
                          step_scores=[(s["step"], s["score"]) for s in steps.get(r["key"], [])])
                for r in self.runs()]


# ---- scoring snapshots (final and intermediate), in parallel ------------------------------------------
MAX_INTERMEDIATE = 50  # snapshots scored per run, as in the original


def registry_from(factory: str | None = None, sys_path: list[str] | None = None):
    """The plugin registry; `factory` ("module:function") builds one programmatically, e.g. with test plugins."""
    for entry in reversed(sys_path or []):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if not factory:
        from mlab.core.plugins.registry import load_registry

        return load_registry()
    module, _, name = factory.partition(":")
    try:
        return getattr(importlib.import_module(module), name or "registry")()
    except (ImportError, AttributeError) as exc:
        raise MlabError(f"registry factory {factory!r} cannot be loaded: {exc}")


def intermediate_steps(trace: Trace, limit: int = MAX_INTERMEDIATE) -> list[tuple[int, str]]:
    """(step, snapshot) of the steps to score: all of them, or `limit` evenly spaced ones ending with the last."""
    steps = [(s.index, s.snapshot) for s in trace.steps]
    if len(steps) <= limit:
        return steps
    picks = sorted({round(i * (len(steps) - 1) / (limit - 1)) for i in range(limit)})
    return [steps[i] for i in picks]


SHM_MAX_BYTES = 64 * 2**20


def _scratch_root(size: int) -> str | None:
    """Small snapshots are scored in memory: creating and deleting thousands of scratch folders on a disk
    mounted with `discard` costs more than the scoring itself."""
    if size <= SHM_MAX_BYTES and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return None


class Scorer:
    """Scores snapshots in scratch folders: the snapshot's files plus links to the task's read-only files."""

    def __init__(self, registry):
        self.registry = registry
        self._read_only: dict[str, list[Path]] = {}

    def task(self, name: str) -> Task:
        return self.registry.get("tasks", name)

    def _read_only_files(self, task: Task) -> list[Path]:
        if task.name not in self._read_only:  # listing a large public folder once per task, not per snapshot
            public = taskdata.public_dir(task)
            self._read_only[task.name] = [p for p in public.rglob("*") if p.is_file() and is_read_only(
                p.relative_to(public).as_posix(), task.read_only_files)] if public.is_dir() else []
        return self._read_only[task.name]

    def score(self, task: Task, run_dir: Path, snapshot: str) -> tuple[float | None, str | None]:
        store = SnapshotStore(Path(run_dir))
        public = taskdata.public_dir(task)
        try:
            size = sum(entry["size"] for entry in store.manifest(snapshot).values())
        except (OSError, ValueError) as exc:
            return None, f"snapshot {snapshot} is unreadable: {exc}"
        with tempfile.TemporaryDirectory(prefix="mlab-eval-", dir=_scratch_root(size)) as scratch:
            target = Path(scratch)
            try:
                store.materialize(snapshot, target)
            except FileNotFoundError as exc:
                return None, f"snapshot {snapshot} is missing: {exc}"
            for path in self._read_only_files(task):
                link = target / path.relative_to(public)
                if not link.exists():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(path, link)
            try:
                return float(task.evaluate(target, taskdata.hidden_dir(task))), None
            except InvalidSubmission as exc:
                return None, f"invalid submission: {exc}"
            except Exception as exc:
                return None, f"evaluation failed: {type(exc).__name__}: {exc}"


_worker_scorer: Scorer | None = None  # set before the pool forks, so workers share the parent's registry


def _score_chunk(task_name: str, run_dir: str, snapshots: list[str]) -> list[tuple[float | None, str | None]]:
    task = _worker_scorer.task(task_name)
    return [_worker_scorer.score(task, Path(run_dir), snap) for snap in snapshots]


def score_many(jobs: list[tuple[str, Path, list[str]]], registry, workers: int = 1, chunk: int = 10,
               on_done=None) -> list[list[tuple[float | None, str | None]]]:
    """Scores of each (task, run_dir, snapshots) job, computed by `workers` forked processes in chunks.

    Forked workers inherit the registry as built here, plugins registered in-process included.
    """
    global _worker_scorer
    pieces = [(j, i, task, str(run_dir), snaps[i:i + chunk])
              for j, (task, run_dir, snaps) in enumerate(jobs) for i in range(0, len(snaps), chunk)]
    out: list[list] = [[None] * len(snaps) for _t, _r, snaps in jobs]
    _worker_scorer = Scorer(registry)
    if workers <= 1 or len(pieces) <= 1:
        for j, i, task, run_dir, snaps in pieces:
            out[j][i:i + len(snaps)] = _score_chunk(task, run_dir, snaps)
            if on_done:
                on_done(len(snaps))
        return out
    import multiprocessing
    from concurrent.futures import as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(pieces)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(_score_chunk, task, run_dir, snaps): (j, i) for j, i, task, run_dir, snaps in pieces}
        for future in as_completed(futures):
            j, i = futures[future]
            result = future.result()
            out[j][i:i + len(result)] = result
            if on_done:
                on_done(len(result))
    return out


def evaluate_runs(run_dirs: list[Path], intermediate: bool = False, workers: int | None = None, registry=None,
                  on_done=None) -> list[dict]:
    """Score each run's final snapshot and, with `intermediate`, up to 50 step snapshots, in parallel.

    Returns per run: run_dir, trace, task, final (score, error) and steps [(step, snapshot, score, error)].
    """
    from mlab.core.run.trace import read_trace

    registry = registry or registry_from()
    workers = workers or os.cpu_count() or 1
    plans = []
    for run_dir in run_dirs:
        trace = read_trace(Path(run_dir))
        task = registry.get("tasks", trace.config.task)
        final = trace.final_snapshot or (trace.steps[-1].snapshot if trace.steps else "step_0000")
        steps = intermediate_steps(trace) if intermediate else []
        plans.append((Path(run_dir), trace, task, final, steps))
    jobs = [(task.name, run_dir, [final] + [snap for _i, snap in steps]) for run_dir, _t, task, final, steps in plans]
    scores = score_many(jobs, registry, workers=workers, on_done=on_done)
    results = []
    for (run_dir, trace, task, _final, steps), got in zip(plans, scores):
        results.append({"run_dir": run_dir, "trace": trace, "task": task, "final": got[0],
                        "steps": [(i, snap, s, e) for (i, snap), (s, e) in zip(steps, got[1:])]})
    return results


def eval_rows(paths: list[Path], intermediate: bool = False, workers: int | None = None, registry=None,
              on_done=None) -> list[dict]:
    """`mlab eval`: score run folders, or every completed run of a bench folder (storing the scores in its
    database); one row per run, with the best step when `intermediate`."""
    from mlab.core.bench.metrics import SUCCESS

    registry = registry or registry_from()
    run_dirs: list[Path] = []
    bench_rows: dict[Path, tuple[Path, str]] = {}
    for path in map(Path, paths):
        if (path / DB_FILE).is_file():
            with ResultsDB(path / DB_FILE) as db:
                for row in db.runs():
                    run_dir = path / row["run_dir"]
                    if row["status"] in ("finished", "failed") and (run_dir / "trace.json").is_file():
                        run_dirs.append(run_dir)
                        bench_rows[run_dir] = (path, row["key"])
        else:
            run_dirs.append(path)
    results = evaluate_runs(run_dirs, intermediate, workers, registry, on_done)
    rows = []
    for res in results:
        trace, task = res["trace"], res["task"]
        (score, error), steps = res["final"], res["steps"]
        trace.final_score, trace.final_score_error = score, error
        if res["run_dir"] in bench_rows:
            bench, key = bench_rows[res["run_dir"]]
            with ResultsDB(bench / DB_FILE) as db:
                db.upsert_run(key, final_score=score, final_score_error=error, failure=classify(trace))
                if intermediate:
                    db.set_step_scores(key, steps)
        base = taskdata.recorded_baseline(task)
        imp = task.improvement(score, base) if score is not None and base is not None else None
        valid = [(i, s) for i, _snap, s, _e in steps if is_valid(s)]
        pick = max if task.metric.higher_is_better else min
        best = pick(valid, key=lambda p: p[1]) if valid else None
        rows.append({"run_dir": str(res["run_dir"]), "task": task.name, "agent": trace.config.agent,
                     "status": trace.status, "steps": len(trace.steps), "metric": task.metric.name,
                     "higher_is_better": task.metric.higher_is_better, "score": score, "error": error,
                     "baseline": base, "improvement": imp, "success": imp is not None and imp > SUCCESS,
                     "failure": classify(trace), "tokens": trace.usage.total_tokens,
                     "time_s": round(trace.total_time_s, 2),
                     **({"best_step": best[0] if best else None, "best_score": best[1] if best else None,
                         "step_scores": [{"step": i, "score": s, "error": e} for i, _snap, s, e in steps]}
                        if intermediate else {})})
    return rows
