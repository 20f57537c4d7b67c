"""Validation rows held out of the training data: for each training file a task's validation split names, prepare
writes a copy without the validation rows into the hidden folder, and a run started with --allow-validate gets
that copy at the file's workspace path. Its Validate Submission score is then on rows no model of the run trained
on; runs without the flag (seed-comparable ones, baselines, check-task) see the full file and none of the split's
own files (validation_only_files), as in the original."""
from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from mlab.core.errors import MlabError
from mlab.core.run.readonly import SHARE_MIN_BYTES
from mlab.core.task import Task

HELD_OUT_DIR = "without_validation"  # below the hidden folder: the held-out copies, at their workspace paths


def held_out_files(task: Task) -> dict[str, str]:
    """Workspace path of each training file the task holds validation rows out of -> its id column."""
    return dict(task.validation.held_out) if task.validation is not None else {}


def validation_only_files(task: Task) -> list[str]:
    """Public files that only the task's validation split uses (its inputs first): a workspace holds them only
    in a run started with --allow-validate."""
    split = task.validation
    return [split.inputs, *split.more_inputs] if split is not None else []


def drop_validation_files(task: Task, workspace: Path) -> list[str]:
    """Remove the validation split's files from a freshly staged workspace of a run without --allow-validate, so
    it holds the original task's files only. Returns the removed paths."""
    removed = []
    for rel in validation_only_files(task):
        target = Path(workspace) / rel
        if os.path.lexists(target) and not target.is_dir():
            os.unlink(target)
            removed.append(rel)
    return removed


def held_out_path(hidden_dir: Path, rel: str) -> Path:
    return Path(hidden_dir) / HELD_OUT_DIR / rel


def held_out_problem(task: Task, public_dir: Path) -> str | None:
    """What keeps prepare's public files from the task's held_out declaration (a file or an id column missing),
    or None."""
    files = held_out_files(task)
    if not files:
        return None
    assert task.validation is not None
    inputs = task.validation.inputs
    if not (Path(public_dir) / inputs).is_file():
        return f"prepare wrote no validation inputs {inputs}"
    input_columns = _columns(task, Path(public_dir) / inputs, inputs)
    for rel, key in sorted(files.items()):
        if not (Path(public_dir) / rel).is_file():
            return f"prepare wrote no {rel} to the workspace"
        if key not in input_columns:
            return f"the validation inputs {inputs} have no column {key!r}"
        if key not in _columns(task, Path(public_dir) / rel, rel):
            return f"{rel} has no column {key!r}"
    return None


def write_held_out(task: Task, public_dir: Path, hidden_dir: Path) -> None:
    """At prepare, after the task's own prepare: each held-out file, the public file minus every record whose id
    is one of the validation inputs'. A declaration prepare's files cannot satisfy is the task's bug: MlabError."""
    problem = held_out_problem(task, public_dir)
    if problem:
        raise MlabError(f"{task.name}: validation.held_out: {problem}")
    files = held_out_files(task)
    if not files:
        return
    assert task.validation is not None
    inputs = task.validation.inputs
    ids = {key: _ids(task, Path(public_dir) / inputs, inputs, key) for key in sorted(set(files.values()))}
    for rel, key in sorted(files.items()):
        target = held_out_path(hidden_dir, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not _copy_without(task, Path(public_dir) / rel, target, rel, key, ids[key]):
            raise MlabError(f"{task.name}: validation.held_out: none of the validation rows are in {rel} (no "
                            f"{key} of {inputs} is in its {key} column)")


def missing_held_out(task: Task, hidden_dir: Path) -> str | None:
    """The one-line error for a home prepared before the task held its validation rows out, or None."""
    missing = [rel for rel in held_out_files(task) if not held_out_path(hidden_dir, rel).is_file()]
    if not missing:
        return None
    return (f"task {task.name!r} was prepared before its validation rows were held out of {', '.join(missing)}; "
            f"prepare it again: mlab prepare {task.name} --force")


def put_held_out(task: Task, hidden_dir: Path, workspace: Path, share: Callable[[str], bool]) -> list[str]:
    """Replace each held-out file of a freshly staged workspace with its copy without the validation rows, hard
    linked where `share` accepts it, as stage_workspace links the task's other large read-only files. Returns the
    replaced paths."""
    problem = missing_held_out(task, hidden_dir)
    if problem:
        raise MlabError(problem)
    replaced = []
    for rel in sorted(held_out_files(task)):
        source, target = held_out_path(hidden_dir, rel), Path(workspace) / rel
        mode = os.stat(target).st_mode & 0o7777 if target.is_file() else None
        if os.path.lexists(target):
            os.unlink(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        replaced.append(rel)
        if share(rel) and source.stat().st_size >= SHARE_MIN_BYTES:
            try:
                os.link(source, target, follow_symlinks=False)
                continue
            except OSError:
                pass  # another file system: a copy
        shutil.copyfile(source, target)
        if mode is not None:
            os.chmod(target, mode)  # as the full file was staged
    return replaced


def _columns(task: Task, path: Path, rel: str) -> list[str]:
    with _text(path) as f:
        try:
            return _header(next(csv.reader(f), None))
        except csv.Error as exc:
            raise MlabError(f"{task.name}: {rel} is not a readable CSV file: {exc}") from None


def _ids(task: Task, path: Path, rel: str, key: str) -> set[str]:
    """The values of the `key` column of a CSV file whose header has it."""
    with _text(path) as f:
        reader = csv.reader(f)
        try:
            at = _header(next(reader, None)).index(key)
            return {row[at] for row in reader if len(row) > at}
        except csv.Error as exc:
            raise MlabError(f"{task.name}: {rel} is not a readable CSV file: {exc}") from None


def _copy_without(task: Task, source: Path, target: Path, rel: str, key: str, ids: set[str]) -> int:
    """Copy source to target record by record, leaving out those whose `key` is in ids; returns how many."""
    dropped = 0
    with _text(source) as f, _text(target, "w") as out:
        raw: list[str] = []  # the lines of the record being read (a quoted field may span lines)

        def lines() -> Iterator[str]:
            for line in f:
                raw.append(line)
                yield line

        reader = csv.reader(lines())
        try:
            at = _header(next(reader, None)).index(key)  # held_out_problem saw the column
            out.write("".join(raw))
            raw.clear()
            for row in reader:
                if len(row) > at and row[at] in ids:
                    dropped += 1
                else:
                    out.write("".join(raw))
                raw.clear()
        except csv.Error as exc:
            raise MlabError(f"{task.name}: {rel} is not a readable CSV file: {exc}") from None
    return dropped


def _text(path: Path, mode: str = "r") -> IO[str]:
    """A CSV file as text as written, undecodable bytes included, so a kept record is copied byte for byte."""
    return open(path, mode, encoding="utf-8", errors="surrogateescape", newline="")


def _header(row: list[str] | None) -> list[str]:
    if not row:
        return []
    return [row[0].removeprefix("\ufeff"), *row[1:]]
