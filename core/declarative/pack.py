"""Declarative packs: a plugin module (a package) with no hooks of its own whose folder holds task folders.

The manager hands every plugin module to `as_plugin`; a declarative pack comes back as a small plugin object whose
register_tasks registers one DeclarativeTask per `<package>/<task>/task.yaml`. A Python pack may also call
`tasks_from_folder` itself, to mix declarative tasks with its own.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from mlab.core.declarative.spec import TASK_FILE
from mlab.core.declarative.task import DeclarativeTask
from mlab.core.declarative.yamlfile import TaskFileError
from mlab.core.errors import MlabError
from mlab.core.hookspecs import has_hooks, hookimpl

# The pack of a task folder checked or run straight from disk, not installed: its tasks are `folder/NAME`.
FOLDER_PACK = "folder"


def task_folders(root: Path) -> list[Path]:
    """root itself when it is a task folder, else its subfolders that are, in name order."""
    root = Path(root)
    if (root / TASK_FILE).is_file():
        return [root]
    return sorted(child for child in root.iterdir() if child.is_dir() and (child / TASK_FILE).is_file()) \
        if root.is_dir() else []


def tasks_from_folder(root: Path | str, pack: str) -> tuple[list[DeclarativeTask], list[TaskFileError]]:
    """The tasks of every task folder under root (named pack/NAME), and the errors of the folders that are bad."""
    tasks: list[DeclarativeTask] = []
    errors: list[TaskFileError] = []
    for folder in task_folders(Path(root)):
        try:
            tasks.append(DeclarativeTask.from_folder(folder, pack))
        except TaskFileError as exc:
            errors.append(exc)
    return tasks, errors


class DeclarativePack:
    """The plugin object of a declarative pack."""

    def __init__(self, roots: list[Path], pack: str):
        self.roots = roots
        self.pack = pack

    def __repr__(self) -> str:
        return f"DeclarativePack({self.pack!r}, {[str(r) for r in self.roots]})"

    @hookimpl
    def register_tasks(self, register: Callable[[Any], None]) -> None:
        problems: list[TaskFileError] = []
        for root in self.roots:
            tasks, errors = tasks_from_folder(root, self.pack)
            for task in tasks:
                register(task)
            problems += errors
        if problems:
            # The good tasks stay registered; list-plugins shows the first bad file's line and field.
            more = f" (and {len(problems) - 1} more bad task file(s))" if len(problems) > 1 else ""
            raise MlabError(f"{problems[0]}{more}")


def as_plugin(module: object, pack: str) -> object:
    """module itself, unless it is a package without hooks holding task folders: then its DeclarativePack."""
    if not isinstance(module, ModuleType) or has_hooks(module):
        return module
    roots = [Path(p) for p in getattr(module, "__path__", [])]
    if not any(task_folders(root) for root in roots):
        return module
    return DeclarativePack(roots, pack)
