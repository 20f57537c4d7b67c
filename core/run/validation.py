"""Harness-held validation: scoring an agent's predictions for a task's validation split (rows of its training
data, labels kept in the hidden folder, held out of the run's training files: held_out.py) with the task's own
evaluate, without the test answers in reach."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mlab.core.actions import OPT_IN_FLAGS, OPT_IN_SPECS, VALIDATE_SUBMISSION, ActionSpec
from mlab.core.agentkit.validation_observation import scored_observation
from mlab.core.errors import EnvError, InvalidSubmission, MlabError
from mlab.core.run.held_out import missing_held_out
from mlab.core.run.readonly import is_read_only
from mlab.core.task import Task, ValidationSplit

if TYPE_CHECKING:
    from mlab.core.models import Step
    from mlab.core.run.scoring import Scorer
    from mlab.core.run.workspace import Workspace

ALLOW_VALIDATE_FLAG = OPT_IN_FLAGS[VALIDATE_SUBMISSION]
_COPY_CHUNK = 1 << 20
# A score is told to this many significant digits: enough to compare models, fewer bits about the labels a call.
SIGNIFICANT_DIGITS = 3
# How a call that reached the scorer but scored nothing begins (after the environment's "EnvError: "): such calls
# count against the budget, and a resumed run counts them again from the trace (calls_made).
_COUNTED_ERROR = "Validate Submission call "


def calls_made(steps: Iterable[Step]) -> int:
    """Validate Submission calls of a trace's steps that reached the scorer: what a resumed run has used of its
    budget. Each such observation is a score (it starts with "Validation ") or a counted error; every other
    error of the action (a missing file, no calls left) begins with the harness's own words, never the agent's."""
    return sum(1 for step in steps if step.action.name == VALIDATE_SUBMISSION and (
        step.observation.startswith("Validation ") or step.observation.startswith(f"EnvError: {_COUNTED_ERROR}")))


def validation_split(task: Task) -> ValidationSplit:
    """The task's split, or an MlabError saying the task has none (a run asked for --allow-validate)."""
    if task.validation is None:
        raise MlabError(f"task {task.name!r} declares no validation split, so {ALLOW_VALIDATE_FLAG} cannot be used "
                        "with it")
    return task.validation


class Validator:
    """Scores predictions on one task's validation split, for the Validate Submission action of one run."""

    def __init__(self, task: Task, hidden_dir: Path, scorer: Scorer):
        self.task = task
        self.split = validation_split(task)
        self.hidden_dir = Path(hidden_dir)
        self.scorer = scorer
        self.max_calls = int(self.split.max_calls)
        self.calls = 0  # calls that reached the scorer, this run
        missing = [name for name in self.split.answers if not (self.hidden_dir / name).is_file()]
        if missing:  # a home prepared before the task declared its split
            raise MlabError(f"task {task.name!r} was prepared without its validation split ({', '.join(missing)} "
                            f"is missing); prepare it again: mlab prepare {task.name} --force")
        problem = missing_held_out(task, self.hidden_dir)
        if problem:  # prepared before the task held its validation rows out of the training data
            raise MlabError(problem)

    def spec(self) -> ActionSpec:
        """The action as this task offers it: the default predictions file named."""
        spec = OPT_IN_SPECS[VALIDATE_SUBMISSION]
        if self.split.held_out:
            origin = (f"rows removed from this run's {', '.join(sorted(self.split.held_out))}, so no model trained "
                      "on them")
        else:
            origin = "also rows of the training data: leave them out of training for an honest score"
        return spec.model_copy(update={
            "description": f"{spec.description} The inputs are {self.split.inputs} ({origin}); the predictions "
                           f"file has the format of the test submission. At most {self.max_calls} calls a run; "
                           f"scores are given to {SIGNIFICANT_DIGITS} significant digits.",
            "args": {"predictions_file": f"the predictions file, relative to the workspace (default "
                                         f"{self.split.predictions})"}})

    def validate(self, space: Workspace, predictions_file: str | None = None) -> str:
        given = predictions_file if predictions_file and predictions_file.strip() else self.split.predictions
        path = space.path(given)
        rel = space.rel(path)
        if is_read_only(rel, space.settings.read_only_patterns):
            raise EnvError(f"{given!r} is one of the task's data files, not predictions; write the predictions for "
                           f"{self.split.inputs} to a file of your own (default {self.split.predictions})")
        if not os.path.lexists(path):
            raise EnvError(f"there is no {given!r} in the workspace; write the predictions for {self.split.inputs} "
                           "there first")
        if self.calls >= self.max_calls:
            raise EnvError(f"no Validate Submission calls left: this run has used all {self.max_calls} (each score "
                           "tells something about the held-out labels)")
        limit = int(self.task.max_submission_bytes)
        with tempfile.TemporaryDirectory(prefix="mlab-validate-") as scratch:
            submission = Path(scratch) / "workspace"
            hidden = Path(scratch) / "hidden"
            submission.mkdir()
            hidden.mkdir()
            target = submission / self.split.submission
            target.parent.mkdir(parents=True, exist_ok=True)
            self._copy_bounded(space, given, target, limit)
            try:
                for kept, as_name in self.split.answers.items():  # the validation answers only: no test answer
                    shutil.copyfile(self.hidden_dir / kept, hidden / as_name)
            except OSError as exc:  # the agent is told what failed, never where the answers live
                raise EnvError(f"the validation answers cannot be read ({exc.strerror or type(exc).__name__}); "
                               "the task may need preparing again") from None
            self.calls += 1  # counted once the predictions reach the scorer, whatever it says of them
            try:
                with self.scorer.scoring(self.task):
                    score = float(self.task.evaluate(submission, hidden))
            except InvalidSubmission as exc:
                raise EnvError(f"{self._counted()}: invalid predictions in {given!r}: "
                               f"{self._in_terms_of(str(exc), given)}") from None
            except Exception as exc:
                raise EnvError(f"{self._counted()}: validation failed: {type(exc).__name__}: {exc}") from None
        return scored_observation(self.task.metric.name, given, float(f"{score:.{SIGNIFICANT_DIGITS}g}"),
                                  self.task.metric.higher_is_better, self.split.inputs, self.calls, self.max_calls)

    def resume(self, steps: Iterable[Step]) -> None:
        """A resumed run goes on with the calls its trace shows used."""
        self.calls = calls_made(steps)

    def _counted(self) -> str:
        return f"{_COUNTED_ERROR}{self.calls} of {self.max_calls}"

    @staticmethod
    def _copy_bounded(space: Workspace, given: str, target: Path, limit: int) -> None:
        """Copy the workspace file to scratch through a no-follow fd, refusing it past `limit` bytes."""
        fd, st = space.open_regular(given)
        with os.fdopen(fd, "rb") as source, open(target, "wb") as out:
            if st.st_size > limit:
                raise EnvError(f"{given!r} is {st.st_size} bytes, more than the {limit} the task reads")
            copied = 0
            while chunk := source.read(_COPY_CHUNK):
                copied += len(chunk)
                if copied > limit:  # it grew since fstat
                    raise EnvError(f"{given!r} is more than the {limit} bytes the task reads")
                out.write(chunk)

    def _in_terms_of(self, message: str, given: str) -> str:
        """The task's message about its submission file, told about the file the agent gave."""
        message = message.replace(self.split.submission, given)
        if self.split.test_inputs:
            message = message.replace(self.split.test_inputs, self.split.inputs)
        for test_words in ("test set", "test id", "test example"):
            message = message.replace(test_words, test_words.replace("test", "validation"))
        return message
