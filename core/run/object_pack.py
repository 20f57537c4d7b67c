"""Packs: many small objects in one data file, found through an index file beside it (as git packs them).

A snapshot of 50,000 small files would otherwise create 50,000 object files, and creating a file costs far more
than appending its bytes. A store writes one pack per process that adds objects: `objects/pack/NAME.pack` holds
the objects back to back, `objects/pack/NAME.idx` one line per object, "<sha256> <offset> <size>\\n". Both are
only ever appended to, without fsync: the store's commit makes them durable with the rest of the step. A crash
can leave an index line naming bytes that never reached the disk, so whoever did not write an object checks it
against its digest before trusting it. NAME starts with the time it was made, so where one digest is indexed
twice (stored again after a torn copy was found), the later line wins.

The index is read as untrusted data (the viewer reads run folders from anywhere): odd names and lines are skipped,
links are never followed, and the bytes read are bounded.
"""
from __future__ import annotations

import os
import re
import secrets
import stat
import time
from contextlib import suppress
from dataclasses import dataclass

from mlab.core.fs.dirfd import opened, pwrite_all

PACK_DIR = "pack"
MAX_INDEX_BYTES = 256 << 20  # of index files read for an untrusted store: 2.5 million lines or more
_NAME = re.compile(r"[0-9]{20}-[0-9]{1,10}-[0-9a-f]{8}")
_LINE = re.compile(rb"([0-9a-f]{64}) ([0-9]{1,15}) ([0-9]{1,15})")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Location:
    pack: str  # the pack's NAME
    offset: int
    size: int


class PackIndex:
    """Where each packed object of one objects folder is, as far as its index files say."""

    def __init__(self, objects_dir: str | os.PathLike[str], max_index_bytes: int | None = MAX_INDEX_BYTES):
        """`max_index_bytes`: None for the harness's own store, whose every object must be found."""
        self.folder = os.path.join(os.fspath(objects_dir), PACK_DIR)
        self.locations: dict[str, Location] = {}
        self._parsed: dict[str, int] = {}  # index NAME -> bytes of it parsed (whole lines only)
        self._budget = float("inf") if max_index_bytes is None else max_index_bytes

    def find(self, digest: str, refresh: bool = True) -> Location | None:
        """The object's place; with `refresh`, index lines written since the last look are read on a miss."""
        found = self.locations.get(digest)
        if found is None and refresh:
            self.refresh()
            found = self.locations.get(digest)
        return found

    def forget(self, digest: str) -> None:
        """The bytes at the object's place are not what its digest promises."""
        self.locations.pop(digest, None)

    def add(self, digest: str, location: Location, index_size: int) -> None:
        """An object this process has just appended (its index line ends at index_size)."""
        self.locations[digest] = location
        self._parsed[location.pack] = index_size

    def refresh(self) -> None:
        """Read what the index files gained since the last look (every index file, the first time)."""
        try:
            folder = os.open(self.folder, _DIR_FLAGS)
        except OSError:
            return  # no packs (yet), or not a folder
        try:
            names = sorted(n[:-4] for n in os.listdir(folder) if n.endswith(".idx") and _NAME.fullmatch(n[:-4]))
            for name in names:
                if self._budget <= 0:
                    return
                self._read_index(folder, name)
        finally:
            os.close(folder)

    def _read_index(self, folder: int, name: str) -> None:
        start = self._parsed.get(name, 0)
        try:
            with opened(os.open(f"{name}.idx", _READ_FLAGS, dir_fd=folder)) as fd:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return
                data = _pread_all(fd, int(min(self._budget, max(0, os.fstat(fd).st_size - start))), start)
        except OSError:
            return
        whole = data[:data.rfind(b"\n") + 1]  # a line still being written is read next time
        self._budget -= len(whole)
        self._parsed[name] = start + len(whole)
        for line in whole.splitlines():
            match = _LINE.fullmatch(line)
            if match:
                self.locations[match[1].decode()] = Location(name, int(match[2]), int(match[3]))


class PackWriter:
    """Appends objects to this process's own pack, made on the first one."""

    def __init__(self, index: PackIndex):
        self.index = index
        self.name = ""
        self._pack = self._idx = -1
        self._pack_size = self._idx_size = 0

    def append(self, digest: str, data: bytes) -> Location:
        """Append the object and its index line; on a failure (a full disk) neither file keeps any of it."""
        if self._pack < 0:
            self._open()
        location = Location(self.name, self._pack_size, len(data))
        line = f"{digest} {location.offset} {location.size}\n".encode()
        try:
            pwrite_all(self._pack, data, self._pack_size)
            pwrite_all(self._idx, line, self._idx_size)
        except BaseException:
            for fd, size in ((self._pack, self._pack_size), (self._idx, self._idx_size)):
                with suppress(OSError):  # left longer: a reader skips bytes no whole index line names
                    os.ftruncate(fd, size)
            raise
        self._pack_size += len(data)
        self._idx_size += len(line)
        self.index.add(digest, location, self._idx_size)
        return location

    def _open(self) -> None:
        os.makedirs(self.index.folder, exist_ok=True)
        name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        pack = os.open(os.path.join(self.index.folder, f"{name}.pack"), flags, 0o444)
        try:
            idx = os.open(os.path.join(self.index.folder, f"{name}.idx"), flags, 0o444)
        except BaseException:
            os.close(pack)
            os.unlink(os.path.join(self.index.folder, f"{name}.pack"))
            raise
        self.name, self._pack, self._idx = name, pack, idx

    def close(self) -> None:
        for fd in (self._pack, self._idx):
            if fd >= 0:
                os.close(fd)
        self._pack = self._idx = -1
        self.name = ""
        self._pack_size = self._idx_size = 0


def open_pack(index: PackIndex, name: str) -> int:
    """A read descriptor of pack NAME, refusing a link or anything but a regular file."""
    fd = os.open(os.path.join(index.folder, f"{name}.pack"), _READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{name}.pack is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_at(fd: int, location: Location) -> bytes:
    """The bytes at the object's place (fewer when the pack is shorter than its index says)."""
    return _pread_all(fd, location.size, location.offset)


def read_packed(index: PackIndex, location: Location, limit: int) -> bytes | None:
    """The bytes at a packed object's place, no more than `limit` and all of them (checked against its digest by
    the caller); None when they are too many or unreadable."""
    if location.size > limit:
        return None
    try:
        with opened(open_pack(index, location.pack)) as fd:
            data = read_at(fd, location)
    except OSError:
        return None
    return data if len(data) == location.size else None


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts, left = [], size
    while left > 0:
        chunk = os.pread(fd, min(left, 1 << 24), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
        left -= len(chunk)
    return b"".join(parts)


