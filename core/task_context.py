"""What the core hands a task's methods: the folders prepare writes and the sandbox its task code runs in, what the
baseline runs with, and the sandbox evaluate runs agent code in (ScoringContext)."""
from __future__ import annotations

import contextvars
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mlab.core.errors import MlabError

if TYPE_CHECKING:
    from mlab.core.sandbox.contract import Sandbox
    from mlab.core.sandbox.limits import Limits
    from mlab.core.sandbox.spec import ExecResult, ExecSpec

# Host variables a scoring command gets, as agent code does: nothing that could carry a secret of the harness.
_SCORING_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "CUDA_VISIBLE_DEVICES")


def _no_sandbox(argv: list[str], spec: ExecSpec) -> ExecResult:
    raise MlabError("this task's prepare runs code of its pack, which runs only in the sandbox the harness hands "
                    "it: prepare the task with `mlab prepare`")


@dataclass
class PrepareContext:
    """Where Task.prepare writes: `public_dir` becomes every run's starting workspace, `hidden_dir` never leaves
    the harness. `run(argv, spec)` runs the pack's own code (a declarative prepare script) in the confining
    sandbox the harness chose, every task's data hidden."""

    public_dir: Path
    hidden_dir: Path
    source_dir: Path | None = None  # a local copy of the raw data, if the user gave one
    log: Callable[[str], None] = print
    run: Callable[[list[str], ExecSpec], ExecResult] = _no_sandbox


@dataclass
class BaselineContext:
    """What Task.baseline gets: a fresh workspace, the answers, and a way to run a workspace script in the sandbox."""

    workspace: Path
    hidden_dir: Path
    run_script: Callable[[str], ExecResult]


@dataclass
class ScoringContext:
    """How Task.evaluate runs anything the agent wrote (a saved model, the module that loads it): in the run's
    sandbox, under the run's limits with the task's scoring timeout, without network, with every task's data
    (`$MLAB_HOME/tasks`: answers, other tasks, this task's hidden folder) invisible. Get the current one with
    `scoring_context()`."""

    new_sandbox: Callable[[], Sandbox]  # the run's sandbox (bwrap in a bwrap run)
    limits: Limits  # the run's limits; timeout_s is the task's scoring_timeout_s
    hidden_paths: list[Path] = field(default_factory=list)  # never visible to a scoring command
    # A confining sandbox for the pack's own code (a declarative scorer), even in an unconfined run; None: new_sandbox.
    task_sandbox: Callable[[], Sandbox] | None = None

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
        from mlab.core.sandbox.spec import ExecSpec

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


def default_home() -> Path:
    """Where prepared tasks live unless a command names another task home: MLAB_HOME, else $XDG_CACHE_HOME/mlab
    (~/.cache/mlab)."""
    if os.environ.get("MLAB_HOME"):
        return Path(os.environ["MLAB_HOME"]).expanduser().resolve()
    return (Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "mlab").resolve()


def scoring_context() -> ScoringContext:
    """The ScoringContext of the evaluate call in progress: the harness's (the run's sandbox and limits) while
    it scores; outside the harness (a task's own tests) the local sandbox with default limits, hiding every task's
    data in the default task home."""
    current = _SCORING.get()
    if current is not None:
        return current
    from mlab.core.sandbox.limits import Limits
    from mlab.core.sandbox.local import LocalSandbox

    return ScoringContext(new_sandbox=LocalSandbox, limits=Limits(), hidden_paths=[default_home() / "tasks"])


@contextmanager
def scoring_with(context: ScoringContext) -> Iterator[ScoringContext]:
    """Make context the one scoring_context() returns while the block runs (the harness, around evaluate)."""
    token = _SCORING.set(context)
    try:
        yield context
    finally:
        _SCORING.reset(token)
