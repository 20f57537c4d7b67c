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
has to announce its writes; without events (no inotify, events lost) every snapshot walks.
Objects up to 1 MB (file contents read whole, folder listings, link targets) are appended to this process's pack
(mlab.core.run.object_pack): creating a file costs far more than appending its bytes; bigger files are streamed
into files of their own. Objects and listings are written without fsync and made durable together by one syncfs
before take() returns (the caller commits the step after it); an object a crash may have torn (one this process
did not write) is checked against its name before it is reused, and verify() checks a whole snapshot.

The workspace is read and changed only through directory descriptors (mlab.core.fs.dirfd): agent code may
swap any of its folders for a symlink while a snapshot is taken or restored.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlab.core.fs import split_walk
from mlab.core.fs.change_watch import ChangeWatch, FolderEvents
from mlab.core.fs.dirfd import FILE_FLAGS, DirChain, WalkLimits, lstat_at, open_root, remove_at, walk, write_all
from mlab.core.fs.durable import sync_filesystem, trust_horizon_ns
from mlab.core.fs.tree_index import Folder, LimitReached, Scanner, StatKey, stat_key
from mlab.core.run.object_pack import Location, PackIndex, PackWriter, open_pack, read_at

_BLOCK = 1 << 20
_SMALL_FILE = 1 << 20  # files up to this size are read once, hashed and stored from memory
_TREE_CACHE = 4096  # parsed folder listings kept for reading manifests

# A manifest entry: {sha256, size, mode}, plus `link` (its target) for a symbolic link.
Entry = dict[str, Any]
Manifest = dict[str, Entry]
TREE = "tree"  # the key of a subfolder's entry in a listing


def _digest_fd(fd: int) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, _BLOCK):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def keep_all(_rel: str) -> bool:
    """The default skip: nothing is left out (one function, so the store knows a later call asks the same)."""
    return False


def is_link(entry: Entry) -> bool:
    return "link" in entry


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

    def ran_agent_code(self) -> None:
        self.unknown = True
        if self._running == 0 and self._sealed is None:
            self._ended_confined = True
        self._running += 1

    def code_ended(self, sealed: dict[str, tuple[int, int]], confined: bool = False) -> None:
        """The run of agent code started last could not change these folders ((device, inode) each); confined:
        it ran in a confining sandbox and nothing of it lives on (a script, not the REPL), so the kernel's
        change events name everything it changed (mlab.core.fs.change_watch)."""
        self._running -= 1
        self._ended_confined = self._ended_confined and confined
        if self._sealed is None:
            self._sealed = dict(sealed)
        else:
            self._sealed = {rel: seen for rel, seen in self._sealed.items() if sealed.get(rel) == seen}

    @property
    def events_tell_all(self) -> bool:
        """Whether change events may stand in for a walk: no agent code ran, or every run of it ended confined."""
        return not self.unknown or (self._running == 0 and self._sealed is not None and self._ended_confined)

    @property
    def sealed(self) -> dict[str, tuple[int, int]]:
        if self._running or not self._sealed:
            return {}
        return dict(self._sealed)

    def clear(self) -> None:
        self.unknown = False
        self._sealed, self._running, self._ended_confined = None, 0, False


