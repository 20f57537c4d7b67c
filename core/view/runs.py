"""What `mlab view` shows of run folders: the runs under a folder (one run, a folder of runs or a bench), a
summary of each for the run list, and each run's steps (reasoning, action, observation, file changes, score)
and model calls.

Run folders are untrusted: they are found without following links, read with bounded reads, and only ever read
(the trace through core.run.trace, snapshots through diffs.py, a bench's results.db opened read-only). Nothing
from a run folder is executed or imported.
"""
from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlab.core.bench.results import classify
from mlab.core.errors import MlabError
from mlab.core.llm.client import usage_of_log
from mlab.core.models import Step, Trace
from mlab.core.run.solution_graph import graph_payload
from mlab.core.run.trace import ERRORS_FILE, LLM_LOG_FILE, TRACE_FILE, read_call_entries, read_trace
from mlab.core.run.trace_log import STEPS_FILE
from mlab.core.view.diffs import Manifest, clip, file_changes, read_manifest, read_regular
from mlab.core.view.live import read_live, run_in_progress

BENCH_DB = "results.db"
INITIAL_SNAPSHOT = "step_0000"
MAX_OBSERVATION = 20_000  # characters of an observation shown
MAX_MESSAGE = 6_000  # characters of one model message or completion shown
MAX_ERRORS_LOG = 20_000
MAX_CALL_LOG_BYTES = 256 << 20
MAX_TRACE_BYTES = 1 << 30  # the harness stores at most 200,000 characters of each string a step holds
MAX_FOLDERS_SEARCHED = 50_000  # a folder of runs is searched this far, so a huge tree cannot stall the viewer
KEPT_RUNS = 8  # whole traces and call logs kept in memory (the runs pages are looking at)
KEPT_STEPS = 2000  # steps' payloads (with their diffs) kept in memory
SKIPPED_FOLDERS = frozenset({"node_modules", "__pycache__", "site-packages"})


def _has_trace(folder: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(folder / TRACE_FILE).st_mode)
    except OSError:
        return False


def find_runs(root: Path) -> dict[str, Path]:
    """Run folders (those with a regular trace.json) at or under root, by their path relative to root ("." for
    root itself), sorted. Links are not followed; a run's own folders (its workspace) are not searched."""
    root = Path(root).resolve()
    if _has_trace(root):
        return {".": root}
    found: dict[str, Path] = {}
    searched = 0
    for folder, dirs, _files in os.walk(root, followlinks=False):
        searched += 1
        if searched > MAX_FOLDERS_SEARCHED:
            break
        kept = []
        for name in sorted(dirs):
            path = Path(folder) / name
            if name.startswith(".") or name in SKIPPED_FOLDERS or path.is_symlink():
                continue
            if _has_trace(path):
                found[path.relative_to(root).as_posix()] = path
            else:
                kept.append(name)
        dirs[:] = kept
    return dict(sorted(found.items()))


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None


def _trace_signature(run_dir: Path) -> tuple[int, int] | None:
    """Changes whenever the trace read_trace() gives does: trace.json or the step log it is completed from."""
    shown, log = _signature(run_dir / TRACE_FILE), _signature(run_dir / STEPS_FILE)
    if shown is None or log is None:
        return shown
    return max(shown[0], log[0]), shown[1] + log[1]


