"""The Task contract: what a task pack registers."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, Field

from mlab.core.errors import InvalidSubmission


class Metric(BaseModel):
    name: str
    higher_is_better: bool


class Resources(BaseModel):
    gpu: Literal["none", "optional", "required"] = "none"
    ram_gb: float = 2.0
    network_for_prepare: bool = False
    baseline_seconds: float = 60.0
    extras: list[str] = Field(default_factory=list)


@dataclass
class PrepareContext:
    """Where prepare writes: `public` becomes every run's starting workspace, `hidden` never leaves the harness."""

    public_dir: Path
    hidden_dir: Path
    source_dir: Path | None = None  # a local copy of the raw data, if the user gave one
    log: Callable[[str], None] = print


@dataclass
class BaselineContext:
    workspace: Path
    hidden_dir: Path
    run_script: Callable[[str], "object"]  # runs a workspace script in the sandbox, returns an ExecResult


class Task(ABC):
    """One benchmark task. Subclasses set the class attributes and implement prepare and evaluate."""

    name: str = ""
    description: str = ""
    research_problem: str = ""
    metric: Metric = Metric(name="score", higher_is_better=True)
    read_only_files: list[str] = []
    resources: Resources = Resources()
    starter_script: str = "train.py"
    # Baseline used when the starter produces no valid submission (the original's worst-value rule).
    worst_score: float | None = None

    def check_runnable(self) -> None:
        """Raise MlabError when this machine cannot run the task (no GPU, a missing extra); called before a run."""

    @abstractmethod
    def prepare(self, ctx: PrepareContext) -> None:
        """Write starter files and data to ctx.public_dir and answers to ctx.hidden_dir."""

    @abstractmethod
    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        """Score the submission in workspace; raise InvalidSubmission when there is none usable."""

    def baseline(self, ctx: BaselineContext) -> float:
        """Run the starter script and score it; fall back to worst_score when it submits nothing valid."""
        ctx.run_script(self.starter_script)
        try:
            return self.evaluate(ctx.workspace, ctx.hidden_dir)
        except InvalidSubmission:
            if self.worst_score is None:
                raise
            return self.worst_score

    @property
    def offline_ready(self) -> bool:
        return not self.resources.network_for_prepare

    def improvement(self, score: float, baseline: float) -> float | None:
        """Relative improvement over the baseline, positive when better, whatever the metric's direction."""
        from mlab.core.bench.metrics import improvement

        return improvement(score, baseline, self.metric.higher_is_better)
