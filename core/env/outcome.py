"""What an episode earned: the task's verdict on its submission (the one `mlab eval` gives: score, baseline,
improvement, success) and the reward a trainer takes from it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mlab.core.bench.verdict import Judged, RunJudge
from mlab.core.errors import MlabError
from mlab.core.run.scoring import ScoreRule, baseline_refusal
from mlab.core.task import Task

RewardKind = Literal["improvement", "score"]
INVALID_REWARD = -1.0  # no valid submission: as bad as a score of 0 on a higher-is-better task


@dataclass(frozen=True)
class Outcome:
    """The verdict on an episode's submission, and its reward."""

    run_dir: Path
    score: float | None
    error: str | None  # why there is no score
    verdict: dict[str, Any]  # the verdict's fields as `mlab eval --json` gives them (Judged.fields)
    reward: float
    status: str | None = None  # the run's end; None for an intermediate outcome (Episode.score_now)
    end_reason: str | None = None
    steps: int = 0

    @property
    def improvement(self) -> float | None:
        value: float | None = self.verdict["improvement"]
        return value


def reward_of(score: float | None, judged: Judged, rule: ScoreRule, kind: RewardKind,
              invalid_reward: float = INVALID_REWARD) -> float:
    """`improvement`: the verdict's improvement over the baseline; `score`: the score, negated where lower is
    better (a higher reward is always better). A submission without a valid score gets invalid_reward."""
    if score is None or not judged.verdict.valid:
        return invalid_reward
    if kind == "score":
        return score if rule.higher_is_better else -score
    if judged.verdict.improvement is None:  # a baseline refused since the episode started
        return invalid_reward
    return judged.verdict.improvement


def check_reward_source(judge: RunJudge, run_dir: Path, task: Task, kind: RewardKind) -> None:
    """MlabError before an episode starts when its reward could not be had: improvement needs a usable baseline."""
    if kind not in ("improvement", "score"):
        raise MlabError(f"reward {kind!r}: use 'improvement' or 'score'")
    if kind != "improvement":
        return
    baseline, source = judge.baseline(run_dir, task)
    why = "it has none" if baseline is None else baseline_refusal(baseline)
    if why:
        raise MlabError(f"task {task.name}: the reward 'improvement' needs the task's baseline, but {why} "
                        f"({source}); measure it first (prepare_task, or `mlab baseline {task.name}`), or use "
                        "reward='score'")


def outcome_of(judge: RunJudge, task: Task, run_dir: Path, score: float | None, error: str | None,
               kind: RewardKind, invalid_reward: float, **ended: Any) -> Outcome:
    """The outcome of a submission scored `score`, judged as `mlab eval` judges the run folder."""
    judged = judge.judge(run_dir, task, score)
    return Outcome(run_dir=run_dir, score=score, error=error, verdict=judged.fields(),
                   reward=reward_of(score, judged, ScoreRule.of(task), kind, invalid_reward), **ended)
