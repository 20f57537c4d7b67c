"""The report's statistics: library results on fixed tables, exact tests against our own enumeration, the two
success denominators, performance profiles and AUP, and a property test that every interval stays in range."""
from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlab.core.bench.metrics import (
    BASELINE_METHOD,
    SEED,
    THRESHOLDS,
    Estimate,
    RunRecord,
    all_groups,
    group_metrics,
    macro_success,
    mean_interval,
    overall,
    paired,
    performance_profiles,
    permutation_p,
    run_metrics,
    wilson,
)
from mlab.core.bench.results import FAILURES
from tests.fixtures.lazy import lazy

stats = lazy("scipy.stats")
proportion = lazy("statsmodels.stats.proportion")


def run(seed=0, score=None, agent="a", task="t", higher=True, status="finished", failure=None, incidents=(),
        tokens=0, time_s=1.0, cost=0.0):
    return RunRecord(key=f"{task}|{agent}|s{seed}", task=task, agent=agent, llm=None, seed=seed, status=status,
                     final_score=score, higher_is_better=higher, failure=failure, incidents=tuple(incidents),
                     tokens=tokens, time_s=time_s, cost_usd=cost)


# ---- library results on fixed tables ----------------------------------------------------------------
@pytest.mark.parametrize(("k", "n", "lo", "hi"), [(0, 8, 0.0, 0.3244), (3, 8, 0.1368, 0.6943), (8, 8, 0.6756, 1.0),
                                                   (1, 1, 0.2065, 1.0), (0, 3, 0.0, 0.5615)])
def test_wilson_bounds_match_published_values(k, n, lo, hi):
    e = wilson(k, n)
    assert e.mean == k / n and e.lo == pytest.approx(lo, abs=1e-4) and e.hi == pytest.approx(hi, abs=1e-4)


def _exact_two_sided(null: list[float], observed: float) -> float:
    """scipy's two-sided permutation p-value: twice the smaller one-sided tail, at most 1."""
    eps = 1e-12
    greater = sum(t >= observed - eps for t in null) / len(null)
    less = sum(t <= observed + eps for t in null) / len(null)
    return min(1.0, 2 * min(greater, less))


def test_independent_permutation_test_matches_an_exact_enumeration():
    a, b = [0.31, 0.52, 0.94, 1.27], [0.12, 0.23, 0.45]
    pooled = a + b
    observed = statistics.fmean(a) - statistics.fmean(b)
    null = []
    for chosen in itertools.combinations(range(len(pooled)), len(a)):  # all C(7, 4) = 35 ways to deal the runs
        xa = [pooled[i] for i in chosen]
        xb = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        null.append(statistics.fmean(xa) - statistics.fmean(xb))
    expected = _exact_two_sided(null, observed)
    assert expected == pytest.approx(4 / 35)  # hand count: 2 deals reach the observed difference or beyond
    assert permutation_p(a, b) == pytest.approx(expected)


def test_paired_permutation_test_matches_sign_flips():
    a, b = [0.9, 0.7, 0.4, 0.8, 0.6], [0.5, 0.6, 0.5, 0.2, 0.1]
    d = [x - y for x, y in zip(a, b, strict=True)]
    null = [statistics.fmean(s * x for s, x in zip(signs, d, strict=True))
            for signs in itertools.product((1, -1), repeat=len(d))]
    assert permutation_p(a, b, paired=True) == pytest.approx(_exact_two_sided(null, statistics.fmean(d)))
    assert permutation_p([1.0], [0.0]) is None  # a single run of each: no test


def test_bootstrap_interval_is_scipys_percentile_interval_and_reproducible():
    values = [0.12, 0.4, 0.05, 0.33, 0.9, 0.27]
    e = mean_interval(values)
    ref = stats.bootstrap((np.array(values),), np.mean, method="percentile", rng=np.random.default_rng(SEED))
    assert (e.lo, e.hi) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high))
    assert e.sem == pytest.approx(stats.sem(values)) and mean_interval(values) == e


