"""The one run harness: the single path from a task to its prepared data, workspace, environment, sandbox and
scorer. `mlab run`, `baseline`, `check-task`, `eval`, `bench` and the report all go through it, so a fix to how
a task is staged, confined or scored lands once."""
from __future__ import annotations

import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.errors import EnvError, InvalidSubmission, MlabError
from mlab.core.models import SubmissionScored, TaskPrepared
from mlab.core.run.environment import Environment, EnvSettings
from mlab.core.run.scoring import Score, Scorer
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.task_lookup import find_task, prepare_args
from mlab.core.run.taskdata import TaskHome, stage_workspace
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.resolve import resolve_sandbox
from mlab.core.sandbox.spec import ExecResult
from mlab.core.task import Task
from mlab.core.task_context import BaselineContext

if TYPE_CHECKING:
    from mlab.core.llm.client import LLMClient
    from mlab.core.plugins.registry import Registry


@dataclass
class ScriptRun:
    """A script run in a fresh workspace and scored: the baseline's starter or check-task's reference."""

    score: float | None
    error: str | None = None  # why there is no score
    output: str = ""  # what the last script printed
    exit_code: int | None = None
    limit_hit: str | None = None  # the limit that stopped the last script, if one did


class Harness:
    """Builds everything a task needs to run, in the sandbox the user chose and the task home given."""

    def __init__(self, registry: Registry, home: TaskHome | None = None, sandbox: str = "auto",
                 limits: Limits | None = None, on_hook_error: Callable[[str], None] | None = None):
        self.registry = registry
        self.home = home or TaskHome.from_env()
        self._sandbox_choice = sandbox
        self._sandbox_cls: type[Sandbox] | None = None
        self._confined: bool | None = None
        self.limits = limits or Limits()
        # Built lazily through new_sandbox: scoring needs a sandbox only when a task runs agent code.
        self.scorer = Scorer(self.home, new_sandbox=self.new_sandbox, limits=self.limits,
                             task_sandbox=self.pack_sandbox)  # the pack's own code (a declarative scorer)
        self.on_hook_error = on_hook_error

    @property
    def sandbox_cls(self) -> type[Sandbox]:
        """The chosen sandbox, resolved on first use (`auto` picks the strongest that works here), so scoring
        alone needs none."""
        if self._sandbox_cls is None:
            self._sandbox_cls = resolve_sandbox(self.registry, self._sandbox_choice)
        return self._sandbox_cls

    @property
    def sandbox_name(self) -> str:
        return self.sandbox_cls.name

    @property
    def sandbox_confined(self) -> bool:
        """Whether the chosen sandbox hides and protects files from agent code (`Sandbox.confined`)."""
        if self._confined is None:
            self._confined = self.new_sandbox().confined
        return self._confined

    # ---- plugins ------------------------------------------------------------------------------------
    def task(self, name: str, params: Mapping[str, Any] | None = None) -> Task:
        """A registered task or a declarative task folder, with its parameters (-T): task_lookup's one rule."""
        return find_task(self.registry, name, params)

    def notify(self, hook: str, event: object) -> None:
        """Tell observer plugins; an observer's failure never changes what the harness does."""
        pm = self.registry.pm
        if pm is None:
            return
        try:
            getattr(pm.hook, hook)(event=event)
        except Exception:
            if self.on_hook_error is not None:
                self.on_hook_error(f"observer hook {hook} failed:\n{traceback.format_exc()}")

    # ---- task data ----------------------------------------------------------------------------------
    def prepare(self, task: Task, data_dir: str | Path | None = None,
                log: Callable[[str], None] = lambda _msg: None, force: bool = False) -> bool:
        """Prepare the task into the home unless it is there (force: again); True when work was done."""
        started = time.monotonic()
        done = self.home.prepare(task, data_dir, log=log, force=force, sandbox=self.pack_sandbox)
        if done:
            source = self.home.task_dir(task) / "prepared.json"
            self.notify("task_prepared", TaskPrepared(
                task=task.name, home=str(self.home.root), seconds=time.monotonic() - started,
                source_dir=_prepared_source(source)))
        return done

    def ensure_prepared(self, task: Task) -> None:
        """Prepare on the fly when the task needs no network; otherwise say how to prepare it."""
        if self.home.is_prepared(task):
            return
        if not task.offline_ready:
            raise MlabError(f"task {task.name!r} is not prepared; run: mlab prepare {prepare_args(task)}")
        self.prepare(task)

    def new_workspace(self, task: Task, workspace: Path, allow_validate: bool = False) -> Path:
        """A fresh copy of the task's public files: the starting point of every run, baseline and check.
        Read-only files are hard links to the prepared copy where the sandbox mounts them read-only (every
        confining sandbox), so runs share the task's data. allow_validate: the training files hold no
        validation row (held_out)."""
        from mlab.core.run.held_out import drop_validation_files, put_held_out
        from mlab.core.run.readonly import is_read_only

        patterns = list(task.read_only_files)
        enforced = self.sandbox_confined

        def share(rel: str) -> bool:
            return enforced and is_read_only(rel, patterns)

        stage_workspace(self.home.public_dir(task), workspace, share=share)
        if allow_validate:
            put_held_out(task, self.home.hidden_dir(task), workspace, share)
        else:  # the validation split's files are the flag's, as the original's workspaces hold none
            drop_validation_files(task, workspace)
        return workspace

    # ---- confinement --------------------------------------------------------------------------------
    def new_sandbox(self) -> Sandbox:
        return self.sandbox_cls()

    def pack_sandbox(self) -> Sandbox:
        """Where task code from a pack runs (a declarative prepare): the chosen sandbox if it confines, else auto's."""
        return self.new_sandbox() if self.sandbox_confined else resolve_sandbox(self.registry, "auto")()

    def environment(self, task: Task, workspace: Path, *, store: SnapshotStore, sandbox_home: Path,
                    timeout_s: float, sandbox: Sandbox | None = None, llm: LLMClient | None = None,
                    interactive: bool = False, ask_human: Callable[[str], str] | None = None,
                    allow_validate: bool = False) -> Environment:
        """The actions' environment over a workspace, running agent code in this harness's sandbox with the
        task data hidden; allow_validate offers Validate Submission on the task's validation split."""
        from mlab.core.run.held_out import held_out_files, held_out_path
        from mlab.core.run.validation import Validator

        limits = self.limits.model_copy(update={"timeout_s": timeout_s})
        hidden = self.home.hidden_dir(task)
        validator = Validator(task, hidden, self.scorer) if allow_validate else None
        # A changed held-out file is put back as the run got it, never as the full file.
        pristine_files = {rel: held_out_path(hidden, rel) for rel in held_out_files(task)} if allow_validate else {}
        return Environment(EnvSettings(
            workspace=workspace, read_only_patterns=list(task.read_only_files),
            sandbox=sandbox or self.new_sandbox(), store=store, pristine_dir=self.home.public_dir(task),
            pristine_files=pristine_files,
            hidden_paths=[self.home.data_root], sandbox_home=sandbox_home, limits=limits, llm=llm,
            interactive=interactive, ask_human=ask_human, network=task.resources.network_at_run_time,
            validator=validator))

    # ---- scoring ------------------------------------------------------------------------------------
    def score_snapshot(self, task: Task, run_dir: Path, snapshot: str) -> Score:
        score = self.scorer.score_snapshot(task, run_dir, snapshot)
        self.scored(task, score, run_dir, snapshot)
        return score

    def scored(self, task: Task, score: Score, run_dir: Path | None = None, snapshot: str | None = None) -> None:
        self.notify("submission_scored", SubmissionScored(
            task=task.name, run_dir=str(run_dir) if run_dir else None, snapshot=snapshot, score=score[0],
            error=score[1]))

    def run_script_fresh(self, task: Task, timeout_s: float,
                         put_files: Callable[[Path], str | None] | None = None) -> ScriptRun:
        """Run the task's baseline (the starter, scored by Task.baseline) in a fresh sandboxed workspace, or,
        with `put_files`, the script it returns after putting its files in the workspace (check-task's
        reference solution)."""
        self.ensure_prepared(task)
        seen = ScriptRun(score=None)
        with tempfile.TemporaryDirectory(prefix="mlab-script-") as scratch:
            workspace = self.new_workspace(task, Path(scratch) / "workspace")
            env = self.environment(task, workspace, store=SnapshotStore(Path(scratch) / "store"),
                                   sandbox_home=Path(scratch) / "home", timeout_s=timeout_s)

            def run_script(name: str) -> ExecResult:
                try:
                    result, _changed = env.run_script(name)
                except EnvError as exc:
                    raise MlabError(f"{task.name}: script {name} failed: {exc}") from exc
                seen.output, seen.exit_code, seen.limit_hit = result.output, result.exit_code, result.limit_hit
                return result

            ctx = BaselineContext(workspace=workspace, hidden_dir=self.home.hidden_dir(task), run_script=run_script)
            try:
                if put_files is None:
                    with self.scorer.scoring(task):  # the baseline's evaluate scores in this sandbox too
                        seen.score = float(task.baseline(ctx))
                else:
                    script = put_files(workspace)
                    if script is None:
                        raise MlabError(f"{task.name}: the task has no reference solution")
                    run_script(script)
                    seen.score, seen.error = self.scorer.score_folder(task, workspace)
            except InvalidSubmission as exc:
                seen.error = f"no valid submission: {exc}"
            except MlabError as exc:
                seen.error = str(exc)
            finally:
                env.close()
        if seen.score is None and seen.limit_hit:
            seen.error = f"{seen.error} (the script was stopped by its {seen.limit_hit} limit)"
        self.scored(task, (seen.score, seen.error))
        return seen


def _prepared_source(marker: Path) -> str | None:
    import json

    try:
        source = json.loads(marker.read_text()).get("source")
        return str(source) if source else None
    except (OSError, ValueError):
        return None
