"""The original benchmark's metrics, direction-aware, with 95% intervals and tests from scipy and statsmodels.

Pure functions over plain records: no database, no plugins. What a score means against a baseline (validity,
improvement, success) is decided in one place, `mlab.core.run.scoring.judge`; this module counts and averages its
verdicts. scipy, statsmodels and numpy are imported inside the functions that use them: `mlab --help` needs none.

Every interval is a 95% interval that lies inside the range of what it measures and contains its point estimate.
Bootstraps and permutation tests draw from a fixed seed (`SEED`), so a report is the same every time it is made.

Per task and agent (a group: one task, one agent and model, many seeds)
- success rate: the Wilson score interval (statsmodels `proportion_confint(method="wilson")`); unlike the normal
  interval it does not collapse at 0/n or n/n (0/8 gives 0-32%).
- improvement, final score, tokens, time, cost: the mean over runs with a percentile bootstrap interval over runs
  (scipy `bootstrap(method="percentile")`), which stays inside the data's range (time never goes below 0, as the
  t-interval over two runs did: "8.8 ±22.9"). One run gives no interval; runs that all agree give a point.
- `sem`: the standard error of the mean over seeds (scipy `sem`), as MLE-bench reports results, beside the interval.

Two denominators of success, both reported
- success (all runs): every finished or failed run counts; what mlab has always reported.
- success (original): runs the original left out before counting are dropped from the denominator. Its plot.py
  drops every run folder holding an error.txt, which its runner writes for any exception that ends a run: an error
  of the harness (`harness_error` here), of the agent's own code (`agent_error`), a connection or quota error with
  the LLM (`llm_error`) and the run's time limit (a run that ended "time limit reached"); and it drops runs whose
  log shows "CUDA out of memory" (here `out_of_memory`: any run whose scripts ran out of memory, CPU or GPU).
  Runs that scored badly, ran out of steps, answered in a broken format or submitted nothing stay in. Kept
  differences (the pack README's deviation table): the original exempts its GPT-4 runs from its error.txt and
  connection filters, and also drops runs whose logs show MKL errors or "Connection aborted"; mlab applies one
  rule to every model. This column is the one comparable to the paper's numbers.
- improvement (original): the mean improvement over the same runs as success (original), as plot.py averages its
  final_improve after the same filter; `improvement` keeps every run with a valid final submission.

Across tasks, per agent (tasks weigh equally, as in the paper)
- success: the macro average, the mean over tasks of each task's success rate. Its interval is a percentile
  bootstrap over runs stratified by task (scipy `bootstrap` with one sample per task, each resampled on its own;
  a task with a single run is a constant). The bootstrap sees only the variation the runs show: when every task's
  runs agree (all 0, all 1, or a single run) every resample gives the same number and the percentile interval is a
  point: "0% (0-0)" beside tasks whose Wilson intervals reach 56%. Then, and only then, the interval is the Wilson
  interval of the macro average at the effective number of runs n_eff = T^2 / sum(1/n_t) (T tasks with n_t runs):
  with equal runs per task this is the Wilson interval of the pooled runs, so 0 successes in 3 tasks x 8 runs gives
  0-14%, as honest at 0/24 as each task's Wilson interval is at 0/8.
- improvement, tokens, time, cost: the mean over tasks of each task's mean, with the same stratified bootstrap
  (no interval when no task has two runs with a value).
- `sem`: over seeds, as MLE-bench does: a seed is one pass over every task; per seed the mean over tasks of its runs'
  values, over the seeds present in every task of the agent (at least two), then scipy `sem`.

Two agents on the same tasks (`paired`)
- per task: each agent's runs are independent samples; a two-sided permutation test of the difference in mean
  success (and in mean improvement) over runs (scipy `permutation_test(permutation_type="independent")`, exact when
  the arrangements are fewer than the resamples); it needs two runs of each agent.
- overall: tasks are the pairs: the mean over tasks of the difference in success rate (and mean improvement), its
  interval by the stratified bootstrap over both agents' runs (degenerate: Newcombe's hybrid score interval from
  the two Wilson intervals at n_eff, statsmodels `confint_proportions_2indep(method="newcomb")`), its p-value by a
  permutation test over tasks (`permutation_type="samples"`, which swaps the two agents within a task).

Performance profiles and AUP (MLGym, Nathani et al. 2025, after Dolan and More 2002 and the AutoML Decathlon)
- a method's score on a task is the mean final score of its runs with a valid final submission (MLGym takes the
  best attempt; the mean is what one run can be expected to reach, and the success columns count the runs without a
  submission). The task's baseline is a method too when it is a valid score and no placeholder (house-price's 1e10
  stands for no baseline: as a method it had a ratio of about 6e5 and an AUP beside the agents').
- performance ratio r = best / score when higher is better, score / best when lower is better (r >= 1, 1 for the
  best method). A method is infeasible on a task, as in MLGym, when it has no valid score there (no run with a
  valid submission, or it did not run the task) or it is worse than the task's baseline; its ratio lies beyond
  tau_max, so it never counts.
- the profile rho(tau) is the fraction of tasks with log10 r <= tau (MLGym's log scale), for tau from 0 (ratio 1) to
  tau_max = max(1, ceil(log10((1 + 0.05) * the largest feasible ratio))); AUP is the area under rho over
  [0, tau_max], computed exactly for the step function: between 0 (infeasible everywhere) and tau_max (best on every
  task). Profiles are relative: adding an agent can change every other agent's AUP.
"""
from __future__ import annotations

