"""The Task contract: what a task pack registers."""
from __future__ import annotations

import contextvars
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from mlab.core.sandbox.contract import ExecResult, Sandbox
    from mlab.core.sandbox.limits import Limits

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
    """Rows of a task's training data that prepare also writes as a validation split: their inputs to the public
    folder, their answers to the hidden one, and (held_out) the training files without them. `Validate
    Submission` scores predictions for them with the task's own evaluate: the predictions are put where evaluate
    reads a submission and the validation answers where it reads the test answers, so a validation score means
    exactly what a test score means."""

    inputs: str  # public file of the validation inputs (no target), e.g. "data/valid.csv"
    predictions: str  # the default name of the agent's predictions for them, e.g. "valid_submission.csv"
    submission: str  # the workspace file evaluate reads, e.g. "submission.csv"
    answers: dict[str, str]  # hidden validation file -> the hidden file name evaluate reads in its place
    test_inputs: str = ""  # the test inputs file evaluate's messages name, told as `inputs` when validating
    # Public training file holding the validation rows -> the id column it shares with `inputs`. Prepare also
    # writes each without those rows (to the hidden folder), and runs with --allow-validate get that version.
    held_out: dict[str, str] = field(default_factory=dict)


@dataclass
class BaselineContext:
    """What Task.baseline gets: a fresh workspace, the answers, and a way to run a script in the sandbox."""

    workspace: Path
    hidden_dir: Path
    run_script: Callable[[str], ExecResult]  # runs a workspace script in the sandbox


# Host variables a scoring command gets, as agent code does: nothing that could carry a secret of the harness.
_SCORING_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "CUDA_VISIBLE_DEVICES")


@dataclass
class ScoringContext:
    """How Task.evaluate runs anything the agent wrote (a saved model, the module that loads it): in the run's
    sandbox, under the run's limits with the task's scoring timeout, without network, with every task's data
    (`$MLAB_HOME/tasks`: answers, other tasks, this task's hidden folder) invisible. Get the current one with
    `scoring_context()`."""

    new_sandbox: Callable[[], Sandbox]  # the run's sandbox (bwrap in a bwrap run)
    limits: Limits  # the run's limits; timeout_s is the task's scoring_timeout_s
    hidden_paths: list[Path] = field(default_factory=list)  # never visible to a scoring command

    @contextmanager
    def scratch(self) -> Iterator[Path]:
        """A fresh folder outside every task's data, writable by scoring commands and removed afterwards: put
        the inputs a command needs there (copies of hidden files it may see) and let it write its results."""
        folder = Path(tempfile.mkdtemp(prefix="mlab-score-"))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def run(self, argv: list[str], workspace: Path, scratch: Path, *, env: Mapping[str, str] | None = None,
            timeout_s: float | None = None) -> ExecResult:
        """Run argv in the sandbox with the submission folder as its working directory (read-only), `scratch`
        writable and its HOME. Symlinks of the submission into the task's public folder do not resolve there:
        copy what the command needs into scratch."""
        from mlab.core.sandbox.contract import ExecSpec

        workspace, scratch = Path(workspace), Path(scratch)
        limits = self.limits if timeout_s is None else self.limits.model_copy(update={"timeout_s": timeout_s})
        command_env = {k: os.environ[k] for k in _SCORING_ENV if k in os.environ}
        command_env.update({"HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONDONTWRITEBYTECODE": "1",
                            "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", **(env or {})})
        if os.path.realpath(workspace).startswith("/dev/"):
            # A folder in /dev/shm (small snapshots are scored in memory) is not there under a private /dev.
            copy = scratch / ".submission"
            shutil.copytree(workspace, copy, symlinks=True)
            workspace = copy
        spec = ExecSpec(cwd=workspace, env=command_env, limits=limits, hidden_paths=list(self.hidden_paths),
                        read_only_paths=[workspace], writable_paths=[scratch], network=False)
        return self.new_sandbox().run(list(argv), spec)


_SCORING: contextvars.ContextVar[ScoringContext | None] = contextvars.ContextVar("mlab_scoring", default=None)


def scoring_context() -> ScoringContext:
    """The ScoringContext of the evaluate call in progress: the harness's (the run's sandbox and limits) while
    it scores; outside the harness (a task's own tests) the local sandbox with default limits, hiding
    $MLAB_HOME/tasks."""
    current = _SCORING.get()
    if current is not None:
        return current
    from mlab.core.run.taskdata import TaskHome
    from mlab.core.sandbox.limits import Limits
    from mlab.core.sandbox.local import LocalSandbox

    return ScoringContext(new_sandbox=LocalSandbox, limits=Limits(), hidden_paths=[TaskHome.from_env().data_root])


@contextmanager
def scoring_with(context: ScoringContext) -> Iterator[ScoringContext]:
    """Make context the one scoring_context() returns while the block runs (the harness, around evaluate)."""
    token = _SCORING.set(context)
    try:
        yield context
    finally:
        _SCORING.reset(token)


class Task(ABC):
    """One benchmark task. Subclasses set the class attributes and implement prepare and evaluate."""

    name: str = ""
    """Registered name, `pack/task`."""
    description: str = ""
    """One line for `mlab tasks`."""
    research_problem: str = ""
    """What the agent is asked to do."""
    metric: Metric = Metric(name="score", higher_is_better=True)
    """The score's name and direction."""
    read_only_files: list[str] = []
    """Glob patterns of workspace files no action and no agent code may change."""
    resources: Resources = Resources()
    """What the task needs of the machine."""
    starter_script: str = "train.py"
    """The script the baseline runs."""
    fixed_baseline: float | None = None
    """A baseline fixed by the task (as the original fixes six) instead of one measured by running the starter;
    must be a valid score (finite, above 0)."""
    fixed_baseline_source: str = ""
    """Where a fixed baseline comes from (required with one), e.g. the original's aggregation script."""
    success_margin: float = DEFAULT_SUCCESS_MARGIN
    """A run succeeds when its improvement over the baseline is above this fraction."""
    scoring_timeout_s: float = 3600.0
    """How long one scoring command (ScoringContext.run) may take before it is killed."""
    max_submission_bytes: int = 256 * 2**20
    """The largest submission file evaluate reads; a larger one is refused unread (InvalidSubmission)."""
    validation: ValidationSplit | None = None
    """The validation split prepare writes from the training data, when the task has one; runs started with
    --allow-validate may score predictions on it (the Validate Submission action)."""

    def check_runnable(self) -> None:  # noqa: B027 (optional: runnable everywhere by default)
        """Raise MlabError when this machine cannot run the task (no GPU, a missing extra); called before a run."""

    @abstractmethod
    def prepare(self, ctx: PrepareContext) -> None:
        """Write starter files and data to ctx.public_dir and answers to ctx.hidden_dir."""

    @abstractmethod
    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        """Score the submission in workspace; raise InvalidSubmission when there is none usable."""

    def baseline(self, ctx: BaselineContext) -> float:
        """Run the starter script and score it; InvalidSubmission when it submits nothing usable (such a run
        does not count towards the measured baseline)."""
        ctx.run_script(self.starter_script)
        return self.evaluate(ctx.workspace, ctx.hidden_dir)

    def reference_solution(self, workspace: Path) -> str | None:
        """Put a reference solution into a fresh copy of the public workspace and return the script to run;
        None when the task has none. `mlab check-task` checks it beats the baseline by the success margin."""
        return None

    @property
    def offline_ready(self) -> bool:
        """Whether prepare needs no network (the task can be prepared on the fly before a run)."""
        return not self.resources.network_for_prepare