def _call_entry(raw: dict[str, Any]) -> dict[str, Any]:
    """One logged model call as the viewer shows it; cost None means unknown (the model has no price)."""
    raw_messages = raw.get("messages")
    messages: list[Any] = raw_messages if isinstance(raw_messages, list) else []
    completion = raw.get("completion")
    return {
        "step": raw.get("step") if isinstance(raw.get("step"), int) else None,
        "role": str(raw.get("role") or ""), "model": str(raw.get("model") or ""),
        "prompt_tokens": raw.get("prompt_tokens") if isinstance(raw.get("prompt_tokens"), int) else 0,
        "completion_tokens": raw.get("completion_tokens") if isinstance(raw.get("completion_tokens"), int) else 0,
        "cost_usd": raw.get("cost_usd") if isinstance(raw.get("cost_usd"), (int, float)) else None,
        "latency_s": raw.get("latency_s") if isinstance(raw.get("latency_s"), (int, float)) else None,
        "cached": bool(raw.get("cached")), "error": None if raw.get("error") is None else str(raw.get("error")),
        "params": raw.get("params") if isinstance(raw.get("params"), dict) else {},
        "messages": [{"role": str(m.get("role", "")), "content": clip(str(m.get("content", "")), MAX_MESSAGE)}
                     for m in messages if isinstance(m, dict)],
        "completion": None if completion is None else clip(str(completion), MAX_MESSAGE),
    }


def read_calls(run_dir: Path) -> list[dict[str, Any]]:
    """The run's model calls from llm_calls.jsonl; none when it is a symlink or unreadable."""
    try:
        return [_call_entry(raw) for raw in read_call_entries(run_dir, MAX_CALL_LOG_BYTES)]
    except MlabError:
        return []