import functools
import importlib
import math
import re
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from mlab.core.run.scoring import ScoreRule, is_valid, judge, reference_ratio
from mlab.core.task import DEFAULT_SUCCESS_MARGIN

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Array = npt.NDArray[np.float64]

THRESHOLDS = (0.05, 0.10, 0.15, 0.20, 0.30)

CONFIDENCE = 0.95
N_RESAMPLES = 9999  # bootstrap resamples and permutations (scipy's default); fewer arrangements are enumerated
SEED = 1729  # every bootstrap and permutation test starts from this seed: the same report every time
# Failure classes (mlab.core.bench.results.FAILURES) of runs the original drops before counting success: each
# writes the original's error.txt (or, out of memory, shows in its log).
ORIGINAL_EXCLUDES = ("harness_error", "agent_error", "llm_error", "out_of_memory")
ORIGINAL_EXCLUDED_END = "time limit reached"  # the run's own time limit: the original's runner raises, error.txt
AUP_EPSILON = 0.05  # MLGym's margin beyond the worst feasible ratio when choosing tau_max
BASELINE_METHOD = "(task baseline)"  # the task's baseline as a method of the performance profiles


class EstimateDict(TypedDict):
    """An Estimate as JSON: in report.json and in the per-agent summary."""

    n: int
    mean: float | None
    lo: float | None
    hi: float | None
    sem: float | None


@dataclass
class Estimate:
    """A mean (or proportion) with its 95% interval and its standard error over seeds; lo/hi (sem) are None when
    there is too little data for them."""

    n: int
    mean: float | None
    lo: float | None = None
    hi: float | None = None
    sem: float | None = None

    def as_dict(self) -> EstimateDict:
        return {"n": self.n, "mean": self.mean, "lo": self.lo, "hi": self.hi, "sem": self.sem}


# ---- library calls ---------------------------------------------------------------------------------
def _library(name: str) -> Any:
    """scipy.stats or statsmodels.stats.proportion, imported when first needed (neither ships type hints)."""
    return importlib.import_module(name)


def _rng() -> Any:
    import numpy as np

    return np.random.default_rng(SEED)


def _array(values: Sequence[float]) -> Array:
    import numpy as np

    return np.asarray(values, dtype=float)


def sem(values: Sequence[float]) -> float | None:
    """Standard error of the mean (scipy.stats.sem, ddof 1); None below two values."""
    if len(values) < 2:
        return None
    return float(_library("scipy.stats").sem(_array(values)))


def wilson_interval(successes: float, n: float) -> tuple[float, float]:
    proportion = _library("statsmodels.stats.proportion")
    lo, hi = proportion.proportion_confint(successes, n, alpha=1 - CONFIDENCE, method="wilson")
    return float(lo), float(hi)


def wilson(successes: int, n: int) -> Estimate:
    """Proportion with its Wilson score interval: sane at 0/8 and 8/8, where the normal interval collapses."""
    if n == 0:
        return Estimate(0, None)
    lo, hi = wilson_interval(successes, n)
    p = successes / n
    return Estimate(n, p, *_bounded(p, (lo, hi), 0.0, 1.0), sem([1.0] * successes + [0.0] * (n - successes)))


