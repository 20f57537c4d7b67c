"""Keeping a task's read-only files as they were while agent code runs.

Before a command the guard surveys the workspace once. The topmost entries matching a read-only pattern are
what the sandbox mounts read-only. A folder in which every name is read-only (`images/*`) and which holds more
than SEPARATE_MOUNTS_MAX entries is mounted as one instead, so a command costs the same with 30 or 200,000
read-only files (one mount per file would cost a command seconds, and past a few thousand no sandbox starts).

After the command the guard puts back whatever changed. In a confined sandbox a folder that was mounted
read-only and is the same folder afterwards (device and inode) cannot have changed, so it is not walked: the
mount is the protection, the walk only checks that the folder was not swapped out from under it (renaming a
folder above it is allowed). The unconfined sandbox has no mounts: every read-only entry is compared.
"""
from __future__ import annotations

import os
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from mlab.core.fs.dirfd import NotAFolder, open_dir_at, open_dirs, open_root, remove_at, walk
from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.readonly import ReadOnlyRule, read_only_rule
from mlab.core.run.workspace import Workspace

ReadOnlyState = dict[str, tuple[int, ...]]
FolderId = tuple[int, int]  # (device, inode)

SEPARATE_MOUNTS_MAX = 32  # more read-only entries than this in one folder: the folder is mounted as one
MAX_DEPTH = 64
NOTE_NAMES_MAX = 20  # a note names this many files, then says how many more


@dataclass
class Survey:
    """The read-only part of the workspace as one command starts."""

    mounts: list[str] = field(default_factory=list)  # what the sandbox mounts read-only, workspace-relative
    sealed: dict[str, FolderId] = field(default_factory=dict)  # mounted folders not walked (confined only)
    state: ReadOnlyState = field(default_factory=dict)  # (type, size, mtime, ctime, inode) of what was walked


@dataclass
class Outcome:
    changed: list[str]  # what was put back (files, or folders when only folders changed) or removed
    intact: dict[str, FolderId]  # sealed folders found as they were: the command could not change them
    removed: list[str] = field(default_factory=list)  # entries the command added under read-only folders


def _state(st: os.stat_result) -> tuple[int, ...]:
    return stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