def cost_fields(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's model calls and cost as the call log has them (it is written as each call ends): the priced part,
    how many answered calls have no price, and the cost as shown to people ("unknown" rather than $0)."""
    usage = usage_of_log(calls)
    return {"calls": usage.calls, "unpriced_calls": usage.unpriced_calls, "cost_usd": usage.cost_usd,
            "cost_text": usage.cost_text() if usage.calls else "-"}


def step_payload(run_dir: Path, step: Step, before: Manifest, after: Manifest,
                 score: tuple[float | None, str | None] | None = None) -> dict[str, Any]:
    """One step as the viewers show it (`mlab view` and the static HTML report)."""
    return {"index": step.index, "action": step.action.name, "args": step.action.args,
            "entries": step.action.entries, "observation": clip(step.observation, MAX_OBSERVATION),
            "is_error": step.is_error, "started_at": step.started_at, "duration_s": round(step.duration_s, 2),
            "tokens": step.usage.total_tokens, "cost_usd": step.usage.cost_usd,
            "score": score[0] if score else None, "score_error": score[1] if score else None,
            "changes": file_changes(run_dir, before, after)}


def step_payloads(run_dir: Path, trace: Trace, scores: dict[int, tuple[float | None, str | None]],
                  first: int = 0, end: int | None = None) -> list[dict[str, Any]]:
    """The payloads of trace.steps[first:end]; a step whose snapshot is unreadable shows no file changes."""
    previous = INITIAL_SNAPSHOT if first == 0 else trace.steps[first - 1].snapshot
    before: Manifest = read_manifest(run_dir, previous) or {}
    out = []
    for step in trace.steps[first:end]:
        after = read_manifest(run_dir, step.snapshot)
        current = before if after is None else after
        out.append(step_payload(run_dir, step, before, current, scores.get(step.index)))
        before = current
    return out


def errors_log(run_dir: Path) -> str:
    data = read_regular(run_dir / ERRORS_FILE, MAX_ERRORS_LOG * 4)
    return clip((data or b"").decode("utf-8", errors="replace"), MAX_ERRORS_LOG)


def _query(conn: sqlite3.Connection, sql: str) -> list[tuple[Any, ...]]:
    """Rows of a table a bench of an older mlab may not have (or have emptied): none then."""
    try:
        return [tuple(r) for r in conn.execute(sql)]
    except sqlite3.Error:
        return []


def _verdict(stored: tuple[Any, Any, Any] | None) -> dict[str, Any]:
    """A bench run's judgement as the pages show it: the baseline, the improvement over it and whether that is a
    success; None for each until the bench (or `mlab eval`) has judged the run."""
    baseline, improvement, success = stored or (None, None, None)
    return {"baseline": baseline, "improvement": improvement, "success": None if success is None else bool(success)}


def _notes(row: dict[str, Any], reference: float | None) -> dict[str, Any]:
    """A bench run's placeholder note and reference ratio, by the one rule from its stored baseline and score
    (results.db stores neither; the report computes them the same way)."""
    from mlab.core.bench.verdict import judged
    from mlab.core.run.scoring import ScoreRule

    def number(v: Any) -> float | None:  # results.db is untrusted
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    higher = row.get("higher_is_better")
    shown = judged(number(row.get("final_score")), (number(row.get("baseline")), ""),
                   ScoreRule(higher_is_better=higher is None or bool(higher)), reference)
    return {"baseline_note": shown.verdict.note, "of_reference": shown.of_reference}


def _keep(cache: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


class Catalog:
    """The runs under a root folder, re-read as they change (by each file's mtime and size), for a server whose
    pages poll it; safe to use from several threads."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.is_bench = (self.root / BENCH_DB).is_file()
        self._lock = threading.Lock()
        # Whole traces and call logs only of the runs pages look at (a few); of the others, what the list shows.
        self._traces: OrderedDict[Path, tuple[tuple[int, int] | None, Trace | str]] = OrderedDict()
        self._calls: OrderedDict[Path, tuple[tuple[int, int] | None, list[dict[str, Any]]]] = OrderedDict()
        self._briefs: dict[Path, tuple[tuple[int, int] | None, dict[str, Any] | str]] = {}
        self._costs: dict[Path, tuple[tuple[int, int] | None, dict[str, Any]]] = {}
        self._steps: OrderedDict[tuple[Path, int, float], dict[str, Any]] = OrderedDict()
        self._judge: Callable[[Path, Trace], dict[str, Any]] | None = None

    # ---- reading, cached ------------------------------------------------------------------------
    def _trace(self, run_dir: Path) -> Trace | str:
        """The trace, or why it cannot be read."""
        sig = _trace_signature(run_dir)
        cached = self._traces.get(run_dir)
        if cached and cached[0] == sig and sig is not None:
            self._traces.move_to_end(run_dir)
            return cached[1]
        try:
            shown = _signature(run_dir / TRACE_FILE)
            if shown is not None and shown[1] > MAX_TRACE_BYTES:
                raise MlabError(f"its trace is {shown[1] >> 20} MB, more than the viewer reads "
                                f"({MAX_TRACE_BYTES >> 20} MB)")
            trace: Trace | str = read_trace(run_dir)
        except MlabError as exc:
            trace = str(exc).replace(str(self.root), ".")
        except OSError as exc:
            trace = f"cannot read the trace: {exc.strerror or exc}"
        _keep(self._traces, run_dir, (sig, trace), KEPT_RUNS)
        return trace

    def _run_calls(self, run_dir: Path) -> list[dict[str, Any]]:
        sig = _signature(run_dir / LLM_LOG_FILE)
        cached = self._calls.get(run_dir)
        if cached and cached[0] == sig:
            self._calls.move_to_end(run_dir)
            return cached[1]
        calls = read_calls(run_dir) if sig else []
        _keep(self._calls, run_dir, (sig, calls), KEPT_RUNS)
        return calls

    def _brief(self, run_dir: Path) -> dict[str, Any] | str:
        """What the run list shows of a trace (or why it cannot be read), kept for every run."""
        sig = _trace_signature(run_dir)
        cached = self._briefs.get(run_dir)
        if cached and cached[0] == sig and sig is not None:
            return cached[1]
        trace = self._trace(run_dir)
        brief: dict[str, Any] | str = trace if isinstance(trace, str) else {
            "task": trace.config.task, "agent": trace.config.agent, "llm": trace.config.llm,
            "method": trace.config.label,  # --label: the method's name, None when the run was not given one
            "seed": trace.config.seed, "status": trace.status, "end_reason": trace.end_reason,
            "steps": len(trace.steps), "max_steps": trace.config.max_steps, "final_score": trace.final_score,
            "final_score_error": trace.final_score_error, "tokens": trace.usage.total_tokens,
            "time_s": trace.total_time_s, "started_at": trace.started_at,
            "failure": classify(trace)}  # eval's, runs' and the report's word; a bench's row replaces it
        if isinstance(brief, dict) and not isinstance(trace, str):
            brief.update(self._loose_verdict(run_dir, trace))
        self._briefs[run_dir] = (sig, brief)
        return brief

    def _loose_verdict(self, run_dir: Path, trace: Trace) -> dict[str, Any]:
        """A run's verdict by the one rule (core/bench/verdict.py), as `mlab runs` and `eval` give it; a bench's own
        rows replace it with what the bench stored (the same rule, read from results.db)."""
        if self.is_bench:
            return {}
        if self._judge is None:
            from mlab.core.bench.verdict import trace_judge

            self._judge = trace_judge()
        fields = self._judge(run_dir, trace)
        return {k: fields.get(k) for k in ("baseline", "baseline_note", "improvement", "success", "of_reference")}

    def _cost(self, run_dir: Path) -> dict[str, Any]:
        sig = _signature(run_dir / LLM_LOG_FILE)
        cached = self._costs.get(run_dir)
        if not (cached and cached[0] == sig):
            cached = (sig, cost_fields(self._run_calls(run_dir)))
            self._costs[run_dir] = cached
        return cached[1]

    def _bench(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[int, tuple[float | None, str | None]]]]:
        """A bench's rows by run folder and its step scores, from results.db opened read-only."""
        if not self.is_bench:
            return {}, {}
        try:
            conn = sqlite3.connect(f"{(self.root / BENCH_DB).as_uri()}?mode=ro", uri=True, timeout=5)
        except sqlite3.Error:
            return {}, {}
        try:
            conn.row_factory = sqlite3.Row
            rows = {str(r["run_dir"]): dict(r) for r in conn.execute("SELECT * FROM runs")}
            by_key = {row["key"]: rel for rel, row in rows.items()}
            scores: dict[str, dict[int, tuple[float | None, str | None]]] = {}
            for r in conn.execute("SELECT run_key, step, score, error FROM step_scores"):
                if r["run_key"] in by_key:
                    scores.setdefault(by_key[r["run_key"]], {})[r["step"]] = (r["score"], r["error"])
            for row in rows.values():
                row.update(_verdict(None))
            for task, baseline in _query(conn, "SELECT task, score FROM baselines"):
                for row in rows.values():
                    if row.get("task") == task:
                        row["baseline"] = baseline
            for key, baseline, improvement, success in _query(
                    conn, "SELECT run_key, baseline, improvement, success FROM verdicts"):
                if key in by_key:
                    rows[by_key[key]].update(_verdict((baseline, improvement, success)))
            from mlab.core.run.scoring import recorded_reference
            from mlab.core.run.taskdata import TaskHome

            home, references = TaskHome.from_env(), {}
            for row in rows.values():
                task = row.get("task")
                if isinstance(task, str) and task not in references:
                    references[task] = recorded_reference(home, task)
                row.update(_notes(row, references.get(task) if isinstance(task, str) else None))
            return rows, scores
        except sqlite3.Error:
            return {}, {}
        finally:
            conn.close()

    # ---- what the pages ask for -------------------------------------------------------------------
    def runs(self) -> dict[str, Any]:
        with self._lock:
            found = find_runs(self.root)
            bench_rows, _scores = self._bench()
            listed = [self._summary(rid, path, bench_rows.get(rid)) for rid, path in found.items()]
            # a bench's runs that have no folder yet (or lost it) are listed from its database
            for rel, row in sorted(bench_rows.items()):
                if rel not in found:
                    listed.append({"id": None, "name": rel, "task": row.get("task"), "agent": row.get("agent"),
                                   "llm": row.get("llm"), "method": row.get("label"), "seed": row.get("seed"),
                                   "status": "interrupted" if row.get("status") == "running" else row.get("status"),
                                   "end_reason": row.get("end_reason"), "steps": row.get("steps") or 0,
                                   "final_score": row.get("final_score"), "failure": row.get("failure"),
                                   "baseline": row.get("baseline"), "improvement": row.get("improvement"),
                                   "success": row.get("success"), "baseline_note": row.get("baseline_note"),
                                   "of_reference": row.get("of_reference"), "error": None, "live": None})
            return {"root": self.root.name or str(self.root), "bench": self.is_bench, "runs": listed}

    def _summary(self, rid: str, run_dir: Path, bench_row: dict[str, Any] | None) -> dict[str, Any]:
        brief = self._brief(run_dir)
        name = self.root.name if rid == "." else rid
        if isinstance(brief, str):
            return {"id": rid, "name": name, "status": "unreadable", "error": brief, "live": None}
        status, live = brief["status"], None
        if status == "running":
            going = run_in_progress(run_dir)
            status = "interrupted" if going is False else "running"
            live = read_live(run_dir) if going is not False else None
        judged = {k: bench_row.get(k) for k in ("failure", "baseline", "improvement", "success", "baseline_note",
                                                 "of_reference")} if bench_row else {}
        return {**brief, "id": rid, "name": name, "status": status, **judged, **self._cost(run_dir),
                "error": None, "live": live}

    def run(self, rid: str, have_steps: int = 0, have_calls: int = 0, started_at: float | None = None
            ) -> dict[str, Any] | None:
        """A run's detail: its summary and the steps and calls after the first have_* (what the page holds, when
        the run it holds started at started_at); None for an id that is not a run under the root."""
        with self._lock:
            path = find_runs(self.root).get(rid)
            if path is None:
                return None
            return self._detail(rid, path, self._bench(), have_steps, have_calls, started_at)

    def details(self) -> dict[str, dict[str, Any]]:
        """Every run's whole detail by its id (the static report writes them all)."""
        with self._lock:
            bench = self._bench()
            return {rid: self._detail(rid, path, bench) for rid, path in find_runs(self.root).items()}

    def _detail(self, rid: str, path: Path, bench: tuple[dict[str, dict[str, Any]], dict[str, Any]],
                have_steps: int = 0, have_calls: int = 0, started_at: float | None = None) -> dict[str, Any]:
        bench_rows, bench_scores = bench
        summary = self._summary(rid, path, bench_rows.get(rid))
        trace = self._trace(path)
        if isinstance(trace, str):
            return {"summary": summary, "steps_from": 0, "steps": [], "calls_from": 0, "calls": []}
        if started_at != trace.started_at:
            have_steps = have_calls = 0
        have_steps = max(0, min(have_steps, len(trace.steps)))
        scores = bench_scores.get(rid, {})
        steps = [self._step(path, trace, i, scores) for i in range(have_steps, len(trace.steps))]
        calls = self._run_calls(path)
        have_calls = max(0, min(have_calls, len(calls)))
        return {"summary": summary, "config": trace.config.model_dump(), "warnings": trace.errors,
                "plugin_versions": trace.plugin_versions, "steps_from": have_steps, "steps": steps,
                "hardware": trace.hardware.summary() if trace.hardware else None,
                "calls_from": have_calls, "calls": calls[have_calls:], "errors_log": errors_log(path),
                "scores": {str(k): v[0] for k, v in scores.items()}, "graph": graph_payload(trace)}

    def _step(self, run_dir: Path, trace: Trace, i: int,
              scores: dict[int, tuple[float | None, str | None]]) -> dict[str, Any]:
        """Steps never change once traced: each is computed once (its score comes fresh, scoring runs later)."""
        step = trace.steps[i]
        key = (run_dir, step.index, step.started_at)
        if key not in self._steps:
            _keep(self._steps, key, step_payloads(run_dir, trace, {}, first=i, end=i + 1)[0], KEPT_STEPS)
        score = scores.get(step.index)
        return {**self._steps[key], "score": score[0] if score else None, "score_error": score[1] if score else None}
