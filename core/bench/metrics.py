"""The original benchmark's metrics, direction-aware, with 95% confidence intervals over seeds.

Pure functions over plain records: no database, no plugins. A run's improvement is
(score - baseline) / |baseline|, sign flipped when lower is better; a score <= 0 is invalid (as in the original).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from mlab.core.run.scoring import ScoreRule, is_valid, judge
from mlab.core.task import DEFAULT_SUCCESS_MARGIN

THRESHOLDS = (0.05, 0.10, 0.15, 0.20, 0.30)
SUCCESS = 0.10  # the original's headline threshold: more than 10% better than the baseline at the last step

# Two-sided 95% critical values of Student's t by degrees of freedom; beyond the table the next lower row is
# used, which errs on the wide side.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
        29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
_Z95 = 1.959964


def t95(df: int) -> float:
    if df > 120:
        return _Z95
    return _T95[max(k for k in _T95 if k <= df)]


class EstimateDict(TypedDict):
    """An Estimate as JSON: in report.json and in the per-agent summary."""

    n: int
    mean: float | None
    lo: float | None
    hi: float | None


@dataclass
class Estimate:
    """A mean (or proportion) with its 95% interval; lo/hi are None when n is too small for one."""

    n: int
    mean: float | None
    lo: float | None = None
    hi: float | None = None

    def as_dict(self) -> EstimateDict:
        return {"n": self.n, "mean": self.mean, "lo": self.lo, "hi": self.hi}


def mean_ci(values: Sequence[float | None]) -> Estimate:
    """Mean and interval of the values that are not None."""
    known = [v for v in values if v is not None]
    if not known:
        return Estimate(0, None)
    mean = statistics.fmean(known)
    if not math.isfinite(mean) or not all(math.isfinite(v) for v in known):
        # an unbounded improvement (a zero baseline) has no interval; both signs at once have no mean
        return Estimate(len(known), None if math.isnan(mean) else mean)
    if len(known) < 2:
        return Estimate(1, mean)
    half = t95(len(known) - 1) * statistics.stdev(known) / math.sqrt(len(known))
    return Estimate(len(known), mean, mean - half, mean + half)


def wilson(successes: int, n: int) -> Estimate:
    """Proportion with its Wilson score interval: sane at 0/8 and 8/8, where the normal interval collapses."""
    if n == 0:
        return Estimate(0, None)
    p = successes / n
    z2 = _Z95 ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return Estimate(n, p, max(0.0, centre - half), min(1.0, centre + half))


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of wins against losses (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / (1 << n)  # 1 << n: an int, where 2 ** n types as Any
    return min(1.0, 2 * tail)


# ---- one run --------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """What metrics need of a run; step_scores are (step, score or None) of evaluated snapshots."""

    key: str
    task: str
    agent: str
    llm: str | None
    seed: int
    status: str
    final_score: float | None
    higher_is_better: bool = True
    success_margin: float = DEFAULT_SUCCESS_MARGIN
    failure: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    time_s: float = 0.0
    steps: int = 0
    step_scores: list[tuple[int, float | None]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.agent if not self.llm else f"{self.agent} ({self.llm})"

    @property
    def rule(self) -> ScoreRule:
        return ScoreRule(higher_is_better=self.higher_is_better, success_margin=self.success_margin)


@dataclass
class RunMetrics:
    final_improvement: float | None
    best_improvement: float | None  # over every evaluated step and the final snapshot
    valid_final: bool
    succeeded: bool  # the run's success, as judged by the one rule (the task's margin)
    success: dict[float, bool]  # threshold -> final improvement above it
    success_any: bool


def run_metrics(run: RunRecord, baseline: float | None) -> RunMetrics:
    verdict = judge(run.final_score, baseline, run.rule)
    final = verdict.improvement
    candidates = [final] + [judge(s, baseline, run.rule).improvement for _i, s in run.step_scores]
    gains = [c for c in candidates if c is not None]
    best = max(gains) if gains else None
    return RunMetrics(final_improvement=final, best_improvement=best, valid_final=verdict.valid,
                      succeeded=verdict.success, success={t: final is not None and final > t for t in THRESHOLDS},
                      success_any=best is not None and best > run.success_margin)


# ---- a group of runs (one task, one agent and model, many seeds) -----------------------------------
@dataclass
class GroupMetrics:
    task: str
    label: str
    runs: int  # completed runs (finished or failed): the denominator of every rate
    failed: int
    valid_final: int
    baseline: float | None
    success_rate: Estimate  # runs that succeeded by the task's own margin: the headline number
    success: dict[float, Estimate]
    success_any: Estimate
    improvement: Estimate  # over runs with a valid final submission
    best_improvement: Estimate
    final_score: Estimate
    tokens: Estimate
    time_s: Estimate
    cost_usd: Estimate
    failures: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "label": self.label, "runs": self.runs, "failed": self.failed,
                "valid_final": self.valid_final, "baseline": self.baseline,
                "success_rate": self.success_rate.as_dict(),
                "success": {f"{int(round(t * 100))}": e.as_dict() for t, e in self.success.items()},
                "success_any": self.success_any.as_dict(), "improvement": self.improvement.as_dict(),
                "best_improvement": self.best_improvement.as_dict(), "final_score": self.final_score.as_dict(),
                "tokens": self.tokens.as_dict(), "time_s": self.time_s.as_dict(),
                "cost_usd": self.cost_usd.as_dict(), "failures": dict(self.failures)}


COMPLETED = ("finished", "failed")


def group_metrics(task: str, label: str, runs: list[RunRecord], baseline: float | None) -> GroupMetrics:
    done = [r for r in runs if r.status in COMPLETED]
    per_run = [run_metrics(r, baseline) for r in done]
    n = len(done)
    failures: dict[str, int] = {}
    for r in done:
        if r.failure:
            failures[r.failure] = failures.get(r.failure, 0) + 1
    return GroupMetrics(
        task=task, label=label, runs=n, failed=sum(r.status == "failed" for r in done),
        valid_final=sum(m.valid_final for m in per_run), baseline=baseline,
        success_rate=wilson(sum(m.succeeded for m in per_run), n),
        success={t: wilson(sum(m.success[t] for m in per_run), n) for t in THRESHOLDS},
        success_any=wilson(sum(m.success_any for m in per_run), n),
        improvement=mean_ci([m.final_improvement for m in per_run if m.final_improvement is not None]),
        best_improvement=mean_ci([m.best_improvement for m in per_run if m.best_improvement is not None]),
        final_score=mean_ci([r.final_score for r in done if is_valid(r.final_score)]),
        tokens=mean_ci([float(r.tokens) for r in done]), time_s=mean_ci([r.time_s for r in done]),
        cost_usd=mean_ci([r.cost_usd for r in done]), failures=failures)


def all_groups(runs: list[RunRecord], baselines: dict[str, float | None]) -> list[GroupMetrics]:
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for r in runs:
        groups.setdefault((r.task, r.label), []).append(r)
    return [group_metrics(task, label, members, baselines.get(task))
            for (task, label), members in sorted(groups.items())]


class LabelSummary(TypedDict):
    """One agent label over every task it ran: means of the per-task estimates."""

    tasks: int
    success: EstimateDict
    success_any: EstimateDict
    improvement: EstimateDict
    tokens: EstimateDict
    cost_usd: EstimateDict
    time_s: EstimateDict


def overall(groups: list[GroupMetrics]) -> dict[str, LabelSummary]:
    """Per agent label: the mean over tasks of each task's success rate (tasks weigh equally, as in the paper)."""
    by_label: dict[str, list[GroupMetrics]] = {}
    for g in groups:
        if g.runs:
            by_label.setdefault(g.label, []).append(g)
    out: dict[str, LabelSummary] = {}
    for label, gs in sorted(by_label.items()):
        out[label] = {
            "tasks": len(gs),
            "success": mean_ci([g.success_rate.mean for g in gs]).as_dict(),
            "success_any": mean_ci([g.success_any.mean for g in gs]).as_dict(),
            "improvement": mean_ci([g.improvement.mean for g in gs if g.improvement.mean is not None]).as_dict(),
            "tokens": mean_ci([g.tokens.mean for g in gs if g.tokens.mean is not None]).as_dict(),
            "cost_usd": mean_ci([g.cost_usd.mean for g in gs if g.cost_usd.mean is not None]).as_dict(),
            "time_s": mean_ci([g.time_s.mean for g in gs if g.time_s.mean is not None]).as_dict(),
        }
    return out


