"""A bench's report: metrics from its database, printed as tables; plots and the HTML viewer live next door."""
from __future__ import annotations

import json
import re
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from mlab.core.bench.formatting import pvalue, signed_pct
from mlab.core.bench.metrics import (
    THRESHOLDS,
    Estimate,
    GroupMetrics,
    LabelSummary,
    PairedComparison,
    Profiles,
    RunRecord,
    all_groups,
    overall,
    paired,
    performance_profiles,
)
from mlab.core.bench.report_formats import Column, Kind, ReportTable, to_rich
from mlab.core.bench.results import DB_FILE, FAILURES, ResultsDB, Row, bench_baselines, judge_records, summarize
from mlab.core.bench.run_folders import is_bench, runs_in
from mlab.core.bench.verdict import Judged, RunJudge
from mlab.core.errors import MlabError
from mlab.core.run.scoring import Verdict
from mlab.core.run.solution_graph import SolutionGraph, final_graph
from mlab.core.run.task_lookup import task_of_run
from mlab.core.run.task_params import labelled
from mlab.core.run.task_params import shown as shown_params
from mlab.core.run.taskdata import TaskHome
from mlab.core.run.trace import read_trace
from mlab.core.task import DEFAULT_SUCCESS_MARGIN

if TYPE_CHECKING:
    from rich.table import Table

# What the report's columns mean, in the terminal, report.json and the HTML report alike.
LEGEND = {
    "success (all runs)": "every finished or failed run counts",
    "success (original)": "the original's rule (more than the task's margin, 10%, better than the baseline) over "
                          "the original's denominator: runs that ended in an error of the harness, the agent's own "
                          "code or the LLM connection, at the run's time limit or out of memory are left out, as "
                          "the original's plot.py drops runs with an error.txt: the column comparable to the paper",
    "improvement (original)": "the mean improvement over the runs success (original) counts, as the original's "
                              "plot.py averages it; improvement: over every run with a valid final submission",
    "baseline note": "a fixed baseline that is a placeholder (the original's 1e10 for house-price's MAE, 1e-10 for "
                     "fathomnet's MAP): any valid submission succeeds against it, so success there says only that "
                     "the submission is valid; of reference discriminates",
    "of reference": "the final score over the task's reference solution's score (reference over score when lower "
                    "is better; mlab check-task records it): 1 is the reference's level, more is better; mean over "
                    "runs with a valid score, - when no reference score is recorded",
    "budget": "what runs spent, mean per run: agent steps, model calls, tokens (prompt and completion), wall time "
              "and cost (- when a model had no price)",
    "intervals": "95%: Wilson per task for success; percentile bootstrap over runs for means; across tasks a "
                 "bootstrap over runs stratified by task (the Wilson interval at the effective number of runs when "
                 "every task's runs agree)",
    "sem": "standard error of the mean over seeds (a seed is one pass over every task), as MLE-bench reports",
    "aup": "area under the performance profile (MLGym): the fraction of tasks on which a method's mean final score "
           "is within a factor 10^tau of the best method's, integrated over tau from 0 to tau_max; a method best on "
           "every task reaches tau_max, one worse than the baseline or without a valid score on a task gets nothing "
           "for it",
    "p": "two-sided permutation tests: per task over runs (needs two runs of each agent), overall over tasks as "
         "pairs (needs two tasks)",
}


