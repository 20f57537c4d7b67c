"""Earlier versions of the files the agent's actions overwrite, kept for Undo Edit Script."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from mlab.core.errors import EnvError
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

    def _backup(self, path: Path) -> str:
        try:
            st = os.lstat(path)
        except OSError:
            return ""
        if not stat.S_ISREG(st.st_mode):
            return ""
        if st.st_size > MAX_BACKUP_BYTES:
            return f"\n(The old version was {st.st_size} bytes, too large to keep: this cannot be undone.)"
        rel = self.workspace.rel(path)
        data = self.workspace.read_bytes(rel, MAX_BACKUP_BYTES)
        self.backups.setdefault(rel, []).append(self.store.store_bytes(data))
        return ""

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
