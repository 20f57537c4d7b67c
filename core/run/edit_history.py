"""Earlier versions of the files the agent's actions overwrite, kept for Undo Edit Script."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from mlab.core.errors import EnvError
from mlab.core.fs.dirfd import write_all
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.workspace import MAX_WRITE_BYTES, Workspace

MAX_BACKUP_BYTES = MAX_WRITE_BYTES  # larger files are overwritten without a copy for Undo Edit Script


class EditHistory:
    def __init__(self, workspace: Workspace, store: SnapshotStore):
        self.workspace = workspace
        self.store = store
        self.backups: dict[str, list[str]] = {}  # file -> digests of earlier versions, newest last

    def save(self, path: Path, data: bytes, given: str, keep_backup: bool = True) -> str:
        """Write data to path, keeping the old version first; returns a note when none could be kept."""
        if len(data) > MAX_WRITE_BYTES:
            raise EnvError(f"content of {len(data)} bytes is more than the {MAX_WRITE_BYTES} allowed")
        note = self._backup(path) if keep_backup else ""
        self.workspace.write_atomic(path, data, given)
        return note

    def append(self, path: Path, data: bytes, given: str) -> str:
        """Add data at the end of the workspace file `path` (made when missing), keeping the old version; returns
        a note when none could be kept. The file is opened once, without following a link, from its folder's
        descriptor and written in place, so a step costs the appended bytes plus one read of the old version
        (whose object the last snapshot usually stored already); a file with other hard links is replaced
        instead, so a name elsewhere never sees the write."""
        dir_fd = self.workspace.open_parent(path, given)
        try:
            try:
                fd = os.open(path.name, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                             | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                return self.save(path, data, given)
            except PermissionError:  # not writable by its mode: replaced, as Write File does
                return self.save(path, self.workspace.read_bytes(given, MAX_WRITE_BYTES) + data, given)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                    raise EnvError(f"{given!r} is not a regular file") from None
                raise EnvError(f"{given!r} cannot be opened: {exc.strerror}") from exc
        finally:
            os.close(dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise EnvError(f"{given!r} is not a regular file")
            if st.st_size + len(data) > MAX_WRITE_BYTES:
                raise EnvError(f"{given!r} would be {st.st_size + len(data)} bytes, more than the {MAX_WRITE_BYTES} "
                               "allowed")
            old = os.pread(fd, st.st_size + 1, 0)
            if len(old) != st.st_size or st.st_nlink != 1:  # changed under us, or other names would see it
                return self.save(path, old[:MAX_WRITE_BYTES + 1] + data, given)
            rel = path.relative_to(self.workspace.root).as_posix()
            note = self._keep(rel, old)
            try:
                write_all(fd, data)
            except BaseException:
                os.ftruncate(fd, st.st_size)  # e.g. a full disk: the file stays as it was
                if not note:
                    self.backups[rel].pop()
                raise
            return note
        finally:
            os.close(fd)

    def _keep(self, rel: str, old: bytes) -> str:
        """Store old as rel's newest earlier version; returns a note when it is too large to keep."""
        if len(old) > MAX_BACKUP_BYTES:
            return _too_large(len(old))
        self.backups.setdefault(rel, []).append(self.store.store_bytes(old))
        return ""

    def _backup(self, path: Path) -> str:
        try:
            st = os.lstat(path)
        except OSError:
            return ""
        if not stat.S_ISREG(st.st_mode):
            return ""
        if st.st_size > MAX_BACKUP_BYTES:  # told before reading it
            return _too_large(st.st_size)
        rel = self.workspace.rel(path)
        return self._keep(rel, self.workspace.read_bytes(rel, MAX_BACKUP_BYTES))

    def undo(self, given: str) -> None:
        """Put back the newest earlier version of the workspace file `given`."""
        path = self.workspace.writable(given)
        rel = self.workspace.rel(path)
        versions = self.backups.get(rel)
        if not versions:
            raise EnvError(f"there is no earlier version of {given!r} to go back to")
        try:
            data = self.store.read_object(versions[-1])
        except OSError as exc:
            versions.pop()
            raise EnvError(f"the earlier version of {given!r} is no longer stored") from exc
        self.workspace.write_atomic(path, data, given)
        versions.pop()
        if not versions:
            del self.backups[rel]

    def state_dict(self) -> dict[str, Any]:
        return {"backups": {k: list(v) for k, v in self.backups.items() if v}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        backups = state.get("backups", {}) if isinstance(state, dict) else {}
        self.backups = {
            str(k): [d for d in v if isinstance(d, str)]
            for k, v in (backups.items() if isinstance(backups, dict) else [])
            if isinstance(v, list) and any(isinstance(d, str) for d in v)
        }


def _too_large(size: int) -> str:
    return f"\n(The old version was {size} bytes, too large to keep: this cannot be undone.)"
