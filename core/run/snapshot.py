"""Content-addressed snapshots of a workspace, stored as a tree of per-folder listings (as git does).

A folder's listing maps each name to {sha256, size, mode} for a regular file, {link, sha256, size, mode} for a
symbolic link (stored as a link, its target text as the object: never followed) or {tree: digest} for a
subfolder holding anything, the digest naming that subfolder's own listing, stored as an object. A snapshot
`NAME` is the root folder's listing in snapshots/NAME.json; an unchanged folder is one reference, so a step
stores only the listings on changed paths. Manifests of the flat kind (paths with slashes as keys), which
earlier versions wrote, read the same way. Other kinds of files (FIFOs, sockets, devices) and folders holding
nothing recorded are not kept. Objects are private copies, so a script that later changes a workspace file in
place cannot change an earlier snapshot.

Cost: the store remembers the workspace as it last recorded it (mlab.core.fs.tree_index). Taking a snapshot
lstats every entry and reads only files whose (inode, size, mtime_ns, ctime_ns) changed. Between snapshots the
kernel's change events (mlab.core.fs.change_watch) name what anyone wrote, the harness's actions and a plugin's
plain open() alike: the store looks only there, or reuses the previous snapshot when nothing changed. Nothing
has to announce its writes; without events (no inotify, events lost) every snapshot walks. After unconfined
code (which can write through a hard link made anywhere) the events tell all only with a watch on each recorded
file's inode: the first such snapshot walks and adds them.
Objects go to a content-addressed store (mlab.core.run.object_store) without fsync, listings too, and are made
durable together by one syncfs before take() returns, or by the caller's own next one (a run's step commit, so
one sync a step); verify() checks a whole snapshot, and finds one a crash before that sync tore. Putting one
back is mlab.core.run.snapshot_restore's.

The workspace is read only through directory descriptors (mlab.core.fs.dirfd): agent code may swap any of its
folders for a symlink while a snapshot is taken.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

from mlab.core.fs import split_walk
from mlab.core.fs.change_watch import ChangeWatch, FolderEvents
from mlab.core.fs.dirfd import WalkLimits, lstat_at, open_root, opened, write_all
from mlab.core.fs.durable import sync_filesystem, trust_horizon_ns
from mlab.core.fs.tree_index import Entry, Folder, LimitReached, Scanner, StatKey, stat_key
from mlab.core.run import snapshot_restore
from mlab.core.run.object_store import ObjectStore, unlink_quietly

_TREE_CACHE = 4096  # parsed folder listings kept for reading manifests

Manifest = dict[str, Entry]  # path -> {sha256, size, mode}, plus `link` (its target) for a symbolic link
TREE = "tree"  # the key of a subfolder's entry in a listing


def keep_all(_rel: str) -> bool:
    """The default skip: nothing is left out (one function, so the store knows a later call asks the same)."""
    return False


class WorkspaceChanges:
    """Whether agent code ran since the last snapshot (`unknown`), and how. The store's change events name
    whatever the harness process wrote; agent code is another matter: a process that lives on (the REPL) or an
    unconfined one may change files with no event (a shared mapping, another hard link), so its runs say here
    whether the events tell all. `sealed` names the folders agent code could not change (mounted read-only, and
    found to be the same folders after every run of it since the last snapshot): a walk need not enter them."""

    def __init__(self) -> None:
        self.unknown = True
        self._sealed: dict[str, tuple[int, int]] | None = None  # None: no run of agent code vouched yet
        self._running = 0  # runs of agent code that have not vouched (yet): nothing is sealed
        self._ended_confined = False  # every run of agent code since the last snapshot ended, confined
        self._ended_reaped = False  # every run of agent code since the last snapshot ended, all its processes

    def ran_agent_code(self) -> None:
        self.unknown = True
        if self._running == 0 and self._sealed is None:
            self._ended_confined = self._ended_reaped = True
        self._running += 1

    def code_ended(self, sealed: dict[str, tuple[int, int]], confined: bool = False, reaped: bool = False) -> None:
        """The run of agent code started last could not change these folders ((device, inode) each); confined:
        it ran in a confining sandbox and nothing of it lives on (a script, not the REPL), so the kernel's
        change events name everything it changed (mlab.core.fs.change_watch); reaped: nothing of it lives on,
        but it may have written through hard links from anywhere (unconfined), which only watches on the files'
        inodes tell."""
        self._running -= 1
        self._ended_confined = self._ended_confined and confined
        self._ended_reaped = self._ended_reaped and (confined or reaped)
        if self._sealed is None:
            self._sealed = dict(sealed)
        else:
            self._sealed = {rel: seen for rel, seen in self._sealed.items() if sealed.get(rel) == seen}

    @property
    def events_tell_all(self) -> bool:
        """Whether change events may stand in for a walk: no agent code ran, or every run of it ended confined."""
        return not self.unknown or (self._running == 0 and self._sealed is not None and self._ended_confined)

    @property
    def reaped(self) -> bool:
        """Agent code ran, and every run of it ended with all its processes: with a watch on each recorded file's
        inode, the events tell all (events_tell_all says whether they do without)."""
        return self.unknown and self._running == 0 and self._sealed is not None and self._ended_reaped

    @property
    def sealed(self) -> dict[str, tuple[int, int]]:
        if self._running or not self._sealed:
            return {}
        return dict(self._sealed)

    def clear(self) -> None:
        self.unknown = False
        self._sealed, self._running, self._ended_confined, self._ended_reaped = None, 0, False, False


class SnapshotStore:
    """Stores objects under objects/ (mlab.core.run.object_store) and snapshots under snapshots/NAME.json."""

    def __init__(self, root: Path):
        self.root = root
        self.objects = ObjectStore(root / "objects")
        self.manifests = root / "snapshots"
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.changes = WorkspaceChanges()
        self.left_out = ""
        # The workspace as last recorded: (root's (device, inode), skip, tree, name of that snapshot)
        self._index: tuple[tuple[int, int], Callable[[str], bool], Folder, str] | None = None
        self._trees: OrderedDict[str, dict[str, Entry]] = OrderedDict()
        self._watch: ChangeWatch | None = None  # events on the folders of the recorded tree
        self._watch_all = True  # the next walk must watch every folder it lists (a new watch)
        self._linked = False  # a file recorded since the walk began has other hard links
        self._files_refused = False  # a file's inode watch was refused (the watch limit): folders' watches only
        self._limit_said = False  # the watch limit's note is given once a store (a run)

    def close(self) -> None:
        """Let go of the packs' descriptors (reading again reopens them) and of the change watch."""
        self._drop_watch()
        self.objects.close()

    def __del__(self) -> None:
        with suppress(Exception):
            self.close()

    def watch_limit_note(self) -> str | None:
        """Once, when the recorded tree went past the user's inotify watch limit: what that costs a step."""
        if self._watch is None or self._limit_said or not self._watch.limit_reached:
            return None
        self._limit_said = True
        unwatched, folders = self._watch.counts()
        return (f"{unwatched:,} of {folders:,} folders of the workspace are past the user's inotify watch limit "
                "(fs.inotify.max_user_watches, shared by all the user's processes), so each is listed again at every "
                "step's snapshot; a limit above the workspace's folder count spares that")

    # ---- taking a snapshot ----------------------------------------------------------------------
    def take(self, workspace: Path, name: str, skip: Callable[[str], bool] = keep_all,
             changes: WorkspaceChanges | None = None) -> Manifest:
        """Record the workspace under `name`; returns the manifest. `changes`, when given, says whether agent
        code ran since the last snapshot of this store (see WorkspaceChanges), so change events may stand in for
        a walk; without it every entry is lstatted. What a bounded walk left out (a tree too deep or too large)
        is described by `self.left_out` afterwards."""
        self.record(workspace, name, skip, changes)
        return self.manifest(name)

    def record(self, workspace: Path, name: str, skip: Callable[[str], bool] = keep_all,
               changes: WorkspaceChanges | None = None, durable: bool = True) -> None:
        """take() without building the flat manifest, which costs as much as the workspace is large. durable=False:
        nothing is synced; the caller's next flush of this file system (a run's trace commit) makes it durable,
        and verify() finds a snapshot a crash before that flush tore."""
        self._record_tree(workspace, name, skip, changes, durable)
        for journal in (changes, self.changes):  # the workspace is recorded: nothing is pending any more
            if journal is not None:
                journal.clear()

    def _record_tree(self, workspace: Path, name: str, skip: Callable[[str], bool],
                     changes: WorkspaceChanges | None, durable: bool) -> None:
        with opened(open_root(workspace)) as root:
            st = os.fstat(root)
            identity = (st.st_dev, st.st_ino)
            index = self._index
            self._index = None  # until this snapshot is complete: a failure leaves no half-updated tree
            if index is None or index[0] != identity or index[1] != skip:
                index = (identity, skip, Folder(), "")
                self._drop_watch()  # a new tree: every folder is watched anew as it is first listed
            tree, previous = index[2], index[3]
            events = self._drain_events()
            # The events name every write since the last snapshot, whoever made it, unless agent code may have
            # written without one; None when they cannot be had: then the whole tree is walked.
            told = changes is not None and (changes.events_tell_all or self._inodes_tell(changes, events)) \
                and events is not None and previous and not self.left_out
            if told and changes is not None and not changes.unknown and not events:
                self.name_again(previous, name, durable)
                self._index = (identity, skip, tree, name)
                return
            sealed = self._sealed(changes, events)
            scanner = Scanner(self._record, skip, WalkLimits(),
                              trust_horizon_ns(self.manifests / ".clock", st.st_dev), sealed)
            scanner.watch, scanner.watch_all = self._watch, self._watch_all
            self._linked = False
            if not (told and self._apply_events(scanner, root, tree, events or {})):
                self._full_walk(scanner, root, tree, sealed)
            self._watch_all = False
            if self._watch is not None and self._watch.files_refused:  # past the watch limit: folders only again
                self._files_refused = True
                self._drop_watch()
            listing = tree.encode(self._seal)
            tree.dirty = False
            self._commit(name, listing, durable)
            self._index = (identity, skip, tree, name)

    def _inodes_tell(self, changes: WorkspaceChanges, events: dict[str, FolderEvents] | None) -> bool:
        """Whether, after agent code that ended whole but perhaps unconfined, the events tell all: every recorded
        file's inode has had a watch since it was recorded. The first time, the watch is told to give each file
        one (and each folder its own again), which this step's walk does."""
        watch = self._watch
        if not changes.reaped or watch is None or self._files_refused:
            return False
        if not watch.files:
            watch.files = self._watch_all = True
            return False
        return events is not None and not watch.files_refused

    def _sealed(self, changes: WorkspaceChanges | None,
                events: dict[str, FolderEvents] | None) -> dict[str, tuple[int, int]]:
        """The folders a walk need not enter: sealed against agent code, and with no event inside (the harness
        process may have written there); none when the events are unknown."""
        if changes is None or events is None or self._watch_all:
            return {}
        return {rel: seen for rel, seen in changes.sealed.items()
                if not any(prefix.startswith(rel + "/") for prefix in events)}

    def _full_walk(self, scanner: Scanner, root: int, tree: Folder, sealed: dict[str, tuple[int, int]]) -> None:
        scanner.only = None
        scanner.split = split_walk.start(root, tree, scanner.limits.max_entries, sealed)
        try:
            scanner.scan(root, "", tree, 0)
        except LimitReached:
            tree.invalidate()  # what the walk reached is kept, the rest left out: encode it all again
        finally:
            if scanner.split is not None:
                scanner.split.close()
        self.left_out = scanner.limits.note()

    # A file recorded with other hard links makes the step walk the tree (a write through another name in the
    # workspace is an event naming only that one), but never the sealed folders: no link of a sealed folder's
    # files is writable to agent code. The folder is a read-only mount; the other link of each file (the task's
    # copy, MLAB_HOME) is not in a confining sandbox at all; a link agent code makes cannot cross a mount
    # (EXDEV), so none leads into or out of it; the harness never writes the task's copy during a run, and
    # what it writes in the workspace is an event, which unseals the folder (_sealed).
    def _apply_events(self, scanner: Scanner, root: int, tree: Folder, events: dict[str, FolderEvents]) -> bool:
        """Bring the tree up to date from change events alone: written files read again, folders whose entries
        came, went or were renamed listed again; False when a walk of the whole tree is needed instead."""
        relist = {prefix for prefix, happened in events.items() if happened.relist}
        for prefix, happened in events.items():
            if not happened.relist and not all(scanner.update_path(root, tree, prefix + name)
                                               for name in sorted(happened.names)):
                relist.add(prefix)
        if relist and not self._linked:
            listed = {""}
            for prefix in relist:  # each folder to list again, and the folders on its way
                parts = prefix.split("/")[:-1]
                listed.update("".join(f"{part}/" for part in parts[:depth]) for depth in range(1, len(parts) + 1))
            scanner.only = listed
            try:
                scanner.scan(root, "", tree, 0)
            except LimitReached:
                tree.invalidate()
                return False
            finally:
                scanner.only = None
            self.left_out = scanner.limits.note()  # a new folder too deep: the next step walks everything
        return not self._linked  # another link of a file may have changed it without an event

    def _drain_events(self) -> dict[str, FolderEvents] | None:
        """The change events since the last snapshot (a watch is made on the first); None when unknown."""
        events = self._watch.drain() if self._watch is not None else None
        # the first snapshot, or a watch failed: watch afresh, every folder at the next walk (events lost to a
        # full queue leave the watches standing: that walk need not add them again)
        if events is None and (self._watch is None or self._watch.broken):
            self._drop_watch()
            self._watch = ChangeWatch.open()
            self._watch_all = self._watch is not None
        return events

    def _drop_watch(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._watch_all = True

    def name_again(self, previous: str, name: str, durable: bool = True) -> None:
        """Snapshot `name` is snapshot `previous`: one more name for the same file (a copy where the file
        system has no hard links), made durable by one fsync of the folder (durable=False: by the caller's
        next sync)."""
        source = self.manifests / f"{previous}.json"
        try:
            self._place(name, lambda tmp: os.link(source, tmp))
        except OSError:
            self._commit(name, source.read_bytes(), durable)
            return
        if not durable:
            return
        with opened(os.open(self.manifests, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as folder:
            os.fsync(folder)

    def _commit(self, name: str, listing: bytes, durable: bool) -> None:
        """Write the listing, then (durable) make it and every object written since the last commit durable with
        one syncfs: the step that refers to them is committed (its trace written) only after this returns."""

        def write(tmp: str) -> None:
            with opened(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)) as fd:
                write_all(fd, listing)

        self._place(name, write)
        if durable:
            sync_filesystem(self.manifests)

    def _place(self, name: str, make: Callable[[str], object]) -> None:
        """Make snapshot `name`'s file under a temporary name (make(tmp)), then put it in place whole."""
        tmp = str(self.manifests / f".{name}.json.tmp{os.getpid()}-{secrets.token_hex(4)}")
        try:
            make(tmp)
            os.replace(tmp, self.manifests / f"{name}.json")
        except BaseException:
            unlink_quietly(tmp)
            raise

    def _seal(self, folder: Folder) -> str | None:
        """The digest of a folder's listing, stored as an object when it changed; None when it holds nothing."""
        if folder.dirty:
            listing = folder.encode(self._seal)
            folder.digest = self.objects.put(listing) if listing != b"{}" else None
            folder.dirty = False
        return folder.digest

    def _record(self, dir_fd: int, name: str, is_link: bool) -> tuple[Entry, StatKey] | None:
        """Store the file or link `name` of dir_fd (as the listing said it was); its entry and the stat key it
        was read at, or None when it is neither any more."""
        if is_link:
            st = lstat_at(dir_fd, name)
            if st is None or not (stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode)):
                return None  # gone, or replaced by something not recorded
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(name, dir_fd=dir_fd)
                except OSError:  # gone since the lstat
                    return None
                data = os.fsencode(target)
                entry = {"link": target, "sha256": self.objects.put(data), "size": len(data), "mode": 0o777}
                return entry, stat_key(st)
            # replaced by a regular file since the listing: stored as one
        stored = self.objects.put_file(dir_fd, name)
        if stored is None:  # no longer a regular file (removed, or swapped for a FIFO)
            return None
        digest, size, st = stored
        if st.st_nlink > 1 and not (self._watch is not None and self._watch.files):  # else its inode tells
            self._linked = True
        return {"sha256": digest, "size": size, "mode": st.st_mode & 0o777}, stat_key(st)

    # ---- reading snapshots ----------------------------------------------------------------------
    def manifest(self, name: str) -> Manifest:
        """Snapshot `name` as one mapping: every file's and link's path -> its entry."""
        return dict(self._entries(name))

    def _entries(self, name: str, broken: list[str] | None = None) -> Iterator[tuple[str, Entry]]:
        """Every file's and link's path and entry in snapshot `name`; with `broken`, a subfolder whose listing
        is not stored whole is named there instead of entered."""
        pending = [(json.loads((self.manifests / f"{name}.json").read_bytes()), "")]
        while pending:
            current, at = pending.pop()
            for key, entry in current.items():
                if TREE not in entry:
                    yield at + key, entry  # a name, or a whole path in a flat manifest
                elif broken is None or self.objects.has(entry[TREE]):
                    pending.append((self._tree(entry[TREE]), f"{at}{key}/"))
                else:
                    broken.append(at + key)

    def _tree(self, digest: str) -> dict[str, Entry]:
        listing = self._trees.get(digest)
        if listing is None:
            listing = json.loads(self.objects.read(digest))
            self._trees[digest] = listing
            if len(self._trees) > _TREE_CACHE:
                self._trees.popitem(last=False)
        else:
            self._trees.move_to_end(digest)
        return listing

    def has(self, name: str) -> bool:
        return (self.manifests / f"{name}.json").exists()

    def verify(self, name: str) -> list[str]:
        """Paths of snapshot `name` whose stored object is missing or does not hold the bytes its name
        promises (a crash tore it), checked once per object and process; [] when the snapshot is whole."""
        broken: list[str] = []
        try:
            torn = [rel for rel, entry in self._entries(name, broken)
                    if not self.objects.has(entry["sha256"], entry["size"])]
        except (OSError, ValueError):  # its listing never reached the disk whole: a crash before the flush
            return [f"{name}.json"]
        return sorted(broken + torn)

    def store_bytes(self, data: bytes) -> str:
        """Store bytes outside any snapshot (e.g. earlier versions of edited files); durable once the next
        snapshot is committed."""
        return self.objects.put(data)

    def read_object(self, digest: str) -> bytes:
        return self.objects.read(digest)

    # ---- putting a snapshot back ----------------------------------------------------------------
    def restore(self, name: str, workspace: Path, skip: Callable[[str], bool] = keep_all) -> None:
        """Make the workspace equal to snapshot `name`, leaving paths for which skip() is true alone."""
        manifest = self.manifest(name)
        self._index = None  # until the restore is complete the workspace is neither what was recorded nor this
        self._drop_watch()  # the files put back are new inodes, with no watch of their own: watched anew
        identity, tree = snapshot_restore.restore(manifest, self.objects, workspace, skip, self.manifests / ".clock")
        self._index = (identity, skip, tree, name)
        self.left_out = ""

    def materialize(self, name: str, target: Path) -> None:
        """Write snapshot `name` into an empty folder, links leading out of it left out (scoring reads it)."""
        snapshot_restore.materialize(self.manifest(name), self.objects, target)
