"""`mlab check-task`: prepare a task from local data (twice, to see it is reproducible), run its baseline and
reference solution, compare."""
from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlab.core.errors import MlabError
from mlab.core.plugins.registry import load_registry

if TYPE_CHECKING:
    from mlab.core.plugins.registry import Registry
    from mlab.core.run.harness import Harness
    from mlab.core.run.taskdata import TaskHome
    from mlab.core.task import Task

from . import task_options
from .durations import Duration

# Exit codes beyond 0 (every check passed) and 2 (bad input): a check failed; else one was skipped (not checked).
FAILED_EXIT, SKIPPED_EXIT = 1, 3


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{value:.6g}"


@click.command("check-task")
@click.argument("task_names", nargs=-1, metavar="[TASK]...")
@click.option("--all", "all_tasks", is_flag=True, help="Check every installed task that has local data.")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Local copy of the data (one task); with several tasks use MLAB_DATA_DIR=<root>.")
@click.option("--home", type=click.Path(file_okay=False),
              help="MLAB_HOME to prepare into (default: a fresh temporary one, removed afterwards).")
@click.option("--timeout", "timeout_s", type=Duration(), default="2h", show_default=True,
              help="Time limit of the starter and of the reference script.")
@click.option("--margin", type=click.FloatRange(0, None), help="Required improvement (default: the task's, 0.10).")
@click.option("--sandbox", default="auto", show_default=True, help="Sandbox the scripts run in.")
@click.option("--json", "as_json", is_flag=True)
@task_options.task_params
def check_task(task_names: tuple[str, ...], all_tasks: bool, data_dir: str | None, home: str | None,
               timeout_s: float, margin: float | None, sandbox: str, as_json: bool,
               task_params: tuple[str, ...]) -> None:
    """Self-check tasks: two prepares in fresh homes must write the same files, and the reference solution must
    beat the baseline by the success margin."""
    from mlab.core.run.harness import Harness
    from mlab.core.run.taskdata import TaskHome

    registry = load_registry()
    checked: list[Task] = []
    scratch = tempfile.mkdtemp(prefix="mlab-check-")
    try:
        harness = Harness(registry, TaskHome(home or scratch), sandbox=sandbox)
        _ = harness.sandbox_cls  # resolving it makes an unknown sandbox fail before any work
        try:
            _check(harness, task_names, all_tasks, data_dir, timeout_s, margin, as_json,
                   task_options.given_params(task_params), checked, TaskHome(home) if home else TaskHome.from_env(),
                   sandbox)
        finally:
            if home is None:  # what the scratch home measured still serves "of reference" in MLAB_HOME
                _keep_references(TaskHome(scratch), TaskHome.from_env(), checked, registry)
    finally:
        _remove_after(scratch)


# Removes the folder argv[1] and what it holds, never following a link (bulk_remove), once the command is done.
_REMOVER = "import sys\nfrom mlab.core.fs.bulk_remove import remove_tree\nremove_tree(sys.argv[1])\n"


