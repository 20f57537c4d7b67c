"""One walk of a workspace's read-only entries through folder descriptors, for the read-only guard and its watch.

It enters only folders that can hold a read-only entry, never follows a link, and holds one descriptor per
folder level (a folder's descriptor stays open until its last subfolder is opened), so 20,000 sibling folders
cost 20,000 opens but never 20,000 descriptors at once.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator

from mlab.core.fs.dirfd import NotAFolder, open_dir_at
from mlab.core.run.readonly import ReadOnlyRule

MAX_DEPTH = 64

State = tuple[int, ...]

# whole(folder_fd, name, rel): whether the folder rel, which may hold read-only entries and in which every name
# is read-only, counts as read-only itself
Whole = Callable[[int, str, str], bool]
# visit(folder_fd, name, rel, st, read_only, covered) for each read-only entry and each folder that may hold one
# (covered: its folder is read-only); True enters a folder
Visit = Callable[[int, str, str, os.stat_result, bool, bool], bool]
# entered(fd, prefix, covered, depth): a folder was opened and is about to be listed
Entered = Callable[[int, str, bool, int], None]


def entry_state(st: os.stat_result) -> State:
    """What a change to an entry changes: type, size, modification and change times, inode."""
    return stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


class _Held:
    """A folder's descriptor, closed once its last pending subfolder has been opened."""

    __slots__ = ("fd", "pending")

    def __init__(self, fd: int):
        self.fd, self.pending = fd, 0

    def release(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            os.close(self.fd)


def _listed(fd: int) -> Iterator[os.DirEntry[str]]:
    """The entries of the folder open as fd, one at a time (a list of 200,000 would be held at once); none
    past an error."""
    try:
        with os.scandir(fd) as listing:
            yield from listing
    except OSError:
        return


def walk_read_only(rule: ReadOnlyRule, fd: int, prefix: str, covered: bool, depth: int, whole: Whole,
                   visit: Visit, entered: Entered | None = None) -> None:
    """Walk from the folder open as fd (workspace-relative prefix "" or "a/b/", covered: itself read-only, at
    depth), which the walk closes."""
    stack: list[tuple[_Held | None, str, str, bool, int]] = [(None, "", prefix, covered, depth)]
    first: int | None = fd
    try:
        while stack:
            parent, name, prefix, covered, depth = stack.pop()
            if parent is None:
                current, first = first, None
            else:
                try:
                    current = open_dir_at(parent.fd, name)
                except (NotAFolder, PermissionError):
                    continue
                finally:
                    parent.release()
            assert current is not None
            held = _Held(current)
            try:
                if entered is not None:
                    entered(current, prefix, covered, depth)
                for entry in _listed(current):
                    rel = prefix + entry.name
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    is_dir = stat.S_ISDIR(st.st_mode)
                    read_only = covered or rule.matches(rel)
                    if not read_only:
                        if not (is_dir and rule.may_hold(rel)):
                            continue
                        read_only = rule.any_name_matches(rel) and whole(current, entry.name, rel)
                    if visit(current, entry.name, rel, st, read_only, covered) and is_dir and depth + 1 < MAX_DEPTH:
                        held.pending += 1
                        stack.append((held, entry.name, rel + "/", read_only, depth + 1))
            finally:
                if held.pending == 0:
                    os.close(current)
    finally:
        if first is not None:
            os.close(first)
        for parent, *_rest in stack:
            if parent is not None:
                parent.release()
