"""Walking and changing a tree that someone else may change at any instant, only through directory descriptors.

Agent code may swap any folder of its workspace for a symlink between two of the harness's system calls. So
the harness never re-resolves a path it looked at: every component is opened relative to the descriptor of
the folder above it with O_NOFOLLOW, and every change (`unlink`, `rmdir`, `mkdir`, `rename`, `symlink`) names
one entry of a folder it holds open. Walks are iterative and bounded: a tree deeper than `max_depth` or larger
than `max_entries` is cut off and reported, never a RecursionError or an unbounded cost.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO the agent planted must not block the harness.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_DEPTH = 256  # folder levels below the root; a descriptor is held per level while walking
MAX_ENTRIES = 2_000_000
_HOISTED = ".mlab-removing-"


class NotAFolder(OSError):
    """A path component is a symlink, a file or missing where a folder was expected."""


def open_root(path: str | os.PathLike[str]) -> int:
    """The descriptor of a tree's root folder; the root itself must not be a symlink."""
    return os.open(path, DIR_FLAGS)


def open_dir_at(dir_fd: int, name: str) -> int:
    """Open the folder `name` of dir_fd, refusing a symlink or anything that is not a folder."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise NotAFolder(exc.errno, f"{name!r} is not a folder", name) from None
        raise


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


REPLACE_ATTEMPTS = 50  # a folder swapped for a link between our look and our open: look again, this often


def _open_part(fd: int, part: str, create: bool, replace: bool) -> int:
    for attempt in range(REPLACE_ATTEMPTS if replace else 1):
        st = lstat_at(fd, part)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            if not replace:
                raise NotAFolder(errno.ENOTDIR, f"{part!r} is not a folder", part)
            remove_at(fd, part)
            st = None
        if st is None:
            if not create:
                raise NotAFolder(errno.ENOENT, f"{part!r} does not exist", part)
            with suppress(FileExistsError):  # made meanwhile: opening it below checks what it is
                os.mkdir(part, 0o755, dir_fd=fd)
        try:
            return open_dir_at(fd, part)
        except NotAFolder:
            if attempt == REPLACE_ATTEMPTS - 1 or not replace:
                raise
    raise AssertionError("unreachable")


def open_dirs(root_fd: int, parts: list[str], create: bool = False, replace: bool = False) -> int:
    """A new descriptor of root/parts[0]/parts[1]/..., one component at a time. `create` makes missing folders;
    `replace` also removes a file or symlink standing where a folder belongs (never following it)."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if part in ("", ".", "..") or "/" in part:
                raise NotAFolder(errno.EINVAL, f"bad path component {part!r}", part)
            child = _open_part(fd, part, create, replace)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def remove_at(dir_fd: int, name: str, max_entries: int = MAX_ENTRIES) -> None:
    """Remove the entry `name` of dir_fd, a whole folder tree included, without following any symlink and
    with at most two descriptors open however deep the tree: the folders of a folder being removed are moved
    up into dir_fd under fresh names and removed in turn."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        _unlink_quiet(dir_fd, name)
        return
    pending = [name]
    budget = max_entries
    while pending:
        current = pending.pop()
        try:
            fd = open_dir_at(dir_fd, current)
        except NotAFolder:  # replaced meanwhile by a file or symlink: remove that instead
            _unlink_quiet(dir_fd, current)
            continue
        try:
            with os.scandir(fd) as entries:
                children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            for child, is_dir in children:
                budget -= 1
                if budget < 0:
                    raise OSError(errno.EMLINK, f"more than {max_entries} entries to remove under {name!r}")
                if is_dir:
                    hoisted = f"{_HOISTED}{secrets.token_hex(8)}"
                    with suppress(FileNotFoundError):
                        os.rename(child, hoisted, src_dir_fd=fd, dst_dir_fd=dir_fd)
                        pending.append(hoisted)
                else:
                    _unlink_quiet(fd, child)
        finally:
            os.close(fd)
        try:
            os.rmdir(current, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        except NotADirectoryError:  # swapped for a file or symlink meanwhile: that goes too
            _unlink_quiet(dir_fd, current)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            pending.append(current)  # something was added meanwhile: go round again (the budget bounds it)


def _unlink_quiet(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:  # swapped for a folder meanwhile
        remove_at(dir_fd, name)


@dataclass
class WalkLimits:
    """How far a walk goes, and what it had to leave out."""

    max_depth: int = MAX_DEPTH
    max_entries: int = MAX_ENTRIES
    too_deep: list[str] = field(default_factory=list)  # folders not entered (at most a few kept)
    too_many: bool = False
    entries: int = 0

    def note(self) -> str:
        """One line for the agent, or "" when nothing was left out."""
        parts = []
        if self.too_deep:
            parts.append(f"folders more than {self.max_depth} levels deep were not entered "
                         f"(e.g. {self.too_deep[0][:200]!r})")
        if self.too_many:
            parts.append(f"only the first {self.max_entries} entries were looked at")
        return "; ".join(parts)


@dataclass
class Entry:
    """One entry met by a walk: valid only while the visit runs (dir_fd is closed afterwards)."""

    rel: str
    dir_fd: int
    name: str
    st: os.stat_result
    depth: int  # 1 for an entry of the root folder


def walk(root_fd: int, skip: Callable[[str], bool] = lambda _rel: False,
         limits: WalkLimits | None = None, sort: bool = False) -> Iterator[Entry]:
    """Every entry below root_fd, folders before what they hold, never following a symlink. A folder is
    entered through its parent's descriptor, so swapping it for a symlink makes it fail to open, nothing
    more. Entries for which skip(rel) is true are neither yielded nor entered."""
    limits = limits or WalkLimits()
    stack: list[tuple[int, str, int, Iterator[tuple[str, os.stat_result | None]]]] = []
    first = os.dup(root_fd)
    stack.append((first, "", 0, iter(list_dir(first, sort))))
    try:
        while stack:
            fd, prefix, depth, children = stack[-1]
            step = next(children, None)
            if step is None:
                stack.pop()
                os.close(fd)
                continue
            name, st = step
            rel = prefix + name
            if skip(rel):
                continue
            limits.entries += 1
            if limits.entries > limits.max_entries:
                limits.too_many = True
                return
            if st is None:
                st = lstat_at(fd, name)
                if st is None:
                    continue
            yield Entry(rel, fd, name, st, depth + 1)
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= limits.max_depth:
                    if len(limits.too_deep) < 5:
                        limits.too_deep.append(rel)
                    continue
                try:
                    child = open_dir_at(fd, name)
                except (NotAFolder, PermissionError):
                    continue
                stack.append((child, rel + "/", depth + 1, iter(list_dir(child, sort))))
    finally:
        for fd, *_rest in stack:
            os.close(fd)


def list_dir(fd: int, sort: bool = False) -> list[tuple[str, os.stat_result | None]]:
    """(name, lstat) of a folder's entries, read at once so the folder's descriptor is the only one held."""
    try:
        with os.scandir(fd) as entries:
            found: list[tuple[str, os.stat_result | None]] = []
            for entry in entries:
                try:
                    found.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    found.append((entry.name, None))
    except OSError:
        return []
    if sort:
        found.sort(key=lambda item: item[0])
    return found


class NotRegular(OSError):
    """A symlink, FIFO, device or folder where a regular file was expected, or a symlink among its folders."""


def read_regular_at(folder: str | os.PathLike[str], rel: str, limit: int | None = None) -> bytes | None:
    """The bytes of the regular file folder/rel (at most limit + 1 of them: one more than allowed tells the caller
    it is too long), none of rel's components followed if a symlink; None when it is missing, NotRegular when it
    or a folder on the way is a link or no regular file. The one way to read a file of an untrusted run folder."""
    *folders, name = rel.split("/")
    try:
        root = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        try:
            dir_fd = open_dirs(root, folders)
        except NotAFolder as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise NotRegular(exc.errno, f"{rel!r} is behind a symlink or no folder", rel) from None
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotRegular(exc.errno, f"{rel!r} is a symlink", rel) from None
            raise
        finally:
            os.close(dir_fd)
    finally:
        os.close(root)
    with opened(fd):
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(errno.EINVAL, f"{rel!r} is no regular file", rel)
        chunks, left = [], (limit + 1 if limit is not None else None)
        while left is None or left > 0:
            chunk = os.read(fd, 1 << 20 if left is None else min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            if left is not None:
                left -= len(chunk)
        return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """Write all of data to fd: os.write may take only part of it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of data to fd at offset, leaving the file position alone."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


@contextmanager
def opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


class DirChain:
    """Descriptors of the folders above the current path while visiting paths in sorted order: consecutive
    paths share their folders, so each folder is opened once and at most one descriptor per level is held."""

    def __init__(self, root_fd: int, create: bool = False, replace: bool = False):
        self.root_fd = root_fd
        self.create, self.replace = create, replace
        self.parts: list[str] = []
        self.fds: list[int] = []

    def folder(self, parts: list[str]) -> int:
        """The descriptor of root/parts (owned by the chain: do not close it)."""
        keep = 0
        while keep < min(len(parts), len(self.parts)) and parts[keep] == self.parts[keep]:
            keep += 1
        for fd in self.fds[keep:]:
            os.close(fd)
        del self.fds[keep:], self.parts[keep:]
        for part in parts[keep:]:
            parent = self.fds[-1] if self.fds else self.root_fd
            child = open_dirs(parent, [part], create=self.create, replace=self.replace)
            self.fds.append(child)
            self.parts.append(part)
        return self.fds[-1] if self.fds else self.root_fd

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
        self.parts.clear()

    def __enter__(self) -> DirChain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
