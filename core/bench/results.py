"""A bench's results database (SQLite in the bench folder, no server) and what goes into it from a run's trace."""
from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from mlab.core.bench.judged import Judged, judged
from mlab.core.bench.metrics import RunRecord, name_methods
from mlab.core.errors import MlabError
from mlab.core.models import Trace
from mlab.core.run.baseline import bench_baseline
from mlab.core.run.scoring import is_valid, recorded_reference
from mlab.core.run.taskdata import TaskHome
from mlab.core.run.validation import calls_made
from mlab.core.task import DEFAULT_SUCCESS_MARGIN, Task

DB_FILE = "results.db"
# meta: the folder name of each bench task's data below the task home, by the bench's name of the task (which
# carries its -T values, task_params.labelled), where `mlab baseline` records that data's baseline
TASK_DATA_META = "task_data"

Row = dict[str, Any]  # a database row by column name: which columns depends on the table

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY, task TEXT NOT NULL, agent TEXT NOT NULL, llm TEXT, seed INTEGER NOT NULL,
    run_dir TEXT NOT NULL, status TEXT NOT NULL, end_reason TEXT, failure TEXT, incidents TEXT,
    attempts INTEGER NOT NULL DEFAULT 0, started_at REAL, updated_at REAL, time_s REAL, steps INTEGER,
    prompt_tokens INTEGER, completion_tokens INTEGER, cost_usd REAL, final_score REAL, final_score_error TEXT,
    metric TEXT, higher_is_better INTEGER, config TEXT, success_margin REAL, llm_calls INTEGER,
    validation_calls INTEGER, label TEXT, hardware TEXT);
CREATE TABLE IF NOT EXISTS step_scores (
    run_key TEXT NOT NULL, step INTEGER NOT NULL, snapshot TEXT NOT NULL, score REAL, error TEXT,
    PRIMARY KEY (run_key, step));
CREATE TABLE IF NOT EXISTS plugin_versions (
    run_key TEXT NOT NULL, distribution TEXT NOT NULL, version TEXT, PRIMARY KEY (run_key, distribution));
CREATE TABLE IF NOT EXISTS baselines (task TEXT PRIMARY KEY, score REAL, source TEXT);
CREATE TABLE IF NOT EXISTS verdicts (
    run_key TEXT PRIMARY KEY, baseline REAL, baseline_source TEXT, valid INTEGER NOT NULL, improvement REAL,
    success INTEGER NOT NULL, refused TEXT);
"""

RUN_FIELDS = ("task", "agent", "llm", "seed", "run_dir", "status", "end_reason", "failure", "incidents", "attempts",
              "started_at", "updated_at", "time_s", "steps", "prompt_tokens", "completion_tokens", "cost_usd",
              "final_score", "final_score_error", "metric", "higher_is_better", "config", "success_margin",
              "llm_calls", "validation_calls", "label", "hardware")
# Columns added after a bench folder may have been created: (name, SQL type).
_ADDED_COLUMNS = (("success_margin", "REAL"), ("llm_calls", "INTEGER"), ("validation_calls", "INTEGER"),
                  ("label", "TEXT"), ("hardware", "TEXT"))

# A results.db is read as untrusted (a shared bench folder): every value is checked for its type and range
# before use, and a run whose folder lies outside the bench is not read. Column: (type, lowest, highest).
_NUMBERS: dict[str, tuple[type, float | None, float | None]] = {
    "seed": (int, None, None), "attempts": (int, 0, None), "steps": (int, 0, None), "prompt_tokens": (int, 0, None),
    "completion_tokens": (int, 0, None), "llm_calls": (int, 0, None), "validation_calls": (int, 0, None),
    "higher_is_better": (int, 0, 1),
    "time_s": (float, 0, None), "cost_usd": (float, 0, None), "final_score": (float, None, None),
    "success_margin": (float, 0, None), "started_at": (float, None, None), "updated_at": (float, None, None)}
_REQUIRED_TEXT = ("key", "task", "agent", "run_dir", "status")
_TEXT = ("llm", "end_reason", "failure", "incidents", "final_score_error", "metric", "config", "label", "hardware")


def _shown(value: object) -> str:
    """A value from an untrusted database as one short, printable line."""
    text = ascii(value)
    return text if len(text) <= 40 else text[:37] + "..."


def number_problem(name: str, value: object, kind: type, lowest: float | None = None,
                   highest: float | None = None) -> str | None:
    """Why value is not a number of this kind in range (None: it is, or it is NULL)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        return f"{name} is {_shown(value)}, not {'an integer' if kind is int else 'a number'}"
    if name != "final_score" and not math.isfinite(value):
        return f"{name} is {_shown(value)}, not a finite number"
    if (lowest is not None and value < lowest) or (highest is not None and value > highest):
        return f"{name} is {_shown(value)}, out of range"
    return None


