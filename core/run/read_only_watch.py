"""The unconfined sandbox's record of a workspace's read-only entries, kept current by the kernel's change events.

A confining sandbox mounts the read-only entries read-only, so after a command the guard need not look at them.
The unconfined sandbox mounts nothing, and comparing every read-only entry before and after every command cost a
command two stat calls per entry (200,000 files: 51x a bare child). Instead the first survey walks them once and
watches (inotify) each read-only file's inode and each folder the walk entered; a command then costs what its
events name, each named entry looked at again through folder descriptors.

- A file's watch is on its inode: a write through any hard link, made before or during the command, anywhere,
  reaches it. A folder's watch names what was created, removed or renamed in it (and, for a read-only folder,
  its own attributes), so a swapped file or folder is found.
- Writes through a shared writable mapping have no event. Opens and last closes of read-only files are counted
  (IN_OPEN, IN_CLOSE_*): a file still open after a command (the REPL, or a process outliving its command) is
  looked at after every command until its last close, as the stat comparison did.
- A file past the user's watch limit (fs.inotify.max_user_watches) gets a fanotify inode mark instead, which
  counts against a limit of its own (mlab.core.fs.inode_marks); its opens are not counted but make it a file
  found held (below). A file past both limits is looked at, a folder past the watch limit listed, after every
  command.
- Events lost (the queue overflowed) or a watch that broke: the record is walked again with a new instance. Opens
  before the watches are unknown (also at the first walk), so the open descriptors and mappings of every process
  the harness can read (/proc) name the read-only files held; those are looked at, and /proc read again, until
  none is held. A descriptor in flight through a Unix socket at that instant is in no process's table.
"""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import threading
import weakref
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from mlab.core.fs.change_watch import read_queued
from mlab.core.fs.dirfd import NotAFolder, lstat_at, open_dir_at, open_root
from mlab.core.fs.inode_marks import FAN_DELETE_SELF, InodeMarks
from mlab.core.run.read_only_walk import MAX_DEPTH, State, Whole, walk_read_only
from mlab.core.run.readonly import ReadOnlyRule

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_OPEN = 0x2, 0x4, 0x8, 0x10, 0x20
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW = 0x1000000, 0x2000000
LISTING = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
FOLDER_MASK = LISTING | IN_ONLYDIR  # added through /proc/self/fd/N, a link to follow
READ_ONLY_FOLDER_MASK = FOLDER_MASK | IN_ATTRIB
CHANGED = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE
FILE_MASK = CHANGED | IN_OPEN | IN_CLOSE_NOWRITE | IN_DONT_FOLLOW
_HEADER_SIZE = 16  # wd, mask, cookie, len
# An entry's state as the record keeps it: type, size, modification and change times (ns), inode, packed (a
# tuple of five ints costs three times the memory, and the record holds one per read-only file)
_STATE = struct.Struct("<IqqqQ")
Packed = bytes


