"""A tree as last recorded, folder by folder, so recording it again costs what changed.

Each folder keeps its recorded files and links with the (inode, size, mtime_ns, ctime_ns) they had when they were
read, its subfolders, the skip verdict of each name met in it, and the digest of its listing once stored. A new
scan lstats every entry through folder descriptors (never following a link) and asks the caller to read only
entries whose stat differs; a folder none of whose entries changed keeps its digest, so storing the tree again
touches only the folders on changed paths. Skip verdicts are asked once per name and folder, never per prefix.
"""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlab.core.fs.dirfd import NotAFolder, WalkLimits, list_dir, lstat_at, open_dir_at

Entry = dict[str, Any]
StatKey = tuple[int, int, int, int]  # (inode, size, mtime_ns, ctime_ns)
# Reads one entry of a folder: (what to record, the stat key it was read at), or None to leave it out.
Recorder = Callable[[int, str, os.stat_result], "tuple[Entry, StatKey] | None"]


_KIND = 0o170000  # the file-type bits of st_mode


def stat_key(st: os.stat_result) -> StatKey:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class LimitReached(Exception):
    """The walk met more entries than its limit allows."""


@dataclass(eq=False)
class Folder:
    # name -> (stat key when read, or None when that stat cannot vouch for the content; entry)
    files: dict[str, tuple[StatKey | None, Entry]] = field(default_factory=dict)
    folders: dict[str, Folder] = field(default_factory=dict)
    verdicts: dict[str, bool] = field(default_factory=dict)  # skip(rel) of each name met here
    digest: str | None = None  # the stored listing; None when nothing is recorded below
    dirty: bool = True  # changed since its listing was stored
    _fragments: dict[str, tuple[Entry, str]] = field(default_factory=dict, repr=False)

    def encode(self, seal: Callable[[Folder], str | None]) -> bytes:
        """The listing: each file and link by name, each subfolder holding anything as {"tree": digest}; as
        compact JSON with sorted keys (json.dumps' very bytes), each unchanged entry's text
        kept from the last time: a step re-encodes only what changed in a folder of thousands of files."""
        parts: list[tuple[str, str]] = []
        fragments: dict[str, tuple[Entry, str]] = {}
        for name, (_key, entry) in self.files.items():
            cached = self._fragments.get(name)
            if cached is None or cached[0] is not entry:
                cached = (entry, f"{json.dumps(name)}:{json.dumps(entry, sort_keys=True, separators=(',', ':'))}")
            fragments[name] = cached
            parts.append((name, cached[1]))
        for name, sub in self.folders.items():
            digest = seal(sub)
            if digest is not None:
                parts.append((name, f'{json.dumps(name)}:{{"tree":"{digest}"}}'))
        self._fragments = fragments
        parts.sort()
        return ("{" + ",".join(text for _name, text in parts) + "}").encode()


class Scanner:
    """Brings a Folder up to date with the folder of a descriptor."""

    def __init__(self, record: Recorder, skip: Callable[[str], bool], limits: WalkLimits, horizon_ns: int):
        self.record = record
        self.skip = skip
        self.limits = limits
        self.horizon_ns = horizon_ns  # stat keys with a change time before this vouch for the content

    def trusted(self, key: StatKey) -> StatKey | None:
        return key if key[3] < self.horizon_ns else None

    def scan(self, fd: int, prefix: str, folder: Folder, depth: int) -> bool:
        """Update `folder` (at `depth` levels below the root) from fd; returns whether anything changed. On an
        exception the folder may be half updated: the caller must drop the whole tree."""
        changed = False
        files: dict[str, tuple[StatKey | None, Entry]] = {}
        folders: dict[str, Folder] = {}
        verdicts: dict[str, bool] = {}
        limits = self.limits
        known_verdicts, known_files = folder.verdicts, folder.files  # the hot loop: one lookup each
        for name, st in list_dir(fd):
            verdict = known_verdicts.get(name)
            if verdict is None:
                verdict = self.skip(prefix + name)
            verdicts[name] = verdict
            if verdict:
                continue
            limits.entries += 1
            if limits.entries > limits.max_entries:
                limits.too_many = True
                raise LimitReached
            if st is None:
                st = lstat_at(fd, name)
                if st is None:
                    continue
            kind = st.st_mode & _KIND
            if kind == stat.S_IFDIR:
                if depth + 1 >= limits.max_depth:
                    if len(limits.too_deep) < 5:
                        limits.too_deep.append(prefix + name)
                    continue
                try:
                    child = open_dir_at(fd, name)
                except (NotAFolder, PermissionError):
                    continue
                sub = folder.folders.get(name)
                if sub is None:
                    sub, changed = Folder(), True
                try:
                    if self.scan(child, f"{prefix}{name}/", sub, depth + 1):
                        changed = True
                finally:
                    os.close(child)
                folders[name] = sub
                continue
            if kind != stat.S_IFREG and kind != stat.S_IFLNK:
                continue  # FIFOs, sockets, devices are not recorded
            before = known_files.get(name)
            if before is not None and before[0] == (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                files[name] = before  # (a key of None, one that cannot vouch, never equals a stat)
                continue
            recorded = self.record(fd, name, st)
            if recorded is None:
                continue
            entry, key = recorded
            files[name] = (self.trusted(key), entry)
            if before is None or before[1] != entry:
                changed = True
        if files.keys() != folder.files.keys() or folders.keys() != folder.folders.keys():
            changed = True
        folder.files, folder.folders, folder.verdicts = files, folders, verdicts
        if changed:
            folder.dirty = True
        return changed

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
            fd = _open_path(root_fd, parts)
        except OSError:  # not a folder any more, or not readable: the walk copes with either
            return False
        try:
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
                del folder.files[leaf]
            else:
                if before is not None and before[0] is not None and before[0] == stat_key(st):
                    return True
                recorded = self.record(fd, leaf, st)
                if recorded is None:
                    folder.files.pop(leaf, None)
                else:
                    entry, key = recorded
                    folder.files[leaf] = (self.trusted(key), entry)
                    if before is not None and before[1] == entry:
                        return True
        finally:
            os.close(fd)
        for folder in chain:
            folder.dirty = True
        return True


def _open_path(root_fd: int, parts: list[str]) -> int:
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = open_dir_at(fd, part)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise
