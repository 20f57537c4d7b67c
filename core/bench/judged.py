"""A score judged against its baseline (scoring.judge), with the margin and the reference ratio: what every command
shows of a run or a submission, and what a bench's results database stores. verdict.py says which baseline."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlab.core.run.scoring import ScoreRule, Verdict, judge, reference_ratio


@dataclass(frozen=True)
class Judged:
    """A score judged against its baseline: what every command shows of a run or a submission."""

    baseline: float | None
    baseline_source: str
    verdict: Verdict
    success_margin: float = 0.10
    reference: float | None = None
    of_reference: float | None = None

    def fields(self) -> dict[str, Any]:
        """The verdict's JSON fields, the same in eval, grade, runs and report."""
        return {"baseline": self.baseline, "baseline_source": self.baseline_source,
                "baseline_refused": self.verdict.refused, "baseline_note": self.verdict.note,
                "valid": self.verdict.valid, "improvement": self.verdict.improvement, "success": self.verdict.success,
                "success_margin": self.success_margin, "reference_score": self.reference,
                "of_reference": self.of_reference}


VERDICT_FIELDS = ("baseline", "baseline_source", "baseline_refused", "baseline_note", "valid", "improvement",
                  "success", "success_margin", "reference_score", "of_reference")


def judged(score: float | None, baseline: tuple[float | None, str], rule: ScoreRule,
           reference: float | None = None) -> Judged:
    """The one verdict: scoring.judge against the baseline, with the margin and the reference ratio."""
    return Judged(baseline=baseline[0], baseline_source=baseline[1], verdict=judge(score, baseline[0], rule),
                  success_margin=rule.success_margin, reference=reference,
                  of_reference=reference_ratio(score, reference, rule.higher_is_better))
