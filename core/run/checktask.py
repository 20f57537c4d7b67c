"""Self-check of a task: prepare it from local data, run its baseline and its reference solution, and check the
reference beats the baseline by the success margin. A broken task is caught before an agent spends hours on it.

A task opts in to the reference step by defining `reference_solution(workspace: Path) -> str | None`, which puts
its reference files into a fresh copy of the public workspace and returns the script to run (None: no
reference). Tasks may set `success_margin` (default 0.10, the original's "more than 10% better").
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from mlab.core.run import taskdata
from mlab.core.errors import InvalidSubmission, MlabError
from mlab.core.task import BaselineContext, Task

DEFAULT_MARGIN = 0.10


@dataclass
class CheckReport:
    task: str
    status: str = "failed"  # "passed", "failed" or "skipped"
    reason: str = ""
    margin: float = DEFAULT_MARGIN
    baseline: float | None = None
    reference: float | None = None
    improvement: float | None = None
    steps: dict[str, str] = field(default_factory=dict)  # step -> "ok" or what went wrong
    seconds: dict[str, float] = field(default_factory=dict)
    output_tail: dict[str, str] = field(default_factory=dict)  # the last lines a script printed

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.improvement is not None and math.isinf(self.improvement):
            data["improvement"] = "inf" if self.improvement > 0 else "-inf"
        return data


class _ScriptRun(Task):
    """Stands in for the task so the core's baseline machinery (sandbox, read-only files) runs our script."""

    def __init__(self, task: Task, prepare_workspace: Callable[[Path], str | None] | None, outputs: dict):
        self._task = task
        self._prepare_workspace = prepare_workspace
        self._outputs = outputs
        self.name = task.name
        self.read_only_files = list(task.read_only_files)
        self.resources = task.resources
        self.starter_script = task.starter_script
        self.worst_score = task.worst_score

    def prepare(self, ctx):  # never called: the real task was prepared first
        raise MlabError("internal: the check prepares the real task")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        return self._task.evaluate(workspace, hidden_dir)

    def baseline(self, ctx: BaselineContext) -> float:
        def run_script(name: str):
            result = ctx.run_script(name)
            self._outputs["output"] = getattr(result, "output", "")
            self._outputs["exit_code"] = getattr(result, "exit_code", None)
            return result

        wrapped = BaselineContext(workspace=ctx.workspace, hidden_dir=ctx.hidden_dir, run_script=run_script)
        if self._prepare_workspace is None:
            return self._task.baseline(wrapped)
        script = self._prepare_workspace(ctx.workspace)
        run_script(script)
        return self._task.evaluate(ctx.workspace, ctx.hidden_dir)


@contextmanager
def _home(path: Path | None):
    """Run with MLAB_HOME at path (a fresh temporary one when None), restoring it afterwards."""
    old = os.environ.get("MLAB_HOME")
    scratch = None
    if path is None:
        scratch = tempfile.mkdtemp(prefix="mlab-check-")
        path = Path(scratch)
    os.environ["MLAB_HOME"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("MLAB_HOME", None)
        else:
            os.environ["MLAB_HOME"] = old
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-lines:])


def check_task(task: Task, data_dir: str | Path | None = None, home: Path | None = None,
               timeout_s: float = 7200.0, margin: float | None = None,
               log: Callable[[str], None] = lambda _m: None) -> CheckReport:
    """Prepare (in a fresh MLAB_HOME unless home is given), run the baseline and the reference, compare."""
    from mlab.core.run.baseline import measure_baseline

    margin = float(margin if margin is not None else getattr(task, "success_margin", DEFAULT_MARGIN))
    report = CheckReport(task=task.name, margin=margin)
    check_runnable = getattr(task, "check_runnable", None)
    try:
        if callable(check_runnable):
            check_runnable()
    except MlabError as exc:
        report.status, report.reason = "skipped", str(exc)
        return report
    with _home(home):
        # 1. prepare from the local copy, and a second prepare must do nothing
        started = time.monotonic()
        try:
            taskdata.prepare(task, data_dir, log=log)
        except MlabError as exc:
            report.steps["prepare"] = str(exc)
            report.reason = f"prepare failed: {exc}"
            return report
        except Exception as exc:
            report.steps["prepare"] = f"{type(exc).__name__}: {exc}"
            report.reason = f"prepare crashed: {type(exc).__name__}: {exc}"
            return report
        report.seconds["prepare"] = round(time.monotonic() - started, 2)
        again = taskdata.prepare(task, data_dir, log=log)
        report.steps["prepare"] = "ok" if not again else "prepared a second time (should do nothing)"

        # 2. an empty workspace must be an invalid submission, not a crash
        with tempfile.TemporaryDirectory(prefix="mlab-check-empty-") as empty:
            try:
                task.evaluate(Path(empty), taskdata.hidden_dir(task))
                report.steps["invalid submission"] = "an empty workspace got a score"
            except InvalidSubmission:
                report.steps["invalid submission"] = "ok"
            except Exception as exc:
                report.steps["invalid submission"] = f"evaluate crashed: {type(exc).__name__}: {exc}"

        # 3. baseline, then 4. the reference solution, each in a fresh sandboxed workspace
        for step, prepare_workspace in (("baseline", None), ("reference", getattr(task, "reference_solution", None))):
            if step == "reference" and prepare_workspace is None:
                report.steps[step] = "the task has no reference solution"
                break
            outputs: dict = {}
            started = time.monotonic()
            try:
                scores = measure_baseline(_ScriptRun(task, prepare_workspace, outputs), runs=1,
                                          timeout_s=timeout_s, record=False)
                setattr(report, step, scores[0])
                report.steps[step] = "ok"
            except MlabError as exc:
                report.steps[step] = str(exc)
            except Exception as exc:
                report.steps[step] = f"{type(exc).__name__}: {exc}"
            report.seconds[step] = round(time.monotonic() - started, 2)
            report.output_tail[step] = _tail(outputs.get("output", ""))
            if report.steps[step] != "ok":
                break

    if report.baseline is not None and report.reference is not None:
        try:
            report.improvement = task.improvement(report.reference, report.baseline)
        except ZeroDivisionError:  # a zero baseline (the worst accuracy): any better score is an infinite gain
            better = (report.reference > report.baseline) == task.metric.higher_is_better
            report.improvement = math.inf if better and report.reference != report.baseline else 0.0
    problems = [f"{step}: {what}" for step, what in report.steps.items() if what != "ok"]
    if report.improvement is not None and report.improvement <= margin:
        problems.append(f"the reference improves on the baseline by {report.improvement:+.1%}, "
                        f"not more than the {margin:.0%} margin")
    report.status = "failed" if problems else "passed"
    report.reason = "; ".join(problems)
    return report