def _bootstrap(samples: Sequence[Sequence[float]], weights: Sequence[float]) -> tuple[float, float] | None:
    """Percentile bootstrap interval of sum_t weights[t] * mean(samples[t]), each sample resampled on its own (a
    stratified bootstrap). A sample of one value is a constant; None when no sample has two values."""
    constant = sum(w * statistics.fmean(s) for s, w in zip(samples, weights, strict=True) if len(s) == 1)
    varying = [(_array(s), w) for s, w in zip(samples, weights, strict=True) if len(s) >= 2]
    if not varying:
        return None
    if all(float(s.min()) == float(s.max()) for s, _w in varying):  # nothing to resample: the bootstrap is a point
        point = constant + sum(w * float(s[0]) for s, w in varying)
        return point, point
    coefficients = [w for _s, w in varying]

    def statistic(*xs: Array, axis: int = -1) -> Any:
        return constant + sum(w * x.mean(axis=axis) for x, w in zip(xs, coefficients, strict=True))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = _library("scipy.stats").bootstrap(
            [s for s, _w in varying], statistic, n_resamples=N_RESAMPLES, vectorized=True,
            confidence_level=CONFIDENCE, method="percentile", rng=_rng())
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _bounded(point: float, interval: tuple[float, float] | None, lowest: float, highest: float) -> tuple[
        float | None, float | None]:
    """An interval inside [lowest, highest] that contains its point: a percentile interval of a discrete bootstrap
    distribution may stop a rounding error short of the point."""
    if interval is None:
        return None, None
    lo, hi = interval
    return max(lowest, min(lo, point)), min(highest, max(hi, point))


def mean_interval(values: Sequence[float], lowest: float = -math.inf, highest: float = math.inf) -> Estimate:
    """Mean over runs, its percentile bootstrap interval over runs (inside the data's range) and its SEM."""
    if not values:
        return Estimate(0, None)
    mean = statistics.fmean(values)
    lo, hi = _bounded(mean, _bootstrap([values], [1.0]), max(lowest, min(values)), min(highest, max(values)))
    return Estimate(len(values), mean, lo, hi, sem(values))


def cost_interval(costs: Sequence[float | None]) -> Estimate:
    """The mean cost, or none at all when a run's cost is unknown (a model without a price): a mean of the
    priced runs alone would pass for the whole."""
    known = [c for c in costs if c is not None]
    return mean_interval(known, lowest=0.0) if len(known) == len(costs) else Estimate(0, None)


def permutation_p(a: Sequence[float], b: Sequence[float], paired: bool = False) -> float | None:
    """Two-sided permutation test of mean(a) - mean(b) (scipy.stats.permutation_test). Independent samples: the
    runs are shuffled between a and b; paired (a[i] with b[i]): a and b are swapped within pairs. None with fewer
    than two values in a sample (or two pairs)."""
    if len(a) < 2 or len(b) < 2:
        return None

    def difference(x: Array, y: Array, axis: int = -1) -> Any:
        return (x - y).mean(axis=axis) if paired else x.mean(axis=axis) - y.mean(axis=axis)

    result = _library("scipy.stats").permutation_test(
        (_array(a), _array(b)), difference, vectorized=True, n_resamples=N_RESAMPLES,
        permutation_type="samples" if paired else "independent", alternative="two-sided", rng=_rng())
    return min(1.0, float(result.pvalue))


# ---- one run --------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """What metrics need of a run; step_scores are (step, score or None) of evaluated snapshots; incidents are
    problems seen along the way (results.incidents), such as a script that ran out of memory."""

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
    llm_calls: int = 0
    cost_usd: float | None = 0.0  # None: a model call had no price
    time_s: float = 0.0
    steps: int = 0
    step_scores: list[tuple[int, float | None]] = field(default_factory=list)
    incidents: tuple[str, ...] = ()
    end_reason: str | None = None
    method: str | None = None  # the name given with --label
    name: str | None = None  # the method label as name_methods settled it among a report's runs
    shown_llm: str | None = None  # the model as name_methods showed it (paths cut, clashes told apart)

    @property
    def model(self) -> str | None:
        """The model as shown: a path in it by its file name (name_methods keeps more where two would clash)."""
        return self.shown_llm or (short_models([self.llm])[self.llm] if self.llm else None)

    @property
    def label(self) -> str:
        """The method's name in every table, CSV, plot and figure: the --label, else agent (model)."""
        if self.name:
            return self.name
        if self.method:
            return self.method
        return self.agent if not self.llm else f"{self.agent} ({self.model})"

    @property
    def rule(self) -> ScoreRule:
        return ScoreRule(higher_is_better=self.higher_is_better, success_margin=self.success_margin)

    @property
    def counted_by_original(self) -> bool:
        """Whether the original's plot.py would count this run: not one that wrote its error.txt (an error of the
        harness, the agent's code or the LLM connection, or the run's time limit), nor one whose log shows an
        out-of-memory error at all."""
        return (self.failure not in ORIGINAL_EXCLUDES and "out_of_memory" not in self.incidents
                and not (self.end_reason or "").startswith(ORIGINAL_EXCLUDED_END))


