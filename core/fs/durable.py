"""Making many unsynced writes durable at once, and the file system's own clock.

Objects are written without fsync; one `syncfs` of their file system before a step is committed makes all of
them durable at the price of one call (fsync per file costs about as much as writing a small file). The threads
of one process share it: a call made while a flush of the same file system runs waits for that flush, which may
have begun before the call's writes, and then one flush serves every call that waited (a bench host's runs end
their steps together, and each syncfs of a busy file system waits on everyone's writes and on the others' syncfs).
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
from collections.abc import Callable

from mlab.core.fs.dirfd import opened

# A file whose change time is this close to a reading of a clock other than its own file system's may still
# change within the same timestamp tick (the coarsest common granularity is 2 s, FAT's).
FOREIGN_CLOCK_MARGIN_NS = 2 * 10**9


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "syncfs") else None


def sync_filesystem(where: str | os.PathLike[str] | int) -> None:
    """Flush every dirty page and pending metadata change of the file system holding `where` (a folder, or an
    open descriptor of any file on it) to its disk: returns once a flush begun after this call has ended."""
    libc = _libc()
    if libc is None:
        os.sync()  # no syncfs here: flush everything
        return
    if isinstance(where, int):
        _flusher(os.fstat(where).st_dev).flush(lambda: _syncfs(libc, where, where))
        return
    with opened(os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as fd:
        _flusher(os.fstat(fd).st_dev).flush(lambda: _syncfs(libc, fd, os.fspath(where)))


class _Flusher:
    """The flushes of one file system by this process's threads: one at a time, shared by the calls made while
    the one before it ran (group commit). Only `with` blocks hold state, so a run stopped by an exception anywhere
    (a bench host stops its runs' threads with KeyboardInterrupt) leaves no flush taken for running."""

    def __init__(self) -> None:
        self._counts = threading.Lock()
        self._one_at_a_time = threading.Lock()
        self._asked = 0  # calls numbered in the order they came
        self._done = 0  # every call up to this number is served by a flush that has ended

    def flush(self, sync: Callable[[], None]) -> None:
        with self._counts:
            self._asked += 1
            mine = self._asked
        with self._one_at_a_time:  # a flush running now may have begun before this call's writes
            with self._counts:
                if self._done >= mine:
                    return
                serves = self._asked
            sync()  # raising, it serves nobody: the calls that waited flush again
            with self._counts:
                self._done = max(self._done, serves)


_flushers: dict[int, _Flusher] = {}
_flushers_lock = threading.Lock()


def _forget_flushers() -> None:
    """In a forked child: the parent's flushes (and locks another of its threads held) are not the child's."""
    global _flushers_lock
    _flushers.clear()
    _flushers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_flushers)


def _flusher(device: int) -> _Flusher:
    with _flushers_lock:
        flusher = _flushers.get(device)
        if flusher is None:
            flusher = _flushers[device] = _Flusher()
        return flusher


def _syncfs(libc: ctypes.CDLL, fd: int, where: str | int) -> None:
    if libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs: {os.strerror(err)}", str(where))


def fs_now_ns(marker: str | os.PathLike[str]) -> tuple[int, int]:
    """(device, change time) of `marker` just touched: the file system's own reading of "now", in its own
    granularity. A file whose change time is earlier than this gets a different one from any later change."""
    with opened(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)) as fd:
        os.utime(fd)
        st = os.fstat(fd)
    return st.st_dev, st.st_ctime_ns


def trust_horizon_ns(marker: str | os.PathLike[str], device: int) -> int:
    """Files on `device` changed before the returned time can be recognised by their stat alone."""
    try:
        marker_device, now = fs_now_ns(marker)
    except OSError:
        return time.time_ns() - FOREIGN_CLOCK_MARGIN_NS
    if marker_device != device:
        return time.time_ns() - FOREIGN_CLOCK_MARGIN_NS
    return now
