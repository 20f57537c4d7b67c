"""Which folders of a recorded tree changed, told by the kernel (inotify) instead of found by a stat walk.

Every folder a walk records gets a watch; afterwards the events name the folders whose entries were written,
created, removed, renamed or had their attributes changed. The snapshot store then looks only there, so a step
costs what changed rather than what the workspace holds.

What the events cannot tell, and what covers it:
- a write through another hard link of the same file: only the link written through has an event. A file found
  with more than one link on an event's path makes the caller walk the whole tree (a confined command can link
  only inside its workspace: links across its mounts fail with EXDEV). Unconfined code can link a file from
  anywhere, so after it the caller may ask for a watch on each recorded file's inode too (`files`): a write
  through any link is then an event naming the file's recorded names, and the folders' watches need tell only
  what came, went or was renamed (one watch per write: a file written in a loop makes merged events, not two
  streams taking turns that fill the queue);
- writes through a shared memory mapping have no event; the mapping's last release does (IN_CLOSE_WRITE), which
  a finished command's exit brings. A process that lives on (the REPL) may still hold one: the caller trusts
  events only for steps whose agent code ended;
- a folder past the user's watch limit (fs.inotify.max_user_watches, 8,192 on many machines, shared by all the
  user's processes): it is reported at every drain as to be listed again, so a tree larger than the limit
  costs a step its unwatched folders, not a walk of everything;
- events past the kernel's queue (IN_Q_OVERFLOW): the caller is told nothing is known this once and walks the
  whole tree, but the watches stand, so it need not make them again (a file's watch each: 50,000 system calls);
- a watch that failed otherwise, or no inotify at all: nothing is known, and the caller walks with a new watch.
"""
from __future__ import annotations

import array
import ctypes
import errno
import fcntl
import os
import struct
import termios
from dataclasses import dataclass, field

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR = 0x4000, 0x8000, 0x1000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
# What changes a recorded entry; reads and opens are left out (they would flood the queue and change nothing).
CONTENT = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE
LISTING = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
MASK = CONTENT | LISTING | IN_ONLYDIR
LISTING_MASK = LISTING | IN_ONLYDIR  # a folder's, where its files have watches of their own
IN_DONT_FOLLOW = 0x2000000
FILE_MASK = CONTENT | IN_DONT_FOLLOW
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):  # not Linux, or a libc without inotify
        return None
    return libc


_libc = _load_libc()


def read_queued(fd: int) -> list[bytes] | None:
    """The events queued on the inotify descriptor fd (non-blocking) when this is called, as read; None when they
    cannot be read. Only those: agent code renaming or opening files in a loop makes events as fast as they are
    read, and a reader that went on until none were left would never end (those made meanwhile are the next
    read's; what they name is looked at afresh anyway)."""
    queued = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, queued, True)
    except OSError:
        return None
    chunks, pending = [], queued[0]
    while pending > 0:
        try:
            data = os.read(fd, 1 << 16)  # whole events only; 64 KiB holds at least one
        except BlockingIOError:
            break
        except InterruptedError:
            continue
        except OSError:
            return None
        if not data:
            break
        pending -= len(data)
        chunks.append(data)
    return chunks


@dataclass
class FolderEvents:
    """What happened in one folder since the last drain."""

    names: set[str] = field(default_factory=set)  # entries written or whose attributes changed
    relist: bool = False  # entries appeared, went or were renamed; or the folder itself moved or went