_PATH = re.compile(r"(?:(?<=^)|(?<=[:=,]))(?:~|\.{1,2})?/[^\s,]*")  # an absolute, ~ or ./ path inside a model string


def _tail(found: re.Match[str], depth: int) -> str:
    """A path's last `depth` parts: its file name at 1."""
    return "/".join(found.group(0).rstrip("/").split("/")[-depth:])


def short_models(llms: Sequence[str | None]) -> dict[str | None, str | None]:
    """Each model string with its paths cut to their file names, or to as many trailing folders as tell two
    different paths with the same file name apart: no absolute path reaches a figure."""
    full = {m: m for m in llms}
    out: dict[str | None, str | None] = {}
    depth = 1
    pending = [m for m in dict.fromkeys(llms) if m and _PATH.search(m)]
    out.update({m: m for m in full if m not in pending})
    while pending:
        cut = {m: _PATH.sub(functools.partial(_tail, depth=depth), m) for m in pending}
        clashes = {c for c in cut.values() if list(cut.values()).count(c) > 1}
        for m in [m for m in pending if cut[m] not in clashes or depth > m.count("/")]:
            out[m] = cut[m]
            pending.remove(m)
        depth += 1
    return out


def name_methods(records: list[RunRecord]) -> list[RunRecord]:
    """Settle every run's method label (record.name): the --label, else agent (model) with paths cut short; a
    --label given to runs of more than one agent and model is told apart by the model."""
    models = short_models([r.llm for r in records])
    combos: dict[str, set[tuple[str, str | None]]] = {}
    for r in records:
        if r.method:
            combos.setdefault(r.method, set()).add((r.agent, r.llm))
    for r in records:
        shown = r.shown_llm = models.get(r.llm)
        if r.method:
            r.name = r.method if len(combos[r.method]) == 1 or not shown else f"{r.method} ({shown})"
        else:
            r.name = r.agent if not shown else f"{r.agent} ({shown})"
    return records


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


@dataclass(frozen=True)
class Outcome:
    """One completed run as the cross-task statistics need it."""

    seed: int
    succeeded: bool
    success_any: bool
    counted_by_original: bool
    improvement: float | None
    tokens: float
    time_s: float
    cost_usd: float | None
    steps: float = 0.0
    llm_calls: float = 0.0
    of_reference: float | None = None


# ---- a group of runs (one task, one agent and model, many seeds) -----------------------------------
@dataclass
class GroupMetrics:
    task: str
    label: str
    runs: int  # completed runs (finished or failed): the denominator of success (all runs)
    failed: int
    valid_final: int
    baseline: float | None
    success_rate: Estimate  # success (all runs): runs that succeeded by the task's own margin
    success: dict[float, Estimate]
    success_any: Estimate
    improvement: Estimate  # over runs with a valid final submission
    best_improvement: Estimate
    final_score: Estimate
    tokens: Estimate
    time_s: Estimate
    cost_usd: Estimate
    failures: dict[str, int]
    steps: Estimate = field(default_factory=lambda: Estimate(0, None))
    llm_calls: Estimate = field(default_factory=lambda: Estimate(0, None))
    of_reference: Estimate = field(default_factory=lambda: Estimate(0, None))  # mean score / reference score
    reference: float | None = None
    baseline_note: str | None = None  # what success means against a placeholder baseline
    # success (original): without the runs the original drops (ORIGINAL_EXCLUDES); its n is that denominator
    success_original: Estimate = field(default_factory=lambda: Estimate(0, None))
    improvement_original: Estimate = field(default_factory=lambda: Estimate(0, None))  # over the same runs
    higher_is_better: bool = True
    outcomes: list[Outcome] = field(default_factory=list, repr=False)
    agent: str = ""  # the agent(s) and model(s) behind the label, comma-joined
    model: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "label": self.label, "agent": self.agent, "model": self.model, "runs": self.runs,
                "failed": self.failed,
                "valid_final": self.valid_final, "baseline": self.baseline, "higher_is_better": self.higher_is_better,
                "success_rate": self.success_rate.as_dict(), "success_original": self.success_original.as_dict(),
                "improvement_original": self.improvement_original.as_dict(),
                "success": {f"{int(round(t * 100))}": e.as_dict() for t, e in self.success.items()},
                "success_any": self.success_any.as_dict(), "improvement": self.improvement.as_dict(),
                "best_improvement": self.best_improvement.as_dict(), "final_score": self.final_score.as_dict(),
                "tokens": self.tokens.as_dict(), "time_s": self.time_s.as_dict(),
                "cost_usd": self.cost_usd.as_dict(), "steps": self.steps.as_dict(),
                "llm_calls": self.llm_calls.as_dict(), "of_reference": self.of_reference.as_dict(),
                "reference_score": self.reference, "baseline_note": self.baseline_note,
                "failures": dict(self.failures)}


