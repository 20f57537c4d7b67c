"""The Task contract: what a task pack implements and registers (`register_tasks`). The core builds what the methods
get (mlab.core.task_context); evaluate runs agent code (a saved model) through `mlab.core.scoring_context()`."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from mlab.core.models import TaskParam
    from mlab.core.task_context import BaselineContext, PrepareContext

DEFAULT_SUCCESS_MARGIN = 0.10  # the original's "more than 10% better than the baseline"


class Metric(BaseModel):
    name: str
    higher_is_better: bool


class Resources(BaseModel):
    """What a task needs of the machine; `mlab tasks` shows it, so users pick what their machine can run."""

    gpu: Literal["none", "optional", "required"] = "none"
    ram_gb: float = 2.0  # memory the starter needs
    network_for_prepare: bool = False  # prepare downloads data unless given a local copy
    network_at_run_time: bool = False  # agent code needs the network (an LLM endpoint, a web API)
    baseline_seconds: float = 60.0  # about how long the starter runs on the machine the task targets
    extras: list[str] = Field(default_factory=list)  # optional installs the task needs (pip extras, tools)


@dataclass(frozen=True)
class ValidationSplit:
    """Training rows (never test rows) prepare also writes as a validation split: answers hidden, public files
    (`inputs`, `more_inputs`) only in runs with --allow-validate. There `Validate Submission` copies the agent's
    predictions to `submission` and the answers where evaluate reads the test ones: the same score, other rows."""

    inputs: str  # public validation inputs (no target), e.g. "data/valid.csv"
    predictions: str  # default name of the agent's predictions for them, e.g. "valid_submission.csv"
    submission: str  # the workspace file evaluate reads, e.g. "submission.csv"
    answers: dict[str, str]  # hidden validation file -> the hidden file name evaluate reads in its place
    test_inputs: str = ""  # the test inputs file evaluate's messages name, told as `inputs` when validating
    # Public training file holding the validation rows -> the id column it shares with `inputs`: prepare also
    # writes it without those rows (hidden), which --allow-validate runs get.
    held_out: dict[str, str] = field(default_factory=dict)
    more_inputs: list[str] = field(default_factory=list)  # other public files of the split
    max_calls: int = 10  # Validate Submission calls per run: each score tells something about the held-out labels


class Task(ABC):
    """One benchmark task: set the class attributes, implement `prepare` and `evaluate`; the rest is optional. The
    core makes one instance (no arguments). `mlab data` also reads `data_files()`, `fetch_data(root, log)` and
    `data_folder` when present."""

    name: str = ""  # required: `pack/name`, lowercase words joined by hyphens; `pack` is the entry-point name
    description: str = ""  # required: one line for `mlab tasks`
    research_problem: str = ""  # what the agent is asked to do: the files, the metric, what to submit
    metric: Metric = Metric(name="score", higher_is_better=True)
    read_only_files: list[str] = []  # globs of workspace files (a folder: its contents) nothing may change
    resources: Resources = Resources()
    starter_script: str = "train.py"  # what the default baseline runs
    fixed_baseline: float | None = None  # instead of a measured one; a valid score (finite, above 0)
    fixed_baseline_source: str = ""  # required with fixed_baseline: where it comes from
    success_margin: float = DEFAULT_SUCCESS_MARGIN  # a run succeeds above this improvement over the baseline
    scoring_timeout_s: float = 3600.0  # one scoring command (ScoringContext.run) is killed after this
    max_submission_bytes: int = 256 * 2**20  # evaluate refuses a larger submission file unread (os.stat it)
    validation: ValidationSplit | None = None  # scored by runs with --allow-validate
    params: list[TaskParam] = []  # what users may set with -T NAME=VALUE
    param_values: dict[str, Any] = {}  # the values, defaults filled in, every method reads; a task copy per set

    @abstractmethod
    def prepare(self, ctx: PrepareContext) -> None:
        """Write the agent's starting files to ctx.public_dir and the answers to ctx.hidden_dir (from ctx.source_dir
        when the user gave a local copy). Deterministic: two prepares write byte-identical files (seeded, no times
        or host names; `mlab check-task` compares). Runs in a staging folder moved into place after, so a failure
        leaves nothing. Raises MlabError: the data cannot be had (say where to get it)."""

    @abstractmethod
    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        """The metric's value for the submission in workspace, against the answers in hidden_dir. Runs in the
        harness, not the sandbox: read the submission as bounded data (max_submission_bytes, a row cap), never
        import, unpickle or execute it; run agent code through `scoring_context()`. Raises InvalidSubmission: no
        usable submission (missing, malformed, NaN); the message is shown to users."""

    def check_runnable(self) -> None:  # noqa: B027 (optional: runnable everywhere by default)
        """Called before a run starts or resumes. Raises MlabError: this machine cannot run the task, in one line."""

    def baseline(self, ctx: BaselineContext) -> float:
        """The starter's score: by default, run starter_script in the sandbox and evaluate.
        Raises InvalidSubmission: the starter submits nothing usable (the run does not count)."""
        ctx.run_script(self.starter_script)
        return self.evaluate(ctx.workspace, ctx.hidden_dir)

    def reference_solution(self, workspace: Path) -> str | None:
        """Put a better solution into workspace (fresh public files) and return the script to run, or None;
        `mlab check-task` checks it beats the baseline by success_margin."""
        return None

    @property
    def offline_ready(self) -> bool:
        """Whether prepare needs no network (the task can be prepared on the fly before a run)."""
        return not self.resources.network_for_prepare
