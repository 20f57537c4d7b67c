"""Taking files from a task folder: a pack comes from a stranger, so nothing is read through a link that leads
out of its folder, and only regular files and folders are taken (a FIFO would hang prepare, a device read the
host)."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from mlab.core.errors import MlabError

SKIPPED = ("__pycache__",)  # never copied: bytecode of the harness's Python, not the pack's files


def _skipped(name: str) -> bool:
    return name in SKIPPED or name.endswith(".pyc")
MAX_ENTRIES = 1_000_000  # a task folder's copied part holds at most this many entries


def _inside(root: str, real: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


def _source(root: str, path: str) -> tuple[str, os.stat_result]:
    """(the path to read path's content from, its stat): path itself, or a file a link inside the pack names."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(path)
        if not _inside(root, real):
            raise MlabError(f"{path} is a link out of the task folder (to {os.readlink(path)}); a pack may only "
                            "hold its own files")
        st = os.lstat(real)
        if not stat.S_ISREG(st.st_mode):
            raise MlabError(f"{path} is a link to a folder or a special file; link only to files of the pack, or "
                            "copy the folder in")
        return real, st
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise MlabError(f"{path} is not a regular file or folder (a FIFO, socket or device)")
    return path, st


def pack_problem(folder: Path, relative: str) -> str | None:
    """Why folder/relative cannot be taken from the pack (a link out of it, a special file), or None."""
    root = os.path.realpath(folder)
    count = 0
    pending = [os.path.join(root, relative)]
    try:
        while pending:
            path = pending.pop()
            source, st = _source(root, path)
            if stat.S_ISDIR(st.st_mode):
                with os.scandir(path) as entries:
                    for entry in entries:
                        count += 1
                        if count > MAX_ENTRIES:
                            return f"{relative} holds more than {MAX_ENTRIES} entries"
                        if not _skipped(entry.name):
                            pending.append(entry.path)
    except MlabError as exc:
        return str(exc)
    except OSError as exc:
        return f"{relative} cannot be read: {exc.strerror or exc}"
    return None


def copy_from_pack(folder: Path, relative: str, target: Path) -> None:
    """Copy folder/relative (a file, or a folder's tree) to target, refusing links out of the folder and
    special files; a link to a file inside the folder is copied as that file."""
    root = os.path.realpath(folder)
    problem = pack_problem(folder, relative)
    if problem:
        raise MlabError(problem)
    pending = [(os.path.join(root, relative), Path(target))]
    while pending:
        path, to = pending.pop()
        source, st = _source(root, path)
        if stat.S_ISDIR(st.st_mode):
            to.mkdir(parents=True, exist_ok=True)
            with os.scandir(path) as entries:
                pending += [(entry.path, to / entry.name) for entry in entries if not _skipped(entry.name)]
            continue
        to.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a file swapped for a link since it was checked is refused, not followed
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise MlabError(f"{path} is not a regular file")
            os.set_blocking(fd, True)
            if to.is_symlink():
                to.unlink()
            with open(to, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        os.chmod(to, stat.S_IMODE(st.st_mode) | stat.S_IRUSR | stat.S_IWUSR)