COMPLETED = ("finished", "failed")


def group_metrics(task: str, label: str, runs: list[RunRecord], baseline: float | None,
                  reference: float | None = None) -> GroupMetrics:
    done = [r for r in runs if r.status in COMPLETED]
    per_run = [run_metrics(r, baseline) for r in done]
    ratios = [reference_ratio(r.final_score, reference, r.higher_is_better) for r in done]
    n = len(done)
    kept = [m for r, m in zip(done, per_run, strict=True) if r.counted_by_original]
    failures = dict(Counter(r.failure for r in done if r.failure))
    return GroupMetrics(
        task=task, label=label, runs=n, failed=sum(r.status == "failed" for r in done),
        valid_final=sum(m.valid_final for m in per_run), baseline=baseline,
        success_rate=wilson(sum(m.succeeded for m in per_run), n),
        success_original=wilson(sum(m.succeeded for m in kept), len(kept)),
        success={t: wilson(sum(m.success[t] for m in per_run), n) for t in THRESHOLDS},
        success_any=wilson(sum(m.success_any for m in per_run), n),
        improvement=mean_interval([m.final_improvement for m in per_run if m.final_improvement is not None]),
        improvement_original=mean_interval([m.final_improvement for m in kept if m.final_improvement is not None]),
        best_improvement=mean_interval([m.best_improvement for m in per_run if m.best_improvement is not None]),
        final_score=mean_interval([r.final_score for r in done if is_valid(r.final_score)]),
        tokens=mean_interval([float(r.tokens) for r in done], lowest=0.0),
        time_s=mean_interval([r.time_s for r in done], lowest=0.0),
        cost_usd=cost_interval([r.cost_usd for r in done]), failures=failures,
        steps=mean_interval([float(r.steps) for r in done], lowest=0.0),
        llm_calls=mean_interval([float(r.llm_calls) for r in done], lowest=0.0),
        of_reference=mean_interval([x for x in ratios if x is not None], lowest=0.0), reference=reference,
        baseline_note=judge(None, baseline, runs[0].rule).note if runs else None,
        higher_is_better=runs[0].higher_is_better if runs else True,
        outcomes=[Outcome(seed=r.seed, succeeded=m.succeeded, success_any=m.success_any,
                          counted_by_original=r.counted_by_original, improvement=m.final_improvement,
                          tokens=float(r.tokens), time_s=r.time_s, cost_usd=r.cost_usd, steps=float(r.steps),
                          llm_calls=float(r.llm_calls), of_reference=x)
                  for r, m, x in zip(done, per_run, ratios, strict=True)])


def all_groups(runs: list[RunRecord], baselines: dict[str, float | None],
               references: dict[str, float | None] | None = None) -> list[GroupMetrics]:
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for r in runs:
        groups.setdefault((r.task, r.label), []).append(r)
    out = []
    for (task, label), members in sorted(groups.items()):
        g = group_metrics(task, label, members, baselines.get(task), (references or {}).get(task))
        g.agent = ", ".join(sorted({r.agent for r in members}))
        g.model = ", ".join(sorted({r.model for r in members if r.model}))
        out.append(g)
    return out


# ---- across tasks ---------------------------------------------------------------------------------
Sample = list[tuple[int, float]]  # one task's runs: (seed, value)


def _values(sample: Sample) -> list[float]:
    return [v for _seed, v in sample]


def seed_sem(samples: list[Sample]) -> float | None:
    """SEM over seeds of the macro average (MLE-bench's seeds: one pass over every task): per seed present in every
    task, the mean over tasks of that seed's values; None with fewer than two such seeds."""
    if not samples:
        return None
    seeds = set.intersection(*({seed for seed, _v in s} for s in samples))
    per_seed = [statistics.fmean(statistics.fmean(v for sd, v in s if sd == seed) for s in samples)
                for seed in sorted(seeds)]
    return sem(per_seed)