def _packed(st: os.stat_result) -> Packed:
    return _STATE.pack(stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _kind_inode(value: Packed) -> tuple[int, int]:
    kind, _size, _mtime, _ctime, inode = _STATE.unpack(value)
    return kind, inode


def _names(rels: str | set[str]) -> set[str] | tuple[str]:
    return (rels,) if isinstance(rels, str) else rels


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not Linux, or a libc without inotify
        return None
    return libc


_libc = _load_libc()


class Journal:
    """What changed since a survey: each entry's state when the survey was taken (None: absent then)."""

    __slots__ = ("entries", "__weakref__")

    def __init__(self) -> None:
        self.entries: dict[str, Packed | None] = {}


@dataclass
class _Folder:
    identity: tuple[int, int]  # (device, inode)
    covered: bool  # read-only itself: every entry in it is
    depth: int  # of its entries
    wd: int | None  # None: past the watch limit, listed at every refresh


class _Gone(Exception):
    """The workspace's root is not the folder recorded: the record is walked again."""


class ReadOnlyWatch:
    """The read-only entries of one workspace (`state`, by workspace-relative name) and their watches."""

    def __init__(self, root: Path, rule: ReadOnlyRule, whole: Whole):
        self.root, self.rule, self._whole_rule = root, rule, whole
        self.pid = os.getpid()  # a forked copy shares the instance: it makes its own
        self.state: dict[str, Packed] = {}
        self._fd = -1
        self._marks: InodeMarks | None = None  # opened when the first file is past the watch limit
        self._marks_failed = False
        self._lock = threading.RLock()
        self._journals: weakref.WeakSet[Journal] = weakref.WeakSet()
        self._recording = True  # False while a rebuild fills a new record (compared with the old one after)
        self._deferred: dict[str, list[str]] | None = None  # files a walk found, by folder, watched after it
        self._polls = 0
        self.limit_reached = False  # a watch was refused for the user's limit (not for a file it may not read)
        # folders the first walk judged read-only as a whole; kept by later walks, so that a folder grown past
        # SEPARATE_MOUNTS_MAX names is no new read-only entry (which would be removed)
        self._whole: set[str] = set()
        self._walked = False
        self._reset()

    @classmethod
    def start(cls, root: Path, rule: ReadOnlyRule, whole: Whole) -> ReadOnlyWatch | None:
        """The record, walked and watched; None where inotify cannot be had (no Linux, the instance limit)."""
        if not os.path.isdir("/proc/self/fd"):  # watches are added through it
            return None
        watch = cls(root, rule, whole)
        if not watch._rebuild():
            return None
        return watch

    def _reset(self) -> None:
        self._folders: dict[str, _Folder] = {}
        self._wd_folder: dict[int, str] = {}
        self._children: dict[str, set[str]] = {}  # folder -> the entries recorded in it (read-only, or folders)
        self._rel_wd: dict[str, int] = {}
        self._wd_rels: dict[int, str | set[str]] = {}  # the read-only name(s) of a watched file's inode
        self._opens: dict[int, int] = {}  # open file descriptions per file watch, from IN_OPEN and IN_CLOSE_*
        self._unwatched_files: set[str] = set()
        self._unwatched_folders: set[str] = set()
        self._mounts: set[str] = set()  # the topmost read-only entries
        self._mount_list: list[str] | None = []
        self._held: set[str] | None = None  # None: opens before the watches unknown; else files found held

    # ---- the record ---------------------------------------------------------------------------------------------

    def journal(self) -> Journal:
        """A journal of what changes from now on (a survey's)."""
        with self._lock:
            journal = Journal()
            self._journals.add(journal)
            return journal

    def changes(self, journal: Journal) -> tuple[dict[str, State], dict[str, State]]:
        """The state before and now of each entry that changed since journal's survey (after a refresh), which
        it then stops recording."""
        with self._lock:
            self._journals.discard(journal)
            before = {rel: _STATE.unpack(old) for rel, old in journal.entries.items() if old is not None}
            now = {rel: _STATE.unpack(self.state[rel]) for rel in journal.entries if rel in self.state}
            return before, now

    def as_surveyed(self, journal: Journal) -> dict[str, State]:
        """The record as it was when journal's survey was taken (what changed since, as it was then)."""
        with self._lock:
            then = dict(self.state)
            for rel, old in journal.entries.items():
                if old is None:
                    then.pop(rel, None)
                else:
                    then[rel] = old
            return {rel: _STATE.unpack(value) for rel, value in then.items()}

    def unwatched(self) -> tuple[int, int, int]:
        """How many read-only files, of how many, and how many folders are looked at after every command for want
        of a watch."""
        with self._lock:
            files = len(self._unwatched_files)
            return files, files + len(self._rel_wd), len(self._unwatched_folders)

    def mounts(self) -> list[str]:
        with self._lock:
            if self._mount_list is None:
                self._mount_list = sorted(self._mounts)
            return list(self._mount_list)

    def _set(self, rel: str, value: Packed | None) -> None:
        old = self.state.get(rel)
        if old == value:
            return
        if self._recording and len(self._journals):
            for journal in self._journals:
                journal.entries.setdefault(rel, old)
        if value is None:
            del self.state[rel]
        else:
            self.state[rel] = value

    # ---- watches -------------------------------------------------------------------------------------------------

    def _add(self, path: str, mask: int) -> int | None:
        """A watch on path (through /proc/self/fd, never re-resolving a workspace path); None past the watch limit
        or where the file may not be read (then it is looked at every time); FileNotFoundError when it went."""
        assert _libc is not None
        wd = int(_libc.inotify_add_watch(self._fd, os.fsencode(path), mask))
        if wd >= 0:
            return wd
        code = ctypes.get_errno()
        if code in (errno.ENOENT, errno.ENOTDIR):
            raise FileNotFoundError(code, os.strerror(code), path)
        self.limit_reached |= code == errno.ENOSPC
        return None

    def _remove_watch(self, wd: int) -> None:
        assert _libc is not None
        if wd < 0:
            if self._marks is not None:
                self._marks.forget(wd)
        else:
            _libc.inotify_rm_watch(self._fd, wd)  # its IN_IGNORED then finds the watch already forgotten
        self._opens.pop(wd, None)

    def _mark(self, dir_fd: int, name: str) -> int | None:
        """A fanotify mark on a file inotify watches no more (a negative number); None where none can be had."""
        if self._marks is None:
            if self._marks_failed:
                return None
            self._marks = InodeMarks.open()
            if self._marks is None:
                self._marks_failed = True
                return None
        return self._marks.add(dir_fd, name)

    @property
    def marks_used(self) -> bool:
        return self._marks is not None

    def _watch_file(self, dir_fd: int, name: str, rel: str) -> None:
        wd = self._add(f"/proc/self/fd/{dir_fd}/{name}", FILE_MASK)
        if wd is None:
            wd = self._mark(dir_fd, name)
        old = self._rel_wd.get(rel)
        if old == wd and wd is not None:
            return
        self._unwatch_file(rel)
        if wd is None:
            self._unwatched_files.add(rel)
            return
        self._rel_wd[rel] = wd
        named = self._wd_rels.get(wd)
        if named is None:
            self._wd_rels[wd] = rel
        elif isinstance(named, str):
            self._wd_rels[wd] = {named, rel}
        else:
            named.add(rel)

    def _unwatch_file(self, rel: str) -> None:
        self._unwatched_files.discard(rel)
        wd = self._rel_wd.pop(rel, None)
        if wd is None:
            return
        named = self._wd_rels.get(wd)
        if named is None:
            return
        if isinstance(named, set) and len(named) > 1:
            named.discard(rel)
            return
        del self._wd_rels[wd]
        self._remove_watch(wd)

    # ---- walking -------------------------------------------------------------------------------------------------

    def whole_folders(self) -> set[str]:
        """The folders the first walk judged read-only as a whole."""
        return set(self._whole)

    def _decide(self, fd: int, name: str, rel: str) -> bool:
        whole = self._whole_rule(fd, name, rel)
        if whole:
            self._whole.add(rel)
        return whole

    def _decided(self, fd: int, name: str, rel: str) -> bool:
        return rel in self._whole

    def _entered(self, fd: int, prefix: str, covered: bool, depth: int) -> None:
        rel = prefix[:-1]
        try:
            wd = self._add(f"/proc/self/fd/{fd}", READ_ONLY_FOLDER_MASK if covered else FOLDER_MASK)
        except FileNotFoundError:
            wd = None
        st = os.fstat(fd)  # after the watch: a later change has an event
        if covered:
            self._set(rel, _packed(st))
        self._folders[rel] = _Folder((st.st_dev, st.st_ino), covered, depth, wd)
        self._children.setdefault(rel, set())
        if wd is None:
            self._unwatched_folders.add(rel)
        else:
            self._wd_folder[wd] = rel

    def _visit(self, fd: int, name: str, rel: str, st: os.stat_result, read_only: bool, covered: bool) -> bool:
        is_dir = stat.S_ISDIR(st.st_mode)
        if read_only and not is_dir and self._deferred is not None:
            self._deferred.setdefault(rel.rpartition("/")[0], []).append(rel)  # watched after the walk
        elif read_only and not is_dir:
            try:
                self._watch_file(fd, name, rel)
                now = lstat_at(fd, name)  # after the watch: a later change has an event
            except OSError:
                now = None  # gone since the listing (its folder's event says so), or not to be looked at
            if now is None:
                self._unwatch_file(rel)
                return False
            st = now
        self._children.setdefault(rel.rpartition("/")[0], set()).add(rel)
        if read_only:
            self._set(rel, _packed(st))
            if not covered and rel not in self._mounts:
                self._mounts.add(rel)
                self._mount_list = None
        return is_dir

    def _walk_from(self, fd: int, prefix: str, covered: bool, depth: int, decide: bool) -> None:
        """Record the tree below the folder open as fd: every folder's watch first, then its files' (near the watch
        limit a folder's watch is worth more: it tells what is listed there)."""
        self._deferred = {}
        try:
            walk_read_only(self.rule, fd, prefix, covered, depth, self._decide if decide else self._decided,
                           self._visit, self._entered)
        finally:
            pending, self._deferred = self._deferred, None
        folders = _Descriptors(self)
        try:
            for folder, rels in pending.items():
                fd_or_none = self._open_for_files(folders, folder)
                for rel in rels:
                    self._watch_recorded(fd_or_none, folder, rel)
        finally:
            folders.close()

    @staticmethod
    def _open_for_files(folders: _Descriptors, folder: str) -> int | None:
        try:
            return folders.open(folder)
        except _Gone:
            return None

    def _watch_recorded(self, fd: int | None, folder: str, rel: str) -> None:
        """Watch a file the walk recorded, then take its state again (a change before the watch is seen)."""
        if fd is None:  # its folder went meanwhile (an event says so): looked at every time until then
            self._unwatched_files.add(rel)
            return
        name = rel[len(folder) + 1:] if folder else rel
        try:
            self._watch_file(fd, name, rel)
            now = lstat_at(fd, name)
        except OSError:
            now = None
        if now is None:
            self._drop(rel)
        else:
            self._set(rel, _packed(now))

    def _drop(self, rel: str) -> None:
        """Forget rel and everything recorded below it (their watches too)."""
        self._children.get(rel.rpartition("/")[0], set()).discard(rel)
        todo = [rel]
        while todo:
            current = todo.pop()
            self._set(current, None)
            if current in self._mounts:
                self._mounts.discard(current)
                self._mount_list = None
            self._unwatch_file(current)
            folder = self._folders.pop(current, None)
            if folder is not None:
                self._unwatched_folders.discard(current)
                if folder.wd is not None and self._wd_folder.pop(folder.wd, None) is not None:
                    self._remove_watch(folder.wd)
            todo.extend(self._children.pop(current, ()))

    def _rebuild(self) -> bool:
        """Walk the whole record again with a new instance; False where inotify cannot be had."""
        old = self.state
        self.close()
        self._fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC) if _libc is not None else -1
        if self._fd < 0:
            return False
        self.pid = os.getpid()
        self._reset()
        self.state = {}
        self._recording = False
        try:
            try:
                root = open_root(self.root)
            except OSError:
                pass  # no workspace (removed, to be made again): nothing is recorded
            else:
                self._walk_from(root, "", False, 0, decide=not self._walked)
                self._walked = True
        finally:
            self._recording = True
        if len(self._journals):
            new = self.state
            for rel in old.keys() | new.keys():
                if old.get(rel) != new.get(rel):
                    for journal in self._journals:
                        journal.entries.setdefault(rel, old.get(rel))
        self._check_held()  # before the next look: a file held from before is looked at from then on
        return True

    # ---- after a command -----------------------------------------------------------------------------------------

    def refresh(self, poll: bool = True) -> None:
        """Bring the record up to date: look again at what the events since the last refresh name and, with
        `poll`, at open files and at what is not watched (after a command; before one, what changed there without
        an event is the next command's doing, found by the poll after it)."""
        with self._lock:
            if self.pid != os.getpid() or self._fd < 0:
                self._rebuild_or_fail()
            else:
                dirty = self._drain()
                if dirty is None:
                    self._rebuild_or_fail()
                else:
                    self._look_at(dirty, poll)
                    if poll:
                        self._check_held()

    def _rebuild_or_fail(self) -> None:
        if not self._rebuild():
            raise OSError(errno.EMFILE, "no inotify instance can be had for the read-only watch")

    def _look_at(self, dirty: set[str], poll: bool) -> None:
        folders = _Descriptors(self)
        try:
            if poll:
                self._polls += 1
                for wd, count in self._opens.items():
                    if count > 0:
                        dirty.update(_names(self._wd_rels.get(wd, set())))
                dirty |= self._held or set()
                self._poll(dirty, folders)
            for rel in sorted(dirty, key=lambda rel: rel.count("/")):  # a folder before what it holds
                self._examine(rel, folders)
        except _Gone:
            folders.close()
            self._rebuild_or_fail()
        finally:
            folders.close()

    def _poll(self, dirty: set[str], folders: _Descriptors) -> None:
        """What is past the watch limit: an unwatched folder is listed (a name come or gone is looked at in full),
        and each unwatched file, and each entry of an unwatched folder, gets one stat (one replaced is looked at
        in full). Every so often the unwatched are looked at in full, to watch them where watches came free."""
        if self._polls % 64 == 0:
            for folder in list(self._unwatched_folders):
                self._rewatch_folder(folder, folders)
            dirty |= self._unwatched_files
        by_folder: dict[str, set[str]] = {}
        for rel in self._unwatched_files - dirty:
            by_folder.setdefault(rel.rpartition("/")[0], set()).add(rel)
        for folder in list(self._unwatched_folders):
            fd = folders.open(folder)
            if fd is None:
                dirty.add(folder)
                continue
            try:
                names = os.listdir(fd)
            except OSError:
                names = []
            prefix = folder + "/" if folder else ""
            listed = {prefix + name for name in names}
            known = self._children.get(folder, set())
            dirty |= listed ^ known  # come or gone
            # looked at while its descriptor is held: opening another folder closes it
            self._stat_entries(folder, fd, by_folder.pop(folder, set()) | ((listed & known) - dirty), dirty, folders)
        for folder, rels in by_folder.items():
            fd = folders.open(folder)
            if fd is None:
                dirty.update(rels)
            else:
                self._stat_entries(folder, fd, rels, dirty, folders)

    def _stat_entries(self, folder: str, fd: int, rels: set[str], dirty: set[str], folders: _Descriptors) -> None:
        """One stat each for recorded entries of the folder open as fd: a change in place is recorded, what was
        replaced or is unknown goes to dirty (looked at in full)."""
        state, ifmt, pack, stat_at = self.state, stat.S_IFMT, _STATE.pack, os.stat
        start = len(folder) + 1 if folder else 0
        changed = False
        for rel in rels:
            try:
                st = stat_at(rel[start:], dir_fd=fd, follow_symlinks=False)
            except OSError:
                dirty.add(rel)
                continue
            old = state.get(rel)
            if old is not None and old == pack(ifmt(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                               st.st_ino):
                continue  # as recorded (most of them)
            record = self._folders.get(rel)
            if record is not None:  # a folder: the same folder, or looked at in full
                if (st.st_dev, st.st_ino) != record.identity or not stat.S_ISDIR(st.st_mode):
                    dirty.add(rel)
                elif rel in state and state[rel] != _packed(st):
                    changed = True
                    self._set(rel, _packed(st))
                continue
            if old is None:
                if rel not in self._children.get(folder, ()):
                    dirty.add(rel)
                continue  # an unentered folder that may hold read-only entries: its identity is unknown
            now = _packed(st)
            if _kind_inode(old) != (ifmt(st.st_mode), st.st_ino):
                dirty.add(rel)
                continue
            changed = True
            self._set(rel, now)
        if changed:
            folders.restate(folder)

    def _rewatch_folder(self, folder: str, folders: _Descriptors) -> None:
        record = self._folders.get(folder)
        fd = folders.open(folder)
        if record is None or fd is None:
            return
        try:
            wd = self._add(f"/proc/self/fd/{fd}", READ_ONLY_FOLDER_MASK if record.covered else FOLDER_MASK)
        except FileNotFoundError:
            return
        if wd is not None:
            record.wd = wd
            self._wd_folder[wd] = folder
            self._unwatched_folders.discard(folder)

    def _examine(self, rel: str, folders: _Descriptors) -> None:
        """Look at rel again and update the record: what stands there now, recorded (walked, for a new folder)."""
        if not rel:
            raise _Gone()
        parent_rel, _, name = rel.rpartition("/")
        parent = self._folders.get(parent_rel)
        if parent is None:
            return  # not recorded, or its folder went earlier in this refresh
        fd = folders.open(parent_rel)
        if fd is None:  # its folder is no longer the one recorded: that folder first, with all below it
            self._examine(parent_rel, folders)
            return
        folders.restate(parent_rel)
        try:
            st = lstat_at(fd, name)
        except OSError:
            st = None
        is_dir = st is not None and stat.S_ISDIR(st.st_mode)
        known = self._folders.get(rel)
        if known is not None:
            if is_dir and st is not None and (st.st_dev, st.st_ino) == known.identity:
                if known.covered:
                    self._set(rel, _packed(st))  # its own attributes
                return
            self._drop(rel)
        elif rel in self._children.get(parent_rel, ()):
            old = self.state.get(rel)
            if st is None or is_dir or old is None or _kind_inode(old) != (stat.S_IFMT(st.st_mode), st.st_ino):
                self._drop(rel)  # another entry stands there now (a file recorded as a file is looked at again)
        if st is None:
            return
        read_only = parent.covered or self.rule.matches(rel)
        if not read_only:
            if not (is_dir and self.rule.may_hold(rel)):
                return
            read_only = rel in self._whole and self.rule.any_name_matches(rel)
        if self._visit(fd, name, rel, st, read_only, parent.covered) and parent.depth + 1 < MAX_DEPTH:
            try:
                child = open_dir_at(fd, name)
            except (NotAFolder, PermissionError):
                return
            self._walk_from(child, rel + "/", read_only, parent.depth + 1, decide=False)

    def _drain(self) -> set[str] | None:
        """The entries the events since the last drain name; None when events were lost."""
        dirty: set[str] = set()
        lost = False
        chunks = read_queued(self._fd)
        if chunks is None:
            return None
        for data in chunks:
            lost = self._parse(data, dirty) or lost
        if self._marks is not None:
            marked = self._marks.events()
            if marked is None:
                return None
            for mark, mask in marked:
                self._file_event(mark, IN_IGNORED if mask & FAN_DELETE_SELF else mask, dirty)
        return None if lost else dirty

    def _parse(self, data: bytes, dirty: set[str]) -> bool:
        """Add what the events in data name to dirty; True when events were lost."""
        lost = False
        offset = 0
        while offset + _HEADER_SIZE <= len(data):
            wd, mask, _cookie, length = _unpack(data, offset)
            name = data[offset + _HEADER_SIZE:offset + _HEADER_SIZE + length].rstrip(b"\0")
            offset += _HEADER_SIZE + length
            if mask & IN_Q_OVERFLOW:
                lost = True
                continue
            folder = self._wd_folder.get(wd)
            if folder is not None:
                if mask & IN_IGNORED:  # the folder went (its parent's event names it), or its watch did
                    del self._wd_folder[wd]
                    record = self._folders.get(folder)
                    if record is not None and record.wd == wd:
                        record.wd = None
                        self._unwatched_folders.add(folder)
                    dirty.add(folder)
                elif name:
                    dirty.add(f"{folder}/{os.fsdecode(name)}" if folder else os.fsdecode(name))
                else:
                    dirty.add(folder)  # the folder itself: its attributes changed, or it moved or went
                continue
            self._file_event(wd, mask, dirty)
        return lost

    def _file_event(self, wd: int, mask: int, dirty: set[str]) -> None:
        """Add what an event of a file's watch or mark names to dirty."""
        named = self._wd_rels.get(wd)
        if named is None:
            return
        rels = _names(named)
        if mask & IN_IGNORED:  # the inode went: looked at again, watched again if a file stands there
            del self._wd_rels[wd]
            self._opens.pop(wd, None)
            if wd < 0 and self._marks is not None:
                self._marks.forget(wd)
            for rel in rels:
                self._rel_wd.pop(rel, None)
            dirty.update(rels)
            return
        if wd < 0:
            if mask & IN_OPEN and self._held is not None:
                self._held.update(rels)  # a mark's opens and closes merge: /proc tells when it is let go
        else:
            if mask & IN_OPEN:
                self._opens[wd] = self._opens.get(wd, 0) + 1
            if mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE):
                # a description opened before the watch closes unopened: never below 0 (see _check_held)
                count = self._opens.get(wd, 0) - 1
                if count > 0:
                    self._opens[wd] = count
                else:
                    self._opens.pop(wd, None)
        if mask & CHANGED:
            dirty.update(rels)

    # ---- files held open from before the watches -----------------------------------------------------------------

    def _check_held(self) -> None:
        """While opens before the watches may be outstanding, find which recorded files any process holds (open
        or mapped). A file none holds has no open description: its count starts again from 0."""
        if self._held is not None and not self._held:
            return
        targets = self.state if self._held is None else [rel for rel in self._held if rel in self.state]
        inodes: dict[int, str] = {}
        more: dict[int, list[str]] = {}  # an inode's other read-only names
        for rel in targets:
            kind, inode = _kind_inode(self.state[rel])
            if kind == stat.S_IFDIR:
                continue
            if inode in inodes:
                more.setdefault(inode, []).append(rel)
            else:
                inodes[inode] = rel
        devices = {folder.identity[0] for folder in self._folders.values()}
        held = held_by_processes(inodes, devices) if inodes else set()
        self._held = {inodes[inode] for inode in held} | {rel for inode in held for rel in more.get(inode, ())}
        for inode, rel in inodes.items():
            if inode not in held:
                wd = self._rel_wd.get(rel)
                if wd is not None:
                    self._opens.pop(wd, None)

    def close(self) -> None:
        if self._fd >= 0 and self.pid == os.getpid():
            os.close(self._fd)
        self._fd = -1
        if self._marks is not None and self.pid == os.getpid():
            self._marks.close()
        self._marks, self._marks_failed = None, False

    def __del__(self) -> None:
        self.close()