def test_overall_success_is_a_macro_average_with_a_stratified_bootstrap():
    runs = [run(s, 1.0 if s < k else 0.5, task=t) for t, k in (("t1", 1), ("t2", 3), ("t3", 4)) for s in range(4)]
    o = overall(all_groups(runs, dict.fromkeys(("t1", "t2", "t3"), 0.5)))["a"]
    assert o["success"]["mean"] == pytest.approx((1 / 4 + 3 / 4 + 1) / 3) and o["tasks"] == 3
    samples = [np.array([1.0] * k + [0.0] * (4 - k)) for k in (1, 3)]  # t3 (4/4) resamples to itself
    ref = stats.bootstrap(samples, lambda x, y, axis: (x.mean(axis=axis) + y.mean(axis=axis) + 1) / 3,
                          method="percentile", rng=np.random.default_rng(SEED))
    assert (o["success"]["lo"], o["success"]["hi"]) == pytest.approx(
        (ref.confidence_interval.low, ref.confidence_interval.high))
    # seeds 0..3 each ran every task: per seed the mean over tasks, then the SEM over the four seeds
    per_seed = [statistics.fmean([s < 1, s < 3, True]) for s in range(4)]
    assert o["success"]["sem"] == pytest.approx(stats.sem(per_seed))


def test_overall_interval_is_honest_when_every_run_failed():
    runs = [run(s, 0.5, task=t) for t in ("t1", "t2", "t3") for s in range(8)]
    groups = all_groups(runs, dict.fromkeys(("t1", "t2", "t3"), 0.5))
    assert all(g.success_rate.hi == pytest.approx(0.3244, abs=1e-4) for g in groups)
    o = overall(groups)["a"]["success"]
    # not "0% (0-0)": the Wilson interval of 0 successes in the 24 pooled runs
    assert o["mean"] == 0 and o["lo"] == 0 and o["hi"] == pytest.approx(wilson(0, 24).hi) and o["hi"] > 0.1
    # unequal runs per task: the effective number of runs, 3^2 / (1/2 + 1/4 + 1/8)
    uneven = macro_success([[(s, 1.0) for s in range(n)] for n in (2, 4, 8)])
    n_eff = 3**2 / (1 / 2 + 1 / 4 + 1 / 8)
    assert uneven.mean == 1 and uneven.hi == 1
    assert uneven.lo == pytest.approx(proportion.proportion_confint(n_eff, n_eff, method="wilson")[0])


# ---- two denominators ------------------------------------------------------------------------------
def test_success_counts_all_runs_and_the_originals_denominator():
    runs = [run(0, 0.9), run(1, 0.9),
            run(2, None, status="failed", failure="harness_error"),
            run(3, None, status="failed", failure="llm_error"),
            run(4, None, failure="out_of_memory"),
            run(5, 0.9, incidents=("out_of_memory",)),  # recovered, but the original drops any run with an OOM
            run(6, None, failure="invalid_format"), run(7, None, failure="no_submission"),
            run(8, None, failure="limits_reached"), run(9, None, failure="timeout"), run(10, 0.5)]
    g = group_metrics("t", "a", runs, baseline=0.5)
    assert (g.success_rate.n, g.success_rate.mean) == (11, pytest.approx(3 / 11))
    assert (g.success_original.n, g.success_original.mean) == (7, pytest.approx(2 / 7))
    assert g.as_dict()["success_original"]["n"] == 7
    assert set(FAILURES) >= {"harness_error", "llm_error", "out_of_memory"}


