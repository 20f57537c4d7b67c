"""Making many unsynced writes durable at once, and the file system's own clock.

Objects are written without fsync; one `syncfs` of their file system before a step is committed makes all of
them durable at the price of one call (fsync per file costs about as much as writing a small file).
"""
from __future__ import annotations

import ctypes
import functools
import os
import time

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
    open descriptor of any file on it) to its disk."""
    libc = _libc()
    if libc is None:
        os.sync()  # no syncfs here: flush everything
        return
    if isinstance(where, int):
        _syncfs(libc, where, where)
        return
    with opened(os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as fd:
        _syncfs(libc, fd, os.fspath(where))


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