@dataclass
class ReportData:
    bench_dir: Path
    rows: list[Row]
    records: list[RunRecord]
    baselines: dict[str, float | None]
    baseline_sources: dict[str, str]
    groups: list[GroupMetrics]
    overall: dict[str, LabelSummary]
    step_scores: dict[str, list[Row]]
    plugin_versions: dict[str, dict[str, str]]
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # run key -> its judged final score
    judged: dict[str, Judged] = field(default_factory=dict)  # run key -> its verdict with baseline and reference
    skipped: list[str] = field(default_factory=list)  # rows of results.db left out, one line each
    comparisons: list[PairedComparison] = field(default_factory=list)
    profiles: Profiles | None = None
    graphs: dict[str, SolutionGraph] = field(default_factory=dict)  # run key -> its search agent's final graph

    @property
    def unconfined_runs(self) -> list[str]:
        """Runs whose agent code ran without confinement (`--sandbox unconfined`): their scores prove nothing."""
        return [row["key"] for row in self.rows if _config_of(row).get("sandbox_confined") is False]

    @property
    def validated_runs(self) -> list[str]:
        """Runs that could score predictions on a validation split (`--allow-validate`): not comparable with runs
        that could not."""
        return [row["key"] for row in self.rows if _config_of(row).get("allow_validate")]

    @property
    def hardware(self) -> dict[str, list[str]]:
        """The runs' keys by the hardware they had (its one line; runs recorded before mlab did: "not recorded"),
        the commonest first."""
        kinds: dict[str, list[str]] = {}
        for row in self.rows:
            kinds.setdefault(row.get("hardware") or "not recorded", []).append(row["key"])
        return dict(sorted(kinds.items(), key=lambda kind: (-len(kind[1]), kind[0])))

    def hardware_line(self) -> str | None:
        """The hardware the runs had, as one line: a note when they mix hardware, whose numbers then compare
        machines as much as methods; None when no run recorded it."""
        kinds = self.hardware
        if len(kinds) == 1:
            (only,) = kinds
            return None if only == "not recorded" else f"hardware: {only}"
        return f"note: these runs ran on {len(kinds)} kinds of hardware: " + "; ".join(
            f"{kind} ({len(keys)} run{'s' if len(keys) > 1 else ''})" for kind, keys in kinds.items())

    @property
    def labels(self) -> list[str]:
        return sorted({r.label for r in self.records})

    @property
    def tasks(self) -> list[str]:
        return sorted({r.task for r in self.records})

    def metric_of(self, task: str) -> tuple[str, bool]:
        """The task's metric name and whether higher is better, as its runs recorded them."""
        for row in self.rows:
            if row["task"] == task and row.get("metric"):
                return str(row["metric"]), bool(row["higher_is_better"]) if row["higher_is_better"] is not None \
                    else True
        higher = next((r.higher_is_better for r in self.records if r.task == task), True)
        return "score", higher

    def as_dict(self) -> dict[str, Any]:
        return {"bench_dir": str(self.bench_dir), "baselines": self.baselines,
                "baseline_sources": self.baseline_sources, "groups": [g.as_dict() for g in self.groups],
                "overall": self.overall, "comparisons": [c.as_dict() for c in self.comparisons],
                "profiles": self.profiles.as_dict() if self.profiles else None, "legend": LEGEND,
                "unconfined_runs": self.unconfined_runs, "validated_runs": self.validated_runs,
                "skipped": self.skipped, "hardware": self.hardware,
                "runs": [{**{k: v for k, v in r.items() if k != "config"}, **self._judged(r), **self._graph(r)}
                         for r in self.rows]}

    def _graph(self, row: Row) -> dict[str, Any]:
        graph = self.graphs.get(row["key"])
        return {} if graph is None else {"solution_graph": graph.payload()}

    def _judged(self, row: Row) -> dict[str, Any]:
        found = self.judged.get(row["key"])
        return {} if found is None else {"score": row["final_score"], **found.fields()}


