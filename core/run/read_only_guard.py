"""Putting back read-only files that agent code changed where the sandbox could not mount them read-only."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from mlab.core.fs.dirfd import WalkLimits, open_dirs, open_root, remove_at, walk
from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.readonly import read_only_rule
from mlab.core.run.workspace import Workspace

ReadOnlyState = dict[str, tuple[int, ...]]


class ReadOnlyGuard:
    def __init__(self, settings: EnvSettings, workspace: Workspace):
        self.settings = settings
        self.workspace = workspace

    def paths(self) -> list[Path]:
        """The topmost workspace entries matching a read-only pattern (what a sandbox mounts read-only)."""
        rule = read_only_rule(tuple(self.settings.read_only_patterns))
        if not rule:
            return []
        found: list[str] = []
        root = open_root(self.workspace.root)
        try:
            matched: set[str] = set()

            def leave_out(rel: str) -> bool:  # below a match, or in a folder no pattern can reach
                parent = rel.rpartition("/")[0]
                return parent in matched or not (rule.matches(rel) or rule.may_hold(rel))

            for entry in walk(root, skip=leave_out, limits=WalkLimits(max_depth=64)):
                if rule.matches(entry.rel):
                    found.append(entry.rel)
                    matched.add(entry.rel)
        finally:
            os.close(root)
        return sorted(self.workspace.root / rel for rel in found)

    def state(self) -> ReadOnlyState:
        """(type, size, mtime, ctime, inode) of every entry at or below the read-only paths, unfollowed; read
        through folder descriptors, never by re-resolving a path. Only folders that can hold a read-only
        entry are entered, and each path is matched once: below a matching folder everything is read-only."""
        state: ReadOnlyState = {}
        rule = read_only_rule(tuple(self.settings.read_only_patterns))
        if not rule:
            return state
        try:
            root = open_root(self.workspace.root)
        except OSError:
            return state
        try:
            read_only_dirs: set[str] = set()

            def read_only(rel: str) -> bool:
                return rel.rpartition("/")[0] in read_only_dirs or rule.matches(rel)

            def leave_out(rel: str) -> bool:
                return not (read_only(rel) or rule.may_hold(rel))

            for entry in walk(root, skip=leave_out, limits=WalkLimits(max_depth=64)):
                if read_only(entry.rel):
                    st = entry.st
                    if stat.S_ISDIR(st.st_mode):
                        read_only_dirs.add(entry.rel)
                    state[entry.rel] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                        st.st_ino)
        finally:
            os.close(root)
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
        """Put back the pristine copy of rel through folder descriptors: a folder the script swapped for a
        symlink is removed as a link, never followed."""
        *parts, leaf = rel.split("/")
        if not (pristine / "/".join(parts)).is_dir():
            return  # nothing pristine down this path; what the script added is already gone
        root = open_root(self.workspace.root)
        try:
            folder = open_dirs(root, parts, create=True, replace=True)
        finally:
            os.close(root)
        try:
            remove_at(folder, leaf)
            source = self.settings.pristine_files.get(rel, pristine / rel)
            if source.is_file() and not source.is_symlink():
                with open(source, "rb") as src:
                    fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 stat.S_IMODE(os.stat(source).st_mode), dir_fd=folder)
                    with os.fdopen(fd, "wb") as out:
                        shutil.copyfileobj(src, out)
            elif source.is_dir():
                os.mkdir(leaf, dir_fd=folder)
        finally:
            os.close(folder)
