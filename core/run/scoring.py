"""Scoring: a submission's score (a snapshot or workspace scored by its task in a scratch folder) and the one
definition of what a score means against a baseline (validity, improvement, success)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from mlab.core.errors import InvalidSubmission
from mlab.core.run.readonly import is_read_only
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.taskdata import TaskHome
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.task import DEFAULT_SUCCESS_MARGIN, Task
from mlab.core.task_context import ScoringContext, scoring_with


# ---- what a score means ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScoreRule:
    """What judging a task's score needs: the metric's direction and the task's success margin."""

    higher_is_better: bool = True
    success_margin: float = DEFAULT_SUCCESS_MARGIN

    @classmethod
    def of(cls, task: Task) -> ScoreRule:
        return cls(higher_is_better=task.metric.higher_is_better, success_margin=float(task.success_margin))


@dataclass(frozen=True)
class Verdict:
    valid: bool  # a finite score above 0 (the original's validity rule)
    improvement: float | None  # relative to the baseline, positive when better; None without both numbers
    success: bool  # improvement above the task's success margin
    refused: str | None = None  # why no improvement can be given for this baseline (0, negative, not finite)
    note: str | None = None  # what success means against this baseline when it means little (baseline_note)


def is_valid(score: float | None) -> TypeGuard[float]:
    return score is not None and math.isfinite(score) and score > 0


def baseline_refusal(baseline: float | None) -> str | None:
    """Why improvement over this baseline is undefined, or None when it is a valid score. As in the original,
    a baseline must itself be a valid score: over 0 any change would be unbounded."""
    if baseline is None:
        return None
    if not is_valid(baseline):
        return f"baseline {baseline:g} is not a valid score (it must be finite and above 0)"
    return None


# The original's fixed 1e10 (house-price's MAE) and 1e-10 (fathomnet's MAP) stand for "no baseline": no score a
# submission can reach is that bad, so success against them says only that the submission is valid.
PLACEHOLDER_HIGH = 1e9
PLACEHOLDER_LOW = 1e-9


def baseline_note(baseline: float | None, rule: ScoreRule) -> str | None:
    """A note for every output that shows success when the baseline is a placeholder that any valid submission
    beats; None for a baseline that discriminates."""
    if not is_valid(baseline):
        return None
    if (baseline >= PLACEHOLDER_HIGH) if not rule.higher_is_better else (baseline <= PLACEHOLDER_LOW):
        return f"fixed baseline {baseline:g}: any valid submission succeeds"
    return None


def improvement(score: float | None, baseline: float | None, higher_is_better: bool) -> float | None:
    """(score - baseline) / baseline, sign flipped when lower is better; None without a valid score and a valid
    baseline."""
    if not is_valid(score) or not is_valid(baseline):
        return None
    change = (score - baseline) / baseline
    return change if higher_is_better else 0.0 - change  # 0.0 - x: no negative zero in reports


def reference_ratio(score: float | None, reference: float | None, higher_is_better: bool) -> float | None:
    """score / reference (reference / score when lower is better): 1.0 is the reference solution's level."""
    if not is_valid(score) or not is_valid(reference):
        return None
    ratio = score / reference if higher_is_better else reference / score
    return ratio if math.isfinite(ratio) else None


def judge(score: float | None, baseline: float | None, rule: ScoreRule | Task) -> Verdict:
    """The one place that turns (score, baseline, task) into validity, improvement and success."""
    if isinstance(rule, Task):
        rule = ScoreRule.of(rule)
    gain = improvement(score, baseline, rule.higher_is_better)
    return Verdict(valid=is_valid(score), improvement=gain, success=gain is not None and gain > rule.success_margin,
                   refused=baseline_refusal(baseline), note=baseline_note(baseline, rule))


# ---- the reference score: what "of reference" compares with (check-task records it) --------------------
REFERENCE_FILE = "reference.json"


class _Named:
    def __init__(self, name: str):
        self.name = name


def reference_path(home: TaskHome, task_name: str) -> Path:
    """task_name as reports name a task (task_params.labelled): with -T values other than its defaults it has a
    reference of its own, beside the defaults' one."""
    name, labelled, values = task_name.partition(" [")
    file = f"reference-{hashlib.sha256(values.encode()).hexdigest()[:12]}.json" if labelled else REFERENCE_FILE
    return home.task_dir(_Named(name)) / file


def record_reference(home: TaskHome, task: Task, score: float | None, sandbox: str, inputs: str | None = None) -> None:
    """Keep the reference solution's score (check-task measured it) beside the task's baseline record; `inputs`:
    the prepared data's fingerprint when the caller has it (check-task digested the data already)."""
    if not is_valid(score):
        return
    from mlab.core.run.task_params import labelled

    path = reference_path(home, labelled(task))  # per -T values: another value may well score otherwise
    path.parent.mkdir(parents=True, exist_ok=True)
    # the data it was measured on: a later prepare keeps the score only for the same data (carry_references)
    if inputs is None and home.is_prepared(task):
        inputs = home.inputs_fingerprint(task)
    path.write_text(json.dumps({"task": task.name, "score": score, "sandbox": sandbox, "inputs": inputs}, indent=1))


def recorded_reference(home: TaskHome, task_name: str) -> float | None:
    """The recorded reference score; None when check-task has not recorded one or the file is not a number."""
    try:
        record = json.loads(reference_path(home, task_name).read_text())
    except (OSError, ValueError):
        return None
    score = record.get("score") if isinstance(record, dict) else None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not is_valid(float(score)):
        return None
    return float(score)


