"""Crash-safe file writes: a reader sees the old content or the new, never a mix.

On a full disk (or any other failure) the old file is left as it was and the half-written temporary file is
removed, so a failed write costs nothing but the error.
"""
from __future__ import annotations

import errno
import os
import secrets
import shutil
from contextlib import suppress
from pathlib import Path
from typing import TypeGuard

from mlab.core.fs.dirfd import opened

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> TypeGuard[OSError]:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def write_atomic(path: Path, data: bytes, sync: bool = True) -> None:
    """`path` holds `data` whole or what it held before; sync=False: not durable until the caller flushes."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        _sync_folder(path.parent)


def replace_folder(new: Path, final: Path) -> None:
    """Move the folder `new` to `final`. A folder already there is moved aside first and removed after, so
    `final` is always one whole folder, and files hard-linked to the old one keep their inodes."""
    retired = final.with_name(f".retired-{final.name}-{os.getpid()}")
    shutil.rmtree(retired, ignore_errors=True)  # left by a crash
    if final.exists():
        os.replace(final, retired)
    os.replace(new, final)
    shutil.rmtree(retired, ignore_errors=True)


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every file system allows fsync on a folder)."""
    with suppress(OSError), opened(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as fd:
        os.fsync(fd)
