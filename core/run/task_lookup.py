"""Finding a task: by its registered name or as a declarative task folder (a path holding task.yaml, run or checked
before it is packed), with the parameters given; and finding a run's task again from its config, the folder
included, so `eval`, `report`, `export` and `--resume` need no installed pack."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.errors import MlabError
from mlab.core.run.task_params import param_values, with_values

if TYPE_CHECKING:
    from mlab.core.declarative.task import DeclarativeTask
    from mlab.core.models import RunConfig
    from mlab.core.plugins.registry import Registry
    from mlab.core.task import Task

TASK_FILE = "task.yaml"
# The attribute of a folder task holding the digest of its folder's files, recorded in its runs' configs.
FOLDER_DIGEST = "folder_digest"


def names_a_path(name: str) -> bool:
    """A name written as a path (./x, ../x, /x, ~/x, x/ or one that exists), not as a task (pack/name)."""
    return name.startswith((".", "/", "~")) or name.endswith("/") or os.path.lexists(name)


# Folders of a task folder that are not the task: version control's and Python's caches change without the task
# changing (a commit, an import), and .git can outgrow the task many times over. Neither read nor hashed.
NOT_THE_TASK = frozenset({".git", ".hg", ".svn", "__pycache__"})


def folder_digest(folder: Path) -> str:
    """One sha256 over a task folder's entries (paths, kinds and file contents, symlinks by target), at any depth:
    task.yaml, its scripts, its data and any other file, so a change to any of them is a changed task. Folders
    named in NOT_THE_TASK (.git, .hg, .svn, __pycache__), wherever they lie, are left out."""
    from mlab.core.fs.tree_sums import tree_sums

    digest = hashlib.sha256()
    for path, (kind, content) in tree_sums(folder, skip=NOT_THE_TASK).items():
        digest.update(f"{path}\0{kind}\0{content}\n".encode())
    return digest.hexdigest()


def load_folder(folder: Path) -> DeclarativeTask:
    """The declarative task of a folder, named folder/NAME, whose prepared data is its own: the folder's digest is
    part of the data's name, so a changed folder is prepared again and two folders of one NAME never share."""
    from mlab.core.declarative.pack import FOLDER_PACK
    from mlab.core.declarative.task import DeclarativeTask
    from mlab.core.run.task_params import DATA_KEY

    task = DeclarativeTask.from_folder(folder, FOLDER_PACK)
    digest = folder_digest(task.folder)
    setattr(task, FOLDER_DIGEST, digest)
    setattr(task, DATA_KEY, f"{task.name.replace('/', '__')}-{digest[:12]}")
    return task


def find_task(registry: Registry, name: str, given: Mapping[str, Any] | None = None) -> Task:
    """A registered task, or a declarative task folder (a path holding task.yaml, or the task.yaml itself), with
    the parameters given (-T): a bad task.yaml, an unknown parameter or a badly typed value is one line."""
    if _written_as_name(name) and _registered(registry, name):  # an installed task beats a folder it names
        return bind(registry.get("tasks", name), given or {})
    path = Path(name).expanduser()
    if path.name == TASK_FILE:
        path = path.parent
    if (path / TASK_FILE).is_file():
        return bind(load_folder(path), given or {})
    if names_a_path(name):
        if path.is_dir():
            raise MlabError(f"{name!r} is a folder without a task.yaml; a task folder holds one "
                            "(mlab new-task DIR writes a scaffold)")
        if path.exists():
            raise MlabError(f"{name!r} is a file, not a task folder (a folder holding task.yaml)")
        raise MlabError(f"the folder {name!r} does not exist; give a task folder (holding task.yaml) or an "
                        "installed task (see: mlab tasks)")
    task: Task = registry.get("tasks", name)
    return bind(task, given or {})


def _written_as_name(name: str) -> bool:
    """Not written as a path (no ./, /, ~ or trailing /): a task name that a file of the folder happens to share."""
    return not (name.startswith((".", "/", "~")) or name.endswith("/"))


def _registered(registry: Registry, name: str) -> bool:
    try:
        registry.get("tasks", name)
    except MlabError:
        return False
    return True


def bind(task: Task, given: Mapping[str, Any]) -> Task:
    """task with every declared parameter's value (given, else the default); a task that declares none and gets
    none is itself."""
    values = param_values(task, given)
    if not values and not getattr(task, "params", None):
        return task
    return with_values(task, values)


def run_fields(task: Task) -> dict[str, Any]:
    """What a run's config records of its task: the name, the folder and its digest for a folder task, and the
    parameters' values."""
    folder = getattr(task, "folder", None) if hasattr(task, FOLDER_DIGEST) else None
    return {"task": task.name, "task_folder": str(folder) if folder else None,
            "task_digest": getattr(task, FOLDER_DIGEST, None), "task_params": dict(task.param_values)}


_FOUND: dict[tuple[int, str, str | None, str], Task] = {}


def task_of_run(registry: Registry, config: RunConfig) -> Task:
    """The task a run ran: its folder's (when it ran from one) or the registered one, with the run's parameters.
    A folder that is gone or changed since the run is one line: its scores would not mean the same."""
    key = (id(registry), config.task, config.task_folder, json.dumps(config.task_params, sort_keys=True))
    if key in _FOUND:
        return _FOUND[key]
    if config.task_folder:
        folder = Path(config.task_folder)
        if not (folder / TASK_FILE).is_file():
            raise MlabError(f"task {config.task} of this run came from the folder {str(folder)!r}, which holds no "
                            f"{TASK_FILE} any more; put the folder back to score or resume the run")
        task: Task = load_folder(folder)
        if config.task_digest and getattr(task, FOLDER_DIGEST) != config.task_digest:
            raise MlabError(f"the task folder {str(folder)!r} changed since the run (task {config.task}), so scoring "
                            f"or resuming it would not mean the same; put its files back as they were, or start a new "
                            f"run: mlab run --task {folder}")
    else:
        task = registry.get("tasks", config.task)
    found = _FOUND[key] = bind(task, config.task_params)
    return found


def prepare_args(task: Task) -> str:
    """What `mlab prepare` needs to prepare this task's data: its name (or folder) and the -T values that change it."""
    import shlex

    from mlab.core.run.task_params import declared, typed_value

    folder = getattr(task, "folder", None) if hasattr(task, FOLDER_DIGEST) else None
    words = [str(folder) if folder else task.name]
    for name, param in declared(task).items():
        value = task.param_values.get(name)
        if param.changes_data and name in task.param_values and value != typed_value(param.default, param.type):
            words += ["-T", f"{name}={json.dumps(value) if isinstance(value, bool) else value}"]
    return shlex.join(words)
