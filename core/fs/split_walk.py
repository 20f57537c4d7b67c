"""Half of a large tree's stat walk done by a forked child on the second core.

After agent code ran, every recorded entry is lstatted and compared with its recorded stat; that walk is the
whole cost of a step in a large workspace, and no single-threaded walk gets under a few µs per file. Before the
walk, the recorded tree's folders are laid out in the order the walk visits them (the order they were first
listed in), and a forked child lists and compares the folders of the second half while the caller walks the first.
The child sends, per folder, the folder's identity (device, inode), how many names it listed, the names whose
stat differs or that were not recorded (with their kind from the listing) and the recorded names that were not
listed. When the caller's walk reaches such a folder it takes the child's word instead of listing it, if the
folder it opened is the one the child listed; a folder whose identity differs, or a child that failed, is listed
again by the caller. The child only reads: lists, lstats, writes its answer to a pipe and exits.
"""
from __future__ import annotations

import gc
import marshal
import os
import signal
import warnings
from collections.abc import Container, Iterator
from contextlib import suppress

from mlab.core.fs.dirfd import open_dir_at, write_all
from mlab.core.fs.tree_index import Folder, LimitReached, changed_entries, listing_room

MIN_ENTRIES = 20_000  # below this a fork and the pipe cost more than half the walk saves
CHILD_SHARE = 0.5  # of the recorded entries, listed by the child (the caller also handles what changed)
_GONE = "x"  # the kind of an entry gone between the listing and the look at its type


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _folders(root: Folder, sealed: Container[str] = ()) -> Iterator[tuple[str, Folder]]:
    """(prefix, folder) of every recorded folder below the root, in the order a walk meets them, but for the
    sealed folders ("a/b") and what they hold: the walk does not enter those."""
    stack: list[tuple[str, Folder]] = [("", root)]
    while stack:
        prefix, folder = stack.pop()
        yield prefix, folder
        stack.extend((f"{prefix}{name}/", sub) for name, sub in reversed(folder.folders.items())
                     if f"{prefix}{name}" not in sealed)


class Listed:
    """A name the child listed: the few DirEntry methods the walk calls, answered from the listing's file type,
    and the lstat done now through the caller's descriptor of the folder."""

    __slots__ = ("name", "_fd", "_kind")

    def __init__(self, fd: int, name: str, kind: str):
        self.name, self._fd, self._kind = name, fd, kind

    def stat(self, follow_symlinks: bool = False) -> os.stat_result:
        return os.stat(self.name, dir_fd=self._fd, follow_symlinks=False)

    def _known(self) -> str:
        if self._kind == _GONE:
            raise FileNotFoundError(2, "gone since the listing", self.name)
        return self._kind

    def is_dir(self, follow_symlinks: bool = False) -> bool:
        return self._known() == "d"

    def is_symlink(self) -> bool:
        return self._known() == "l"

    def is_file(self, follow_symlinks: bool = False) -> bool:
        return self._known() == "f"


class SplitWalk:
    """The child's answers for the folders it took; `take` waits for them the first time one is needed."""

    def __init__(self, pid: int, read_fd: int, prefixes: set[str]):
        self._pid, self._read_fd, self._prefixes = pid, read_fd, prefixes
        self._answers: dict[str, tuple] | None = None
        self.used = 0  # folders whose listing came from the child

    def take(self, prefix: str, fd: int) -> tuple[list[Listed], int, list[str]] | None:
        """(entries to look at, how many names were listed, recorded names not listed) for the folder at
        prefix opened as fd, or None when the caller must list it itself."""
        if prefix not in self._prefixes:
            return None
        answer = self._collect().pop(prefix, None)
        if answer is None:
            return None
        device, inode, count, others, gone = answer
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (device, inode):
            return None  # another folder than the child listed is there now
        self.used += 1
        return [Listed(fd, name, kind) for name, kind in others], count, gone

    def _collect(self) -> dict[str, tuple]:
        if self._answers is None:
            chunks = []
            try:
                while chunk := os.read(self._read_fd, 1 << 20):
                    chunks.append(chunk)
            except OSError:
                chunks = []
            self._end(kill=False)  # it wrote all it had: it is exiting
            try:
                answers = marshal.loads(b"".join(chunks)) if chunks else {}
            except (EOFError, ValueError, TypeError):
                answers = {}
            self._answers = answers if isinstance(answers, dict) else {}
        return self._answers

    def close(self) -> None:
        """End the child (if its answers were never needed: the walk stopped at a limit) and reap it."""
        self._end(kill=self._answers is None)

    def _end(self, kill: bool) -> None:
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1
        if self._pid and kill:
            with suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)  # it may still be listing a folder of millions of entries
        if self._pid:
            with suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
            self._pid = 0
        if self._answers is None:
            self._answers = {}


