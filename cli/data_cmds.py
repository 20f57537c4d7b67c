"""Commands about task data: `mlab data` (the manifest of files each task's prepare needs, and fetching them) and
`mlab prepare` (one task, or every task whose files are in a --data-dir)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mlab.core.errors import MlabError
from mlab.core.plugins.registry import load_registry

from . import task_options
from .console import make_console

if TYPE_CHECKING:
    from mlab.core.run.harness import Harness
    from mlab.core.task import Task


def _tasks(registry: Any, names: tuple[str, ...], all_tasks: bool) -> list[Task]:
    if all_tasks and names:
        raise MlabError("give task names or --all, not both")
    if not all_tasks and not names:
        raise MlabError("give a task name, or --all")
    if all_tasks:
        return [registry.items["tasks"][n] for n in sorted(registry.items["tasks"])]
    return [registry.get("tasks", n) for n in names]


def _size(size: int | None) -> str:
    if size is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return "?"


@click.command(short_help="The files each task's prepare needs and where each goes; --download fetches "
                          "them.")
@click.argument("task_names", nargs=-1, metavar="[TASK]...")
@click.option("--all", "all_tasks", is_flag=True, help="Every installed task.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--download", "download_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Fetch the files into DIR (resuming partial downloads, verifying checksums).")
def data(task_names: tuple[str, ...], all_tasks: bool, as_json: bool, download_dir: str | None) -> None:
    """The files each task's prepare needs (URL, size, checksum, terms, where it goes under --data-dir); with
    --download, fetch them on a machine with internet."""
    from mlab.core.run.taskdata import data_files

    registry = load_registry()
    tasks = _tasks(registry, task_names, all_tasks)
    if download_dir is not None:
        _download(tasks, Path(download_dir))
        return
    rows = [{"task": task.name, **vars(f)} for task in tasks for f in data_files(task)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    console = make_console()
    if rows:
        _print_files(console, rows)
    without = [task.name for task in tasks if not data_files(task)]
    if without:
        verb = "generates its" if len(without) == 1 else "generate their"
        console.print(f"no files to fetch: {', '.join(without)} {verb} data at prepare", highlight=False,
                      markup=False)


def _print_files(console: Console, rows: list[dict[str, Any]]) -> None:
    """The files as a table whose sources and terms are numbered: each URL is printed whole on a line of its own
    under the table, where a terminal can open or copy it (a table cell would break it across lines)."""
    urls: dict[str, int] = {}

    def ref(url: str) -> str:
        return f"[{urls.setdefault(url, len(urls) + 1)}]"

    table = Table(title="mlab data: put each file at DIR/<path>, then mlab prepare TASK --data-dir DIR")
    for column in ("task", "path", "size", "checksum", "source", "terms"):
        table.add_column(column, overflow="fold", no_wrap=column in ("size", "source", "terms"))
    for r in rows:
        checksum = (f"sha256 {r['sha256']}" if r["sha256"] else f"md5 {r['md5']}" if r["md5"]
                    else f"none published; checked: {r['check'] or 'present'}")
        terms = r["terms"] or "-"
        table.add_row(escape(r["task"]), escape(r["path"]), _size(r["size"]), escape(checksum),
                      escape(f"{r['how']} {ref(r['url'])}"), escape(ref(terms) if "://" in terms else terms))
    console.print(table)
    for url, number in urls.items():
        console.print(f"[{number}] {url}", highlight=False, markup=False, soft_wrap=True)


def _download(tasks: list[Task], root: Path) -> None:
    """Fetch each task's files; one task's failure does not stop the others, and is named at the end."""
    root.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for task in tasks:
        fetch = getattr(task, "fetch_data", None)
        if fetch is None:
            continue
        click.echo(f"{task.name}: fetching into {root}", err=True)
        try:
            fetch(root, lambda msg: click.echo(f"  {msg}", err=True))
        except MlabError as exc:
            failed.append(f"{task.name}: {exc}")
    for line in failed:
        click.echo(f"mlab: error: {line}", err=True)
    if failed:
        sys.exit(1)
    click.echo(f"fetched into {root}; prepare with: mlab prepare --all --data-dir {root}")


@click.command()
@click.argument("task_name", metavar="[TASK]", required=False)
@click.option("--data-dir", type=click.Path(file_okay=False), help="Prepare from a local copy of the data.")
@click.option("--all", "all_tasks", is_flag=True,
              help="Prepare every task whose files are found (with --data-dir: laid out as `mlab data` says).")
@click.option("--force", is_flag=True, help="Prepare again, replacing an earlier preparation (and its baseline).")
@task_options.task_params
def prepare(task_name: str | None, data_dir: str | None, all_tasks: bool, force: bool,
            task_params: tuple[str, ...]) -> None:
    """Prepare a task's data (once; a second call does nothing unless --force)."""
    from mlab.core.run.harness import Harness

    harness = Harness(load_registry())
    if data_dir is not None and not Path(data_dir).is_dir():
        raise MlabError(f"data directory {data_dir!r} does not exist")
    if all_tasks:
        if task_name or task_params:
            raise MlabError("give a task name (with its -T values) or --all, not both")
        _prepare_all(harness, data_dir, force)
        return
    if not task_name:
        raise MlabError("give a task name, or --all")
    task = harness.task(task_name, task_options.given_params(task_params))
    done = _prepare_one(harness, task, data_dir, force)
    where = harness.home.task_dir(task)
    click.echo(f"{task.name}: {'prepared' if done else 'already prepared'} in {where}")


def _prepare_one(harness: Harness, task: Task, data_dir: str | None, force: bool) -> bool:
    try:
        return harness.prepare(task, data_dir, log=lambda msg: click.echo(msg, err=True), force=force)
    except FileNotFoundError as exc:
        raise MlabError(f"preparing {task.name} failed: {exc}") from exc


def _prepare_all(harness: Harness, data_dir: str | None, force: bool) -> None:
    """Every task whose files are found is prepared; the others are named with what is missing or why this
    machine cannot run them. Exit 1 when a prepare was refused or failed (bad files, a missing setting)."""
    from mlab.core.run.taskdata import data_files

    root = Path(data_dir).resolve() if data_dir else None
    prepared, missing, cannot, failed = [], [], [], []
    for name in sorted(harness.registry.items["tasks"]):
        task = harness.registry.items["tasks"][name]
        needed = data_files(task)
        folders = sorted({f.path.split("/")[0] for f in needed})
        if needed and (root is None or not all((root / folder).is_dir() for folder in folders)):
            missing.append(f"{task.name}: needs {', '.join(f.path for f in needed)}")
            continue
        try:
            task.check_runnable()
        except MlabError as exc:  # e.g. a GPU task on a machine without one: not a failure of its files
            cannot.append(f"{task.name}: {exc}")
            continue
        try:
            done = _prepare_one(harness, task, data_dir if needed else None, force)
            prepared.append(f"{task.name}: {'prepared' if done else 'already prepared'}")
        except MlabError as exc:
            failed.append(f"{task.name}: {exc}")
    for line in prepared:
        click.echo(line)
    if missing:
        where = f" in {root}" if root else " (no --data-dir)"
        click.echo(f"not prepared, files not found{where} (see: mlab data TASK):")
        for line in missing:
            click.echo(f"  {line}")
    if cannot:
        click.echo("not prepared, cannot run on this machine:")
        for line in cannot:
            click.echo(f"  {line}")
    if failed:
        click.echo("not prepared, prepare refused or failed:")
        for line in failed:
            click.echo(f"  {line}")
        sys.exit(1)