# ---- scoring submissions -----------------------------------------------------------------------------
SHM_MAX_BYTES = 64 * 2**20


def _scratch_root(size: int) -> str | None:
    """Small snapshots are scored in memory: creating and deleting thousands of scratch folders on a disk
    mounted with `discard` costs more than the scoring itself."""
    if size <= SHM_MAX_BYTES and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return None


Score = tuple[float | None, str | None]  # (score, why there is none)

# A prepared folder is never changed in place (a prepare puts a new task folder, with a new prepared.json, in the
# old one's place), so its read-only files are listed once per process (a bench's zygote lists them for every run
# it forks), by (public folder, its and prepared.json's identity, the task's read-only patterns).
_READ_ONLY_LISTED: dict[tuple[object, ...], list[Path]] = {}


def read_only_files(home: TaskHome, task: Task) -> list[Path]:
    """The task's read-only files in its prepared public folder (none when there is no such folder)."""
    public = home.public_dir(task)
    try:
        folder = public.stat()
    except OSError:
        return []
    try:
        marker = (home.task_dir(task) / "prepared.json").stat()
        prepared: tuple[int, int] | None = (marker.st_ino, marker.st_mtime_ns)
    except OSError:
        prepared = None
    key = (str(public), folder.st_dev, folder.st_ino, folder.st_mtime_ns, prepared, tuple(task.read_only_files))
    if key not in _READ_ONLY_LISTED:
        _READ_ONLY_LISTED[key] = [p for p in public.rglob("*") if p.is_file() and is_read_only(
            p.relative_to(public).as_posix(), list(task.read_only_files))] if public.is_dir() else []
    return list(_READ_ONLY_LISTED[key])


def _local_sandbox() -> Sandbox:
    from mlab.core.sandbox.local import LocalSandbox

    return LocalSandbox()


class Scorer:
    """Scores snapshots in scratch folders: the snapshot's files plus links to the task's read-only files.
    Whatever a task's evaluate runs of the agent's (ScoringContext) runs in `new_sandbox()` under `limits`, and
    of its own pack's (a declarative scorer) in `task_sandbox()`, which confines."""

    def __init__(self, home: TaskHome, new_sandbox: Callable[[], Sandbox] | None = None,
                 limits: Limits | None = None, task_sandbox: Callable[[], Sandbox] | None = None):
        self.home = home
        self.new_sandbox = new_sandbox or _local_sandbox
        self.task_sandbox = task_sandbox
        self.limits = limits or Limits()
        self._read_only: dict[str, list[Path]] = {}

    def context(self, task: Task) -> ScoringContext:
        """What the task's evaluate runs agent code with: the run's sandbox and limits, the task's scoring
        timeout, every task's data hidden (this home's and the environment's MLAB_HOME)."""
        hidden = [self.home.data_root]
        default = TaskHome.from_env().data_root
        if default != self.home.data_root:
            hidden.append(default)
        limits = self.limits.model_copy(update={"timeout_s": float(task.scoring_timeout_s)})
        return ScoringContext(new_sandbox=self.new_sandbox, limits=limits, hidden_paths=hidden,
                              task_sandbox=self.task_sandbox)

    @contextmanager
    def scoring(self, task: Task) -> Iterator[ScoringContext]:
        """The block in which task's evaluate finds this scorer's context through scoring_context()."""
        with scoring_with(self.context(task)) as ctx:
            yield ctx

    def _read_only_files(self, task: Task) -> list[Path]:
        if task.name not in self._read_only:  # listing a large public folder once per task, not per snapshot
            self._read_only[task.name] = read_only_files(self.home, task)
        return self._read_only[task.name]

    def score_folder(self, task: Task, folder: Path) -> Score:
        """The task's score of a folder holding a submission; never raises for a bad submission."""
        try:
            with self.scoring(task):
                return float(task.evaluate(folder, self.home.hidden_dir(task))), None
        except InvalidSubmission as exc:
            return None, f"invalid submission: {exc}"
        except Exception as exc:
            return None, f"evaluation failed: {type(exc).__name__}: {exc}"

    def score_snapshot(self, task: Task, run_dir: Path, snapshot: str) -> Score:
        store = SnapshotStore(Path(run_dir))
        try:
            size = sum(entry["size"] for entry in store.manifest(snapshot).values())
        except (OSError, ValueError) as exc:
            return None, f"snapshot {snapshot} is unreadable: {exc}"
        with tempfile.TemporaryDirectory(prefix="mlab-eval-", dir=_scratch_root(size)) as scratch:
            target = Path(scratch)
            try:
                store.materialize(snapshot, target)
            except FileNotFoundError as exc:
                return None, f"snapshot {snapshot} is missing: {exc}"
            self._link_read_only_files(task, target)
            return self.score_folder(task, target)

    def _link_read_only_files(self, task: Task, target: Path) -> None:
        """The task's read-only files (its data) beside a submission, as links: a submission never holds them."""
        public = self.home.public_dir(task)
        for path in self._read_only_files(task):
            link = target / path.relative_to(public)
            if not os.path.lexists(link):
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(path, link)

    def score_path(self, task: Task, path: Path) -> Score:
        """A loose submission (`mlab grade`): a folder scored as a run's workspace, or one file scored as the only
        file an agent wrote, under its own name; either is copied to scratch first (links are not followed, so
        nothing outside it is read) and the task's read-only files are linked in."""
        from mlab.core.run.intake import submission_files, taken_in  # kinds and sizes checked before any copy

        with taken_in(Path(path), int(task.max_submission_bytes), submission_files(task)) as target:
            self._link_read_only_files(task, target)
            return self.score_folder(task, target)
