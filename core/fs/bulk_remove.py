"""Removing large trees the harness made (a scratch task home, a workspace), fast and never following a link.

Removing a file whose blocks go back to the disk waits on the device, and much longer on a file system mounted
with `discard` (a virtual disk, often): 0.5 to 2 ms a file, so 200,000 prepared files took minutes one by one.
The waits overlap: the files of a folder are unlinked by several threads at once (about 3x faster here), and
`Removals` lets a caller go on with its work while a tree goes, joining before it returns.
"""
from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from mlab.core.fs.dirfd import DIR_FLAGS, NotAFolder, list_dir, open_dir_at

WORKERS = 8  # unlinks in flight: they wait on the disk, not the CPU
BATCH = 256  # names a worker unlinks in one go
PARALLEL_MIN = 2_000  # fewer files in a folder: one thread (starting workers costs more)


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove path and everything below it, as shutil.rmtree(path, ignore_errors=True) does: a symlink is removed
    as a link (below path or path itself), never followed; what cannot be removed is left."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        root = os.open(path, DIR_FLAGS)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="mlab-remove") as pool:
        try:
            _empty(root, pool)
        finally:
            os.close(root)
    try:
        os.rmdir(path)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)  # something came meanwhile, or could not go: the slow way


def _empty(root: int, pool: ThreadPoolExecutor) -> None:
    """Remove what the folder root holds: files first (in parallel where many), then each emptied folder."""
    # (descriptor, its folders still to do as (name, entered already)); a folder is removed once emptied
    stack: list[tuple[int, list[tuple[str, bool]]]] = [(os.dup(root), _folders(_unlink_files(root, pool)))]
    try:
        while stack:
            fd, folders = stack[-1]
            if not folders:
                stack.pop()
                os.close(fd)
                continue
            name, entered = folders.pop()
            if not entered:
                try:
                    child = open_dir_at(fd, name)
                except (NotAFolder, PermissionError):
                    _unlink_quiet(fd, name)  # swapped for a file or link meanwhile, or unreadable: try it as one
                    continue
                except OSError:
                    continue
                try:
                    inner = _unlink_files(child, pool)
                except BaseException:
                    os.close(child)
                    raise
                if inner:
                    folders.append((name, True))  # removed once its own folders are gone
                    stack.append((child, _folders(inner)))
                    continue
                os.close(child)
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                pass  # not empty after all: left for the caller's fallback
    finally:
        for fd, _folders_left in stack:
            os.close(fd)


def _folders(names: list[str]) -> list[tuple[str, bool]]:
    return [(name, False) for name in names]


def _unlink_files(fd: int, pool: ThreadPoolExecutor) -> list[str]:
    """Unlink every entry of folder fd that is not a folder; returns the names of its folders."""
    folders: list[str] = []
    others: list[str] = []
    for name, st in list_dir(fd):
        (folders if st is not None and stat.S_ISDIR(st.st_mode) else others).append(name)
    if len(others) < PARALLEL_MIN:
        for name in others:
            _unlink_quiet(fd, name)
    else:
        batches = [others[i:i + BATCH] for i in range(0, len(others), BATCH)]
        for _done in pool.map(lambda names: _unlink_all(fd, names), batches):
            pass
    return folders


def _unlink_all(fd: int, names: list[str]) -> None:
    for name in names:
        _unlink_quiet(fd, name)


def _unlink_quiet(fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=fd)
    except OSError:  # gone, or became a folder meanwhile: left (shutil.rmtree at the end takes it)
        pass


class Removals:
    """Trees removed in the background while the caller goes on (remove_tree in a thread each); `wait` joins."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []

    def remove(self, path: str | os.PathLike[str]) -> None:
        thread = threading.Thread(target=remove_tree, args=(path,), name="mlab-remove-tree", daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait(self) -> None:
        for thread in self._threads:
            thread.join()
        self._threads.clear()


@contextmanager
def removals() -> Iterator[Removals]:
    """A Removals whose trees are all gone when the block ends (however it ends)."""
    pending = Removals()
    try:
        yield pending
    finally:
        pending.wait()
