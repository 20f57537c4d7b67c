"""The Task contract: what a task pack implements and registers (`register_tasks`).

Running agent code from evaluate (a saved model) goes through `mlab.core.scoring_context()`; the harness that
calls these methods lives in `mlab.core.run`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from mlab.core.models import TaskParam
    from mlab.core.sandbox.contract import ExecResult

DEFAULT_SUCCESS_MARGIN = 0.10  # the original's "more than 10% better than the baseline"


class Metric(BaseModel):
    name: str
    higher_is_better: bool


class Resources(BaseModel):
    """What a task needs of the machine; `mlab tasks` shows it, so users pick what their machine can run."""

    gpu: Literal["none", "optional", "required"] = "none"
    ram_gb: float = 2.0  # memory the starter needs
    network_for_prepare: bool = False  # prepare downloads data unless given a local copy
    network_at_run_time: bool = False  # agent code needs the network (an LLM endpoint, a web API): the run says so
    baseline_seconds: float = 60.0  # about how long the starter runs on the machine the task targets
    extras: list[str] = Field(default_factory=list)  # optional installs the task needs (pip extras, tools)


@dataclass
class PrepareContext:
    """Where prepare writes: `public` becomes every run's starting workspace, `hidden` never leaves the harness."""

    public_dir: Path
    hidden_dir: Path
    source_dir: Path | None = None  # a local copy of the raw data, if the user gave one
    log: Callable[[str], None] = print


@dataclass(frozen=True)
class ValidationSplit:
    """Rows of the training data that prepare also writes as a validation split: inputs to the public folder,
    answers to the hidden one. `Validate Submission` puts the agent's predictions where evaluate reads a
    submission and the answers where it reads the test answers, so a validation score means what a test score
    means. Never take rows from the test set."""

    inputs: str  # public file of the validation inputs (no target), e.g. "data/valid.csv"
    predictions: str  # the default name of the agent's predictions for them, e.g. "valid_submission.csv"
    submission: str  # the workspace file evaluate reads, e.g. "submission.csv"
    answers: dict[str, str]  # hidden validation file -> the hidden file name evaluate reads in its place
    test_inputs: str = ""  # the test inputs file evaluate's messages name, told as `inputs` when validating
    # Public training file holding the validation rows -> the id column it shares with `inputs`. Prepare also
    # writes each without those rows (to the hidden folder), and runs with --allow-validate get that version.
    held_out: dict[str, str] = field(default_factory=dict)
    # Other public files only the split uses (e.g. its sample predictions): like `inputs`, they reach the workspace
    # only in runs started with --allow-validate, since the original's workspaces hold no validation split.
    more_inputs: list[str] = field(default_factory=list)
    # Validate Submission calls a run may make: each score tells something about the held-out labels.
    max_calls: int = 10


@dataclass
class BaselineContext:
    """What Task.baseline gets: a fresh workspace, the answers, and a way to run a script in the sandbox."""

    workspace: Path
    hidden_dir: Path
    run_script: Callable[[str], ExecResult]  # runs a workspace script in the sandbox


class Task(ABC):
    """One benchmark task. Subclass it, set the class attributes, implement `prepare` and `evaluate`; the other
    methods are optional overrides. The core makes one instance (no arguments) and calls it from the harness.

    Optional, read by `mlab data` when present: `data_files()`, `fetch_data(root, log)`, `data_folder`.
    """

    name: str = ""
    """`pack/name`, lowercase words joined by hyphens; `pack` is the plugin's entry-point name. Required."""
    description: str = ""
    """One line for `mlab tasks`. Required."""
    research_problem: str = ""
    """What the agent is asked to do: the files, the metric, what to submit."""
    metric: Metric = Metric(name="score", higher_is_better=True)
    """The score's name and direction."""
    read_only_files: list[str] = []
    """Glob patterns of workspace files (a folder covers its contents) no action and no agent code may change."""
    resources: Resources = Resources()
    """What the task needs of the machine."""
    starter_script: str = "train.py"
    """The script the default baseline runs."""
    fixed_baseline: float | None = None
    """A baseline fixed by the task instead of measured; must be a valid score (finite, above 0)."""
    fixed_baseline_source: str = ""
    """Where a fixed baseline comes from (required with one), e.g. the original's aggregation script."""
    success_margin: float = DEFAULT_SUCCESS_MARGIN
    """A run succeeds when its improvement over the baseline is above this fraction."""
    scoring_timeout_s: float = 3600.0
    """How long one scoring command (ScoringContext.run) may take before it is killed."""
    max_submission_bytes: int = 256 * 2**20
    """The largest submission file evaluate reads; check it with os.stat and refuse a larger one unread."""
    validation: ValidationSplit | None = None
    """The validation split prepare writes, if any; runs with --allow-validate may score predictions on it."""
    params: list[TaskParam] = []
    """The parameters users may set (`-T NAME=VALUE`). Every method reads the values, each declared one filled in,
    from `param_values` (the harness gives each set of values a copy of the task)."""
    param_values: dict[str, Any] = {}

    @abstractmethod
    def prepare(self, ctx: PrepareContext) -> None:
        """Write the agent's starting files to ctx.public_dir and the answers to ctx.hidden_dir.

        Must be deterministic: two prepares write byte-identical files (seeded generators only, no times or host
        names); `mlab check-task` compares two. The core runs it in a staging folder and moves that into place,
        so a failure leaves nothing behind.

        Raises:
            MlabError: the data cannot be had (say where to get it).
        """

    @abstractmethod
    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        """Score the submission in workspace against the answers in hidden_dir.

        Runs in the harness, not the sandbox: read the submission as bounded data (stat it against
        max_submission_bytes, cap rows), never import, unpickle or execute it; run agent code through
        `scoring_context()`.

        Returns:
            The metric's value.
        Raises:
            InvalidSubmission: no usable submission (missing, malformed, NaN); the message is shown to users.
        """

    def check_runnable(self) -> None:  # noqa: B027 (optional: runnable everywhere by default)
        """Called before a run starts or resumes.

        Raises:
            MlabError: this machine cannot run the task (no GPU, a missing extra), in one line.
        """

    def baseline(self, ctx: BaselineContext) -> float:
        """The starter's score: by default run starter_script in the sandbox and evaluate.

        Raises:
            InvalidSubmission: the starter submits nothing usable (the run does not count).
        """
        ctx.run_script(self.starter_script)
        return self.evaluate(ctx.workspace, ctx.hidden_dir)

    def reference_solution(self, workspace: Path) -> str | None:
        """Put a better solution into workspace (a fresh copy of the public files) and return the script to run,
        or None when there is none. `mlab check-task` checks it beats the baseline by success_margin."""
        return None

    @property
    def offline_ready(self) -> bool:
        """Whether prepare needs no network (the task can be prepared on the fly before a run)."""
        return not self.resources.network_for_prepare
