"""A bench's report: metrics from its database, printed as tables; plots and the HTML viewer live next door."""
from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from mlab.core.bench.formatting import pvalue, signed_pct
from mlab.core.bench.metrics import (
    SUCCESS,
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
from mlab.core.bench.report_formats import Column, ReportTable, to_rich
from mlab.core.bench.results import DB_FILE, FAILURES, ResultsDB, Row, bench_baselines, judge_records, summarize
from mlab.core.bench.run_folders import is_bench, runs_in
from mlab.core.errors import MlabError
from mlab.core.run.scoring import Verdict
from mlab.core.run.solution_graph import SolutionGraph, final_graph
from mlab.core.run.taskdata import TaskHome
from mlab.core.run.trace import read_trace

if TYPE_CHECKING:
    from rich.table import Table

# What the report's columns mean, in the terminal, report.json and the HTML report alike.
LEGEND = {
    "success (all runs)": "every finished or failed run counts",
    "success (original)": "runs that ended in a harness error, an LLM connection error or an out-of-memory error "
                          "are left out of the denominator, as the original's plot.py does: the column comparable "
                          "to the paper",
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
    comparisons: list[PairedComparison] = field(default_factory=list)
    profiles: Profiles | None = None
    graphs: dict[str, SolutionGraph] = field(default_factory=dict)  # run key -> its search agent's final graph

    @property
    def unconfined_runs(self) -> list[str]:
        """Runs whose agent code ran without confinement (`--sandbox unconfined`): their scores prove nothing."""
        return [row["key"] for row in self.rows if _sandbox_of(row) == "unconfined"]

    @property
    def validated_runs(self) -> list[str]:
        """Runs that could score predictions on a validation split (`--allow-validate`): not comparable with runs
        that could not."""
        return [row["key"] for row in self.rows if _config_of(row).get("allow_validate")]

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
                "runs": [{**{k: v for k, v in r.items() if k != "config"}, **self._judged(r), **self._graph(r)}
                         for r in self.rows]}

    def _graph(self, row: Row) -> dict[str, Any]:
        graph = self.graphs.get(row["key"])
        return {} if graph is None else {"solution_graph": graph.payload()}

    def _judged(self, row: Row) -> dict[str, Any]:
        verdict = self.verdicts.get(row["key"])
        if verdict is None:
            return {}
        return {"baseline": self.baselines.get(row["task"]),
                "baseline_source": self.baseline_sources.get(row["task"], "missing"),
                "baseline_refused": verdict.refused, "valid": verdict.valid,
                "improvement": verdict.improvement, "success": verdict.success}


def _config_of(row: Row) -> dict[str, Any]:
    try:
        config = json.loads(row.get("config") or "{}")
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def _sandbox_of(row: Row) -> str | None:
    sandbox = _config_of(row).get("sandbox")
    return None if sandbox is None else str(sandbox)


def load(bench_dir: Path, compare: tuple[str, str] | None = None) -> ReportData:
    with ResultsDB.open_existing(bench_dir) as db:
        rows, records = db.runs(), db.records()
        baselines, sources = bench_baselines(db, records, TaskHome.from_env())
        judged = judge_records(records, baselines, sources)  # the same judgement `mlab eval` stores
        steps, versions = db.step_scores(), db.plugin_versions()
    groups = all_groups(records, baselines)
    verdicts = {key: j.verdict for key, j in judged.items()}
    data = ReportData(bench_dir=Path(bench_dir), rows=rows, records=records, baselines=baselines,
                      baseline_sources=sources, groups=groups, overall=overall(groups), step_scores=steps,
                      plugin_versions=versions, verdicts=verdicts, profiles=performance_profiles(groups),
                      graphs=solution_graphs(Path(bench_dir), rows))
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
    are gathered into a scratch database and reported like a bench's, judged against the tasks' known baselines."""
    from mlab.core.plugins.registry import load_registry

    registry = load_registry()
    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="mlab-report-") as scratch:
        with ResultsDB(Path(scratch) / DB_FILE) as db:
            for run_dir in runs_in(folder):
                trace = read_trace(run_dir)
                task = registry.get("tasks", trace.config.task)
                key = run_dir.relative_to(folder).as_posix() if run_dir != folder else run_dir.resolve().name
                db.upsert_run(key, task=task.name, agent=trace.config.agent, llm=trace.config.llm,
                              seed=trace.config.seed, run_dir=str(run_dir.resolve()), **summarize(trace, task))
                db.set_plugin_versions(key, trace.plugin_versions)
        data = load(Path(scratch), compare)
    data.bench_dir = folder
    return data


def load_any(folder: Path, compare: tuple[str, str] | None = None) -> ReportData:
    """A bench's report, or the report of the run folders under folder."""
    return load(folder, compare) if is_bench(folder) else load_runs(folder, compare)


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _p(value: float | None) -> str:
    return "-" if value is None else pvalue(value)


def _estimates(o: LabelSummary) -> dict[str, Estimate]:
    return {k: Estimate(**o[k]) for k in ("success", "success_original", "success_any", "improvement", "tokens",
                                          "cost_usd", "time_s")}


def report_tables(data: ReportData) -> list[ReportTable]:
    """Every table of the report, as data: per task and agent, thresholds, overall, performance profiles, the
    failure taxonomy and paired comparisons. The terminal, CSV, LaTeX and JSON all render these."""
    out: list[ReportTable] = []
    per_task = ReportTable(
        "per_task", f"Runs per task and agent (success: >{SUCCESS:.0%} better than the baseline at the last step, "
                    "unless the task sets its own margin; 95% intervals over seeds)",
        [Column("task", "task"), Column("agent", "agent"), Column("baseline", "baseline", "num", ".4g"),
         Column("runs", "runs", "int"), Column("failed", "failed", "int"),
         Column("success\n(all runs)", "success_all_runs", "pct"),
         Column("success\n(original)", "success_original", "pct"), Column("any step", "success_any_step", "pct"),
         Column("improvement", "improvement", "signed_pct"), Column("tokens", "tokens", "num"),
         Column("time s", "time_s", "num", ",.1f"), Column("cost $", "cost_usd", "num", ".4f")],
        caption=f"success (all runs): {LEGEND['success (all runs)']}; success (original): "
                f"{LEGEND['success (original)']}. Intervals: {LEGEND['intervals']}.")
    for g in data.groups:
        per_task.rows.append([g.task, g.label, g.baseline, g.runs, g.failed, g.success_rate, g.success_original,
                              g.success_any, g.improvement, g.tokens, g.time_s, g.cost_usd])
    out.append(per_task)

    thresholds = ReportTable("thresholds", "Success rate by improvement threshold (final step, all runs)",
                             [Column("task", "task"), Column("agent", "agent"),
                              *(Column(f">{th:.0%}", f"success_over_{round(th * 100)}", "pct") for th in THRESHOLDS)])
    for g in data.groups:
        thresholds.rows.append([g.task, g.label, *(g.success[th] for th in THRESHOLDS)])
    out.append(thresholds)

    tau_max = data.profiles.tau_max if data.profiles else 1.0
    totals = ReportTable(
        "overall", "Overall: means over tasks (each task weighs the same)",
        [Column("agent", "agent"), Column("tasks", "tasks", "int"),
         Column("success\n(all runs)", "success_all_runs", "pct"),
         Column("success\n(original)", "success_original", "pct"), Column("± SEM\n(seeds)", "success_sem", "sem_pct"),
         Column("any step", "success_any_step", "pct"), Column("improvement", "improvement", "signed_pct"),
         Column("AUP", "aup", "ratio"), Column("tokens", "tokens", "num"), Column("cost $", "cost_usd", "num", ".4f"),
         Column("time s", "time_s", "num", ",.1f")],
        caption=f"± SEM: {LEGEND['sem']}. AUP (of {tau_max:g}): {LEGEND['aup']}.")
    for label, o in data.overall.items():
        e = _estimates(o)
        totals.rows.append([label, o["tasks"], e["success"], e["success_original"], e["success"], e["success_any"],
                            e["improvement"], o["aup"], e["tokens"], e["cost_usd"], e["time_s"]])
    out.append(totals)

    if data.profiles and data.profiles.tasks:
        p = data.profiles
        profiles = ReportTable(
            "profiles", f"Performance ratios (MLGym: 1 = the best mean final score on the task; - = infeasible: no "
                        f"valid score or worse than the baseline) and AUP (of {p.tau_max:g})",
            [Column("method", "method"), Column("AUP", "aup", "ratio"),
             *(Column(task, task, "ratio") for task in p.tasks)])
        for m in p.methods:
            profiles.rows.append([m, p.aup[m], *(p.ratios[m][task] for task in p.tasks)])
        out.append(profiles)

    counts: dict[str, dict[str, int]] = {}
    for r in data.records:
        if r.failure:
            counts.setdefault(r.label, {}).setdefault(r.failure, 0)
            counts[r.label][r.failure] += 1
    if counts:
        used = [f for f in FAILURES if any(f in c for c in counts.values())]
        failures = ReportTable("failures", "Why runs have no valid final submission (or failed)",
                               [Column("agent", "agent"), *(Column(f, f, "int") for f in used)])
        for label, by_failure in sorted(counts.items()):
            failures.rows.append([label, *(by_failure.get(f, 0) for f in used)])
        out.append(failures)

    for c in data.comparisons:
        pair = ReportTable(
            f"comparison_{_slug(c.a)}_vs_{_slug(c.b)}", f"Paired comparison on the same tasks: {c.a} − {c.b}",
            [Column("task", "task"), Column(f"success {c.a}", "success_a", "pct"),
             Column(f"success {c.b}", "success_b", "pct"), Column("difference", "success_difference", "signed_pct"),
             Column("p", "p_success", "p"), Column(f"improvement {c.a}", "improvement_a", "signed_pct"),
             Column(f"improvement {c.b}", "improvement_b", "signed_pct"), Column("p ", "p_improvement", "p")],
            caption=comparison_summary(c))
        for row in c.tasks:
            pair.rows.append([row["task"], row["success_a"], row["success_b"], row["success_diff"], row["p_success"],
                              row["improvement_a"], row["improvement_b"], row["p_improvement"]])
        out.append(pair)

    for run_row in data.rows:
        if run_row["key"] in data.graphs:
            out.append(graph_table(run_row, data.graphs[run_row["key"]]))
    return out


def graph_table(row: Row, graph: SolutionGraph) -> ReportTable:
    """A search agent's solution graph: one row per node, how it was made and how its run went."""
    table = ReportTable(
        f"graph_{_slug(str(row['key']))}", f"Solution graph of run {row['key']} ({row['agent']} on {row['task']})",
        [Column("node", "node", "int"), Column("parents", "parents"), Column("operator", "operator"),
         Column("status", "status"), Column("fitness", "fitness", "num", ".6g"), Column("best", "best"),
         Column("plan", "plan")],
        caption=f"fitness: {graph.direction} is better; * marks the best node, whose script the run submitted")
    for node in graph.rows():
        table.rows.append([node["node"], node["parents"], node["operator"], node["status"], node["fitness"],
                           "*" if node["best"] else "", node["plan"][:100]])
    return table


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "agent"


def tables(data: ReportData) -> list[Table]:
    """The report's tables for a terminal."""
    return [to_rich(t) for t in report_tables(data)]


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

        written["html"] = write_html(data, out_dir, images)
    return written
