"""A tree as last recorded, folder by folder, so recording it again costs what changed.

Each folder keeps its recorded files and links with the (inode, size, mtime_ns, ctime_ns) they had when they were
read, its subfolders, the skip verdict of each other name met in it, and the digest of its listing once stored.
A new scan lists each folder through its descriptor (never following a link), lstats only the entries it recorded
before (the file type the listing gives says which names are folders, and a new file's stat comes from the
descriptor it is read through) and asks the caller to read only entries whose stat differs. A folder none of
whose entries changed keeps its digest, and a changed folder re-encodes only its changed entries, so storing the
tree again touches only the folders and names on changed paths. Skip verdicts are asked once per name and folder,
never per prefix.
"""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from mlab.core.fs.dirfd import NotAFolder, WalkLimits, lstat_at, open_dir_at, open_dirs, opened

Entry = dict[str, Any]
StatKey = tuple[int, int, int, int]  # (inode, size, mtime_ns, ctime_ns)
# Reads the file (is_link False) or link (True) `name` of a folder: (what to record, the stat key it was read
# at), or None to leave it out (gone, or not of that kind any more).
Recorder = Callable[[int, str, bool], "tuple[Entry, StatKey] | None"]

_FILE_KEYS = frozenset(("mode", "sha256", "size"))
_KIND = 0o170000  # the file-type bits of st_mode
_DIR, _LINK, _REG = stat.S_IFDIR, stat.S_IFLNK, stat.S_IFREG


def stat_key(st: os.stat_result) -> StatKey:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def fragment(name: str, entry: Entry) -> str:
    """`"name":{entry}` exactly as json.dumps(sort_keys=True, separators=(",", ":")) writes it; a regular
    file's entry (the common case) is formatted directly, at a fraction of json's cost."""
    if entry.keys() == _FILE_KEYS:
        mode, digest, size = entry["mode"], entry["sha256"], entry["size"]
        if type(mode) is int and type(size) is int and type(digest) is str and digest.isascii() and digest.isalnum():
            return f'{json.dumps(name)}:{{"mode":{mode},"sha256":"{digest}","size":{size}}}'
    return f"{json.dumps(name)}:{json.dumps(entry, sort_keys=True, separators=(',', ':'))}"


class LimitReached(Exception):
    """The walk met more entries than its limit allows."""


@dataclass(eq=False)
class Folder:
    # name -> (stat key when read, or None when that stat cannot vouch for the content; entry)
    files: dict[str, tuple[StatKey | None, Entry]] = field(default_factory=dict)
    folders: dict[str, Folder] = field(default_factory=dict)
    verdicts: dict[str, bool] = field(default_factory=dict)  # skip(rel) of each name met here and not recorded
    digest: str | None = None  # the stored listing; None when nothing is recorded below
    dirty: bool = True  # changed since its listing was stored
    # Names whose listing text may be out of date; None: all of them (nothing encoded yet)
    stale: set[str] | None = field(default=None, repr=False)
    _texts: dict[str, str] = field(default_factory=dict, repr=False)  # name -> its text in the listing
    _order: list[str] = field(default_factory=list, repr=False)  # _texts' names, sorted
    _sorted: bool = field(default=False, repr=False)  # whether _order holds exactly _texts' names
    identity: tuple[int, int] | None = None  # (device, inode) of the folder the last scan read
    entries_below: int = 0  # what the last scan counted below it, toward the walk's entry limit

    def touched(self, name: str) -> None:
        """The entry `name` (file, link or subfolder) changed, appeared or went."""
        self.dirty = True
        if self.stale is not None:
            self.stale.add(name)

    def invalidate(self) -> None:
        """Forget every listing text below (after a walk cut short left some folders half updated)."""
        pending = [self]
        while pending:
            folder = pending.pop()
            folder.dirty, folder.stale = True, None
            pending.extend(folder.folders.values())

    def encode(self, seal: Callable[[Folder], str | None]) -> bytes:
        """The listing: each file and link by name, each subfolder holding anything as {"tree": digest}; as
        compact JSON with sorted keys (json.dumps' very bytes). Only the entries named stale are encoded
        again, so a step re-encodes what changed in a folder of thousands of files, not the folder."""
        texts = self._texts
        if self.stale is None:
            texts.clear()
            self._sorted = False
            names: set[str] | list[str] = [*self.files, *self.folders]
        else:
            names = self.stale
        for name in names:
            had = name in texts
            recorded = self.files.get(name)
            sub = self.folders.get(name) if recorded is None else None
            digest = seal(sub) if sub is not None else None
            if recorded is not None:
                texts[name] = fragment(name, recorded[1])
            elif digest is not None:
                texts[name] = f'{json.dumps(name)}:{{"tree":"{digest}"}}'
            elif had:
                del texts[name]
            if had != (name in texts):
                self._sorted = False  # kept false until sorted: an error (a full disk) midway loses nothing
        self.stale = set()
        if not self._sorted:
            self._order = sorted(texts)
            self._sorted = True
        return ("{" + ",".join(map(texts.__getitem__, self._order)) + "}").encode()


