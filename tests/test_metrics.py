"""The original's metrics: direction-aware improvement, success thresholds, intervals, paired comparisons."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mlab.core.bench.evaluate import intermediate_steps
from mlab.core.bench.metrics import (
    RunRecord,
    all_groups,
    group_metrics,
    mean_interval,
    overall,
    paired,
    run_metrics,
    wilson,
)
from mlab.core.bench.report import ReportData, report_tables
from mlab.core.bench.report_formats import to_json
from mlab.core.bench.results import classify
from mlab.core.models import Action, RunConfig, Step, Trace
from mlab.core.run.scoring import improvement


def run(seed=0, score=None, agent="a", task="t", higher=True, status="finished", steps=(), tokens=0, cost=0.0,
        time_s=1.0, failure=None):
    return RunRecord(key=f"{task}|{agent}|s{seed}", task=task, agent=agent, llm=None, seed=seed, status=status,
                     final_score=score, higher_is_better=higher, tokens=tokens, cost_usd=cost, time_s=time_s,
                     step_scores=list(steps), failure=failure)


def test_improvement_is_direction_aware_and_nonpositive_scores_are_invalid():
    assert improvement(0.9, 0.75, True) == pytest.approx(0.2)
    assert improvement(15000.0, 20000.0, False) == pytest.approx(0.25)  # MAE down 25% is +25%
    assert improvement(25000.0, 20000.0, False) == pytest.approx(-0.25)
    assert improvement(0.0, 0.5, True) is None and improvement(-1.0, 0.5, False) is None
    assert improvement(None, 0.5, True) is None and improvement(0.6, None, True) is None
    # a baseline of 0 (or below, or not finite) gives no improvement at all: never an unbounded one
    assert improvement(0.6, 0.0, True) is None and improvement(0.6, 0.0, False) is None
    assert improvement(0.6, -0.5, True) is None and improvement(0.6, math.inf, False) is None


def test_success_at_each_threshold_and_at_any_step():
    m = run_metrics(run(score=0.86, steps=[(1, 0.5), (2, 0.95), (3, None)]), baseline=0.8)
    assert m.final_improvement == pytest.approx(0.075)
    assert m.success == {0.05: True, 0.10: False, 0.15: False, 0.20: False, 0.30: False}
    assert m.best_improvement == pytest.approx(0.1875) and m.success_any
    lower = run_metrics(run(score=14000.0, higher=False, steps=[(1, 30000.0)]), baseline=20000.0)
    assert lower.success[0.30] is False and lower.success[0.20] is True and lower.success_any
    invalid = run_metrics(run(score=0.0, steps=[(1, 0.0)]), baseline=0.5)
    assert not invalid.valid_final and invalid.final_improvement is None and not invalid.success_any


def test_wilson_interval_and_bootstrap_interval_of_a_mean():
    zero = wilson(0, 8)
    assert zero.mean == 0 and zero.lo == 0 and zero.hi == pytest.approx(0.3244, abs=1e-3)
    full = wilson(8, 8)
    assert full.lo == pytest.approx(1 - 0.3244, abs=1e-3) and full.hi == 1
    half = wilson(4, 8)
    assert half.lo == pytest.approx(0.2152, abs=1e-3) and half.hi == pytest.approx(0.7848, abs=1e-3)
    # the time column: two runs of 3.0 s and 14.6 s once read "8.8 ±22.9", below zero; now inside the data
    e = mean_interval([3.0, 14.6], lowest=0.0)
    assert e.mean == pytest.approx(8.8) and (e.lo, e.hi) == (3.0, 14.6) and e.sem == pytest.approx(5.8)
    assert mean_interval([5.0]).lo is None and mean_interval([]).mean is None
    assert mean_interval([2.0, 2.0, 2.0]).as_dict() == {"n": 3, "mean": 2.0, "lo": 2.0, "hi": 2.0, "sem": 0.0}


def test_group_counts_failed_runs_and_averages_improvement_over_valid_runs_only():
    runs = [run(0, 0.9), run(1, 0.7), run(2, None, status="failed", failure="llm_error"), run(3, 0.0),
            run(4, None, status="running")]  # a run still going counts nowhere
    g = group_metrics("t", "a", runs, baseline=0.75)
    assert g.runs == 4 and g.failed == 1 and g.valid_final == 2
    assert g.success[0.10].mean == pytest.approx(0.25)
    assert g.improvement.n == 2 and g.improvement.mean == pytest.approx(((0.9 - 0.75) + (0.7 - 0.75)) / 0.75 / 2)
    assert g.failures == {"llm_error": 1}


def test_paired_comparison_over_shared_tasks():
    runs = []
    for task, (a_ok, b_ok) in {"t1": (4, 1), "t2": (3, 0), "t3": (2, 2), "t4": (4, 3), "t5": (1, 0)}.items():
        for seed in range(4):
            runs.append(run(seed, 1.0 if seed < a_ok else 0.5, agent="A", task=task))
            runs.append(run(seed, 1.0 if seed < b_ok else 0.5, agent="B", task=task))
    runs.append(run(0, 1.0, agent="A", task="only-a"))
    groups = all_groups(runs, dict.fromkeys(("t1", "t2", "t3", "t4", "t5", "only-a"), 0.5))
    c = paired(groups, "A", "B")
    assert [row["task"] for row in c.tasks] == ["t1", "t2", "t3", "t4", "t5"]
    assert (c.wins, c.losses, c.ties) == (4, 0, 1)
    assert c.success_diff.mean == pytest.approx((3 + 3 + 0 + 1 + 1) / 4 / 5)
    # tasks as pairs: 4 of 5 differences positive, one zero; swapping the agents within tasks gives 2^5 equally
    # likely arrangements, of which 4 reach a mean difference as large (either sign): p = 4/32
    assert c.p_success == pytest.approx(0.125)
    # per task, runs are shuffled between the agents: t1 is 4/4 against 1/4; 5 of the C(8, 4) = 70 ways to deal
    # the 5 successes reach 4/4, and scipy's two-sided p-value doubles the smaller tail
    assert c.tasks[0]["p_success"] == pytest.approx(2 * 5 / 70)
    assert overall(groups)["A"]["tasks"] == 6


def _trace(status="finished", reason="final answer", score=None, observations=()):
    steps = [Step(index=i + 1, action=Action(name=name), observation=obs, is_error=err, started_at=0, duration_s=0,
                  snapshot=f"step_{i + 1:04d}") for i, (name, obs, err) in enumerate(observations)]
    return Trace(run_id="r", config=RunConfig(task="t", agent="a"), status=status, end_reason=reason, started_at=0,
                 final_score=score, steps=steps)


def test_failure_taxonomy_from_traces():
    assert classify(_trace(score=0.8)) is None
    assert classify(_trace(status="failed", reason="llm error: rate limited")) == "llm_error"
    assert classify(_trace(status="failed", reason="harness error: OSError: disk full")) == "harness_error"
    assert classify(_trace(reason="agent stopped: 5 invalid responses in a row")) == "invalid_format"
    oom = ("Execute Script", "EnvError: the script hit the memory limit (exit code -9). Output:\n", True)
    assert classify(_trace(observations=[oom])) == "out_of_memory"
    late = ("Execute Script", "EnvError: the script ran past the time limit of 60 s and was killed.", True)
    assert classify(_trace(observations=[oom, late])) == "timeout"  # the latest problem explains the outcome
    assert classify(_trace(reason="max steps reached (50)")) == "limits_reached"
    assert classify(_trace(reason="budget reached: 100000 tokens")) == "limits_reached"
    assert classify(_trace()) == "no_submission"
    assert classify(_trace(score=0.0)) == "no_submission"  # a score <= 0 is no valid submission
    assert classify(_trace(score=0.9, observations=[oom])) is None  # recovered: not a failure


def test_intermediate_snapshots_are_subsampled_to_50_ending_with_the_last():
    steps = [("Append File", "ok", False)] * 120
    picks = intermediate_steps(_trace(observations=steps))
    assert len(picks) == 50 and picks[0] == (1, "step_0001") and picks[-1] == (120, "step_0120")
    assert [p[0] for p in picks] == sorted({p[0] for p in picks})
    assert len(intermediate_steps(_trace(observations=steps[:30]))) == 30


def test_success_original_drops_the_runs_that_wrote_the_originals_error_txt():
    """The original's plot.py drops every run with an error.txt (an error of the harness, the agent's own code or
    the LLM, and the run's time limit) and runs that ran out of memory; bad scores, step limits, broken formats
    and missing submissions stay in."""
    dropped = [RunRecord(key=f"d{i}", task="t", agent="a", llm=None, seed=i, status=status, final_score=None,
                         failure=failure, end_reason=end, incidents=incidents)
               for i, (status, failure, end, incidents) in enumerate((
                   ("failed", "harness_error", "harness error: boom", ()),
                   ("failed", "agent_error", "agent error: ValueError", ()),
                   ("failed", "llm_error", "llm error: 429", ()),
                   ("finished", "limits_reached", "time limit reached (3600 s)", ()),
                   ("finished", "no_submission", "agent stopped", ("out_of_memory",))))]
    kept = [RunRecord(key=f"k{i}", task="t", agent="a", llm=None, seed=10 + i, status="finished", final_score=score,
                      failure=failure, end_reason=end)
            for i, (score, failure, end) in enumerate(((2.0, None, "agent stopped"),
                                                       (None, "limits_reached", "max steps reached"),
                                                       (None, "invalid_format", "agent stopped: invalid format"),
                                                       (None, "no_submission", "agent stopped")))]
    assert not any(r.counted_by_original for r in dropped) and all(r.counted_by_original for r in kept)
    g = group_metrics("t", "a", dropped + kept, baseline=1.0)
    assert (g.success_rate.n, g.success_original.n) == (9, 4)
    assert g.success_original.mean == pytest.approx(1 / 4) and g.success_rate.mean == pytest.approx(1 / 9)


def test_budget_and_reference_ratio_per_group():
    runs = [RunRecord(key=f"r{i}", task="t", agent="a", llm=None, seed=i, status="finished", final_score=score,
                      steps=steps, llm_calls=calls, tokens=100 * calls, higher_is_better=False)
            for i, (score, steps, calls) in enumerate(((20.0, 10, 12), (40.0, 6, 2)))]
    g = group_metrics("t", "a", runs, baseline=1e10, reference=10.0)
    assert g.steps.mean == 8 and g.llm_calls.mean == 7 and g.tokens.mean == 700
    assert g.of_reference.mean == pytest.approx((10 / 20 + 10 / 40) / 2)  # lower is better: reference / score
    assert g.baseline_note == "fixed baseline 1e+10: any valid submission succeeds"
    assert g.success_rate.mean == 1.0  # the original's rule is kept: any valid submission succeeds
    summary = overall([g])["a"]
    assert summary["llm_calls"]["mean"] == 7 and summary["steps"]["mean"] == 8


def test_improvement_original_averages_the_runs_success_original_counts():
    """plot.py drops the runs with an error.txt before it averages final_improve too: a run that timed out or
    erred after leaving a valid submission is in mlab's mean improvement and out of the original's."""
    kept = [RunRecord(key=f"k{i}", task="t", agent="a", llm=None, seed=i, status="finished", final_score=s,
                      end_reason="agent stopped") for i, s in enumerate((1.2, 1.0))]
    dropped = [RunRecord(key="d0", task="t", agent="a", llm=None, seed=5, status="finished", final_score=2.0,
                         failure="limits_reached", end_reason="time limit reached (3600 s)"),
               RunRecord(key="d1", task="t", agent="a", llm=None, seed=6, status="failed", final_score=1.6,
                         failure="agent_error", end_reason="agent error: ValueError")]
    g = group_metrics("t", "a", kept + dropped, baseline=1.0)
    assert g.improvement.mean == pytest.approx((0.2 + 0.0 + 1.0 + 0.6) / 4)
    assert g.improvement_original.n == 2 and g.improvement_original.mean == pytest.approx(0.1)
    summary = overall([g])["a"]
    assert summary["improvement_original"]["mean"] == pytest.approx(0.1)
    assert summary["improvement"]["mean"] == pytest.approx(0.45)
    # and the report shows it beside mlab's
    other = [RunRecord(key=f"o{i}", task="u", agent="a", llm=None, seed=i, status="finished", final_score=1.5)
             for i in range(2)]
    groups = all_groups(kept + dropped + other, {"t": 1.0, "u": 1.0})
    data = ReportData(bench_dir=Path("."), rows=[], records=kept + dropped + other, baselines={"t": 1.0, "u": 1.0},
                      baseline_sources={}, groups=groups, overall=overall(groups), step_scores={},
                      plugin_versions={})
    tables = json.loads(to_json(report_tables(data)))
    assert tables["overall"]["rows"][0]["improvement_original"] == pytest.approx((0.1 + 0.5) / 2)
    assert [r["improvement_original"] for r in tables["per_task"]["rows"]] == pytest.approx([0.1, 0.5])


def test_a_placeholder_baseline_is_no_method_of_the_performance_profiles():
    """house-price's 1e10 stands for "no baseline": as a method it got a ratio of 6.55e+05 and an AUP beside the
    agents'. Only a baseline that discriminates is a method."""
    from mlab.core.bench.metrics import BASELINE_METHOD, performance_profiles

    runs = [RunRecord(key=f"{a}{i}", task="house-price", agent=a, llm=None, seed=i, status="finished",
                      final_score=s, higher_is_better=False)
            for a, scores in (("x", (15000.0, 16000.0)), ("y", (15500.0, 15500.0))) for i, s in enumerate(scores)]
    groups = all_groups(runs, {"house-price": 1e10})
    profiles = performance_profiles(groups)
    assert BASELINE_METHOD not in profiles.methods and BASELINE_METHOD not in profiles.aup
    assert profiles.tau_max == 1 and profiles.aup == {"x": 1.0, "y": 1.0}
    assert max(r for per in profiles.ratios.values() for r in per.values() if r is not None) == 1.0
    # a baseline that discriminates stays a method
    assert BASELINE_METHOD in performance_profiles(all_groups(runs, {"house-price": 20000.0})).methods