def n_eff(sizes: Sequence[int]) -> float:
    """The effective number of runs behind a macro average of len(sizes) tasks with these many runs each: the n of
    one proportion with the same variance when every task has the same rate (the pooled n for equal sizes)."""
    return len(sizes) ** 2 / sum(1 / k for k in sizes)


def macro_mean(samples: list[Sample], lowest: float = -math.inf, highest: float = math.inf) -> Estimate:
    """Mean over tasks of each task's mean, with the stratified percentile bootstrap interval over runs and the SEM
    over seeds; n is the number of tasks."""
    samples = [s for s in samples if s]
    if not samples:
        return Estimate(0, None)
    means = [statistics.fmean(_values(s)) for s in samples]
    point = statistics.fmean(means)
    floor = statistics.fmean(min(_values(s)) for s in samples)
    ceiling = statistics.fmean(max(_values(s)) for s in samples)
    interval = _bootstrap([_values(s) for s in samples], [1 / len(samples)] * len(samples))
    lo, hi = _bounded(point, interval, max(lowest, floor), min(highest, ceiling))
    return Estimate(len(samples), point, lo, hi, seed_sem(samples))


def macro_success(samples: list[Sample]) -> Estimate:
    """The macro average of success rates (values 0 or 1): the stratified bootstrap interval, or, when every task's
    runs agree so the bootstrap is a point, the Wilson interval at n_eff (see the module's notes)."""
    est = macro_mean(samples, 0.0, 1.0)
    if est.mean is None or (est.lo is not None and est.hi is not None and est.lo < est.hi):
        return est
    size = n_eff([len(s) for s in samples if s])
    lo, hi = _bounded(est.mean, wilson_interval(est.mean * size, size), 0.0, 1.0)
    return Estimate(est.n, est.mean, lo, hi, est.sem)


class LabelSummary(TypedDict):
    """One agent label over every task it ran: macro averages (tasks weigh equally) and its AUP."""

    tasks: int
    success: EstimateDict  # success (all runs)
    success_original: EstimateDict  # success (original): without the runs the original drops
    success_any: EstimateDict
    improvement: EstimateDict
    improvement_original: EstimateDict  # over the runs success (original) counts
    of_reference: EstimateDict  # mean score over the reference score, over the tasks that have one
    tokens: EstimateDict
    cost_usd: EstimateDict
    time_s: EstimateDict
    steps: EstimateDict
    llm_calls: EstimateDict
    aup: float | None  # area under the performance profile, out of tau_max (see Profiles)


def _samples(gs: list[GroupMetrics], value: Callable[[Outcome], float | bool | None],
             keep: Callable[[Outcome], bool] = lambda _o: True) -> list[Sample]:
    out = []
    for g in gs:
        sample = [(o.seed, float(v)) for o in g.outcomes if keep(o) for v in (value(o),) if v is not None]
        out.append(sample)
    return out


def overall(groups: list[GroupMetrics]) -> dict[str, LabelSummary]:
    """Per agent label: macro averages over the tasks it ran (each task weighs the same, as in the paper)."""
    by_label: dict[str, list[GroupMetrics]] = {}
    for g in groups:
        if g.runs:
            by_label.setdefault(g.label, []).append(g)
    aup = performance_profiles(groups).aup
    out: dict[str, LabelSummary] = {}
    for label, gs in sorted(by_label.items()):
        out[label] = {
            "tasks": len(gs),
            "success": macro_success(_samples(gs, lambda o: o.succeeded)).as_dict(),
            "success_original": macro_success(
                _samples(gs, lambda o: o.succeeded, lambda o: o.counted_by_original)).as_dict(),
            "success_any": macro_success(_samples(gs, lambda o: o.success_any)).as_dict(),
            "improvement": macro_mean(_samples(gs, lambda o: o.improvement)).as_dict(),
            "improvement_original": macro_mean(
                _samples(gs, lambda o: o.improvement, lambda o: o.counted_by_original)).as_dict(),
            "of_reference": macro_mean(_samples(gs, lambda o: o.of_reference), 0.0).as_dict(),
            "tokens": macro_mean(_samples(gs, lambda o: o.tokens), 0.0).as_dict(),
            "cost_usd": (macro_mean(_samples(gs, lambda o: o.cost_usd), 0.0) if all(
                o.cost_usd is not None for g in gs for o in g.outcomes) else Estimate(0, None)).as_dict(),
            "time_s": macro_mean(_samples(gs, lambda o: o.time_s), 0.0).as_dict(),
            "steps": macro_mean(_samples(gs, lambda o: o.steps), 0.0).as_dict(),
            "llm_calls": macro_mean(_samples(gs, lambda o: o.llm_calls), 0.0).as_dict(),
            "aup": aup.get(label),
        }
    return out