# ---- performance profiles and AUP ------------------------------------------------------------------
def test_performance_profiles_and_aup_by_hand():
    runs = [run(0, 0.9, "A", "up"), run(0, 0.6, "B", "up"), run(0, 0.4, "C", "up"),  # C worse than the baseline
            run(0, 10.0, "A", "down", higher=False), run(1, 30.0, "A", "down", higher=False),  # mean 20
            run(0, 10.0, "B", "down", higher=False), run(0, None, "C", "down", higher=False)]
    groups = all_groups(runs, {"up": 0.5, "down": 40.0})
    p = performance_profiles(groups)
    assert p.methods == ["A", "B", "C", BASELINE_METHOD] and p.tasks == ["down", "up"]
    assert p.ratios["A"] == {"up": 1.0, "down": pytest.approx(2.0)}
    assert p.ratios["B"] == {"up": pytest.approx(1.5), "down": 1.0}
    assert p.ratios["C"] == {"up": None, "down": None}  # infeasible: worse than the baseline, no valid score
    assert p.ratios[BASELINE_METHOD] == {"up": pytest.approx(1.8), "down": pytest.approx(4.0)}
    assert p.tau_max == 1.0  # log10(1.05 * 4) < 1
    assert p.aup["A"] == pytest.approx((1 + 1 - math.log10(2)) / 2)
    assert p.aup["B"] == pytest.approx((1 - math.log10(1.5) + 1) / 2)
    assert p.aup["C"] == 0 and p.rho("C", 1.0) == 0
    assert p.rho("A", 0.0) == 0.5 and p.rho("A", math.log10(2)) == 1.0
    # the area of the step function, against a fine midpoint sum
    grid = np.linspace(0, p.tau_max, 20001)
    mid = (grid[1:] + grid[:-1]) / 2
    for m in p.methods:
        assert p.aup[m] == pytest.approx(sum(p.rho(m, t) for t in mid) * (grid[1] - grid[0]), abs=1e-3)
    o = overall(groups)
    assert o["A"]["aup"] == p.aup["A"] and o["C"]["aup"] == 0


def test_tau_max_grows_with_the_worst_feasible_ratio():
    runs = [run(0, 100.0, "A"), run(0, 3.0, "B")]
    p = performance_profiles(all_groups(runs, {"t": None}))
    assert p.methods == ["A", "B"] and p.ratios["B"]["t"] == pytest.approx(100 / 3) and p.tau_max == 2.0
    assert p.aup["A"] == 2.0 and p.aup["B"] == pytest.approx(2 - math.log10(100 / 3))


# ---- every interval in range, containing its estimate ---------------------------------------------
KINDS = ("valid", "valid", "valid", "invalid", "no_submission", "harness_error", "llm_error", "out_of_memory",
         "running")


@st.composite
def bench_tables(draw):
    tasks = [f"t{i}" for i in range(draw(st.integers(1, 3)))]
    agents = [f"a{i}" for i in range(draw(st.integers(1, 3)))]
    seeds = draw(st.integers(1, 4))
    higher = {t: draw(st.booleans()) for t in tasks}
    baselines = {t: draw(st.one_of(st.none(), st.just(0.0), st.floats(0.1, 10.0))) for t in tasks}
    runs = []
    for t, a, s in itertools.product(tasks, agents, range(seeds)):
        if draw(st.integers(0, 9)) == 0:
            continue  # a missing run: seeds need not line up
        kind = draw(st.sampled_from(KINDS))
        score = draw(st.floats(0.01, 20.0)) if kind == "valid" else draw(st.sampled_from([None, 0.0, -1.0]))
        failure = None if kind in ("valid", "running") else "invalid_format" if kind == "invalid" else kind
        status = {"harness_error": "failed", "llm_error": "failed", "running": "running"}.get(kind, "finished")
        steps = [(i, draw(st.one_of(st.none(), st.floats(0.01, 20.0)))) for i in range(draw(st.integers(0, 2)))]
        incidents = ("out_of_memory",) if kind == "valid" and draw(st.integers(0, 5)) == 0 else ()
        runs.append(RunRecord(
            key=f"{t}|{a}|{s}", task=t, agent=a, llm=None, seed=s, status=status, final_score=score,
            higher_is_better=higher[t], failure=failure, incidents=incidents, step_scores=steps,
            tokens=draw(st.integers(0, 10**6)), time_s=draw(st.floats(0.0, 1e4)), cost_usd=draw(st.floats(0, 10))))
    return runs, baselines