def start(root_fd: int, root: Folder, max_entries: int, sealed: Container[str] = ()) -> SplitWalk | None:
    """Fork a child listing the second half of the recorded tree below root_fd (no folder beyond the walk's
    entry limit, none of the sealed ones); None when the tree is small, there is no second core, or the fork
    fails."""
    if _cores() < 2:
        return None
    layout = [(prefix, folder, len(folder.files) + len(folder.folders)) for prefix, folder in _folders(root, sealed)]
    total = sum(count for _p, _f, count in layout)
    if total < MIN_ENTRIES:
        return None
    taken, below = [], 0
    for prefix, folder, count in reversed(layout):
        if below >= total * CHILD_SHARE or not prefix:
            break
        taken.append((prefix, folder))
        below += count
    taken.reverse()
    read_fd, write_fd = os.pipe()  # not inherited by anything the harness starts later
    try:
        with warnings.catch_warnings():  # the child only makes system calls: other threads' locks do not matter
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # pragma: no cover - the child's work is checked by the caller through its answers
        status = 1
        try:
            gc.disable()  # a collection would write to every object's page the parent shares
            os.close(read_fd)
            write_all(write_fd, marshal.dumps(_answer(root_fd, taken, max_entries)))
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    return SplitWalk(pid, read_fd, {prefix for prefix, _f in taken})


def _answer(root_fd: int, taken: list[tuple[str, Folder]], max_entries: int) -> dict[str, tuple]:
    """The child's work: each folder listed and compared, reached from the root one name at a time."""
    answers: dict[str, tuple] = {}
    held: list[tuple[str, int]] = [("", root_fd)]  # the descriptors of the folders on the current path
    try:
        for prefix, folder in taken:
            while not prefix.startswith(held[-1][0]):
                os.close(held.pop()[1])
            try:
                for name in prefix[len(held[-1][0]):].split("/")[:-1]:
                    held.append((f"{held[-1][0]}{name}/", open_dir_at(held[-1][1], name)))
            except OSError:
                continue  # gone or swapped: the caller finds out itself
            fd = held[-1][1]
            st = os.fstat(fd)
            listed: list[str] = []
            files, folders = folder.files, folder.folders
            try:
                others = changed_entries(fd, files, listed, listing_room(folder, max_entries))
            except LimitReached:
                continue  # the caller's own listing of it stops at the limit
            described = []
            recorded_listed = len(listed) - len(others)
            for entry in others:
                name = entry.name
                if name in files or name in folders:
                    recorded_listed += 1
                try:
                    kind = ("d" if entry.is_dir(follow_symlinks=False) else "l" if entry.is_symlink()
                            else "f" if entry.is_file(follow_symlinks=False) else "o")
                except OSError:
                    kind = _GONE
                described.append((name, kind))
            gone: list[str] = []
            if recorded_listed != len(files) + len(folders):
                names = set(listed)
                gone = [name for name in (*files, *folders) if name not in names]
            answers[prefix] = (st.st_dev, st.st_ino, len(listed), described, gone)
    finally:
        for _prefix, fd in held[1:]:
            os.close(fd)
    return answers
