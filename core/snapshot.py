"""Content-addressed snapshots of a workspace: each step stores a manifest; a file's bytes are stored once."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from .atomic import write_atomic

_BLOCK = 1 << 20


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_BLOCK):
            h.update(chunk)
    return h.hexdigest()


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

    def take(self, workspace: Path, name: str, skip: "callable[[str], bool]" = lambda _rel: False) -> dict:
        """Record the workspace under `name`; returns the manifest {relpath: {sha256, size, mode}}."""
        manifest: dict[str, dict] = {}
        for rel, full, st in _walk(workspace, skip):
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            cached = self._stat_cache.get(rel)
            if cached and cached[0] == key:
                digest = cached[1]
            else:
                digest = self._store(full)
                self._stat_cache[rel] = (key, digest)
            manifest[rel] = {"sha256": digest, "size": st.st_size, "mode": st.st_mode & 0o777}
        write_atomic(self.manifests / f"{name}.json", json.dumps(manifest, sort_keys=True).encode())
        return manifest

    def _store(self, full: str) -> str:
        digest = file_digest(full)
        target = self._object_path(digest)
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            tmp = target.with_name(target.name + f".tmp{os.getpid()}")
            shutil.copyfile(full, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, target)
        return digest

    def store_bytes(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self._object_path(digest)
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            write_atomic(target, data)
        return digest

    def read_object(self, digest: str) -> bytes:
        return self._object_path(digest).read_bytes()

    def manifest(self, name: str) -> dict:
        return json.loads((self.manifests / f"{name}.json").read_text())

    def has(self, name: str) -> bool:
        return (self.manifests / f"{name}.json").exists()

    def restore(self, name: str, workspace: Path, skip: "callable[[str], bool]" = lambda _rel: False) -> None:
        """Make the workspace equal to snapshot `name`, leaving paths for which skip() is true alone."""
        manifest = self.manifest(name)
        workspace.mkdir(parents=True, exist_ok=True)
        for rel, full, _st in list(_walk(workspace, skip)):
            if rel not in manifest:
                os.remove(full)
        for rel, entry in manifest.items():
            target = workspace / rel
            if target.is_file() and not target.is_symlink() and file_digest(str(target)) == entry["sha256"]:
                continue
            if target.is_symlink() or target.exists():
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self._object_path(entry["sha256"]), target)
            os.chmod(target, entry["mode"])
        _remove_empty_dirs(workspace)
        self._stat_cache.clear()

    def materialize(self, name: str, target: Path) -> None:
        """Write snapshot `name` into an empty folder."""
        for rel, entry in self.manifest(name).items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self._object_path(entry["sha256"]), path)
            os.chmod(path, entry["mode"] | 0o200)


def _walk(workspace: Path, skip):
    """(relpath, fullpath, stat) of every regular file below workspace; symlinks are not followed."""
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
            if entry.is_dir(follow_symlinks=False):
                stack.append((rel + "/", entry.path))
            elif entry.is_file(follow_symlinks=False):
                yield rel, entry.path, entry.stat(follow_symlinks=False)


def _remove_empty_dirs(workspace: Path) -> None:
    for folder, dirs, files in os.walk(workspace, topdown=False):
        if folder != str(workspace) and not dirs and not files:
            try:
                os.rmdir(folder)
            except OSError:
                pass
