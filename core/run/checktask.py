"""Self-check of a task: prepare it from local data (twice, in fresh homes, to see it gives the same files), run
its baseline and its reference solution, and check the reference beats the baseline by the success margin. A
broken task is caught before an agent spends hours on it.

A task opts in to the reference step through `Task.reference_solution`; `Task.success_margin` is the margin.
Everything runs through the harness given: its task home and its sandbox.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlab.core.errors import InvalidSubmission, MlabError
from mlab.core.fs.bulk_remove import Removals, removals, remove_tree
from mlab.core.fs.tree_sums import tree_sums
from mlab.core.run.baseline import check_fixed_baseline
from mlab.core.run.harness import Harness
from mlab.core.run.scoring import ScoreRule, is_valid, judge, record_reference
from mlab.core.run.taskdata import TaskHome
from mlab.core.task import DEFAULT_SUCCESS_MARGIN, Task


@dataclass
class CheckReport:
    task: str
    status: str = "failed"  # "passed", "failed" or "skipped"
    reason: str = ""
    margin: float = DEFAULT_SUCCESS_MARGIN
    baseline: float | None = None  # what the reference is judged against: the fixed baseline, else the starter's
    baseline_source: str = ""
    starter: float | None = None  # the starter's own score (None: it submitted nothing valid)
    reference: float | None = None
    improvement: float | None = None
    steps: dict[str, str] = field(default_factory=dict)  # step -> "ok" or what went wrong
    seconds: dict[str, float] = field(default_factory=dict)
    output_tail: dict[str, str] = field(default_factory=dict)  # the last lines a script printed

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reference_hint(task: Task) -> str:
    """The command that records the task's reference score ("of reference" compares with it), as a user types it:
    a folder task by its path, with the -T values its reference is kept under (scoring.reference_path)."""
    import json
    import shlex

    from mlab.core.run.task_lookup import FOLDER_DIGEST
    from mlab.core.run.task_params import declared, typed_value

    folder = getattr(task, "folder", None) if hasattr(task, FOLDER_DIGEST) else None
    words = ["mlab", "check-task", str(folder) if folder else task.name]
    for name, param in declared(task).items():
        value = task.param_values.get(name)
        if name in task.param_values and value != typed_value(param.default, param.type):
            words += ["-T", f"{name}={json.dumps(value) if isinstance(value, bool) else value}"]
    return shlex.join(words)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-lines:])


REPRODUCIBLE = "reproducible prepare"
NOT_CHECKED = "not checked"  # a step's value that is no failure: nothing to check it with here
SHOWN_DIFFERENCES = 5


def check_reproducible_prepare(harness: Harness, task: Task, data_dir: str | Path | None, prepared_now: bool,
                               log: Callable[[str], None] = lambda _m: None, later: Removals | None = None,
                               home_digest: dict[str, tuple[str, str]] | None = None) -> str:
    """"ok" when two prepares in fresh homes write the same public and hidden files, else what differs.

    The harness's home counts as the first when it was prepared just now; one prepared earlier (a reused
    --home) may come from an older version of the task, so then both prepares are made here. The scratch
    homes sit beside the harness's home, on the same disk as the data, and are removed afterwards: by `later`
    while the caller goes on, when given (a task's data may take minutes to remove). The harness's home is
    digested while the second prepare runs, once: `home_digest`, when given, receives it (inputs_of)."""
    harness.home.root.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".mlab-reprepare-", dir=harness.home.root)
    try:
        homes = [harness.home] if prepared_now else []
        homes += [TaskHome(Path(scratch) / f"home{i}") for i in range(2 - len(homes))]
        with ThreadPoolExecutor(1, thread_name_prefix="mlab-digest") as pool:
            ahead = pool.submit(prepared_sums, harness.home, task) if prepared_now else None
            try:
                for home in homes:
                    if home is harness.home:
                        continue
                    try:
                        home.prepare(task, data_dir, log=lambda msg: log(f"(again) {msg}"),
                                     sandbox=harness.pack_sandbox)
                    except Exception as exc:
                        return f"preparing again in a fresh home failed: {type(exc).__name__}: {exc}"
                first, second = (ahead.result() if home is harness.home and ahead else prepared_sums(home, task)
                                 for home in homes)
            finally:
                if ahead is not None:
                    ahead.cancel()
        if prepared_now and home_digest is not None:
            home_digest.update(first)
    finally:
        if later is not None:
            later.remove(_out_of_sight(harness.home, scratch))
        else:
            remove_tree(scratch)
    differing = [path for path in sorted(first.keys() | second.keys()) if first.get(path) != second.get(path)]
    if not differing:
        return "ok"
    # only the top of a differing folder: its entries would repeat the same news
    tops = [p for p in differing if not any(p.startswith(f"{q}/") for q in differing if q != p)]
    shown = ", ".join(f"{path} ({_difference(first.get(path), second.get(path))})"
                      for path in tops[:SHOWN_DIFFERENCES])
    more = f" and {len(tops) - SHOWN_DIFFERENCES} more" if len(tops) > SHOWN_DIFFERENCES else ""
    return (f"two prepares in fresh homes differ: {shown}{more}; prepare must write the same files every time "
            f"(seeded generators such as random.Random(seed), no OS randomness, times or host names)")


PARTS = ("public", "hidden")


def prepared_sums(home: TaskHome, task: Task) -> dict[str, tuple[str, str]]:
    """What prepare wrote, by "public/..." and "hidden/..." path (fs.tree_sums of each); the folder's own records
    (prepared.json, baseline.json) are left out: they hold times and scores."""
    return {f"{part}/{path}": entry for part in PARTS
            for path, entry in tree_sums(home.task_dir(task) / part).items()}


def inputs_of(digest: dict[str, tuple[str, str]]) -> str:
    """taskdata.inputs_fingerprint of a prepared folder, from its digest (prepared_sums): what a recorded
    reference was measured on (carry_references compares it), without reading the files again."""
    sha = hashlib.sha256()
    for part in PARTS:
        for path in sorted(p for p in digest if p.startswith(f"{part}/")):
            kind, content = digest[path]
            sha.update(f"{path}\0{kind}\0{content}\n".encode())
    return sha.hexdigest()


def _out_of_sight(home: TaskHome, scratch: str) -> str:
    """The scratch homes (hidden answers among them) moved below the task data, which no sandbox sees, while
    they are removed as the baseline and reference run."""
    hidden = home.data_root / f".mlab-removing{Path(scratch).name}"
    try:
        home.data_root.mkdir(parents=True, exist_ok=True)
        os.rename(scratch, hidden)
    except OSError:
        remove_tree(scratch)  # not movable there: removed now
        return scratch
    return str(hidden)


def _difference(first: tuple[str, str] | None, second: tuple[str, str] | None) -> str:
    if first is None or second is None:
        return "only in the " + ("second" if first is None else "first")
    if first[0] != second[0]:
        return f"a {first[0]}, then a {second[0]}"
    return {"file": "content", "symlink": "target"}.get(first[0], "differs")


def _validation_problem(harness: Harness, task: Task) -> str | None:
    """What is missing of the task's validation split after prepare, or None."""
    split = task.validation
    assert split is not None
    public, hidden = harness.home.public_dir(task), harness.home.hidden_dir(task)
    if not (public / split.inputs).is_file():
        return f"prepare wrote no validation inputs {split.inputs}"
    for kept, as_name in split.answers.items():
        if not (hidden / kept).is_file():
            return f"prepare wrote no validation answers {kept} to the hidden folder"
        if kept == as_name:
            return f"the validation answers {kept} are the file the test answers are read from"
    return None


def check_task(harness: Harness, task: Task, data_dir: str | Path | None = None, timeout_s: float = 7200.0,
               margin: float | None = None, log: Callable[[str], None] = lambda _m: None,
               reprepare: bool = True) -> CheckReport:
    """Prepare into the harness's home, run the baseline and the reference in its sandbox, compare. The scratch
    homes of the reproducibility check are removed while the baseline and reference run, and gone on return.
    Without `reprepare` (a task prepared from a download, with no copy to prepare again from) the check of a
    reproducible prepare is left out and said to be."""
    with removals() as later:
        return _check_task(harness, task, data_dir, timeout_s, margin, log, later, reprepare)


def _check_task(harness: Harness, task: Task, data_dir: str | Path | None, timeout_s: float,
                margin: float | None, log: Callable[[str], None], later: Removals,
                reprepare: bool = True) -> CheckReport:
    margin = float(margin if margin is not None else task.success_margin)
    report = CheckReport(task=task.name, margin=margin)
    try:
        task.check_runnable()
    except MlabError as exc:
        report.status, report.reason = "skipped", str(exc)
        return report
    # 1. prepare from the local copy, and a second prepare must do nothing
    started = time.monotonic()
    try:
        prepared_now = harness.prepare(task, data_dir, log=log)
    except MlabError as exc:
        report.steps["prepare"] = str(exc)
        report.reason = f"prepare failed: {exc}"
        return report
    except Exception as exc:
        report.steps["prepare"] = f"{type(exc).__name__}: {exc}"
        report.reason = f"prepare crashed: {type(exc).__name__}: {exc}"
        return report
    report.seconds["prepare"] = round(time.monotonic() - started, 2)
    again = harness.prepare(task, data_dir, log=log)
    report.steps["prepare"] = "ok" if not again else "prepared a second time (should do nothing)"
    # 1b. a prepare in a fresh home must write the same files: baselines and scores then compare across machines.
    # It runs beside the steps below: a second prepare and two digests took minutes at 200,000 files.
    home_digest: dict[str, tuple[str, str]] = {}
    report.steps[REPRODUCIBLE] = "" if reprepare else (
        f"{NOT_CHECKED}: the task was prepared from a download, with no local copy to prepare again from "
        "(give --data-dir)")

    def reproducible() -> str:
        started = time.monotonic()
        try:
            return check_reproducible_prepare(harness, task, data_dir, prepared_now, log, later, home_digest)
        except Exception as exc:  # a digest that failed: told as the step's failure, as a prepare's is
            return f"checking it failed: {type(exc).__name__}: {exc}"
        finally:
            report.seconds[REPRODUCIBLE] = round(time.monotonic() - started, 2)

    with ThreadPoolExecutor(1, thread_name_prefix="mlab-reprepare") as pool:
        beside = pool.submit(reproducible) if reprepare else None
        try:
            reference = _run_checks(harness, task, timeout_s, report)
        finally:
            if beside is not None:
                report.steps[REPRODUCIBLE] = beside.result()
    if is_valid(reference):  # for "of reference", with the data it was measured on (digested once, above)
        record_reference(harness.home, task, reference, harness.sandbox_name,
                         inputs=inputs_of(home_digest or prepared_sums(harness.home, task)))

    rule = ScoreRule(higher_is_better=task.metric.higher_is_better, success_margin=margin)
    verdict = judge(report.reference, report.baseline, rule) if report.baseline is not None else None
    report.improvement = verdict.improvement if verdict else None
    problems = [f"{step}: {what}" for step, what in report.steps.items()
                if what != "ok" and not what.startswith(NOT_CHECKED)]
    if verdict is not None and report.reference is not None and not verdict.success:
        shown = verdict.refused or ("an undefined amount" if verdict.improvement is None
                                    else f"{verdict.improvement:+.1%}")
        problems.append(f"the reference improves on the baseline by {shown}, not more than the {margin:.0%} margin")
    report.status = "failed" if problems else "passed"
    report.reason = "; ".join(problems)
    return report


def _run_checks(harness: Harness, task: Task, timeout_s: float, report: CheckReport) -> float | None:
    """The validation split, an empty workspace, the baseline and the reference solution, into report; returns
    the reference's score, to be recorded."""
    # 1c. a declared validation split must be there, apart from the test answers
    if task.validation is not None:
        report.steps["validation split"] = _validation_problem(harness, task) or "ok"

    # 2. an empty workspace must be an invalid submission, not a crash
    with tempfile.TemporaryDirectory(prefix="mlab-check-empty-") as empty:
        try:
            task.evaluate(Path(empty), harness.home.hidden_dir(task))
            report.steps["invalid submission"] = "an empty workspace got a score"
        except InvalidSubmission:
            report.steps["invalid submission"] = "ok"
        except Exception as exc:
            report.steps["invalid submission"] = f"evaluate crashed: {type(exc).__name__}: {exc}"

    # 3. baseline, then 4. the reference solution, each in a fresh sandboxed workspace
    fixed_problem = check_fixed_baseline(task)
    if fixed_problem:
        report.steps["fixed baseline"] = fixed_problem
    for step in ("baseline", "reference"):
        put_files = task.reference_solution if step == "reference" else None
        started = time.monotonic()
        try:
            outcome = harness.run_script_fresh(task, timeout_s, put_files)
            report.output_tail[step] = _tail(outcome.output)
            if step == "reference":
                report.reference = outcome.score
            else:
                report.starter = outcome.score if is_valid(outcome.score) else None
                report.baseline = report.starter
                report.baseline_source = "measured (1 starter run)"
                if task.fixed_baseline is not None and not fixed_problem:
                    # judged against the fixed number; the starter may submit nothing (house-price's does not)
                    report.baseline = float(task.fixed_baseline)
                    report.baseline_source = f"fixed: {task.fixed_baseline_source}"
                    outcome.score = report.baseline
            report.steps[step] = "ok" if outcome.score is not None else (outcome.error or "no score")
        except MlabError as exc:
            report.steps[step] = str(exc)
        except Exception as exc:
            report.steps[step] = f"{type(exc).__name__}: {exc}"
        report.seconds[step] = round(time.monotonic() - started, 2)
        if report.steps[step] != "ok":
            if step == "reference" and report.steps[step].endswith("has no reference solution"):
                report.steps[step] = "the task has no reference solution"
            break
    return report.reference
