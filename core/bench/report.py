"""A bench's report: metrics from its database, printed as tables; plots and the HTML viewer live next door."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from mlab.core.bench.formatting import num, pct, pvalue, ratio, sem_pct, signed_pct
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
from mlab.core.bench.results import FAILURES, ResultsDB, Row, bench_baselines, judge_runs
from mlab.core.run.scoring import Verdict
from mlab.core.run.taskdata import TaskHome

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

    @property
    def unconfined_runs(self) -> list[str]:
        """Runs whose agent code ran without confinement (`--sandbox unconfined`): their scores prove nothing."""
        return [row["key"] for row in self.rows if _sandbox_of(row) == "unconfined"]

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
                "unconfined_runs": self.unconfined_runs,
                "runs": [{**{k: v for k, v in r.items() if k != "config"}, **self._judged(r)} for r in self.rows]}

    def _judged(self, row: Row) -> dict[str, Any]:
        verdict = self.verdicts.get(row["key"])
        if verdict is None:
            return {}
        return {"baseline": self.baselines.get(row["task"]),
                "baseline_source": self.baseline_sources.get(row["task"], "missing"),
                "baseline_refused": verdict.refused, "valid": verdict.valid,
                "improvement": verdict.improvement, "success": verdict.success}


def _sandbox_of(row: Row) -> str | None:
    try:
        return str(json.loads(row.get("config") or "{}").get("sandbox"))
    except ValueError:
        return None


def load(bench_dir: Path, compare: tuple[str, str] | None = None) -> ReportData:
    with ResultsDB.open_existing(bench_dir) as db:
        rows, records = db.runs(), db.records()
        baselines, sources = bench_baselines(db, records, TaskHome.from_env())
        judged = judge_runs(db, TaskHome.from_env())  # the same judgement `mlab eval` stores
        steps, versions = db.step_scores(), db.plugin_versions()
    groups = all_groups(records, baselines)
    verdicts = {key: j.verdict for key, j in judged.items()}
    data = ReportData(bench_dir=Path(bench_dir), rows=rows, records=records, baselines=baselines,
                      baseline_sources=sources, groups=groups, overall=overall(groups), step_scores=steps,
                      plugin_versions=versions, verdicts=verdicts, profiles=performance_profiles(groups))
    labels = data.labels
    if compare:
        from mlab.core.errors import MlabError

        for label in compare:
            if label not in labels:
                raise MlabError(f"--compare: no runs of {label!r}; agents in this bench: {', '.join(labels)}")
        data.comparisons = [paired(groups, *compare)]
    elif len(labels) == 2:
        data.comparisons = [paired(groups, labels[0], labels[1])]
    return data


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _p(value: float | None) -> str:
    return "-" if value is None else pvalue(value)


def _estimates(o: LabelSummary) -> dict[str, Estimate]:
    return {k: Estimate(**o[k]) for k in ("success", "success_original", "success_any", "improvement", "tokens",
                                          "cost_usd", "time_s")}


def tables(data: ReportData) -> list[Table]:
    """rich Tables: per task and agent, thresholds, overall, performance profiles, failures, paired comparisons."""
    from rich.table import Table

    out: list[Table] = []
    t = Table(title=f"Runs per task and agent (success: >{SUCCESS:.0%} better than the baseline at the last step, "
                    "unless the task sets its own margin; 95% intervals over seeds)",
              caption=f"success (all runs): {LEGEND['success (all runs)']}; success (original): "
                      f"{LEGEND['success (original)']}. Intervals: {LEGEND['intervals']}.")
    for col in ("task", "agent", "baseline", "runs", "failed", "success\n(all runs)", "success\n(original)",
                "any step", "improvement", "tokens", "time s", "cost $"):
        t.add_column(col, overflow="fold")
    for g in data.groups:
        base = "-" if g.baseline is None else f"{g.baseline:.4g}"
        t.add_row(g.task, g.label, base, str(g.runs), str(g.failed), pct(g.success_rate), pct(g.success_original),
                  pct(g.success_any), signed_pct(g.improvement), num(g.tokens), num(g.time_s, ",.1f"),
                  num(g.cost_usd, ".4f"))
    out.append(t)

    t = Table(title="Success rate by improvement threshold (final step, all runs)")
    t.add_column("task")
    t.add_column("agent")
    for threshold in THRESHOLDS:
        t.add_column(f">{threshold:.0%}")
    for g in data.groups:
        t.add_row(g.task, g.label, *(pct(g.success[th]) for th in THRESHOLDS))
    out.append(t)

    tau_max = data.profiles.tau_max if data.profiles else 1.0
    t = Table(title="Overall: means over tasks (each task weighs the same)",
              caption=f"± SEM: {LEGEND['sem']}. AUP (of {tau_max:g}): {LEGEND['aup']}.")
    for col in ("agent", "tasks", "success\n(all runs)", "success\n(original)", "± SEM\n(seeds)", "any step",
                "improvement", "AUP", "tokens", "cost $", "time s"):
        t.add_column(col, overflow="fold")
    for label, o in data.overall.items():
        e = _estimates(o)
        t.add_row(label, str(o["tasks"]), pct(e["success"]), pct(e["success_original"]), sem_pct(e["success"]),
                  pct(e["success_any"]), signed_pct(e["improvement"]), ratio(o["aup"]), num(e["tokens"]),
                  num(e["cost_usd"], ".4f"), num(e["time_s"], ",.1f"))
    out.append(t)

    if data.profiles and data.profiles.tasks:
        p = data.profiles
        t = Table(title=f"Performance ratios (MLGym: 1 = the best mean final score on the task; - = infeasible: no "
                        f"valid score or worse than the baseline) and AUP (of {p.tau_max:g})")
        for col in ("method", "AUP", *p.tasks):
            t.add_column(col, overflow="fold")
        for m in p.methods:
            t.add_row(m, ratio(p.aup[m]), *(ratio(p.ratios[m][task]) for task in p.tasks))
        out.append(t)

    counts: dict[str, dict[str, int]] = {}
    for r in data.records:
        if r.failure:
            counts.setdefault(r.label, {}).setdefault(r.failure, 0)
            counts[r.label][r.failure] += 1
    if counts:
        t = Table(title="Why runs have no valid final submission (or failed)")
        t.add_column("agent")
        used = [f for f in FAILURES if any(f in c for c in counts.values())]
        for f in used:
            t.add_column(f)
        for label, by_failure in sorted(counts.items()):
            t.add_row(label, *(str(by_failure.get(f, 0)) for f in used))
        out.append(t)

    for c in data.comparisons:
        t = Table(title=f"Paired comparison on the same tasks: {c.a} − {c.b}")
        for col in ("task", f"success {c.a}", f"success {c.b}", "difference", "p", f"improvement {c.a}",
                    f"improvement {c.b}", "p "):
            t.add_column(col, overflow="fold")
        for row in c.tasks:
            t.add_row(row["task"], f"{row['success_a']:.0%}", f"{row['success_b']:.0%}",
                      f"{row['success_diff']:+.0%}", _p(row["p_success"]), _signed(row["improvement_a"]),
                      _signed(row["improvement_b"]), _p(row["p_improvement"]))
        t.caption = comparison_summary(c)
        out.append(t)
    return out


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
