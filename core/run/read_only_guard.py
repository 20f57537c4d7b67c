"""Keeping a task's read-only files as they were while agent code runs.

Before a command the guard surveys the workspace once. The topmost entries matching a read-only pattern are
what the sandbox mounts read-only. A folder in which every name is read-only (`images/*`) and which holds more
than SEPARATE_MOUNTS_MAX entries is mounted as one instead, so a command costs the same with 30 or 200,000
read-only files (one mount per file would cost a command seconds, and past a few thousand no sandbox starts).

After the command the guard puts back whatever changed. In a confined sandbox a folder that was mounted
read-only and is the same folder afterwards (device and inode) cannot have changed, so it is not walked: the
mount is the protection, the walk only checks that the folder was not swapped out from under it (renaming a
folder above it is allowed). Whether a folder counts as read-only as a whole is decided by the survey, never
anew after the command (a folder grown past SEPARATE_MOUNTS_MAX is no new entry). The unconfined sandbox has no
mounts: there the kernel's change events name what a command changed (mlab.core.run.read_only_watch), and only
that is compared; where they cannot be had, every read-only entry is.
"""
from __future__ import annotations

import os
import secrets
import shutil
import stat
import threading
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from mlab.core.fs.dirfd import NotAFolder, open_dir_at, open_dirs, open_root, remove_at, walk
from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.read_only_walk import entry_state, walk_read_only
from mlab.core.run.read_only_watch import Journal, ReadOnlyWatch
from mlab.core.run.readonly import ReadOnlyRule, read_only_rule
from mlab.core.run.workspace import Workspace

ReadOnlyState = dict[str, tuple[int, ...]]
FolderId = tuple[int, int]  # (device, inode)

SEPARATE_MOUNTS_MAX = 32  # more read-only entries than this in one folder: the folder is mounted as one
NOTE_NAMES_MAX = 20  # a note names this many files, then says how many more


@dataclass
class Survey:
    """The read-only part of the workspace as one command starts."""

    mounts: list[str] = field(default_factory=list)  # what the sandbox mounts read-only, workspace-relative
    sealed: dict[str, FolderId] = field(default_factory=dict)  # mounted folders not walked (confined only)
    state: ReadOnlyState = field(default_factory=dict)  # (type, size, mtime, ctime, inode) of what was walked
    whole: set[str] = field(default_factory=set)  # folders judged read-only as a whole (many names, all read-only)
    journal: Journal | None = None  # unconfined, watched: what changes from now on, in place of `state`


@dataclass
class Outcome:
    changed: list[str]  # what was put back (files, or folders when only folders changed) or removed
    intact: dict[str, FolderId]  # sealed folders found as they were: the command could not change them
    removed: list[str] = field(default_factory=list)  # entries the command added under read-only folders