# ---- performance profiles and AUP (MLGym) --------------------------------------------------------
@dataclass
class Profiles:
    """Performance profiles over the tasks: ratios[method][task] is the performance ratio (>= 1; None when the
    method is infeasible there); rho(method, tau) is the fraction of tasks with log10 ratio <= tau."""

    tasks: list[str]
    methods: list[str]
    ratios: dict[str, dict[str, float | None]]
    tau_max: float
    aup: dict[str, float]

    def log_ratios(self, method: str) -> list[float]:
        """The method's feasible log10 ratios, ascending: where its profile steps up by 1/len(tasks)."""
        return sorted(math.log10(r) for r in self.ratios[method].values() if r is not None)

    def rho(self, method: str, tau: float) -> float:
        if not self.tasks:
            return 0.0
        return sum(x <= tau for x in self.log_ratios(method)) / len(self.tasks)

    def as_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "methods": self.methods, "ratios": self.ratios, "tau_max": self.tau_max,
                "aup": self.aup, "score": "mean final score of the runs with a valid final submission",
                "tau": "log10 of the performance ratio"}


def performance_profiles(groups: list[GroupMetrics]) -> Profiles:
    """MLGym's performance profiles of every agent label (and the task baseline) over the tasks (module notes)."""
    by = {(g.task, g.label): g for g in groups if g.runs}
    tasks = sorted({t for t, _label in by})
    labels = sorted({label for _t, label in by})
    # a placeholder (house-price's 1e10) stands for no baseline: not a method, and no valid score is worse
    with_baseline = any(is_valid(g.baseline) and not g.baseline_note for g in by.values())
    methods = labels + ([BASELINE_METHOD] if with_baseline else [])
    ratios: dict[str, dict[str, float | None]] = {m: {} for m in methods}
    for task in tasks:
        gs = [g for (t, _label), g in by.items() if t == task]
        higher, baseline = gs[0].higher_is_better, None if gs[0].baseline_note else gs[0].baseline
        scores: dict[str, float] = {}
        for g in gs:
            if is_valid(g.final_score.mean):
                scores[g.label] = g.final_score.mean
        if is_valid(baseline):
            scores[BASELINE_METHOD] = baseline
            scores = {m: s for m, s in scores.items() if (s >= baseline if higher else s <= baseline)}
        best = (max if higher else min)(scores.values()) if scores else None
        for m in methods:
            s = scores.get(m)
            ratios[m][task] = None if s is None or best is None else max(1.0, best / s if higher else s / best)
    worst = max((r for per_task in ratios.values() for r in per_task.values() if r is not None), default=1.0)
    tau_max = float(max(1, math.ceil(math.log10((1 + AUP_EPSILON) * worst))))
    aup = {m: (sum(max(0.0, tau_max - math.log10(r)) for r in ratios[m].values() if r is not None) / len(tasks)
               if tasks else 0.0) for m in methods}
    return Profiles(tasks=tasks, methods=methods, ratios=ratios, tau_max=tau_max, aup=aup)


# ---- two agents on the same tasks ----------------------------------------------------------------
class TaskPair(TypedDict):
    """One task of a paired comparison: success rates and mean improvements of a and b, their differences and the
    permutation tests' p-values over runs (None without two runs of each)."""

    task: str
    success_a: float
    success_b: float
    success_diff: float
    p_success: float | None
    improvement_a: float | None
    improvement_b: float | None
    improvement_diff: float | None
    p_improvement: float | None


@dataclass
class PairedComparison:
    a: str
    b: str
    tasks: list[TaskPair]
    success_diff: Estimate  # mean over tasks of (success rate a - success rate b)
    improvement_diff: Estimate  # mean over tasks where both have one of (mean improvement a - that of b)
    wins: int
    losses: int
    ties: int
    p_success: float | None  # permutation test over tasks (pairs) of the success difference
    p_improvement: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "tasks": self.tasks, "success_diff": self.success_diff.as_dict(),
                "improvement_diff": self.improvement_diff.as_dict(), "wins": self.wins, "losses": self.losses,
                "ties": self.ties, "p_success": self.p_success, "p_improvement": self.p_improvement,
                "test": "two-sided permutation tests: over tasks as pairs overall, over runs per task"}