class ReadOnlyGuard:
    def __init__(self, settings: EnvSettings, workspace: Workspace):
        self.settings = settings
        self.workspace = workspace
        self._removed: set[str] = set()  # what the last restore removed, for its note

    def _rule(self) -> ReadOnlyRule:
        return read_only_rule(tuple(self.settings.read_only_patterns))

    def _confined(self) -> bool:
        return bool(getattr(self.settings.sandbox, "confined", False))

    def paths(self) -> list[Path]:
        """What a sandbox mounts read-only: the topmost matching entries, or their folder when it holds many."""
        return [self.workspace.root / rel for rel in self._survey(seal=False).mounts]

    def survey(self) -> Survey:
        """One walk through folder descriptors (never re-resolving a path): what to mount and the state to
        compare after the command. Only folders that can hold a read-only entry are entered."""
        return self._survey(seal=self._confined())

    def _survey(self, seal: bool) -> Survey:
        found = Survey()
        if self._rule():
            self._walk(found, sealed=None, seal=seal)
        found.mounts.sort()
        return found

    def state(self) -> ReadOnlyState:
        """The state of every read-only entry, unfollowed."""
        return self.look({}).state

    def look(self, sealed: dict[str, FolderId]) -> Survey:
        """The state of every read-only entry, except below the folders of `sealed` still there as the same
        folder: those are recorded but not entered, and are the returned survey's `sealed`."""
        found = Survey()
        if self._rule():
            self._walk(found, sealed=sealed, seal=False)
        return found

    def _walk(self, found: Survey, sealed: dict[str, FolderId] | None, seal: bool) -> None:
        """Fill `found`. sealed None: a survey (decide mounts; with `seal`, seal the folders mounted); else a
        later look that does not enter the folders of `sealed` still there as they were."""
        rule = self._rule()
        try:
            root = open_root(self.workspace.root)
        except OSError:
            return
        # (descriptor, prefix, everything in it read-only, depth)
        stack: list[tuple[int, str, bool, int]] = [(root, "", False, 0)]
        try:
            while stack:
                fd, prefix, covered, depth = stack.pop()
                try:
                    with os.scandir(fd) as listing:
                        entries = list(listing)
                except OSError:
                    entries = []
                try:
                    for entry in entries:
                        rel = prefix + entry.name
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        is_dir = stat.S_ISDIR(st.st_mode)
                        identity = (st.st_dev, st.st_ino)
                        if sealed and is_dir and sealed.get(rel) == identity:
                            found.sealed[rel] = identity  # still the folder mounted read-only: not entered
                            found.state[rel] = _state(st)
                            continue
                        matched = covered or rule.matches(rel)
                        whole = False
                        if not matched:
                            if not (is_dir and rule.may_hold(rel)):
                                continue
                            whole = self._whole_folder(rule, fd, entry.name, rel)
                        if not covered and (matched or whole):
                            if sealed is None:
                                found.mounts.append(rel)
                        read_only = matched or whole
                        if read_only:
                            found.state[rel] = _state(st)
                        if not is_dir or depth + 1 >= MAX_DEPTH:
                            continue
                        if seal and read_only and not covered:
                            found.sealed[rel] = identity  # mounted read-only: nothing below can change
                            continue
                        try:
                            child = open_dir_at(fd, entry.name)
                        except (NotAFolder, PermissionError):
                            continue
                        stack.append((child, rel + "/", read_only, depth + 1))
                finally:
                    os.close(fd)
        finally:
            for fd, *_rest in stack:
                os.close(fd)

    @staticmethod
    def _whole_folder(rule: ReadOnlyRule, parent: int, name: str, rel: str) -> bool:
        """Whether the folder rel is mounted as one: every name in it is read-only, and it holds many."""
        if not rule.any_name_matches(rel):
            return False
        try:
            fd = open_dir_at(parent, name)
        except (NotAFolder, PermissionError):
            return False
        try:
            with os.scandir(fd) as listing:
                return sum(1 for _ in islice(listing, SEPARATE_MOUNTS_MAX + 1)) > SEPARATE_MOUNTS_MAX
        except OSError:
            return False
        finally:
            os.close(fd)

    def restore(self, before: Survey) -> Outcome:
        """Belt and braces: put back what changed since `before` (a survey, or a look)."""
        after = self.look(before.sealed)
        for rel in after.sealed:
            after.state[rel] = before.state[rel]  # mounted read-only and still there: vouched for by the mount
        changed = sorted(rel for rel in set(before.state) | set(after.state)
                         if before.state.get(rel) != after.state.get(rel))
        replaced = [rel for rel in before.sealed if rel not in after.sealed]  # swapped out: every file below
        self._unshare_moved(before, after, replaced)
        # Entries the command added under a read-only folder go, whole (the topmost of them), pristine copy or not;
        # below a swapped sealed folder everything is put back whole anyway.
        swapped = tuple(f"{rel}/" for rel in replaced)
        added = [rel for rel in changed if rel not in before.state and not rel.startswith(swapped)]
        added_set = set(added)
        removed = [rel for rel in added if not any("/".join(rel.split("/")[:i]) in added_set
                                                   for i in range(1, rel.count("/") + 1))]
        for rel in removed:
            self._remove(rel)
        changed = [rel for rel in changed if rel not in added]
        # Folders only change because something below them did; name the files.
        dirs = {rel for rel in changed if (before.state.get(rel) or after.state[rel])[0] == stat.S_IFDIR}
        files = [rel for rel in changed if rel not in dirs]
        pristine = self.settings.pristine_dir
        if pristine:
            for rel in replaced:
                files += self._restore_tree(rel, pristine)
            for rel in sorted(set(files)):
                self._restore_one(rel, pristine)
        files = sorted(set(files))
        self._removed = set(removed)
        # A folder's own change is news only when nothing below it explains it (a file put back, an entry removed).
        shown = files or ([] if removed else sorted(dirs))
        return Outcome(sorted(shown + removed), after.sealed, removed)

    def _unshare_moved(self, before: Survey, after: Survey, replaced: list[str]) -> None:
        """A confined command may rename a folder above a read-only mount: the mount moves with it, and once the
        command ends its files (hard links of the task's prepared copy, see stage_workspace) would sit at a path
        the next command may write. Wherever a sealed folder or a mounted file went, each of its files with
        other links becomes a copy of its own. Costs a walk of the workspace, only after such a move."""
        moved_dirs = {before.sealed[rel] for rel in replaced}
        moved_files = {state[4] for rel, state in before.state.items()
                       if state[0] == stat.S_IFREG and (after.state.get(rel) or (0,) * 5)[4] != state[4]}
        if not moved_dirs and not moved_files:
            return
        try:
            root = open_root(self.workspace.root)
        except OSError:
            return
        inside_moved: list[str] = []  # the moved sealed folders, where the walk found them
        try:
            # sealed folders still in place are the mount's: nothing below can have moved
            for entry in walk(root, skip=lambda rel: rel in after.sealed):
                st = entry.st
                if stat.S_ISDIR(st.st_mode):
                    if (st.st_dev, st.st_ino) in moved_dirs:
                        inside_moved.append(entry.rel + "/")
                    continue
                if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
                    continue
                if st.st_ino in moved_files or entry.rel.startswith(tuple(inside_moved)):
                    _unshare_at(entry.dir_fd, entry.name, st)
        finally:
            os.close(root)

    def note(self, changed: list[str]) -> str:
        """What the agent is told about read-only files its code changed (and entries it added, now removed)."""
        removed = [rel for rel in changed if rel in self._removed]
        changed = [rel for rel in changed if rel not in self._removed]
        note = ""
        if changed:
            state = "have been restored" if self.settings.pristine_dir else "could not be restored"
            note += f"\n[read-only files were changed and {state}: {_names(changed)}]"
        if removed:
            note += f"\n[entries added under read-only folders have been removed: {_names(removed)}]"
        return note

    def _remove(self, rel: str) -> None:
        """Remove what a command added at rel (a whole folder included), never following a link."""
        *parts, leaf = rel.split("/")
        try:
            root = open_root(self.workspace.root)
        except OSError:
            return
        try:
            folder = open_dirs(root, parts)
        except (OSError, NotAFolder):
            return  # its folder is gone or replaced: nothing of it is left in the workspace
        finally:
            os.close(root)
        try:
            remove_at(folder, leaf)
        finally:
            os.close(folder)

    def _restore_tree(self, rel: str, pristine: Path) -> list[str]:
        """A sealed folder was swapped for something else: remove what stands there (never following a link)
        and name every pristine file below it, which _restore_one then copies back."""
        folder, leaf = self._open_parent(rel)
        try:
            remove_at(folder, leaf)
        finally:
            os.close(folder)
        names = []
        source = pristine / rel
        for top, _dirs, files in os.walk(source):  # the harness's own copy, not the workspace
            names += [str((Path(top) / name).relative_to(pristine)) for name in files]
        return names

    def _open_parent(self, rel: str) -> tuple[int, str]:
        """The descriptor of rel's folder (made, and a file or link standing in its way removed) and rel's name."""
        *parts, leaf = rel.split("/")
        root = open_root(self.workspace.root)
        try:
            return open_dirs(root, parts, create=True, replace=True), leaf
        finally:
            os.close(root)

    def _restore_one(self, rel: str, pristine: Path) -> None:
        """Put back the pristine copy of rel through folder descriptors: a folder the script swapped for a
        symlink is removed as a link, never followed."""
        if not (pristine / rel).parent.is_dir():
            return  # nothing pristine down this path; what the script added is already gone
        folder, leaf = self._open_parent(rel)
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