class ReadOnlyGuard:
    def __init__(self, settings: EnvSettings, workspace: Workspace):
        self.settings = settings
        self.workspace = workspace
        self._removed: set[str] = set()  # what the last restore removed, for its note
        self._whole: set[str] = set()  # what the last survey judged read-only as a whole, for later looks
        self._watch: ReadOnlyWatch | None = None  # unconfined: the record kept by change events
        self._watch_lock = threading.Lock()
        self._limit_said = False

    def _rule(self) -> ReadOnlyRule:
        return read_only_rule(tuple(self.settings.read_only_patterns))

    def _confined(self) -> bool:
        return bool(getattr(self.settings.sandbox, "confined", False))

    def paths(self) -> list[Path]:
        """What a sandbox mounts read-only: the topmost matching entries, or their folder when it holds many."""
        return [self.workspace.root / rel for rel in self._walk_all(seal=False).mounts]

    def survey(self) -> Survey:
        """What to mount, and the state to compare after the command: in a confined sandbox one walk through
        folder descriptors (never re-resolving a path), entering only folders that can hold a read-only entry;
        unconfined, the watched record brought up to date."""
        watched = self._watched()
        if watched is not None:
            return watched
        found = self._walk_all(seal=self._confined())
        self._whole = found.whole
        return found

    def state(self) -> ReadOnlyState:
        """The state of every read-only entry, unfollowed."""
        return self._walk_all(seal=False).state

    def look(self, sealed: dict[str, FolderId]) -> Survey:
        """The state of every read-only entry, except below the folders of `sealed` still there as the same
        folder: those are recorded but not entered, and are the returned survey's `sealed`. Folders count as read-
        only as a whole as the last survey judged them."""
        watched = self._watched()
        if watched is not None:
            return watched
        return self._look(sealed, self._whole)

    def _look(self, sealed: dict[str, FolderId], whole: set[str]) -> Survey:
        found = Survey(whole=set(whole))
        if self._rule():
            self._walk(found, sealed=sealed, seal=False)
        return found

    def _walk_all(self, seal: bool) -> Survey:
        """A survey: folders judged read-only as a whole by what they hold now; with `seal`, the folders mounted
        sealed."""
        found = Survey()
        if self._rule():
            self._walk(found, sealed=None, seal=seal)
        found.mounts.sort()
        return found

    def _watched(self) -> Survey | None:
        """Unconfined: the watched record brought up to date, as a survey whose journal tells what changes from
        now on; None where it cannot be had (then every entry is walked, before and after)."""
        rule = self._rule()
        if self._confined() or not rule:
            return None
        with self._watch_lock:
            watch = self._watch
            if watch is not None and (watch.rule is not rule or watch.pid != os.getpid()):
                watch.close()
                watch = self._watch = None
            try:
                if watch is None:
                    watch = self._watch = ReadOnlyWatch.start(self.workspace.root, rule, self._whole_size)
                    if watch is None:
                        return None
                else:
                    watch.refresh(poll=False)
            except OSError:  # no inotify instance to be had any more
                if watch is not None:
                    watch.close()
                self._watch = None
                return None
            return Survey(mounts=watch.mounts(), journal=watch.journal())

    def watch_limit_note(self) -> str | None:
        """Once, when the unconfined record went past the user's inotify watch limit: what that costs a command."""
        watch = self._watch
        if watch is None or self._limit_said or not watch.limit_reached:
            return None
        unwatched, files, folders = watch.unwatched()
        if not unwatched and not folders:
            return None  # fanotify marks took the files inotify could not watch
        self._limit_said = True
        limits = "inotify watch limit (fs.inotify.max_user_watches"
        if watch.marks_used:
            limits = ("inotify watch limit and fanotify mark limit (fs.inotify.max_user_watches and "
                      "fs.fanotify.max_user_marks")
        return (f"{unwatched:,} of {files:,} read-only files are past the user's {limits}, shared by all the user's "
                "processes), so each costs a stat after every command; a limit above the read-only files' count "
                "spares that")

    def close(self) -> None:
        """Stop watching (the record's inotify instance)."""
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def _walk(self, found: Survey, sealed: dict[str, FolderId] | None, seal: bool) -> None:
        """Fill `found`. sealed None: a survey (decide mounts and which folders are read-only as a whole; with
        `seal`, seal the folders mounted); else a later look that does not enter the folders of `sealed` still
        there as they were, and takes found.whole as decided."""
        try:
            root = open_root(self.workspace.root)
        except OSError:
            return

        def whole(fd: int, name: str, rel: str) -> bool:
            if sealed is not None:
                return rel in found.whole
            if self._whole_size(fd, name, rel):
                found.whole.add(rel)
                return True
            return False

        def visit(fd: int, name: str, rel: str, st: os.stat_result, read_only: bool, covered: bool) -> bool:
            is_dir = stat.S_ISDIR(st.st_mode)
            identity = (st.st_dev, st.st_ino)
            if sealed and is_dir and sealed.get(rel) == identity:
                found.sealed[rel] = identity  # still the folder mounted read-only: not entered
                found.state[rel] = entry_state(st)
                return False
            if not read_only:
                return True  # a folder that may hold read-only entries
            if not covered and sealed is None:
                found.mounts.append(rel)
            found.state[rel] = entry_state(st)
            if seal and is_dir and not covered:
                found.sealed[rel] = identity  # mounted read-only: nothing below can change
                return False
            return True

        walk_read_only(self._rule(), root, "", False, 0, whole, visit)

    @staticmethod
    def _whole_size(parent: int, name: str, rel: str) -> bool:
        """Whether the folder rel, every name in which is read-only, is mounted as one: it holds many."""
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
        if before.journal is not None:
            watch = self._watch
            if watch is None:  # stopped since the survey: what happened since cannot be told
                return Outcome([], {})
            with self._watch_lock:
                try:
                    watch.refresh()
                except OSError:  # no inotify instance to be had any more: every entry compared, this once
                    self._watch = None
                    watch.close()
                    then = watch.as_surveyed(before.journal)
                    return self._put_back(then, self._look({}, watch.whole_folders()).state, {}, {})
                then, now = watch.changes(before.journal)
                outcome = self._put_back(then, now, {}, {})
                if outcome.changed:
                    try:
                        watch.refresh()  # what was put back is in the record before the next command
                    except OSError:
                        self._watch = None
                        watch.close()
            return outcome
        after = self._look(before.sealed, before.whole)
        for rel in after.sealed:
            after.state[rel] = before.state[rel]  # mounted read-only and still there: vouched for by the mount
        return self._put_back(before.state, after.state, before.sealed, after.sealed)

    def _put_back(self, before: ReadOnlyState, after: ReadOnlyState, sealed: dict[str, FolderId],
                  intact: dict[str, FolderId]) -> Outcome:
        """Put back what differs between before and after (states of the entries in question), given the
        folders sealed before and those found intact after."""
        changed = sorted(rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel))
        replaced = [rel for rel in sealed if rel not in intact]  # swapped out: every file below
        self._unshare_moved(before, after, sealed, intact, replaced)
        # Entries the command added under a read-only folder go, whole (the topmost of them), pristine copy or not;
        # below a swapped sealed folder everything is put back whole anyway.
        swapped = tuple(f"{rel}/" for rel in replaced)
        added = [rel for rel in changed if rel not in before and not rel.startswith(swapped)]
        added_set = set(added)
        removed = [rel for rel in added if not any("/".join(rel.split("/")[:i]) in added_set
                                                   for i in range(1, rel.count("/") + 1))]
        for rel in removed:
            self._remove(rel)
        changed = [rel for rel in changed if rel not in added]
        # Folders only change because something below them did; name the files.
        dirs = {rel for rel in changed if (before.get(rel) or after[rel])[0] == stat.S_IFDIR}
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
        return Outcome(sorted(shown + removed), intact, removed)

    def _unshare_moved(self, before: ReadOnlyState, after: ReadOnlyState, sealed: dict[str, FolderId],
                       intact: dict[str, FolderId], replaced: list[str]) -> None:
        """A confined command may rename a folder above a read-only mount: the mount moves with it, and once the
        command ends its files (hard links of the task's prepared copy, see stage_workspace) would sit at a path
        the next command may write. Wherever a sealed folder or a mounted file went, each of its files with
        other links becomes a copy of its own. Costs a walk of the workspace, only after such a move."""
        moved_dirs = {sealed[rel] for rel in replaced}
        moved_files = {state[4] for rel, state in before.items()
                       if state[0] == stat.S_IFREG and (after.get(rel) or (0,) * 5)[4] != state[4]}
        if not moved_dirs and not moved_files:
            return
        try:
            root = open_root(self.workspace.root)
        except OSError:
            return
        inside_moved: list[str] = []  # the moved sealed folders, where the walk found them
        try:
            # sealed folders still in place are the mount's: nothing below can have moved
            for entry in walk(root, skip=lambda rel: rel in intact):
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
