"""Putting back read-only files that agent code changed where the sandbox could not mount them read-only."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.readonly import is_read_only
from mlab.core.run.workspace import Workspace

ReadOnlyState = dict[str, tuple[int, ...]]


class ReadOnlyGuard:
    def __init__(self, settings: EnvSettings, workspace: Workspace):
        self.settings = settings
        self.workspace = workspace

    def paths(self) -> list[Path]:
        """The topmost workspace entries matching a read-only pattern; symlinks are not followed."""
        found: list[Path] = []
        stack = [(self.workspace.root, "")]
        while stack:
            folder, prefix = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                rel = prefix + entry.name
                if is_read_only(rel, self.settings.read_only_patterns):
                    found.append(Path(entry.path))
                else:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((Path(entry.path), rel + "/"))
                    except OSError:
                        pass
        return sorted(found)

    def state(self) -> ReadOnlyState:
        """(type, size, mtime, ctime, inode) of every entry at or below the read-only paths, unfollowed."""
        state: ReadOnlyState = {}
        stack = list(self.paths())
        while stack:
            path = stack.pop()
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rel = self.workspace.rel(path)
            state[rel] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            if stat.S_ISDIR(st.st_mode):
                try:
                    stack.extend(Path(e.path) for e in os.scandir(path))
                except OSError:
                    pass
        return state

    def restore(self, before: ReadOnlyState) -> list[str]:
        """Belt and braces: put back what changed since `before`; returns the changed names."""
        after = self.state()
        changed = sorted(rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel))
        # Folders only change because something below them did; name the files.
        dirs = {rel for rel in changed if (before.get(rel) or after[rel])[0] == stat.S_IFDIR}
        files = [rel for rel in changed if rel not in dirs]
        pristine = self.settings.pristine_dir
        if pristine:
            for rel in files:
                self._restore_one(rel, pristine)
        return files or sorted(dirs)

    def note(self, changed: list[str]) -> str:
        """What the agent is told about read-only files its code changed."""
        if not changed:
            return ""
        if self.settings.pristine_dir:
            return f"\n[read-only files were changed and have been restored: {', '.join(changed)}]"
        return f"\n[read-only files were changed and could not be restored: {', '.join(changed)}]"

    def _restore_one(self, rel: str, pristine: Path) -> None:
        """Put back the pristine copy of rel, never following a symlink the script may have planted."""
        current = self.workspace.root
        parts = rel.split("/")
        for part in parts[:-1]:
            current = current / part
            if os.path.islink(current) or (os.path.lexists(current) and not os.path.isdir(current)):
                os.unlink(current)
            if not os.path.lexists(current):
                source_dir = pristine / self.workspace.rel(current)
                if not source_dir.is_dir():
                    return  # nothing pristine down this path; what the script added is already gone
                os.mkdir(current)
        target = current / parts[-1]
        if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
            os.unlink(target)
        elif os.path.isdir(target):
            shutil.rmtree(target)
        source = pristine / rel
        if source.is_file():
            shutil.copy2(source, target)
        elif source.is_dir():
            os.mkdir(target)