def _inside(e: Estimate | dict, lowest: float, highest: float) -> None:
    e = e if isinstance(e, Estimate) else Estimate(**e)
    if e.mean is None:
        assert e.lo is None and e.hi is None
        return
    tol = 1e-9 * max(1.0, abs(lowest), abs(highest))
    assert lowest - tol <= e.mean <= highest + tol
    if e.lo is not None or e.hi is not None:
        assert e.lo is not None and e.hi is not None
        assert lowest - tol <= e.lo <= e.mean <= e.hi <= highest + tol, (e, lowest, highest)
    assert e.sem is None or e.sem >= 0


def _span(values):
    values = list(values)
    return (min(values), max(values)) if values else (0.0, 0.0)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(bench_tables())
def test_every_interval_lies_in_range_and_contains_its_estimate(table):
    runs, baselines = table
    groups = all_groups(runs, baselines)
    improvements: dict[tuple[str, str], list[float]] = {}
    for g in groups:
        members = [r for r in runs if r.task == g.task and r.label == g.label and r.status != "running"]
        per_run = [run_metrics(r, g.baseline) for r in members]
        for e in (g.success_rate, g.success_original, g.success_any, *g.success.values()):
            _inside(e, 0.0, 1.0)
        assert set(g.success) == set(THRESHOLDS)
        imps = [m.final_improvement for m in per_run if m.final_improvement is not None]
        improvements[(g.task, g.label)] = imps
        _inside(g.improvement, *_span(imps))
        _inside(g.best_improvement, *_span(m.best_improvement for m in per_run if m.best_improvement is not None))
        _inside(g.final_score, *_span(r.final_score for r in members if r.final_score and r.final_score > 0))
        _inside(g.tokens, *_span(r.tokens for r in members))
        _inside(g.time_s, *_span(r.time_s for r in members))
        _inside(g.cost_usd, *_span(r.cost_usd for r in members))
        assert g.tokens.lo is None or g.tokens.lo >= 0
    summary = overall(groups)
    profiles = performance_profiles(groups)
    for label, o in summary.items():
        for key in ("success", "success_original", "success_any"):
            _inside(o[key], 0.0, 1.0)
        mine = [v for (_t, lab), vs in improvements.items() if lab == label for v in vs]
        _inside(o["improvement"], *_span(mine))
        for key in ("tokens", "cost_usd", "time_s"):
            values = [getattr(r, "tokens" if key == "tokens" else key) for r in runs
                      if r.label == label and r.status != "running"]
            _inside(o[key], *_span(values))
        assert o["aup"] is not None and 0 <= o["aup"] <= profiles.tau_max
    for ratios in profiles.ratios.values():
        assert all(r is None or r >= 1 for r in ratios.values())
    labels = sorted(summary)
    for a, b in itertools.combinations(labels, 2):
        c = paired(groups, a, b)
        _inside(c.success_diff, -1.0, 1.0)
        both = [(improvements[(t, a)], improvements[(t, b)]) for t in {row["task"] for row in c.tasks}
                if improvements[(t, a)] and improvements[(t, b)]]
        lowest = statistics.fmean(min(x) - max(y) for x, y in both) if both else 0.0
        highest = statistics.fmean(max(x) - min(y) for x, y in both) if both else 0.0
        _inside(c.improvement_diff, lowest, highest)
        for p in (c.p_success, c.p_improvement, *(row["p_success"] for row in c.tasks),
                  *(row["p_improvement"] for row in c.tasks)):
            assert p is None or 0 <= p <= 1


def test_an_unknown_cost_is_unknown_never_a_made_up_zero():
    from mlab.core.bench.driver import BenchStatus
    from mlab.core.bench.metrics import cost_interval

    assert cost_interval([0.5, 1.5]).mean == 1.0
    assert cost_interval([0.5, None]).mean is None  # a mean of the priced runs alone would pass for the whole
    status = BenchStatus(total=2)
    status.add_cost(0.25)
    status.add_cost(None)
    assert status.cost_text() == "$0.2500 + unknown (1 unpriced runs)"