def _unshare_at(dir_fd: int, name: str, seen: os.stat_result) -> None:
    """Replace the file `name` of dir_fd (as `seen`, never following a link) by a copy with one link, so a write
    to it changes this file only; where no copy can be made, the file goes."""
    try:
        source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return  # gone or swapped since the walk saw it
    temporary = f".mlab-unshare-{secrets.token_hex(6)}.tmp"
    made = False
    try:
        opened = os.fstat(source)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(opened.st_mode):
            return
        target = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         stat.S_IMODE(opened.st_mode), dir_fd=dir_fd)
        made = True
        with os.fdopen(target, "wb") as out, os.fdopen(os.dup(source), "rb") as src:
            shutil.copyfileobj(src, out)
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        made = False
    except OSError:
        try:
            os.unlink(name, dir_fd=dir_fd)  # a link of the task's copy must not stay writable
        except OSError:
            pass
    finally:
        os.close(source)
        if made:
            try:
                os.unlink(temporary, dir_fd=dir_fd)
            except OSError:
                pass


def _names(rels: list[str]) -> str:
    shown = ", ".join(rels[:NOTE_NAMES_MAX])
    return shown + (f" and {len(rels) - NOTE_NAMES_MAX} more" if len(rels) > NOTE_NAMES_MAX else "")