class Scanner:
    """Brings a Folder up to date with the folder of a descriptor."""

    def __init__(self, record: Recorder, skip: Callable[[str], bool], limits: WalkLimits, horizon_ns: int,
                 sealed: dict[str, tuple[int, int]] | None = None):
        self.record = record
        # Folders ("a/b") nothing could change since they were last scanned, with their (device, inode): kept
        # as recorded when the same folder is found there again
        self.sealed = sealed or {}
        # A ChangeWatch (mlab.core.fs.change_watch) told of each folder newly listed, and with its `files` of
        # each file recorded
        self.watch: Any = None
        self.watch_all = False  # tell it of every folder listed, and every file kept (a new watch)
        # Set: list only these recorded folders (prefixes "a/b/", those on their way included) and folders not
        # recorded before; any other recorded folder still there as the same folder is kept as it is
        self.only: set[str] | None = None
        self.skip = skip
        # A skip that knows every name in a folder it does not skip itself is left out (ReadOnlyRule's
        # any_name_matches, mlab.core.run.readonly) spares listing it: 20,000 read-only record folders in train/
        # cost a walk more than the rest of the workspace. One regex match a folder: its own verdict was False.
        self.skips_folder: Callable[[str], bool] | None = getattr(skip, "any_name_matches", None)
        self.limits = limits
        self.horizon_ns = horizon_ns  # stat keys with a change time before this vouch for the content
        # Folders another process listed and compared already (split_walk.SplitWalk): take(prefix, fd) gives
        # (entries to look at, names listed, recorded names not listed), or None
        self.split: Any = None

    def trusted(self, key: StatKey) -> StatKey | None:
        return key if key[3] < self.horizon_ns else None

    def scan(self, fd: int, prefix: str, folder: Folder, depth: int) -> bool:
        """Update `folder` (at `depth` levels below the root) from fd; returns whether it changed. On an
        exception the folder may be half updated: the caller must drop the whole tree, or invalidate() it."""
        limits = self.limits
        skip, record, horizon = self.skip, self.record, self.horizon_ns
        files, folders, verdicts = folder.files, folder.folders, folder.verdicts  # the hot loop: one lookup each
        entries_before = limits.entries
        here = os.fstat(fd)
        identity = (here.st_dev, here.st_ino)
        if self.watch is not None and (self.watch_all or folder.identity != identity):
            self.watch.add(fd, prefix)  # before the listing: a change after it is an event
        watch_files = self.watch is not None and self.watch.files
        folder.identity = identity
        new_verdicts: dict[str, bool] = {}
        listed: list[str] = []
        taken = self.split.take(prefix, fd) if self.split is not None else None
        gone: list[str] | None = None
        if taken is None:
            # Unchanged files are matched while the folder is listed (each stat right after its entry is read);
            # only the other entries are kept, and looked at once the listing is closed: the folder's descriptor
            # is the only one held below.
            try:
                others: list[Any] = changed_entries(fd, files, listed,
                                                    listing_room(folder, limits.max_entries - limits.entries))
            except LimitReached:
                limits.entries, limits.too_many = limits.max_entries + 1, True
                raise
            count_listed = len(listed)
        else:
            others, count_listed, gone = taken
        kept = count_listed - len(others)  # names listed here and recorded after this scan
        count = limits.entries + kept
        if count > limits.max_entries:
            limits.entries, limits.too_many = count, True
            raise LimitReached
        for entry in others:
            name = entry.name
            before = files.get(name)
            if before is not None and before[0] is not None:
                # A file recorded before whose stat changed, or could not be read
                count += 1
                if count > limits.max_entries:
                    limits.entries, limits.too_many = count, True
                    raise LimitReached
                key = before[0]
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    _forget(folder, name)  # gone since the listing
                    continue
                if (key[0] == st.st_ino and key[1] == st.st_size and key[2] == st.st_mtime_ns
                        and key[3] == st.st_ctime_ns):
                    kept += 1
                    continue
                kind = st.st_mode & _KIND
                is_dir, is_link = kind == _DIR, kind == _LINK
                if not (is_dir or is_link or kind == _REG):
                    _forget(folder, name)  # FIFOs, sockets, devices are not recorded
                    continue
            else:
                if before is None and name not in folders:
                    verdict = verdicts.get(name)
                    if verdict is None:
                        verdict = skip(prefix + name)
                    new_verdicts[name] = verdict
                    if verdict:
                        continue
                count += 1
                if count > limits.max_entries:
                    limits.entries, limits.too_many = count, True
                    raise LimitReached
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_link = not is_dir and entry.is_symlink()
                    if not (is_dir or is_link or entry.is_file(follow_symlinks=False)):
                        _forget(folder, name)  # FIFOs, sockets, devices are not recorded
                        continue
                except OSError:  # the listing did not say, and the entry went before it could be looked at
                    _forget(folder, name)
                    continue
            if is_dir:
                if before is not None:  # a file or link became a folder
                    _forget(folder, name)
                if self.skips_folder is not None and self.skips_folder(prefix + name):
                    if name in folders:
                        _forget(folder, name)
                    continue  # holds nothing recorded, whatever it holds
                if depth + 1 >= limits.max_depth:
                    if len(limits.too_deep) < 5:
                        limits.too_deep.append(prefix + name)
                    continue
                sub = folders.get(name)
                if sub is not None and self._unchanged(f"{prefix}{name}/", entry, sub):
                    count += sub.entries_below
                    kept += 1
                    continue
                try:
                    child = open_dir_at(fd, name)
                except (NotAFolder, PermissionError):
                    _forget(folder, name)
                    continue
                sub = folders.get(name)
                if sub is None:
                    sub = folders[name] = Folder()
                elif self._still_sealed(prefix + name, child, sub):
                    os.close(child)
                    count += sub.entries_below
                    kept += 1
                    continue
                limits.entries = count
                try:
                    if self.scan(child, f"{prefix}{name}/", sub, depth + 1):
                        folder.touched(name)
                finally:
                    os.close(child)
                count = limits.entries
                kept += 1
                continue
            if before is None and name in folders:  # a folder became a file or link
                _forget(folder, name)
            if watch_files and not is_link and not self.watch_all:  # before it is read (a write after is an event);
                self.watch.add_file(fd, name, prefix)  # with watch_all, with the others below (nothing runs meanwhile)
            recorded = record(fd, name, is_link)
            if recorded is None:
                _forget(folder, name)
                continue
            entry_now, key_now = recorded
            files[name] = (key_now if key_now[3] < horizon else None, entry_now)
            kept += 1
            if before is None or before[1] != entry_now:
                folder.touched(name)
        limits.entries = count
        folder.entries_below = count - entries_before
        if watch_files and self.watch_all:  # a new watch: the files kept as recorded get theirs too
            for name, (_key, entry) in files.items():
                if "link" not in entry:
                    self.watch.add_file(fd, name, prefix)
        folder.verdicts = new_verdicts
        if gone is not None:
            for name in gone:
                _forget(folder, name)
        elif kept != len(files) + len(folders):  # some recorded names were not listed: they went
            names = set(listed)
            for name in [*files, *folders]:
                if name not in names:
                    _forget(folder, name)
        return folder.dirty

    def _unchanged(self, prefix: str, entry: Any, recorded: Folder) -> bool:
        """Whether a listing limited to `only` keeps the recorded subfolder at prefix as it is: not to be
        listed, and the same folder (its inode, from the listing) as when it was recorded."""
        if self.only is None or prefix in self.only or recorded.identity is None:
            return False
        try:
            return bool(entry.inode() == recorded.identity[1])
        except (AttributeError, OSError):
            return False

    def _still_sealed(self, rel: str, fd: int, recorded: Folder) -> bool:
        """Whether the folder rel, open as fd, is sealed and the very folder its record was read from."""
        seen = self.sealed.get(rel)
        if seen is None or seen != recorded.identity or recorded.dirty:
            return False
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino) == seen

    def update_path(self, root_fd: int, root: Folder, rel: str) -> bool:
        """Bring one path (a file the harness itself wrote) up to date, creating the folders on its way;
        False when that cannot be done here (a folder on the way is not one, or the leaf is a folder), and a
        scan of the whole tree is needed instead."""
        *parts, leaf = rel.split("/")
        if len(parts) + 1 >= self.limits.max_depth:
            return False
        chain = [root]
        prefix = ""
        for depth, part in enumerate([*parts, leaf]):
            folder = chain[-1]
            if part not in folder.files and part not in folder.folders:
                verdict = folder.verdicts.get(part)
                if verdict is None:
                    verdict = folder.verdicts[part] = self.skip(prefix + part)
                if verdict:
                    return True  # not recorded, whatever it is
            prefix += part + "/"
            if depth < len(parts):
                if part in folder.files:
                    return False
                chain.append(folder.folders.setdefault(part, Folder()))
        folder = chain[-1]
        if leaf in folder.folders:
            return False
        try:
            fd = open_dirs(root_fd, parts)
        except OSError:  # not a folder any more, or not readable: the walk copes with either
            return False
        with opened(fd):
            try:
                st = lstat_at(fd, leaf)
            except OSError:
                return False
            before = folder.files.get(leaf)
            if st is None or not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                if st is not None and stat.S_ISDIR(st.st_mode):
                    return False
                if before is None:
                    return True
                _forget(folder, leaf)
            else:
                if before is not None and before[0] is not None and before[0] == stat_key(st):
                    return True
                recorded = self.record(fd, leaf, stat.S_ISLNK(st.st_mode))
                if recorded is None:
                    _forget(folder, leaf)
                else:
                    entry, key = recorded
                    folder.files[leaf] = (self.trusted(key), entry)
                    if before is not None and before[1] == entry:
                        return True
                    folder.touched(leaf)
        for parent, part in zip(chain[:-1], parts, strict=True):
            parent.touched(part)
        return True