def _difference(a: list[list[float]], b: list[list[float]], lowest: float, highest: float) -> Estimate:
    """Mean over tasks of mean(a[t]) - mean(b[t]) with the bootstrap over both agents' runs, stratified by task."""
    if not a:
        return Estimate(0, None)
    point = statistics.fmean(statistics.fmean(x) - statistics.fmean(y) for x, y in zip(a, b, strict=True))
    floor = statistics.fmean(min(x) - max(y) for x, y in zip(a, b, strict=True))
    ceiling = statistics.fmean(max(x) - min(y) for x, y in zip(a, b, strict=True))
    w = 1 / len(a)
    interval = _bootstrap([s for pair in zip(a, b, strict=True) for s in pair], [w, -w] * len(a))
    lo, hi = _bounded(point, interval, max(lowest, floor), min(highest, ceiling))
    return Estimate(len(a), point, lo, hi)


def paired(groups: list[GroupMetrics], a: str, b: str) -> PairedComparison:
    """Tasks are the pairs: each task's success rate (and mean improvement) of a minus that of b."""
    by = {(g.task, g.label): g for g in groups if g.runs}
    tasks = sorted({t for t, label in by if label == a} & {t for t, label in by if label == b})
    rows: list[TaskPair] = []
    succ_a: list[list[float]] = []
    succ_b: list[list[float]] = []
    imp_a: list[list[float]] = []
    imp_b: list[list[float]] = []
    wins = losses = ties = 0
    for task in tasks:
        ga, gb = by[(task, a)], by[(task, b)]
        xa = [float(o.succeeded) for o in ga.outcomes]
        xb = [float(o.succeeded) for o in gb.outcomes]
        ya = [o.improvement for o in ga.outcomes if o.improvement is not None]
        yb = [o.improvement for o in gb.outcomes if o.improvement is not None]
        sa, sb = statistics.fmean(xa), statistics.fmean(xb)
        d = sa - sb
        succ_a.append(xa)
        succ_b.append(xb)
        ia = statistics.fmean(ya) if ya else None
        ib = statistics.fmean(yb) if yb else None
        di = ia - ib if ia is not None and ib is not None else None
        if di is not None:
            imp_a.append(ya)
            imp_b.append(yb)
        wins, losses, ties = wins + (d > 0), losses + (d < 0), ties + (d == 0)
        rows.append({"task": task, "success_a": sa, "success_b": sb, "success_diff": d,
                     "p_success": permutation_p(xa, xb), "improvement_a": ia, "improvement_b": ib,
                     "improvement_diff": di, "p_improvement": permutation_p(ya, yb)})
    success_diff = _difference(succ_a, succ_b, -1.0, 1.0)
    if success_diff.mean is not None and not (success_diff.lo is not None and success_diff.hi is not None
                                              and success_diff.lo < success_diff.hi):
        success_diff = _newcombe(succ_a, succ_b, success_diff)
    return PairedComparison(
        a=a, b=b, tasks=rows, success_diff=success_diff,
        improvement_diff=_difference(imp_a, imp_b, -math.inf, math.inf), wins=wins, losses=losses, ties=ties,
        p_success=permutation_p([statistics.fmean(x) for x in succ_a], [statistics.fmean(x) for x in succ_b], True),
        p_improvement=permutation_p([statistics.fmean(x) for x in imp_a], [statistics.fmean(x) for x in imp_b], True))


def _newcombe(a: list[list[float]], b: list[list[float]], diff: Estimate) -> Estimate:
    """When every task's runs agree for both agents the bootstrap is a point: Newcombe's hybrid score interval of a
    difference of two proportions, each macro average taken at its n_eff."""
    pa, pb = statistics.fmean(statistics.fmean(x) for x in a), statistics.fmean(statistics.fmean(x) for x in b)
    na, nb = n_eff([len(x) for x in a]), n_eff([len(x) for x in b])
    proportion = _library("statsmodels.stats.proportion")
    lo, hi = proportion.confint_proportions_2indep(pa * na, na, pb * nb, nb, method="newcomb", compare="diff",
                                                   alpha=1 - CONFIDENCE)
    assert diff.mean is not None
    bounded = _bounded(diff.mean, (float(lo), float(hi)), -1.0, 1.0)
    return Estimate(diff.n, diff.mean, *bounded)