# ---- two agents on the same tasks ----------------------------------------------------------------
class TaskPair(TypedDict):
    """One task of a paired comparison: success rates and mean improvements of a and b, and their differences."""

    task: str
    success_a: float
    success_b: float
    success_diff: float
    improvement_a: float | None
    improvement_b: float | None
    improvement_diff: float | None


@dataclass
class PairedComparison:
    a: str
    b: str
    tasks: list[TaskPair]
    success_diff: Estimate  # mean over tasks of (success rate a - success rate b)
    improvement_diff: Estimate
    wins: int
    losses: int
    ties: int
    p_sign: float

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "tasks": self.tasks, "success_diff": self.success_diff.as_dict(),
                "improvement_diff": self.improvement_diff.as_dict(), "wins": self.wins, "losses": self.losses,
                "ties": self.ties, "p_sign": self.p_sign}


def paired(groups: list[GroupMetrics], a: str, b: str) -> PairedComparison:
    """Tasks are the pairs: each task's success rate (and mean improvement) of a minus that of b."""
    by = {(g.task, g.label): g for g in groups if g.runs}
    tasks = sorted({t for t, label in by if label == a} & {t for t, label in by if label == b})
    rows: list[TaskPair] = []
    sdiff: list[float] = []
    idiff: list[float] = []
    wins = losses = ties = 0
    for task in tasks:
        ga, gb = by[(task, a)], by[(task, b)]
        sa, sb = ga.success_rate.mean, gb.success_rate.mean
        assert sa is not None and sb is not None  # groups with runs have a success rate
        d = sa - sb
        sdiff.append(d)
        ia, ib = ga.improvement.mean, gb.improvement.mean
        di = ia - ib if ia is not None and ib is not None else None
        if di is not None:
            idiff.append(di)
        wins, losses, ties = wins + (d > 0), losses + (d < 0), ties + (d == 0)
        rows.append({"task": task, "success_a": sa, "success_b": sb,
                     "success_diff": d, "improvement_a": ia, "improvement_b": ib, "improvement_diff": di})
    return PairedComparison(a=a, b=b, tasks=rows, success_diff=mean_ci(sdiff), improvement_diff=mean_ci(idiff),
                            wins=wins, losses=losses, ties=ties, p_sign=sign_test(wins, losses))
