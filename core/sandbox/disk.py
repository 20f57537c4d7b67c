"""The disk limits: how much a command may add to its workspace's disk, and how much must stay free."""
from __future__ import annotations

import os
from pathlib import Path

from mlab.core.sandbox.limits import Limits


def disk_usage(path: Path) -> tuple[int, int] | None:
    """(used, free) bytes of the file system holding path; free as an unprivileged user sees it."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_bavail * st.f_frsize


def disk_limit_hit(start: tuple[int, int] | None, cwd: Path, limits: Limits) -> str | None:
    """'disk' when the command, started when the disk was at `start` (disk_usage then), broke a disk limit."""
    if start is None or (limits.disk_bytes is None and limits.min_free_disk_bytes is None):
        return None
    now = disk_usage(cwd)
    if now is None:
        return None
    grown = now[0] - start[0]
    if limits.disk_bytes is not None and grown > limits.disk_bytes:
        return "disk"
    # Only a command that is itself using space is stopped for a disk that was nearly full already.
    if limits.min_free_disk_bytes is not None and now[1] < limits.min_free_disk_bytes and now[1] < start[1]:
        return "disk"
    return None
