"""`mlab grade`: score a loose submission (a file or a folder made outside a run) with the task's own scorer,
through the harness, and judge it against the task's baseline as runs are judged."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from mlab.core.plugins.registry import load_registry

from . import task_options
from .console import make_console


@click.command(short_help="Score a submission (a file or a folder) with TASK's scorer and judge it against "
                          "the baseline.")
@click.argument("task_name", metavar="TASK")
@click.argument("submission", metavar="FILE_OR_DIR", type=click.Path(exists=True, path_type=Path))
@click.option("--sandbox", default="auto", show_default=True,
              help="Sandbox of any submitted code the task's scorer runs (auto: bwrap, else local).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@task_options.task_params
def grade(task_name: str, submission: Path, sandbox: str, as_json: bool, task_params: tuple[str, ...]) -> None:
    """Score FILE_OR_DIR with TASK's scorer: a folder is scored as a run's workspace would be, a file as the only
    file in one (under its own name, e.g. submission.csv). A run folder is scored by its final workspace, and a run
    (its folder, workspace or a file there) with the run's task parameters unless -T is given. Prints the score,
    the baseline, the improvement and whether it counts as a success; exits 1 when the submission is invalid."""
    from mlab.core.bench.verdict import baseline_hint, judged, known_baseline, recorded_reference, success_text
    from mlab.core.run.checktask import reference_hint
    from mlab.core.run.harness import Harness
    from mlab.core.run.scoring import ScoreRule
    from mlab.core.run.task_params import labelled
    from mlab.core.run.task_params import shown as shown_params

    harness = Harness(load_registry(), sandbox=sandbox)
    params: dict[str, object] = dict(task_options.given_params(task_params))
    run_dir, submission = _run_of(submission)
    from_run = False
    if run_dir is not None and not params:
        # the run's -T values: the defaults' answers would judge it against other data
        ran, run_params = _run_task(run_dir)
        if run_params and ran == harness.task(task_name).name:
            params, from_run = run_params, True
    task = harness.task(task_name, params)
    harness.ensure_prepared(task)
    score, error = harness.scorer.score_path(task, submission)
    error = _misnamed(submission, error)
    harness.scored(task, (score, error))
    verdict = judged(score, known_baseline(task, harness.home), ScoreRule.of(task),
                     recorded_reference(harness.home, labelled(task)))
    # "of reference" stays unknown until check-task has measured the reference solution: say what measures it
    hint = reference_hint(task) if verdict.reference is None else None
    result = {"task": task.name, "task_params": dict(task.param_values), "submission": str(submission),
              "metric": task.metric.name,
              "higher_is_better": task.metric.higher_is_better, "score": score, "error": error, **verdict.fields(),
              "reference_hint": hint}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        console = make_console()
        if params:
            console.print(f"task parameters: {shown_params(task.param_values)}" + (" (the run's)" if from_run else ""),
                          highlight=False, markup=False)
        arrow = "higher" if task.metric.higher_is_better else "lower"
        if score is None:
            console.print(f"{task.name}: no {task.metric.name}: {error}", highlight=False, soft_wrap=True)
        else:
            console.print(f"{task.name}: {task.metric.name} = {score:.6g} ({arrow} is better)", highlight=False)
        if verdict.baseline is None:
            console.print(f"baseline: not known (run: {baseline_hint(task)})", highlight=False, markup=False)
        else:
            console.print(f"baseline: {verdict.baseline:.6g} ({verdict.baseline_source})", highlight=False)
        console.print(success_text(verdict), highlight=False, soft_wrap=True)
        if hint and score is not None:
            console.print(f"of reference: - (no reference score recorded; run: {hint})", highlight=False,
                          markup=False, soft_wrap=True)
    if score is None:
        sys.exit(1)


def _run_of(submission: Path) -> tuple[Path | None, Path]:
    """The run a graded path belongs to (its folder, its workspace, or a file in that), and what to score: a run
    folder's final workspace, else the path itself."""
    from mlab.core.run.trace import CONFIG_FILE

    def is_run(folder: Path) -> bool:
        return (folder / CONFIG_FILE).is_file() and (folder / "workspace").is_dir()

    path = submission.absolute()
    if path.is_dir() and is_run(path):
        return path, path / "workspace"
    if path.is_dir() and path.name == "workspace" and is_run(path.parent):
        return path.parent, submission
    if path.is_file() and path.parent.name == "workspace" and is_run(path.parent.parent):
        return path.parent.parent, submission
    return None, submission


def _run_task(run_dir: Path) -> tuple[str | None, dict[str, object]]:
    """The task and -T values a run's config.json records; none when it cannot be read."""
    from mlab.core.run.trace import CONFIG_FILE

    try:
        config = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        params = config.get("task_params") or {}
        return str(config.get("task")), dict(params) if isinstance(params, dict) else {}
    except (OSError, ValueError, AttributeError):
        return None, {}


def _misnamed(submission: Path, error: str | None) -> str | None:
    """A file graded under a name the task does not read: say so, rather than the task's words for an agent
    ("the script must write it"), which blame a script the user never ran."""
    missing = re.search(r"there is no (\S+) in the workspace", error or "")
    if not missing or not submission.is_file() or submission.name == missing.group(1):
        return error
    wanted = missing.group(1)
    return (f"the task scores a file named {wanted}, and a file is graded under its own name ({submission.name}): "
            f"rename or copy it to {wanted}")
