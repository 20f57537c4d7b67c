"""Content-addressed snapshots of a workspace: each step stores a manifest; a file's bytes are stored once.

A manifest maps each path to {sha256, size, mode} for a regular file, or to {link, sha256, size, mode} for a
symbolic link (stored as a link, its target text as the object: never followed). Other kinds of files (FIFOs,
sockets, devices) are not recorded. Objects are private copies, so a script that later changes a workspace file
in place cannot change an earlier snapshot.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mlab.core.fs.atomic import write_atomic

_BLOCK = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block the harness

# A manifest entry: {sha256, size, mode}, plus `link` (its target) for a symbolic link.
Entry = dict[str, Any]
Manifest = dict[str, Entry]


def file_digest(path: str) -> str:
    fd = os.open(path, _OPEN_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return _digest_fd(fd)[0]
    finally:
        os.close(fd)


def _digest_fd(fd: int) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, _BLOCK):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def is_link(entry: Entry) -> bool:
    return "link" in entry


class SnapshotStore:
    """Stores objects under objects/ab/abcdef… and manifests under snapshots/NAME.json."""

    def __init__(self, root: Path):
        self.root = root
        self.objects = root / "objects"
        self.manifests = root / "snapshots"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.manifests.mkdir(parents=True, exist_ok=True)
        # (size, mtime_ns, ctime_ns, inode) of a path at its last hashing: unchanged files are not read again
        self._stat_cache: dict[str, tuple[tuple[int, int, int, int], str]] = {}

    def _object_path(self, digest: str) -> Path:
        return self.objects / digest[:2] / digest

    def take(self, workspace: Path, name: str, skip: Callable[[str], bool] = lambda _rel: False) -> Manifest:
        """Record the workspace under `name`; returns the manifest."""
        manifest: Manifest = {}
        for rel, full, st in _walk(workspace, skip):
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(full)
                except OSError:  # gone since the walk
                    continue
                data = os.fsencode(target)
                manifest[rel] = {"link": target, "sha256": self.store_bytes(data), "size": len(data),
                                 "mode": 0o777}
                continue
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            cached = self._stat_cache.get(rel)
            if cached and cached[0] == key:
                digest, size = cached[1], st.st_size
            else:
                stored = self._store(full)
                if stored is None:  # no longer a regular file (removed, or swapped for a FIFO)
                    continue
                digest, size, key = stored
                self._stat_cache[rel] = (key, digest)
            manifest[rel] = {"sha256": digest, "size": size, "mode": st.st_mode & 0o777}
        write_atomic(self.manifests / f"{name}.json", json.dumps(manifest, sort_keys=True).encode())
        return manifest

    def _store(self, full: str) -> tuple[str, int, tuple[int, int, int, int]] | None:
        """Store a regular file's bytes; (digest, size, stat key), or None when it is not a regular file.
        Read through one descriptor, never following a link, so what is hashed is what is stored."""
        try:
            fd = os.open(full, _OPEN_FLAGS)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            os.set_blocking(fd, True)
            digest, size = _digest_fd(fd)
            if not self._object_path(digest).exists():
                os.lseek(fd, 0, os.SEEK_SET)
                digest, size = self._copy_in(fd, digest)
            return digest, size, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        finally:
            os.close(fd)

    def _copy_in(self, fd: int, digest: str) -> tuple[str, int]:
        """Copy fd into the store; returns the digest and size of what was copied (the file may have changed
        since it was hashed)."""
        tmp_dir = self.objects / digest[:2]
        tmp_dir.mkdir(exist_ok=True)
        tmp = tmp_dir / f".{digest}.tmp{os.getpid()}-{secrets.token_hex(4)}"
        h = hashlib.sha256()
        try:
            with open(tmp, "wb") as out:
                size = _copy_sparse(fd, out.fileno(), h)
                os.fsync(out.fileno())
            copied = h.hexdigest()
            target = self._object_path(copied)
            target.parent.mkdir(exist_ok=True)
            os.chmod(tmp, 0o444)  # objects are never changed in place
            os.replace(tmp, target)
            return copied, size
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def store_bytes(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self._object_path(digest)
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            write_atomic(target, data)
        return digest

    def read_object(self, digest: str) -> bytes:
        return self._object_path(digest).read_bytes()

    def manifest(self, name: str) -> Manifest:
        manifest: Manifest = json.loads((self.manifests / f"{name}.json").read_text())
        return manifest

    def has(self, name: str) -> bool:
        return (self.manifests / f"{name}.json").exists()

    def restore(self, name: str, workspace: Path, skip: Callable[[str], bool] = lambda _rel: False) -> None:
        """Make the workspace equal to snapshot `name`, leaving paths for which skip() is true alone."""
        manifest = self.manifest(name)
        workspace.mkdir(parents=True, exist_ok=True)
        for rel, full, st in list(_walk(workspace, skip, every_kind=True)):
            entry = manifest.get(rel)
            if entry is None or is_link(entry) != stat.S_ISLNK(st.st_mode):
                _remove(full)
        for rel, entry in sorted(manifest.items()):
            target = workspace / rel
            _clear_path(workspace, rel)
            if is_link(entry):
                if os.path.islink(target) and os.readlink(target) == entry["link"]:
                    continue
                _remove(str(target))
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(entry["link"], target)
                continue
            if _same_file(target, entry):
                if stat.S_IMODE(os.lstat(target).st_mode) != entry["mode"]:
                    os.chmod(target, entry["mode"])
                continue
            _remove(str(target))
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_object(self._object_path(entry["sha256"]), target)
            os.chmod(target, entry["mode"])
        _remove_empty_dirs(workspace)
        self._stat_cache.clear()

    def materialize(self, name: str, target: Path) -> None:
        """Write snapshot `name` into an empty folder. Links that would lead out of it are left out: the
        result is read by the harness itself (scoring), which must never follow the agent's links out."""
        manifest = self.manifest(name)
        links = []
        for rel, entry in manifest.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if is_link(entry):
                links.append(path)
                os.symlink(entry["link"], path)
                continue
            _copy_object(self._object_path(entry["sha256"]), path)
            os.chmod(path, entry["mode"] | 0o200)
        root = os.path.realpath(target)
        for path in links:
            real = os.path.realpath(path)
            if not (real == root or real.startswith(root + os.sep)) or not os.path.exists(path):
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


