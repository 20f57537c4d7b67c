"""A content-addressed object store: bytes stored once under their sha256, never changed in place.

Objects up to 1 MB (file contents read whole, folder listings, link targets) are appended to this process's pack
(mlab.core.run.object_pack): creating a file costs far more than appending its bytes; bigger files are streamed
into files of their own, objects/ab/abcdef… (mode 0444). Objects are private copies, so a script that later
changes a workspace file in place cannot change what was stored. Nothing is fsynced here: the snapshot store's
commit makes the objects durable with the step, so an object a crash may have torn (one this process did not
write) is checked against its name before it is trusted.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import stat
from contextlib import suppress
from pathlib import Path

from mlab.core.fs.dirfd import FILE_FLAGS, opened, write_all
from mlab.core.run.object_pack import Location, PackIndex, PackWriter, open_pack, read_at

_BLOCK = 1 << 20
_SMALL_FILE = 1 << 20  # files up to this size are read once, hashed and stored from memory
_ZEROS = bytes(_BLOCK)


class ObjectStore:
    """Objects in packs under FOLDER/pack, those streamed from a big file under FOLDER/ab/abcdef…"""

    def __init__(self, folder: Path):
        self.folder = str(folder)
        os.makedirs(self.folder, exist_ok=True)
        self._good: set[str] = set()  # objects written or verified by this process
        self._listed: dict[str, set[str]] = {}  # objects/ab -> its objects, listed once
        self._loose_folders = set(os.listdir(self.folder))  # objects/ab folders: none in a new store
        self._packs = PackIndex(self.folder, max_index_bytes=None)
        self._packs.refresh()
        self._pack_writer = PackWriter(self._packs)
        self._pack_fds: dict[str, int] = {}

    def close(self) -> None:
        """Let go of the packs' descriptors (reading again reopens them)."""
        self._pack_writer.close()
        for fd in self._pack_fds.values():
            os.close(fd)
        self._pack_fds.clear()

    def has(self, digest: str, size: int | None = None, refresh: bool = True) -> bool:
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
        path = self._file(digest)
        try:
            with opened(os.open(path, os.O_RDONLY | os.O_CLOEXEC)) as fd:
                intact = (size is None or os.fstat(fd).st_size == size) and digest_fd(fd)[0] == digest
        except FileNotFoundError:
            intact = False
        if intact:
            self._good.add(digest)
            return True
        unlink_quietly(path)
        names.discard(digest)
        return False

    def put(self, data: bytes) -> str:
        """Store bytes (durable from the snapshot store's next commit on); returns their digest. Appended to
        this process's pack: a crash that tears it is caught by has() before any reuse."""
        digest = hashlib.sha256(data).hexdigest()
        if not self.has(digest, len(data), refresh=False):
            self._pack_writer.append(digest, data)  # on a failure (a full disk) nothing of it stays
            self._good.add(digest)
        return digest

    def put_file(self, dir_fd: int, name: str) -> tuple[str, int, os.stat_result] | None:
        """Store a regular file's bytes; (digest, size, its stat when opened), or None when it is not a
        regular file. Read through one descriptor, never following a link, so what is hashed is what is
        stored."""
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None
        with opened(fd):
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            os.set_blocking(fd, True)
            if st.st_size <= _SMALL_FILE:
                data = _read_all(fd, st.st_size)
                if len(data) <= _SMALL_FILE:
                    return self.put(data), len(data), st
                os.lseek(fd, 0, os.SEEK_SET)  # it grew meanwhile: stream it
            digest, size = digest_fd(fd)
            if not self.has(digest, size, refresh=False):
                os.lseek(fd, 0, os.SEEK_SET)
                digest, size = self._copy_in(fd, digest)
            return digest, size, st

    def read(self, digest: str) -> bytes:
        location = self._packs.find(digest)
        if location is not None:
            return read_at(self._pack_fd(location.pack), location)
        return Path(self._file(digest)).read_bytes()

    def location(self, digest: str) -> tuple[Path, int, int] | None:
        """Where an object's bytes are: (file, offset, size), None when the store does not hold it."""
        location = self._packs.find(digest)
        if location is not None:
            return Path(self._packs.folder) / f"{location.pack}.pack", location.offset, location.size
        path = Path(self._file(digest))
        return (path, 0, path.stat().st_size) if path.is_file() else None

    def digests(self) -> set[str]:
        """Every object the store holds (packed or not), whole or not."""
        self._packs.refresh()
        found = set(self._packs.locations)
        for prefix in os.listdir(self.folder):
            if len(prefix) == 2:
                found.update(n for n in os.listdir(os.path.join(self.folder, prefix)) if not n.startswith("."))
        return found

    def copy_to(self, digest: str, folder: int, leaf: str, mode: int) -> None:
        """Copy an object to the new file `leaf` of the folder descriptor (never following a link there)."""
        location = self._packs.find(digest)
        if location is not None:
            _copy_to_new_file(self._pack_fd(location.pack), location.offset, location.size, False, folder, leaf, mode)
            return
        with opened(os.open(self._file(digest), os.O_RDONLY | os.O_CLOEXEC)) as src:
            st = os.fstat(src)
            sparse = st.st_blocks * 512 < st.st_size  # holes stay holes; otherwise the kernel copies fastest
            _copy_to_new_file(src, 0, st.st_size, sparse, folder, leaf, mode)

    def _copy_in(self, fd: int, digest: str) -> tuple[str, int]:
        """Copy fd into the store; returns the digest and size of what was copied (the file may have changed
        since it was hashed, so it is copied under a temporary name and named by what was copied)."""
        self._loose_folder(digest[:2])
        tmp = os.path.join(self.folder, digest[:2], f".{digest}.tmp{os.getpid()}-{secrets.token_hex(4)}")
        h = hashlib.sha256()
        try:
            with opened(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)) as out:
                size = _copy_sparse(fd, out, h)
            copied = h.hexdigest()
            names = self._loose_folder(copied[:2])
            os.replace(tmp, self._file(copied))  # objects are never changed in place (mode 0444)
        except BaseException:
            unlink_quietly(tmp)
            raise
        names.add(copied)
        self._good.add(copied)
        return copied, size

    def _loose_folder(self, prefix: str) -> set[str]:
        """Folder objects/<prefix> made where missing; the objects it holds."""
        names = self._stored_names(prefix)
        if prefix not in self._loose_folders:
            os.makedirs(os.path.join(self.folder, prefix), exist_ok=True)
            self._loose_folders.add(prefix)
        return names

    def _stored_names(self, prefix: str) -> set[str]:
        """The objects of folder objects/<prefix>, listed once per process."""
        names = self._listed.get(prefix)
        if names is None:
            names = set()
            if prefix in self._loose_folders:
                try:
                    names = set(os.listdir(os.path.join(self.folder, prefix)))
                except FileNotFoundError:
                    self._loose_folders.discard(prefix)
            self._listed[prefix] = names
        return names

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

    def _file(self, digest: str) -> str:
        return os.path.join(self.folder, digest[:2], digest)


def digest_fd(fd: int) -> tuple[str, int]:
    """The sha256 and size of what is left to read of fd."""
    h = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, _BLOCK):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def unlink_quietly(path: str | Path) -> None:
    with suppress(OSError):
        os.unlink(path)


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
            write_all(dst, chunk)
        size += len(chunk)
    os.ftruncate(dst, size)  # a hole at the end still counts
    return size


def _copy_to_new_file(src: int, offset: int, size: int, sparse: bool, folder: int, leaf: str, mode: int) -> None:
    """Copy `size` bytes of src from `offset` (a sparse one whole, holes kept) to the new file `leaf` of the folder
    descriptor, never following a link there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with opened(os.open(leaf, flags, 0o600, dir_fd=folder)) as dst:
        if sparse:
            _copy_sparse(src, dst)
        else:
            _copy_range(src, dst, offset, size)
        os.fchmod(dst, mode)


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