def listing_room(folder: Folder, entries_left: int) -> int:
    """How many names a listing of `folder` may hold before the walk's entry limit is surely passed (agent code
    may have made millions, never to be read): each counts toward the limit unless a read-only pattern skips it,
    and at most all of the last walk's names did not."""
    return entries_left + len(folder.files) + len(folder.folders) + len(folder.verdicts)


def changed_entries(fd: int, files: dict[str, tuple[StatKey | None, Entry]],
                    listed: list[str], most: int) -> list[os.DirEntry[str]]:
    """List the folder of fd into `listed` (its names); returns its entries that are not files recorded at the
    stat they have now. Every entry of an unchanged workspace goes through this loop alone, so it does nothing
    but a lookup, one lstat and a compare (ctime first: any write moves it). Raises LimitReached, the listing
    cut off, at the name after the `most`-th."""
    others = []
    get, add = files.get, listed.append
    most = max(most, 0)
    with suppress(OSError):  # unreadable: it lists as empty
        with os.scandir(fd) as listing:
            for entry in islice(listing, most + 1):  # bounded here, not by a check per name
                name = entry.name
                add(name)
                before = get(name)
                if before is not None and (key := before[0]) is not None:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:  # gone since the listing: looked at again by the caller
                        others.append(entry)
                        continue
                    if (key[3] == st.st_ctime_ns and key[2] == st.st_mtime_ns and key[0] == st.st_ino
                            and key[1] == st.st_size):
                        continue
                others.append(entry)
    if len(listed) > most:
        raise LimitReached
    return others


def _forget(folder: Folder, name: str) -> None:
    """Drop the recorded file, link or subfolder `name`, if there is one."""
    if folder.files.pop(name, None) is not None or folder.folders.pop(name, None) is not None:
        folder.touched(name)