def row_problem(row: Row) -> str | None:
    """Why a runs-table row cannot be used: a field of the wrong type or out of range."""
    for name in _REQUIRED_TEXT:
        if not isinstance(row.get(name), str):
            return f"{name} is {_shown(row.get(name))}, not text"
    for name in _TEXT:
        if row.get(name) is not None and not isinstance(row[name], str):
            return f"{name} is {_shown(row[name])}, not text"
    for name, (kind, lowest, highest) in _NUMBERS.items():
        why = number_problem(name, row.get(name), kind, lowest, highest)
        if why:
            return why
    if row.get("seed") is None:
        return "seed is missing"
    return None


def inside(root: Path, relative: str) -> bool:
    """Whether root/relative, links resolved, stays inside root (an absolute path or ../ leaves it)."""
    base = Path(root).resolve()
    try:
        (base / relative).resolve().relative_to(base)
    except (ValueError, OSError, RuntimeError):
        return False
    return True

# ---- the failure taxonomy ------------------------------------------------------------------------
FAILURES = ("harness_error", "agent_error", "llm_error", "invalid_format", "out_of_memory", "timeout", "limits_reached",
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
    """Why a run has nothing to show, or None when it ended with a valid final submission or has not ended."""
    reason = trace.end_reason or ""
    if trace.status not in ("finished", "failed"):
        return None
    if trace.status == "failed":
        if reason.startswith("agent error"):  # the agent's own code raised
            return "agent_error"
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


def summarize(trace: Trace, task: Task) -> Row:
    """The runs-table fields a trace determines."""
    return {"status": trace.status, "end_reason": trace.end_reason, "failure": classify(trace),
            "incidents": ",".join(incidents(trace)) or None, "started_at": trace.started_at,
            "time_s": trace.total_time_s, "steps": len(trace.steps), "llm_calls": trace.usage.calls,
            "prompt_tokens": trace.usage.prompt_tokens,
            "completion_tokens": trace.usage.completion_tokens,
            # NULL when a call had no price: unknown, never a made-up $0
            "cost_usd": trace.usage.cost_usd if trace.usage.cost_known else None,
            "final_score": trace.final_score, "final_score_error": trace.final_score_error,
            "metric": task.metric.name, "higher_is_better": int(task.metric.higher_is_better),
            "success_margin": float(task.success_margin), "config": trace.config.model_dump_json(),
            # Validate Submission calls that reached the scorer (runs with --allow-validate; NULL otherwise)
            "validation_calls": calls_made(trace.steps) if trace.config.allow_validate else None,
            "label": trace.config.label,  # the method's name (--label), NULL: agent (model)
            # the machine the run had, one line (Hardware.summary); NULL for runs recorded before mlab did
            "hardware": trace.hardware.summary() if trace.hardware else None}


# ---- the database --------------------------------------------------------------------------------
class ResultsDB:
    """One writer (the bench or eval process); readers such as `mlab report` may look in while it runs."""

    def __init__(self, path: Path, read_only: bool = False, root: Path | None = None):
        self.path = Path(path)
        self.root = Path(root) if root is not None else self.path.parent  # where every run folder must lie
        self.skipped: list[str] = []  # one line per row of the database that could not be used, and why
        if read_only:
            self.conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60,
                                        isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SCHEMA)
        have = {row["name"] for row in self.conn.execute("PRAGMA table_info(runs)")}
        for name, kind in _ADDED_COLUMNS:
            if name not in have:
                self.conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")

    @classmethod
    def open_existing(cls, bench_dir: Path, read_only: bool = False, root: Path | None = None) -> ResultsDB:
        path = Path(bench_dir) / DB_FILE
        if not path.is_file():
            raise MlabError(f"{str(bench_dir)!r} is not a bench folder (no {DB_FILE})")
        try:
            return cls(path, read_only=read_only, root=root)
        except sqlite3.Error as exc:
            raise MlabError(f"{path}: not a results database ({exc})") from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultsDB:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # writing
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Writes made inside commit together (one commit, not one per statement), or not at all; a
        transaction opened inside another is part of it. A reader sees all of them or none."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def set_meta(self, key: str, value: object) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def upsert_run(self, key: str, **fields: object) -> None:
        unknown = set(fields) - set(RUN_FIELDS)
        if unknown:
            raise ValueError(f"unknown run fields {sorted(unknown)}")
        fields["updated_at"] = time.time()
        with self.transaction():
            exists = self.conn.execute("SELECT 1 FROM runs WHERE key = ?", (key,)).fetchone()
            if exists:
                sets = ", ".join(f"{name} = ?" for name in fields)
                self.conn.execute(f"UPDATE runs SET {sets} WHERE key = ?", (*fields.values(), key))
            else:
                names = ", ".join(["key", *fields])
                marks = ", ".join("?" * (len(fields) + 1))
                self.conn.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", (key, *fields.values()))

    def set_step_scores(self, key: str, scores: list[tuple[int, str, float | None, str | None]]) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM step_scores WHERE run_key = ?", (key,))
            self.conn.executemany("INSERT INTO step_scores VALUES (?, ?, ?, ?, ?)",
                                  [(key, step, snap, score, error) for step, snap, score, error in scores])

    def set_plugin_versions(self, key: str, versions: dict[str, str]) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM plugin_versions WHERE run_key = ?", (key,))
            self.conn.executemany("INSERT INTO plugin_versions VALUES (?, ?, ?)",
                                  [(key, dist, version) for dist, version in sorted(versions.items())])

    def set_baseline(self, task: str, score: float | None, source: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO baselines VALUES (?, ?, ?)", (task, score, source))

    # reading
    def run(self, key: str) -> Row | None:
        row = self.conn.execute("SELECT * FROM runs WHERE key = ?", (key,)).fetchone()
        return dict(row) if row else None

    def runs(self) -> list[Row]:
        """The runs whose every field has its type and range and whose folder lies inside the bench folder (`root`,
        the database's folder); each other run is left out with one line in `skipped`."""
        out, skipped = [], []
        try:
            rows = [dict(r) for r in self.conn.execute("SELECT * FROM runs")]
        except sqlite3.Error as exc:
            raise MlabError(f"{self.path}: the runs table cannot be read ({exc})") from None
        for row in rows:
            why = row_problem(row)
            if why is None and not inside(self.root, row["run_dir"]):
                why = f"its folder {_shown(row['run_dir'])} lies outside the bench folder"
            if why:
                skipped.append(f"{self.path}: run {_shown(row.get('key'))} skipped: {why}")
            else:
                out.append(row)
        self.skipped = skipped
        return sorted(out, key=lambda r: (r["task"], r["agent"], r["llm"] or "", r["seed"]))

    def step_scores(self) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {}
        for r in self.conn.execute("SELECT * FROM step_scores ORDER BY run_key, step"):
            row = dict(r)
            if isinstance(row["run_key"], str) and not number_problem("step", row["step"], int) \
                    and not number_problem("final_score", row["score"], float):
                out.setdefault(row["run_key"], []).append(row)
        return out

    def plugin_versions(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for r in self.conn.execute("SELECT * FROM plugin_versions"):
            out.setdefault(r["run_key"], {})[r["distribution"]] = r["version"]
        return out

    def store_verdicts(self, verdicts: dict[str, Judged]) -> None:
        """Replace every run's stored judgement (after scores or baselines changed)."""
        with self.transaction():
            self.conn.execute("DELETE FROM verdicts")
            self.conn.executemany("INSERT INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)", [
                (key, j.baseline, j.baseline_source, int(j.verdict.valid), j.verdict.improvement,
                 int(j.verdict.success), j.verdict.refused) for key, j in verdicts.items()])

    def verdicts(self) -> dict[str, Row]:
        return {r["run_key"]: dict(r) for r in self.conn.execute("SELECT * FROM verdicts")}

    def baselines(self) -> dict[str, tuple[float | None, str]]:
        """Per task: (baseline, its source) as the bench stored them when it prepared its tasks; a stored value that
        is no number counts as none."""
        out: dict[str, tuple[float | None, str]] = {}
        for r in self.conn.execute("SELECT * FROM baselines"):
            if not isinstance(r["task"], str):
                continue
            score = None if number_problem("final_score", r["score"], float) else r["score"]
            source = r["source"] if isinstance(r["source"], str) else "stored"
            out[r["task"]] = (None if score is None else float(score), source if score is not None else "missing")
        return out

    def records(self) -> list[RunRecord]:
        steps = self.step_scores()
        return name_methods([RunRecord(key=r["key"], task=r["task"], agent=r["agent"], llm=r["llm"], seed=r["seed"],
                          status=r["status"], final_score=r["final_score"],
                          higher_is_better=bool(r["higher_is_better"]) if r["higher_is_better"] is not None else True,
                          success_margin=(r["success_margin"] if r["success_margin"] is not None
                                          else DEFAULT_SUCCESS_MARGIN),
                          failure=r["failure"], end_reason=r["end_reason"],
                          incidents=tuple(filter(None, (r["incidents"] or "").split(","))),
                          tokens=(r["prompt_tokens"] or 0) + (r["completion_tokens"] or 0),
                          llm_calls=r.get("llm_calls") or 0,
                          cost_usd=r["cost_usd"], time_s=r["time_s"] or 0.0, steps=r["steps"] or 0,
                          step_scores=[(s["step"], s["score"]) for s in steps.get(r["key"], [])],
                          method=r.get("label") or None)
                for r in self.runs()])


def task_data_keys(db: ResultsDB) -> dict[str, str]:
    """TASK_DATA_META as stored (untrusted: what is not a name of a name is left out)."""
    found = db.conn.execute("SELECT value FROM meta WHERE key = ?", (TASK_DATA_META,)).fetchone()
    try:
        keys = json.loads(found[0]) if found else {}
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in keys.items() if isinstance(v, str) and "/" not in v and v not in ("", ".", "..")} \
        if isinstance(keys, dict) else {}


def bench_baselines(db: ResultsDB, records: list[RunRecord], home: TaskHome,
                    settled: bool = False) -> tuple[dict[str, float | None], dict[str, str]]:
    """Per task of a bench: the baseline its runs are judged against and where it came from. `mlab eval` of a
    bench folder and `mlab report` both use this, so they judge against the same number. `settled`: the stored
    baselines are final (a folder of runs, whose baselines verdict.RunJudge chose): no looking further."""
    stored = db.baselines()
    data_keys = task_data_keys(db)
    scores: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    for task in sorted({r.task for r in records} | set(stored)):
        known = stored.get(task, (None, "missing"))
        if settled:
            scores[task], sources[task] = known
            continue
        if known[0] is None:  # prepared before `mlab baseline` ran: look again
            recorded = home.recorded_baseline(_TaskName(task, data_keys.get(task)))
            known = (recorded, "recorded") if recorded is not None else (None, "missing")
        own = [r.final_score for r in records if r.task == task and r.agent == "baseline"]
        scores[task], sources[task] = bench_baseline(known, own)
    return scores, sources


def judge_runs(db: ResultsDB, home: TaskHome, store: bool = False) -> dict[str, Judged]:
    """Every run of a bench judged by the one rule against the bench's baselines; `mlab eval` stores them in
    the database after scoring, the bench stores them when it ends, and the report reads the same numbers."""
    records = db.records()
    found = judge_records(records, *bench_baselines(db, records, home), home=home)
    if store:
        db.store_verdicts(found)
    return found


def judge_records(records: list[RunRecord], baselines: dict[str, float | None], sources: dict[str, str],
                  home: TaskHome | None = None) -> dict[str, Judged]:
    """Runs judged by the one rule (verdict.judged) against the given bench baselines (bench_baselines' answer)."""
    references = {t: recorded_reference(home, t) if home else None for t in {r.task for r in records}}
    return {r.key: judged(r.final_score, (baselines.get(r.task), sources.get(r.task, "missing")), r.rule,
                          references[r.task]) for r in records}


class _TaskName:
    def __init__(self, name: str, data_key: str | None = None):
        self.name = name
        self.data_key = data_key  # TaskHome.task_dir's folder of its data, when not named by its name