class SnapshotStore:
    """Stores objects in packs under objects/pack (mlab.core.run.object_pack), those streamed from a big file under
    objects/ab/abcdef…, and snapshots under snapshots/NAME.json."""

    def __init__(self, root: Path):
        self.root = root
        self.objects = root / "objects"
        self.manifests = root / "snapshots"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.changes = WorkspaceChanges()
        self.left_out = ""
        # The workspace as last recorded: (root's (device, inode), skip, tree, name of that snapshot)
        self._index: tuple[tuple[int, int], Callable[[str], bool], Folder, str] | None = None
        self._good: set[str] = set()  # objects written or verified by this process
        self._listed: dict[str, set[str]] = {}  # objects/ab -> its objects, listed once
        self._objects_dir = str(self.objects)
        self._loose_folders = set(os.listdir(self._objects_dir))  # objects/ab folders: none in a new store
        self._trees: OrderedDict[str, dict[str, Entry]] = OrderedDict()
        self._packs = PackIndex(self.objects, max_index_bytes=None)
        self._packs.refresh()
        self._pack_writer = PackWriter(self._packs)
        self._pack_fds: dict[str, int] = {}
        self._watch: ChangeWatch | None = None  # events on the folders of the recorded tree
        self._watch_all = True  # the next walk must watch every folder it lists (a new watch)
        self._linked = False  # a file recorded since the walk began has other hard links

    def close(self) -> None:
        """Let go of the packs' descriptors (reading again reopens them) and of the change watch."""
        self._drop_watch()
        self._pack_writer.close()
        for fd in self._pack_fds.values():
            os.close(fd)
        self._pack_fds.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

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
               changes: WorkspaceChanges | None = None) -> None:
        """take() without building the flat manifest, which costs as much as the workspace is large."""
        self._record_tree(workspace, name, skip, changes)
        for journal in (changes, self.changes):  # the workspace is recorded: nothing is pending any more
            if journal is not None:
                journal.clear()

    def _record_tree(self, workspace: Path, name: str, skip: Callable[[str], bool],
                     changes: WorkspaceChanges | None) -> None:
        root = open_root(workspace)
        try:
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
            told = changes is not None and changes.events_tell_all and events is not None and previous \
                and not self.left_out
            if told and changes is not None and not changes.unknown and not events:
                self._reuse(previous, name)
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
            listing = tree.encode(self._seal)
            tree.dirty = False
            self._commit(name, listing)
            self._index = (identity, skip, tree, name)
        finally:
            os.close(root)

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
        if self._watch is None:
            self._watch = ChangeWatch.open()
            self._watch_all = self._watch is not None
            return None
        events = self._watch.drain()
        if events is None:  # lost some: watch afresh, every folder at the next walk
            self._drop_watch()
            self._watch = ChangeWatch.open()
            self._watch_all = self._watch is not None
        return events

    def _drop_watch(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._watch_all = True

    def _reuse(self, previous: str, name: str) -> None:
        """Snapshot `name` is snapshot `previous`: one more name for the same file (a copy where the file
        system has no hard links), made durable by one fsync of the folder."""
        source = self.manifests / f"{previous}.json"
        tmp = self._temporary(name)
        try:
            os.link(source, tmp)
        except OSError:
            self._commit(name, source.read_bytes())
            return
        self._replace(tmp, name)
        _fsync_folder(self.manifests)

    def _commit(self, name: str, listing: bytes) -> None:
        """Write the listing, then make it and every object written since the last commit durable with one
        syncfs: the step that refers to them is committed (its trace written) only after this returns."""
        tmp = self._temporary(name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(listing)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except BaseException:
            _unlink_object(tmp)
            raise
        self._replace(tmp, name)
        sync_filesystem(self.manifests)

    def _temporary(self, name: str) -> Path:
        return self.manifests / f".{name}.json.tmp{os.getpid()}-{secrets.token_hex(4)}"

    def _replace(self, tmp: Path, name: str) -> None:
        try:
            os.replace(tmp, self.manifests / f"{name}.json")
        except BaseException:
            _unlink_object(tmp)
            raise

    def _seal(self, folder: Folder) -> str | None:
        """The digest of a folder's listing, stored as an object when it changed; None when it holds nothing."""
        if folder.dirty:
            listing = folder.encode(self._seal)
            folder.digest = self._put(listing) if listing != b"{}" else None
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
                return {"link": target, "sha256": self._put(data), "size": len(data), "mode": 0o777}, stat_key(st)
            # replaced by a regular file since the listing: stored as one
        stored = self._store(dir_fd, name)
        if stored is None:  # no longer a regular file (removed, or swapped for a FIFO)
            return None
        digest, size, opened = stored
        if opened.st_nlink > 1:
            self._linked = True
        return {"sha256": digest, "size": size, "mode": opened.st_mode & 0o777}, stat_key(opened)

    def _store(self, dir_fd: int, name: str) -> tuple[str, int, os.stat_result] | None:
        """Store a regular file's bytes; (digest, size, its stat when opened), or None when it is not a
        regular file. Read through one descriptor, never following a link, so what is hashed is what is
        stored."""
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            os.set_blocking(fd, True)
            if st.st_size <= _SMALL_FILE:
                data = _read_all(fd, st.st_size)
                if len(data) <= _SMALL_FILE:
                    return self._put(data), len(data), st
                os.lseek(fd, 0, os.SEEK_SET)  # it grew meanwhile: stream it
            digest, size = _digest_fd(fd)
            if not self._has(digest, size, refresh=False):
                os.lseek(fd, 0, os.SEEK_SET)
                digest, size = self._copy_in(fd, digest)
            return digest, size, st
        finally:
            os.close(fd)

    def _stored_names(self, prefix: str) -> set[str]:
        """The objects of folder objects/<prefix>, listed once per process."""
        names = self._listed.get(prefix)
        if names is None:
            names = set()
            if prefix in self._loose_folders:
                try:
                    names = set(os.listdir(os.path.join(self._objects_dir, prefix)))
                except FileNotFoundError:
                    self._loose_folders.discard(prefix)
            self._listed[prefix] = names
        return names

    def _has(self, digest: str, size: int | None = None, refresh: bool = True) -> bool:
        """Whether the object is stored whole. One this process did not write is checked against its name
        once (a crash may have left it torn: objects are written unsynced); a torn one is forgotten (or
        removed), to be stored again. `refresh`: look for packs other processes added since this one looked
        (the store's only writer, which holds the run's lock, need not)."""
        if digest in self._good:
            return True
        location = self._packs.find(digest, refresh)
        if location is not None:
            if (size is None or location.size == size) and self._packed_intact(digest, location):
                self._good.add(digest)
                return True
            self._packs.forget(digest)
        names = self._stored_names(digest[:2])
        if digest not in names:
            return False
        path = self._object_file(digest)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            names.discard(digest)
            return False
        try:
            intact = (size is None or os.fstat(fd).st_size == size) and _digest_fd(fd)[0] == digest
        finally:
            os.close(fd)
        if intact:
            self._good.add(digest)
            return True
        _unlink_object(path)
        names.discard(digest)
        return False

    def _packed_intact(self, digest: str, location: Location) -> bool:
        try:
            data = read_at(self._pack_fd(location.pack), location)
        except OSError:
            return False
        return len(data) == location.size and hashlib.sha256(data).hexdigest() == digest

    def _pack_fd(self, name: str) -> int:
        fd = self._pack_fds.get(name)
        if fd is None:
            fd = self._pack_fds[name] = open_pack(self._packs, name)
        return fd

    def _object_file(self, digest: str) -> str:
        return os.path.join(self._objects_dir, digest[:2], digest)

    def _put(self, data: bytes) -> str:
        """Store bytes (durable from the next commit on); returns their digest. Appended to this process's pack:
        a crash that tears it is caught by _has before any reuse."""
        digest = hashlib.sha256(data).hexdigest()
        if self._has(digest, len(data), refresh=False):
            return digest
        self._pack_writer.append(digest, data)  # on a failure (a full disk) nothing of it stays
        self._good.add(digest)
        return digest

    def _copy_in(self, fd: int, digest: str) -> tuple[str, int]:
        """Copy fd into the store; returns the digest and size of what was copied (the file may have changed
        since it was hashed, so it is copied under a temporary name and named by what was copied)."""
        self._loose_folder(digest[:2])
        tmp = os.path.join(self._objects_dir, digest[:2], f".{digest}.tmp{os.getpid()}-{secrets.token_hex(4)}")
        h = hashlib.sha256()
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
            try:
                size = _copy_sparse(fd, out, h)
            finally:
                os.close(out)
            copied = h.hexdigest()
            names = self._loose_folder(copied[:2])
            os.replace(tmp, self._object_file(copied))  # objects are never changed in place (mode 0444)
        except BaseException:
            _unlink_object(Path(tmp))
            raise
        names.add(copied)
        self._good.add(copied)
        return copied, size

    def _loose_folder(self, prefix: str) -> set[str]:
        """Folder objects/<prefix> made where missing; the objects it holds."""
        names = self._stored_names(prefix)
        if prefix not in self._loose_folders:
            os.makedirs(os.path.join(self._objects_dir, prefix), exist_ok=True)
            self._loose_folders.add(prefix)
        return names

    def store_bytes(self, data: bytes) -> str:
        """Store bytes outside any snapshot (e.g. earlier versions of edited files); durable once the next
        snapshot is committed."""
        return self._put(data)

    def read_object(self, digest: str) -> bytes:
        location = self._packs.find(digest)
        if location is not None:
            return read_at(self._pack_fd(location.pack), location)
        with open(self._object_file(digest), "rb") as f:
            return f.read()

    def object_location(self, digest: str) -> tuple[Path, int, int] | None:
        """Where an object's bytes are: (file, offset, size), None when the store does not hold it."""
        location = self._packs.find(digest)
        if location is not None:
            return Path(self._packs.folder) / f"{location.pack}.pack", location.offset, location.size
        path = Path(self._object_file(digest))
        return (path, 0, path.stat().st_size) if path.is_file() else None

    def digests(self) -> set[str]:
        """Every object the store holds (packed or not), whole or not."""
        self._packs.refresh()
        found = set(self._packs.locations)
        for prefix in os.listdir(self._objects_dir):
            if len(prefix) == 2:
                found.update(n for n in os.listdir(os.path.join(self._objects_dir, prefix)) if not n.startswith("."))
        return found

    def _copy_object_at(self, digest: str, folder: int, leaf: str, mode: int) -> None:
        """Copy a stored object to the new file `leaf` of the folder descriptor (never following a link there)."""
        location = self._packs.find(digest)
        if location is not None:
            _copy_to_new_file(self._pack_fd(location.pack), location.offset, location.size, False, folder, leaf,
                              mode)
            return
        src = os.open(self._object_file(digest), os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(src)
            sparse = st.st_blocks * 512 < st.st_size  # holes stay holes; otherwise the kernel copies fastest
            _copy_to_new_file(src, 0, st.st_size, sparse, folder, leaf, mode)
        finally:
            os.close(src)

    # ---- reading snapshots ----------------------------------------------------------------------
    def manifest(self, name: str) -> Manifest:
        """Snapshot `name` as one mapping: every file's and link's path -> its entry."""
        return self._flatten(self._root_listing(name), "")

    def _root_listing(self, name: str) -> dict[str, Entry]:
        listing: dict[str, Entry] = json.loads((self.manifests / f"{name}.json").read_bytes())
        return listing

    def _tree(self, digest: str) -> dict[str, Entry]:
        listing = self._trees.get(digest)
        if listing is None:
            listing = json.loads(self.read_object(digest))
            self._trees[digest] = listing
            if len(self._trees) > _TREE_CACHE:
                self._trees.popitem(last=False)
        else:
            self._trees.move_to_end(digest)
        return listing

    def _flatten(self, listing: dict[str, Entry], prefix: str) -> Manifest:
        flat: Manifest = {}
        pending = [(listing, prefix)]
        while pending:
            current, at = pending.pop()
            for key, entry in current.items():
                if TREE in entry:
                    pending.append((self._tree(entry[TREE]), f"{at}{key}/"))
                else:
                    flat[at + key] = entry  # a name, or a whole path in a flat manifest
        return flat

    def has(self, name: str) -> bool:
        return (self.manifests / f"{name}.json").exists()

    def verify(self, name: str) -> list[str]:
        """Paths of snapshot `name` whose stored object is missing or does not hold the bytes its name
        promises (a crash tore it), checked once per object and process; [] when the snapshot is whole."""
        broken: list[str] = []
        pending = [(self._root_listing(name), "")]
        while pending:
            current, at = pending.pop()
            for key, entry in current.items():
                if TREE in entry:
                    if self._has(entry[TREE]):
                        pending.append((self._tree(entry[TREE]), f"{at}{key}/"))
                    else:
                        broken.append(at + key)
                elif not self._has(entry["sha256"], entry["size"]):
                    broken.append(at + key)
        return sorted(broken)

    def restore(self, name: str, workspace: Path, skip: Callable[[str], bool] = keep_all) -> None:
        """Make the workspace equal to snapshot `name`, leaving paths for which skip() is true alone."""
        manifest = self.manifest(name)
        folders = {rel.rsplit("/", 1)[0] for rel in manifest if "/" in rel}
        folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
        workspace.mkdir(parents=True, exist_ok=True)
        self._index = None  # until the restore is complete the workspace is neither what was recorded nor this
        root = open_root(workspace)
        keys: dict[str, StatKey | None] = {}
        try:
            st = os.fstat(root)
            identity = (st.st_dev, st.st_ino)
            horizon = trust_horizon_ns(self.manifests / ".clock", st.st_dev)
            # 1. remove what the snapshot does not have, each entry through its folder's descriptor
            limits = WalkLimits()
            extra_dirs = []
            for found in walk(root, skip, limits):
                entry = manifest.get(found.rel)
                if stat.S_ISDIR(found.st.st_mode):
                    if found.rel not in folders:
                        if found.depth >= limits.max_depth:
                            remove_at(found.dir_fd, found.name)  # too deep for any snapshot to hold a file
                        else:
                            extra_dirs.append(found.rel)  # removed below once empty (it may hold skipped files)
                    continue
                if entry is None or is_link(entry) != stat.S_ISLNK(found.st.st_mode) or not (
                        stat.S_ISLNK(found.st.st_mode) or stat.S_ISREG(found.st.st_mode)):
                    remove_at(found.dir_fd, found.name)
            with DirChain(root) as chain:
                for rel in sorted(extra_dirs, key=lambda r: (-r.count("/"), r)):
                    *parts, leaf = rel.split("/")
                    try:
                        os.rmdir(leaf, dir_fd=chain.folder(parts))
                    except OSError:
                        pass  # not empty (skipped files), or gone
            # 2. put back every file and link, folders made (or cleared of what stands in their way) on the way
            with DirChain(root, create=True, replace=True) as chain:
                for rel, entry in sorted(manifest.items()):
                    *parts, leaf = rel.split("/")
                    folder = chain.folder(parts)
                    key = self._restore_entry(folder, leaf, entry)
                    keys[rel] = key if key is not None and key[3] < horizon else None
        finally:
            os.close(root)
        # The workspace is now this snapshot: files found intact keep their stat, so the next snapshot reads
        # only those written here.
        tree = Folder()
        for rel, entry in manifest.items():
            *parts, leaf = rel.split("/")
            folder_node = tree
            for part in parts:
                folder_node = folder_node.folders.setdefault(part, Folder())
            folder_node.files[leaf] = (keys.get(rel), entry)
        self._index = (identity, skip, tree, name)
        self.left_out = ""

    def _restore_entry(self, folder: int, leaf: str, entry: Entry) -> StatKey | None:
        """Put back one file or link; the stat key of what was found intact, None for what was written."""
        st = lstat_at(folder, leaf)
        if is_link(entry):
            if st is not None and stat.S_ISLNK(st.st_mode) and os.readlink(leaf, dir_fd=folder) == entry["link"]:
                return stat_key(st)
            if st is not None:
                remove_at(folder, leaf)
            os.symlink(entry["link"], leaf, dir_fd=folder)
            return None
        # A file with other hard links is written afresh: a write to it would reach the other names (a shipped
        # run folder may have a link into the task's own copy put in its place).
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == entry["size"] and st.st_nlink == 1:
            try:
                fd = os.open(leaf, FILE_FLAGS, dir_fd=folder)
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    os.set_blocking(fd, True)
                    opened = os.fstat(fd)
                    if stat.S_ISREG(opened.st_mode) and _digest_fd(fd)[0] == entry["sha256"]:
                        if stat.S_IMODE(opened.st_mode) != entry["mode"]:
                            os.fchmod(fd, entry["mode"])
                            return None
                        return stat_key(opened)
                finally:
                    os.close(fd)
        if st is not None:
            remove_at(folder, leaf)
        self._copy_object_at(entry["sha256"], folder, leaf, entry["mode"])
        return None

    def materialize(self, name: str, target: Path) -> None:
        """Write snapshot `name` into an empty folder. Links that would lead out of it are left out: the
        result is read by the harness itself (scoring), which must never follow the agent's links out."""
        manifest = self.manifest(name)
        links = []
        root = open_root(target)
        try:
            with DirChain(root, create=True) as chain:
                for rel, entry in sorted(manifest.items()):
                    *parts, leaf = rel.split("/")
                    folder = chain.folder(parts)
                    if is_link(entry):
                        links.append(target / rel)
                        os.symlink(entry["link"], leaf, dir_fd=folder)
                        continue
                    self._copy_object_at(entry["sha256"], folder, leaf, entry["mode"] | 0o200)
        finally:
            os.close(root)
        root_path = os.path.realpath(target)
        for path in links:
            real = os.path.realpath(path)
            if not (real == root_path or real.startswith(root_path + os.sep)) or not os.path.exists(path):
                os.unlink(path)


_ZEROS = bytes(_BLOCK)


def _copy_sparse(src: int, dst: int, h: hashlib._Hash | None = None) -> int:
    """Copy from fd src to fd dst leaving blocks of zeros as holes (a 1 GB sparse file stays small);
    returns the bytes copied, feeding them to the hash h."""
    size = 0
    while chunk := os.read(src, _BLOCK):
        if h is not None:
            h.update(chunk)
        if len(chunk) == _BLOCK and chunk == _ZEROS:
            os.lseek(dst, _BLOCK, os.SEEK_CUR)
        else:
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view):]
        size += len(chunk)
    os.ftruncate(dst, size)  # a hole at the end still counts
    return size


def _copy_to_new_file(src: int, offset: int, size: int, sparse: bool, folder: int, leaf: str, mode: int) -> None:
    """Copy `size` bytes of src from `offset` (a sparse one whole, holes kept) to the new file `leaf` of the folder
    descriptor, never following a link there."""
    dst = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        if sparse:
            _copy_sparse(src, dst)
        else:
            _copy_range(src, dst, offset, size)
        os.fchmod(dst, mode)
    finally:
        os.close(dst)


def _copy_range(src: int, dst: int, offset: int, size: int) -> None:
    """Copy `size` bytes of src from `offset` to dst's start, leaving src's file position alone."""
    done = 0
    while done < size:
        try:
            sent = os.sendfile(dst, src, offset + done, size - done)
        except OSError:  # a file system without sendfile between these two
            chunk = os.pread(src, min(size - done, _BLOCK), offset + done)
            write_all(dst, chunk)
            sent = len(chunk)
        if sent == 0:
            raise OSError(f"a stored object ends {size - done} bytes early")
        done += sent


def _read_all(fd: int, expected: int) -> bytes:
    """The whole file: one read for a file still of `expected` bytes, more when it changed meanwhile."""
    first = os.read(fd, expected + 1)
    if len(first) == expected and expected:
        return first  # a regular file gives all it has in one read; the next would return nothing
    parts = [first]
    while first and (chunk := os.read(fd, _BLOCK)):
        parts.append(chunk)
    return b"".join(parts)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_object(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