class ChangeWatch:
    """An inotify instance watching the folders of one recorded tree, by their workspace-relative prefix."""

    def __init__(self, fd: int):
        self._fd = fd
        self._prefixes: dict[int, str] = {}  # watch descriptor -> the folder's prefix ("" or "a/b/")
        self.unwatched: set[str] = set()  # folders past the watch limit: listed again at every drain
        self.limit_reached = False  # a watch was refused for the limit: the user is told once (the store's note)
        self.broken = False  # a watch could not be added: nothing is known
        self.overflowed = False  # events were lost to a full queue (the watches stand): the next drain says so
        # Each recorded file gets a watch on its inode (add_file), named by the recorded names of that inode, and
        # each folder added from then on (again: the caller's next walk adds them all) tells only what comes and goes
        self.files = False
        self.files_refused = False  # a file's watch could not be added: file events do not tell all
        self._files: dict[int, tuple[str, str]] = {}  # an inode's watch -> (folder prefix, name) first recorded
        self._more_links: dict[int, set[tuple[str, str]]] = {}  # its other recorded names (hard links, renames)

    @classmethod
    def open(cls) -> ChangeWatch | None:
        """A new watch; None where inotify cannot be had (no Linux, the per-user limit of instances reached)."""
        if _libc is None:
            return None
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        return cls(fd) if fd >= 0 else None

    def add(self, dir_fd: int, prefix: str) -> None:
        """Watch the folder open as dir_fd (reached through its descriptor, never by re-resolving its path)."""
        if self.broken or _libc is None:
            return
        wd = _libc.inotify_add_watch(self._fd, f"/proc/self/fd/{dir_fd}".encode(),
                                     LISTING_MASK if self.files else MASK)
        if wd < 0:
            if ctypes.get_errno() == errno.ENOSPC:  # past max_user_watches: this folder is listed at every drain
                self.unwatched.add(prefix)
                self.limit_reached = True
            else:
                self.broken = True
            return
        self.unwatched.discard(prefix)
        self._prefixes[wd] = prefix

    def add_file(self, dir_fd: int, name: str, prefix: str) -> None:
        """Watch the inode of the file `name` in the folder open as dir_fd (a link is watched itself, never
        followed); its events name prefix + name, and every other recorded name of the same inode."""
        if self.broken or self.files_refused or _libc is None:
            return
        wd = _libc.inotify_add_watch(self._fd, f"/proc/self/fd/{dir_fd}/".encode() + os.fsencode(name), FILE_MASK)
        if wd < 0:
            if ctypes.get_errno() not in (errno.ENOENT, errno.ENOTDIR):  # gone: its folder's events tell
                self.files_refused = True
            return
        link = self._files.setdefault(wd, (prefix, name))
        if link != (prefix, name):
            self._more_links.setdefault(wd, set()).add((prefix, name))

    def counts(self) -> tuple[int, int]:
        """(folders past the watch limit, folders of the tree)."""
        return len(self.unwatched), len(self.unwatched) + len(self._prefixes)

    def drain(self) -> dict[str, FolderEvents] | None:
        """The events since the last drain, by folder prefix; None when they cannot be trusted."""
        found: dict[str, FolderEvents] = {}
        chunks = read_queued(self._fd)
        if chunks is None:
            self.broken = True
        for data in chunks or ():
            self._parse(data, found)
        for prefix in self.unwatched:  # no event can come from there: whatever happened, listed again
            found.setdefault(prefix, FolderEvents()).relist = True
        if self.overflowed:  # the caller walks the tree once; the watches go on telling what happens next
            self.overflowed = False
            return None
        return None if self.broken else found

    def _parse(self, data: bytes, found: dict[str, FolderEvents]) -> None:
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            name = data[offset + _HEADER.size:offset + _HEADER.size + length].rstrip(b"\0")
            offset += _HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                self.overflowed = True
                continue
            link = self._files.get(wd)
            if link is not None:
                if mask & IN_IGNORED:  # the inode went: its names' folders had events of their own
                    del self._files[wd]
                    self._more_links.pop(wd, None)
                    continue
                for folder, leaf in (link, *self._more_links.get(wd, ())):  # a name renamed away: looked at for nothing
                    found.setdefault(folder, FolderEvents()).names.add(leaf)
                continue
            prefix = self._prefixes.get(wd)
            if mask & IN_IGNORED:  # the folder went (or its watch was removed): its events are over
                self._prefixes.pop(wd, None)
                continue
            if prefix is None:
                continue
            events = found.setdefault(prefix, FolderEvents())
            if mask & LISTING:
                events.relist = True
            elif name:
                events.names.add(os.fsdecode(name))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()