def _remove_after(folder: str) -> None:
    """The temporary home goes in a process of its own, which outlives this command: removing a task's prepared
    data (200,000 files freed on a disk mounted with discard) took minutes after the report was out. Removed
    here when no process can be started."""
    import subprocess

    try:
        subprocess.Popen([sys.executable, "-c", _REMOVER, folder], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        from mlab.core.fs.bulk_remove import remove_tree

        remove_tree(folder)


def _keep_references(measured: TaskHome, home: TaskHome, checked: list[Task], registry: Registry) -> None:
    """Copy the reference scores check-task recorded in a scratch home to the user's home, each under the name of
    the -T values it was measured with (installed tasks only: a task folder checked before it is packed has no
    name runs are judged by). Prepare is checked to be reproducible, so the score holds for the user's own
    prepared copy too."""
    from mlab.core.run.scoring import reference_path
    from mlab.core.run.task_params import labelled

    for task in checked:
        if task.name not in registry.items["tasks"]:
            continue
        source = reference_path(measured, labelled(task))
        if source.is_file():
            target = reference_path(home, labelled(task))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def _where(harness: Harness, task: Task, prepared: TaskHome, sandbox: str) -> tuple[Path | None, Harness | None]:
    """For a task prepare downloads, with no local copy given (no --data-dir or MLAB_DATA_DIR), prepared in the home:
    the copy it was prepared from, else (downloaded) a harness on its prepared data; (None, None) otherwise. Its
    data is never downloaded again to be checked."""
    from mlab.core.run.harness import Harness

    if not prepared.is_prepared(task):
        return None, None
    source = prepared.prepared_source(task)
    if source is not None:
        return source, None
    return None, harness if prepared.root == harness.home.root else Harness(harness.registry, prepared, sandbox)


def _check(harness: Harness, task_names: tuple[str, ...], all_tasks: bool, data_dir: str | None,
           timeout_s: float, margin: float | None, as_json: bool, params: dict[str, str], checked: list[Task],
           prepared: TaskHome, sandbox: str) -> None:
    from mlab.core.run.checktask import NOT_CHECKED
    from mlab.core.run.checktask import check_task as run_check
    from mlab.core.run.taskdata import source_for

    registry = harness.registry
    if all_tasks and task_names:
        raise MlabError("give task names or --all, not both")
    if not all_tasks and not task_names:
        raise MlabError("give a task name, or --all")
    if data_dir and (all_tasks or len(task_names) > 1):
        raise MlabError("--data-dir applies to one task; for several, set MLAB_DATA_DIR to a folder of copies")
    if params and all_tasks:
        raise MlabError("-T sets the parameters of the tasks named; give them instead of --all")
    if data_dir and not Path(data_dir).is_dir():
        raise MlabError(f"data directory {data_dir!r} does not exist")
    tasks = ([registry.items["tasks"][n] for n in sorted(registry.items["tasks"])] if all_tasks
             else [harness.task(n, params) for n in task_names])
    reports: list[dict[str, Any]] = []
    for task in tasks:
        source, on_prepared = (data_dir, None) if data_dir or task.offline_ready or source_for(task, None) else \
            _where(harness, task, prepared, sandbox)
        if all_tasks and not task.offline_ready and source is None and on_prepared is None:
            reports.append({"task": task.name, "status": "skipped",
                            "reason": "no local data (set MLAB_DATA_DIR)"})
            continue
        if not as_json:
            click.echo(f"checking {task.name} ...", err=True)
        checked.append(task)
        report = run_check(on_prepared or harness, task, data_dir=source, timeout_s=timeout_s, margin=margin,
                           log=lambda msg: None if as_json else click.echo(f"  {msg}", err=True),
                           reprepare=on_prepared is None)
        if all_tasks and report.status == "failed" and report.steps.get("prepare", "ok") != "ok" \
                and not task.offline_ready:
            report.status, report.reason = "skipped", f"no usable local data: {report.steps['prepare']}"
        reports.append(report.to_dict())
        if not as_json:
            gain = report.improvement
            shown = "-" if gain is None else f"{gain:+.1%}"
            source = f" ({report.baseline_source})" if report.baseline_source else ""
            click.echo(f"{task.name}: {report.status.upper()}  baseline {_fmt(report.baseline)}{source}  reference "
                       f"{_fmt(report.reference)}  improvement {shown}"
                       f" (margin {report.margin:.0%})" + (f"\n  {report.reason}" if report.reason else ""))
            if report.steps:  # every step, the reproducible prepare included, passed or not at a glance
                click.echo("  steps: " + ", ".join(
                    f"{step} {'ok' if what == 'ok' else NOT_CHECKED if what.startswith(NOT_CHECKED) else 'FAILED'}"
                    for step, what in report.steps.items()))
                for step, what in report.steps.items():
                    if what.startswith(NOT_CHECKED):
                        click.echo(f"  {step} {what}")
            if report.status == "failed":
                for step, tail in report.output_tail.items():
                    if tail and report.steps.get(step) != "ok":
                        click.echo(f"  last output of the {step} script:\n    " + tail.replace("\n", "\n    "))
    if as_json:
        click.echo(json.dumps(reports, indent=2))
    if any(r["status"] == "failed" for r in reports):
        sys.exit(FAILED_EXIT)
    if any(r["status"] == "skipped" or any(str(what).startswith(NOT_CHECKED) for what in r.get("steps", {}).values())
           for r in reports):
        sys.exit(SKIPPED_EXIT)