def _unpack(data: bytes, offset: int) -> tuple[int, int, int, int]:
    return (int.from_bytes(data[offset:offset + 4], "little", signed=True),
            int.from_bytes(data[offset + 4:offset + 8], "little"),
            int.from_bytes(data[offset + 8:offset + 12], "little"),
            int.from_bytes(data[offset + 12:offset + 16], "little"))


class _Descriptors:
    """Recorded folders opened in one refresh, each checked to be the folder recorded; closed at its end. Only
    one path's are held: opening a folder closes those not above it, so a descriptor is good until the next
    open (a task may hold 20,000 folders of read-only files, and a user's limit on open files is often 1,024)."""

    def __init__(self, watch: ReadOnlyWatch):
        self.watch = watch
        self.open_fds: dict[str, int | None] = {}
        self.restated: set[str] = set()

    def open(self, rel: str) -> int | None:
        """The descriptor of the recorded folder rel; None when what stands there is not that folder (the root:
        _Gone)."""
        if rel in self.open_fds:
            return self.open_fds[rel]
        self._keep_above(rel)
        record = self.watch._folders.get(rel)
        fd: int | None = None
        if record is not None:
            try:
                if rel:
                    parent_rel, _, name = rel.rpartition("/")
                    parent = self.open(parent_rel)
                    fd = open_dir_at(parent, name) if parent is not None else None
                else:
                    fd = open_root(self.watch.root)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    raise  # not a folder replaced: the caller compares every entry instead
                fd = None
            if fd is not None:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != record.identity:
                    os.close(fd)
                    fd = None
        if fd is None and not rel:
            raise _Gone()
        self.open_fds[rel] = fd
        return fd

    def _keep_above(self, rel: str) -> None:
        """Close what is held but the folders above rel."""
        above = {rel[:at] for at, char in enumerate(rel) if char == "/"} | {""}
        for held in [held for held in self.open_fds if held not in above]:
            fd = self.open_fds.pop(held)
            if fd is not None:
                os.close(fd)

    def restate(self, rel: str) -> None:
        """A read-only folder changes with what it holds: its state is taken again (once a refresh)."""
        record = self.watch._folders.get(rel)
        fd = self.open_fds.get(rel)
        if record is None or not record.covered or fd is None or rel in self.restated:
            return
        self.restated.add(rel)
        self.watch._set(rel, _packed(os.fstat(fd)))

    def close(self) -> None:
        for fd in self.open_fds.values():
            if fd is not None:
                os.close(fd)
        self.open_fds.clear()


def held_by_processes(inodes: Collection[int], devices: Collection[int]) -> set[int]:
    """Which of these inodes, on these devices, an open descriptor or a mapping of any process this one may read
    refers to. A descriptor is matched by device too: pipes' and sockets' inode numbers are often a recorded file's.
    A mapping's device as /proc/PID/maps gives it may differ from stat's where that is an anonymous device (major 0:
    overlayfs, btrfs subvolumes, tmpfs): there a mapping is matched by inode alone."""
    found: set[int] = set()
    by_inode_alone = any(os.major(device) == 0 for device in devices)
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return set(inodes)  # nothing can be known: every one may be held
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone, or another user's
        for number in descriptors:
            try:
                st = os.stat(f"/proc/{pid}/fd/{number}")
            except OSError:
                continue
            if st.st_ino in inodes and st.st_dev in devices:
                found.add(st.st_ino)
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                lines = maps.read().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(None, 5)
            if len(fields) < 5 or not fields[4].isdigit() or int(fields[4]) not in inodes:
                continue
            major, _, minor = fields[3].partition(b":")
            if by_inode_alone or os.makedev(int(major, 16), int(minor, 16)) in devices:
                found.add(int(fields[4]))
    return found