def _config_of(row: Row) -> dict[str, Any]:
    try:
        config = json.loads(row.get("config") or "{}")
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def run_tagging(row: Row) -> dict[str, str]:
    """A run's task parameters, tags and notes from its stored config (untrusted: what is not of the right shape
    is left out), each as one text cell."""
    config = _config_of(row)
    params, tags, meta = config.get("task_params"), config.get("tags"), config.get("meta")
    return {"params": shown_params(params) if isinstance(params, dict) else "",
            "tags": ",".join(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else "",
            "meta": ",".join(f"{k}={v}" for k, v in sorted(meta.items()) if isinstance(v, str))
            if isinstance(meta, dict) else ""}


def load(bench_dir: Path, compare: tuple[str, str] | None = None, root: Path | None = None,
         settled: bool = False) -> ReportData:
    """The report of the bench in bench_dir (its runs' folders under root, by default bench_dir); `settled`: the
    stored baselines are final (a folder of runs gathered by load_runs)."""
    root = Path(root or bench_dir)
    home = TaskHome.from_env()
    try:
        with ResultsDB.open_existing(bench_dir, read_only=True, root=root) as db:
            rows, records = db.runs(), db.records()
            baselines, sources = bench_baselines(db, records, home, settled=settled)
            judged = judge_records(records, baselines, sources, home)  # the same judgement `mlab eval` stores
            steps, versions = db.step_scores(), db.plugin_versions()
            skipped = db.skipped
    except sqlite3.Error as exc:
        raise MlabError(f"{Path(bench_dir) / DB_FILE}: cannot be read as a results database ({exc})") from None
    references = {r.task: judged[r.key].reference for r in records}
    groups = all_groups(records, baselines, references)
    verdicts = {key: j.verdict for key, j in judged.items()}
    data = ReportData(bench_dir=root, rows=rows, records=records, baselines=baselines,
                      baseline_sources=sources, groups=groups, overall=overall(groups), step_scores=steps,
                      plugin_versions=versions, verdicts=verdicts, judged=judged, skipped=skipped,
                      profiles=performance_profiles(groups), graphs=solution_graphs(root, rows))
    labels = data.labels
    if compare:
        for label in compare:
            if label not in labels:
                raise MlabError(f"--compare: no runs of {label!r}; agents in this bench: {', '.join(labels)}")
        data.comparisons = [paired(groups, *compare)]
    elif len(labels) == 2:
        data.comparisons = [paired(groups, labels[0], labels[1])]
    return data


def solution_graphs(bench_dir: Path, rows: list[Row]) -> dict[str, SolutionGraph]:
    """The final solution graph of every run whose agent kept one (search agents); runs without a readable trace
    have none."""
    graphs = {}
    for row in rows:
        run_dir = bench_dir / str(row["run_dir"])
        try:
            graph = final_graph(read_trace(run_dir))
        except (OSError, ValueError, MlabError):
            continue
        if graph is not None:
            graphs[row["key"]] = graph
    return graphs


def load_runs(folder: Path, compare: tuple[str, str] | None = None) -> ReportData:
    """The report of run folders outside a bench (one run, or a folder of runs such as runs/demo): their traces
    are gathered into a scratch database and reported like a bench's, each run judged against the baseline the
    one rule gives it (verdict.RunJudge: its bench's, else its task's known baseline)."""
    from mlab.core.plugins.registry import load_registry

    registry = load_registry()
    folder = Path(folder)
    judge = RunJudge(TaskHome.from_env())
    chosen: dict[str, tuple[float | None, str]] = {}
    unreadable: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mlab-report-") as scratch:
        with ResultsDB(Path(scratch) / DB_FILE, root=folder) as db:
            for run_dir in runs_in(folder):
                try:
                    trace = read_trace(run_dir)
                    task = task_of_run(registry, trace.config)
                except MlabError as exc:  # one bad run does not hide the others: said, then left out
                    unreadable.append(f"{run_dir}: skipped: {exc}")
                    continue
                key = run_dir.relative_to(folder).as_posix() if run_dir != folder else run_dir.resolve().name
                name = labelled(task)  # runs with other task parameters are results of another task
                db.upsert_run(key, task=name, agent=trace.config.agent, llm=trace.config.llm,
                              seed=trace.config.seed, run_dir=run_dir.relative_to(folder).as_posix(),
                              **summarize(trace, task))
                db.set_plugin_versions(key, trace.plugin_versions)
                baseline = judge.baseline(run_dir, task)
                if chosen.setdefault(name, baseline) != baseline:
                    raise MlabError(
                        f"runs of {name} in {str(folder)!r} are judged against different baselines "
                        f"({chosen[name][0]} {chosen[name][1]}; {baseline[0]} {baseline[1]}): report "
                        "each bench folder on its own")
            for task_name, (score, source) in chosen.items():
                db.set_baseline(task_name, score, source)
        if not chosen:
            raise MlabError(f"{str(folder)!r}: no run could be read ({'; '.join(unreadable)})")
        data = load(Path(scratch), compare, root=folder, settled=True)
    data.skipped[:0] = unreadable
    return data


def load_any(folder: Path, compare: tuple[str, str] | None = None) -> ReportData:
    """A bench's report, or the report of the run folders under folder."""
    return load(folder, compare) if is_bench(folder) else load_runs(folder, compare)


def _p(value: float | None) -> str:
    return "-" if value is None else pvalue(value)


def _estimates(o: LabelSummary) -> dict[str, Estimate]:
    return {k: Estimate(**o[k]) for k in ("success", "success_original", "success_any", "improvement",
                                          "improvement_original", "of_reference", "tokens", "cost_usd", "time_s",
                                          "steps", "llm_calls")}


def _at(mapping: Callable[[Any], Any], key: Any, default: Any = None) -> Callable[[Any], Any]:
    """A column's value: the entry `key` of the mapping an item gives (a threshold's, a task's, a failure's)."""
    return lambda item: mapping(item).get(key, default)


def _budget_columns(of: Callable[[Any], dict[str, Any]]) -> list[Column]:
    """What runs spent, per task and overall: steps, model calls, tokens, time and cost."""
    return [Column("steps", "steps", "num", ",.1f", value=lambda x: of(x)["steps"]),
            Column("model\ncalls", "llm_calls", "num", ",.1f", value=lambda x: of(x)["llm_calls"]),
            Column("tokens", "tokens", "num", value=lambda x: of(x)["tokens"]),
            Column("time s", "time_s", "num", ",.1f", value=lambda x: of(x)["time_s"]),
            Column("cost $", "cost_usd", "num", ".4f", value=lambda x: of(x)["cost_usd"])]


def _group_estimates(g: GroupMetrics) -> dict[str, Estimate]:
    return {"steps": g.steps, "llm_calls": g.llm_calls, "tokens": g.tokens, "time_s": g.time_s,
            "cost_usd": g.cost_usd}


def report_tables(data: ReportData) -> list[ReportTable]:
    """Every table of the report, as data: per task and agent, thresholds, overall, performance profiles, the
    failure taxonomy and paired comparisons. The terminal, CSV, LaTeX and JSON all render these; each column is
    one Column naming the field it shows."""
    if len(data.records) == 1 and len(data.groups) == 1:
        return [one_run_table(data)] + [graph_table(row, data.graphs[row["key"]]) for row in data.rows
                                        if row["key"] in data.graphs]
    out: list[ReportTable] = []
    noted = any(g.baseline_note for g in data.groups)
    per_task = ReportTable(
        "per_task", f"Runs per task and agent (success (original): >{DEFAULT_SUCCESS_MARGIN:.0%} better than the "
                    "baseline at the last step, unless the task sets its own margin; 95% intervals over seeds)",
        [Column("task", "task"), Column("agent", "agent", value=lambda g: g.label),
         Column("model", "model", machine=True), Column("agent plugin", "agent_name", machine=True,
                                                         value=lambda g: g.agent),
         Column("baseline", "baseline", "num", ".4g"),
         *([Column("baseline note", "baseline_note")] if noted else []),
         Column("runs", "runs", "int"), Column("failed", "failed", "int"),
         Column("success\n(all runs)", "success_all_runs", "pct", value=lambda g: g.success_rate),
         Column("success\n(original)", "success_original", "pct"),
         Column("any step", "success_any_step", "pct", value=lambda g: g.success_any),
         Column("improvement", "improvement", "signed_pct"),
         Column("improvement\n(original)", "improvement_original", "signed_pct"),
         Column("of\nreference", "of_reference", "num", ".3g"),
         *_budget_columns(_group_estimates)],
        caption=f"success (all runs): {LEGEND['success (all runs)']}; success (original): "
                f"{LEGEND['success (original)']}. improvement (original): {LEGEND['improvement (original)']}. "
                f"of reference: {LEGEND['of reference']}. Budget: "
                f"{LEGEND['budget']}. Intervals: {LEGEND['intervals']}.")
    for g in data.groups:
        per_task.add(g)
    out.append(per_task)

    thresholds = ReportTable("thresholds", "Success rate by improvement threshold (final step, all runs)",
                             [Column("task", "task"), Column("agent", "agent", value=lambda g: g.label),
                              *(Column(f">{th:.0%}", f"success_over_{round(th * 100)}", "pct",
                                       value=_at(lambda g: g.success, th)) for th in THRESHOLDS)])
    for g in data.groups:
        thresholds.add(g)
    out.append(thresholds)

    tau_max = data.profiles.tau_max if data.profiles else 1.0
    models = {g.label: g.model for g in data.groups}

    def summary(item: tuple[str, LabelSummary]) -> dict[str, Any]:
        label, o = item
        return {"agent": label, "tasks": o["tasks"], "aup": o["aup"], **_estimates(o)}

    totals = ReportTable(
        "overall", "Overall: means over tasks (each task weighs the same)",
        [Column("agent", "agent", value=lambda x: x[0]),
         Column("model", "model", machine=True, value=lambda x: models.get(x[0], "")),
         Column("tasks", "tasks", "int", value=lambda x: x[1]["tasks"]),
         Column("success\n(all runs)", "success_all_runs", "pct", value=lambda x: summary(x)["success"]),
         Column("success\n(original)", "success_original", "pct", value=lambda x: summary(x)["success_original"]),
         Column("± SEM\n(seeds)", "success_sem", "sem_pct", value=lambda x: summary(x)["success"]),
         Column("any step", "success_any_step", "pct", value=lambda x: summary(x)["success_any"]),
         Column("improvement", "improvement", "signed_pct", value=lambda x: summary(x)["improvement"]),
         Column("improvement\n(original)", "improvement_original", "signed_pct",
                value=lambda x: summary(x)["improvement_original"]),
         Column("of\nreference", "of_reference", "num", ".3g", value=lambda x: summary(x)["of_reference"]),
         Column("AUP", "aup", "ratio", value=lambda x: x[1]["aup"]), *_budget_columns(summary)],
        caption=f"± SEM: {LEGEND['sem']}. AUP (of {tau_max:g}): {LEGEND['aup']}. Budget: {LEGEND['budget']}.")
    for item in data.overall.items():
        totals.add(item)
    out.append(totals)

    if data.profiles and data.profiles.tasks:
        p = data.profiles
        profiles = ReportTable(
            "profiles", f"Performance ratios (MLGym: 1 = the best mean final score on the task; - = infeasible: no "
                        f"valid score or worse than the baseline) and AUP (of {p.tau_max:g})",
            [Column("method", "method", value=lambda m: m), Column("AUP", "aup", "ratio", value=lambda m: p.aup[m]),
             *(Column(task, task, "ratio", value=_at(lambda m: p.ratios[m], task)) for task in p.tasks)])
        for m in p.methods:
            profiles.add(m)
        out.append(profiles)

    counts: dict[str, dict[str, int]] = {}
    for r in data.records:
        if r.failure:
            counts.setdefault(r.label, {}).setdefault(r.failure, 0)
            counts[r.label][r.failure] += 1
    if counts:
        used = [f for f in FAILURES if any(f in c for c in counts.values())]
        failures = ReportTable("failures", "Why runs have no valid final submission (or failed)",
                               [Column("agent", "agent", value=lambda x: x[0]),
                                *(Column(f, f, "int", value=_at(lambda x: x[1], f, 0)) for f in used)])
        for entry in sorted(counts.items()):
            failures.add(entry)
        out.append(failures)

    for c in data.comparisons:
        pair = ReportTable(
            f"comparison_{_slug(c.a)}_vs_{_slug(c.b)}", f"Paired comparison on the same tasks: {c.a} − {c.b}",
            [Column("task", "task"), Column(f"success {c.a}", "success_a", "pct"),
             Column(f"success {c.b}", "success_b", "pct"),
             Column("difference", "success_difference", "signed_pct", value=lambda r: r["success_diff"]),
             Column("p", "p_success", "p"), Column(f"improvement {c.a}", "improvement_a", "signed_pct"),
             Column(f"improvement {c.b}", "improvement_b", "signed_pct"), Column("p ", "p_improvement", "p")],
            caption=comparison_summary(c))
        for row in c.tasks:
            pair.add(row)
        out.append(pair)

    for run_row in data.rows:
        if run_row["key"] in data.graphs:
            out.append(graph_table(run_row, data.graphs[run_row["key"]]))
    return out


ONE_RUN_NOTE = ("one run: no intervals or AUP, which need several runs (seeds) of a method or several methods to "
                "compare; a bench (mlab bench --runs N) has them")


def one_run_table(data: ReportData) -> ReportTable:
    """The report of a single run: what it scored and spent, as plain numbers; no interval, SEM or profile, since
    one run has none."""
    (g,), (r,) = data.groups, data.records
    success = g.success_original.mean
    table = ReportTable(
        "run", "One run",
        [Column("task", "task"), Column("agent", "agent"), Column("model", "model", machine=True),
         Column("status", "status"), Column("score", "score", "num", ".6g"),
         Column("baseline", "baseline", "num", ".4g"), Column("improvement", "improvement", "signed_pct"),
         Column("success\n(original)", "success_original"), Column("of\nreference", "of_reference", "num", ".3g"),
         Column("steps", "steps", "int"), Column("model\ncalls", "llm_calls", "int"), Column("tokens", "tokens", "int"),
         Column("time s", "time_s", "num", ".1f"), Column("cost $", "cost_usd", "num", ".4f"),
         Column("failure", "failure"), Column("hardware", "hardware", machine=True)],
        caption=ONE_RUN_NOTE)
    table.add({"task": g.task, "agent": g.label, "model": g.model, "status": r.status, "score": r.final_score,
               "baseline": g.baseline, "improvement": g.improvement.mean,
               "success_original": None if success is None else ("yes" if success else "no"),
               "of_reference": g.of_reference.mean, "steps": r.steps, "llm_calls": r.llm_calls, "tokens": r.tokens,
               "time_s": r.time_s, "cost_usd": r.cost_usd if r.llm_calls else None, "failure": r.failure,
               "hardware": data.rows[0].get("hardware") or ""})
    return table


def default_out(folder: Path) -> Path:
    """Where a report is written without --out: a bench's or a folder of runs' report/ folder; for one run, a
    folder in the working directory (a run folder keeps only what the run wrote)."""
    if (Path(folder) / "trace.json").is_file():
        return Path(f"report-{Path(folder).resolve().name}")
    return Path(folder) / "report"


def check_out(out_dir: Path) -> None:
    """Refuse to write a report into a run folder (at any depth)."""
    for place in (Path(out_dir).resolve(), *Path(out_dir).resolve().parents):
        if (place / "trace.json").is_file():
            raise MlabError(f"--out {str(out_dir)!r} is inside the run folder {str(place)!r}: a report is never "
                            "written into a run; give a folder elsewhere")


def runs_table(data: ReportData) -> ReportTable:
    """One row per run, for analysis (runs.csv and tables.json; not on the terminal nor in LaTeX): what it scored
    and spent."""
    rows = {row["key"]: row for row in data.rows}

    def judged(r: RunRecord) -> Any:
        return data.judged.get(r.key)

    fields: tuple[tuple[str, str, Kind, Callable[[RunRecord], Any]], ...] = (
        ("task", "task", "text", lambda r: r.task), ("method", "method", "text", lambda r: r.label),
        ("agent", "agent", "text", lambda r: r.agent), ("model", "model", "text", lambda r: r.model or ""),
        ("seed", "seed", "int", lambda r: r.seed), ("status", "status", "text", lambda r: r.status),
        ("score", "score", "num", lambda r: r.final_score),
        ("baseline", "baseline", "num", lambda r: judged(r).baseline if judged(r) else None),
        ("improvement", "improvement", "num", lambda r: judged(r).verdict.improvement if judged(r) else None),
        ("success", "success", "text", lambda r: judged(r).verdict.success if judged(r) else None),
        ("steps", "steps", "int", lambda r: r.steps), ("model calls", "llm_calls", "int", lambda r: r.llm_calls),
        ("tokens", "tokens", "int", lambda r: r.tokens), ("cost $", "cost_usd", "num", lambda r: r.cost_usd),
        ("time s", "time_s", "num", lambda r: r.time_s),
        # Validate Submission calls that reached the scorer (--allow-validate runs; empty otherwise)
        ("validation calls", "validation_calls", "int", lambda r: rows.get(r.key, {}).get("validation_calls")),
        ("run folder", "run_dir", "text", lambda r: rows.get(r.key, {}).get("run_dir")),
        # what the run was started with: the task's parameters (-T), its tags and notes (--tag, --meta)
        ("params", "params", "text", lambda r: run_tagging(rows.get(r.key, {}))["params"]),
        ("tags", "tags", "text", lambda r: run_tagging(rows.get(r.key, {}))["tags"]),
        ("meta", "meta", "text", lambda r: run_tagging(rows.get(r.key, {}))["meta"]),
        ("hardware", "hardware", "text", lambda r: rows.get(r.key, {}).get("hardware") or ""))
    table = ReportTable("runs", "Runs", [Column(h, k, kind, machine=True, value=v) for h, k, kind, v in fields])
    for record in data.records:
        table.add(record)
    return table


def graph_table(row: Row, graph: SolutionGraph) -> ReportTable:
    """A search agent's solution graph: one row per node, how it was made and how its run went."""
    table = ReportTable(
        f"graph_{_slug(str(row['key']))}", f"Solution graph of run {row['key']} ({row['agent']} on {row['task']})",
        [Column("node", "node", "int"), Column("parents", "parents"), Column("operator", "operator"),
         Column("status", "status"), Column("fitness", "fitness", "num", ".6g"),
         Column("best", "best", value=lambda n: "*" if n["best"] else ""),
         Column("plan", "plan", value=lambda n: n["plan"][:100])],
        caption=f"fitness: {graph.direction} is better; * marks the best node, whose script the run submitted")
    for node in graph.rows():
        table.add(node)
    return table


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "agent"


def tables(data: ReportData) -> list[Table]:
    """The report's tables for a terminal."""
    return [to_rich(t) for t in report_tables(data) if t.shown]


def comparison_summary(c: PairedComparison) -> str:
    return (f"mean success difference {signed_pct(c.success_diff)}, permutation test over tasks p = "
            f"{_p(c.p_success)}; mean improvement difference {signed_pct(c.improvement_diff)}, p = "
            f"{_p(c.p_improvement)}; {c.a} better on {c.wins} task(s), worse on {c.losses}, tied on {c.ties}; "
            "per task: permutation tests over runs")


class Written(TypedDict, total=False):
    """What `write` wrote: report.json always, the plots and the page when asked for (and possible)."""

    json: Path
    plots: list[Path]  # every file of every figure (PDF, SVG, PNG)
    html: Path


def write(data: ReportData, out_dir: Path, plots: bool = True, html: bool = True,
          log: Callable[[str], None] = lambda _m: None) -> Written:
    """Write report.json, the plots (PDF, SVG and PNG, when matplotlib is installed) and the HTML report into
    out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: Written = {"json": out_dir / "report.json"}
    written["json"].write_text(json.dumps(data.as_dict(), indent=1, default=str))
    images: list[Path] = []
    if plots:
        try:
            from mlab.core.bench.report_plots import files_of, write_plots
        except ImportError:
            log("plots skipped: matplotlib is not installed (pip install 'mlab[report]')")
        else:
            images = write_plots(data, out_dir)
            written["plots"] = [path for png in images for path in files_of(png)]
    if html:
        from mlab.core.bench.report_html import write_html

        written["html"] = write_html(data, out_dir, images, tables(data), LEGEND)
    return written