def _copy_object(source: Path, target: Path) -> None:
    st = os.stat(source)
    if st.st_blocks * 512 >= st.st_size:  # not sparse: the kernel copies fastest
        shutil.copyfile(source, target, follow_symlinks=False)
        return
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            _copy_sparse(src, dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _same_file(target: Path, entry: Entry) -> bool:
    try:
        st = os.lstat(target)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != entry["size"]:
        return False
    expected: str = entry["sha256"]
    try:
        return file_digest(str(target)) == expected
    except OSError:
        return False


def _remove(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _clear_path(workspace: Path, rel: str) -> None:
    """Make every folder above rel a real folder: a file or a link in the way (maybe out of the workspace)
    is removed, never followed."""
    current = str(workspace)
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(current)
            return


def _walk(workspace: Path, skip: Callable[[str], bool],
          every_kind: bool = False) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relpath, fullpath, lstat) of every regular file and symlink below workspace (with every_kind, of
    every non-folder entry: FIFOs, sockets...); symlinks are never followed."""
    root = str(workspace)
    stack = [("", root)]
    while stack:
        prefix, folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            rel = prefix + entry.name
            if skip(rel):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append((rel + "/", entry.path))
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or every_kind:
                yield rel, entry.path, st


def _remove_empty_dirs(workspace: Path) -> None:
    for folder, dirs, files in os.walk(workspace, topdown=False):
        if folder != str(workspace) and not dirs and not files:
            try:
                os.rmdir(folder)
            except OSError:
                pass
