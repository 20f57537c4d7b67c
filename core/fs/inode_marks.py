"""More inode watches where inotify's run out: fanotify inode marks, which count against a limit of their own.

fs.inotify.max_user_watches is shared by all of a user's processes (192,543 on a 24 GiB machine), so a task with
200,000 read-only files outruns it and every file past it cost a stat after every command. fanotify marks an
inode the way an inotify watch does (an event whatever link it was changed through) and counts against
fs.fanotify.max_user_marks instead; since Linux 5.13 an unprivileged user may mark inodes when events name
objects by file handle (FAN_REPORT_FID). Each mark is named by a negative number, never an inotify watch
descriptor, and its events carry inotify's bits (the two APIs share their values for what is asked here).

A mark cannot be removed without reaching its inode again, so a forgotten one stays until its inode goes or the
instance closes; its events are ignored. fanotify merges events of one inode that are still queued, so opens and
closes cannot be counted: the caller learns only that a file was opened.
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct

from mlab.core.fs.change_watch import read_queued

FAN_CLOEXEC, FAN_NONBLOCK, FAN_REPORT_FID = 0x1, 0x2, 0x200
FAN_MARK_ADD, FAN_MARK_DONT_FOLLOW = 0x1, 0x4
FAN_MODIFY, FAN_ATTRIB, FAN_CLOSE_WRITE, FAN_CLOSE_NOWRITE, FAN_OPEN = 0x2, 0x4, 0x8, 0x10, 0x20
FAN_DELETE_SELF, FAN_Q_OVERFLOW = 0x400, 0x4000
MASK = FAN_MODIFY | FAN_ATTRIB | FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE | FAN_OPEN | FAN_DELETE_SELF
_METADATA = struct.Struct("<IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_METADATA_VERSION = 3
_INFO_FID = 1
_HANDLE_MAX = 128  # MAX_HANDLE_SZ
# an info record: type, pad, len (4 bytes), fsid (8), then struct file_handle: handle_bytes, handle_type, f_handle
_HANDLE_AT = 12


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        libc.name_to_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    except (OSError, AttributeError):  # not Linux, or a libc without fanotify
        return None
    return libc


_libc = _load_libc()


class InodeMarks:
    """One fanotify instance marking files' inodes, each mark named by a negative number."""

    def __init__(self, fd: int):
        self.fd = fd
        self.limit_reached = False  # a mark was refused for fs.fanotify.max_user_marks
        self._by_handle: dict[bytes, int] = {}
        self._handles: dict[int, bytes] = {}
        self._next = -1

    @classmethod
    def open(cls) -> InodeMarks | None:
        """An instance; None where fanotify cannot be had (not Linux, before 5.13 unprivileged, the group limit)."""
        if _libc is None:
            return None
        fd = int(_libc.fanotify_init(FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_FID, os.O_RDONLY))
        return cls(fd) if fd >= 0 else None

    def add(self, dir_fd: int, name: str) -> int | None:
        """Mark the inode of dir_fd's entry `name` (a link is marked itself, never followed); its number, or None
        where it cannot be marked (FileNotFoundError when it went). Marked first, its handle taken after: an
        entry swapped between the two is named by its folder's events, and looked at again."""
        assert _libc is not None
        path = os.fsencode(name)
        if _libc.fanotify_mark(self.fd, FAN_MARK_ADD | FAN_MARK_DONT_FOLLOW, MASK, dir_fd, path) != 0:
            self._refused()
            return None
        handle = ctypes.create_string_buffer(8 + _HANDLE_MAX)
        struct.pack_into("<I", handle, 0, _HANDLE_MAX)
        mount = ctypes.c_int()
        if _libc.name_to_handle_at(dir_fd, path, handle, ctypes.byref(mount), 0) != 0:
            self._refused()
            return None
        size = struct.unpack_from("<I", handle, 0)[0]
        key = handle.raw[4:8 + size]  # handle_type and f_handle, as an event carries them
        mark = self._by_handle.get(key)
        if mark is None:
            mark, self._next = self._next, self._next - 1
            self._by_handle[key] = mark
            self._handles[mark] = key
        return mark

    def _refused(self) -> None:
        """FileNotFoundError where the entry went; a refusal for the limit is recorded."""
        code = ctypes.get_errno()
        if code in (errno.ENOENT, errno.ENOTDIR):
            raise FileNotFoundError(code, os.strerror(code))
        self.limit_reached |= code == errno.ENOSPC

    def forget(self, mark: int) -> None:
        key = self._handles.pop(mark, None)
        if key is not None:
            del self._by_handle[key]

    def events(self) -> list[tuple[int, int]] | None:
        """The (mark, mask) of each event queued now, for marks not forgotten; None when events were lost."""
        chunks = read_queued(self.fd)
        if chunks is None:
            return None
        found = []
        for data in chunks:
            offset = 0
            while offset + _METADATA.size <= len(data):
                length, version, _reserved, header, mask, _fd, _pid = _METADATA.unpack_from(data, offset)
                if version != _METADATA_VERSION or mask & FAN_Q_OVERFLOW or length < _METADATA.size:
                    return None
                info = offset + header
                if data[info] == _INFO_FID:
                    size = struct.unpack_from("<I", data, info + _HANDLE_AT)[0]
                    start = info + _HANDLE_AT + 4
                    mark = self._by_handle.get(data[start:start + 4 + size])
                    if mark is not None:
                        found.append((mark, mask))
                offset += length
        return found

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1
