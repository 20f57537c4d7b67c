"""What a tree holds, entry by entry, with each file's sha256: fast enough for 200,000 small files.

Relative path -> ("dir", ""), ("file", sha256), ("symlink", target, unresolved) or ("other", ""), built for
less: the kinds come from each folder's listing (no stat per file), and the files are hashed by a few threads in
batches (a task per file cost more than reading it), so the disk's waits overlap.
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

from mlab.core.fs.dirfd import FILE_FLAGS, opened

WORKERS = 4  # files read at once: waits on a cold disk overlap; warm, the hashing holds the interpreter anyway
BATCH = 512  # files a worker hashes in one task
CHUNK = 1 << 20


def tree_sums(root: str | os.PathLike[str], skip: frozenset[str] = frozenset()) -> dict[str, tuple[str, str]]:
    """Every entry below root by relative path, sorted; folders named in skip (at any depth) are left out."""
    sums: dict[str, tuple[str, str]] = {}
    names: list[str] = []
    paths: list[str] = []
    pending = [("", os.fspath(root))]
    while pending:
        rel, folder = pending.pop()
        with os.scandir(folder) as listing:
            for entry in listing:
                name = f"{rel}{entry.name}"
                if entry.is_symlink():
                    sums[name] = ("symlink", os.readlink(entry.path))
                elif entry.is_dir(follow_symlinks=False):
                    if entry.name not in skip:
                        sums[name] = ("dir", "")
                        pending.append((f"{name}/", entry.path))
                elif entry.is_file(follow_symlinks=False):
                    names.append(name)
                    paths.append(entry.path)
                else:
                    sums[name] = ("other", "")
    batches = [paths[i:i + BATCH] for i in range(0, len(paths), BATCH)]
    if len(batches) > 1:
        with ThreadPoolExecutor(WORKERS, thread_name_prefix="mlab-sums") as pool:
            hashed = [sha for batch in pool.map(_hash_all, batches) for sha in batch]
    else:
        hashed = [sha for batch in batches for sha in _hash_all(batch)]
    sums.update(zip(names, (("file", sha) for sha in hashed), strict=True))
    return dict(sorted(sums.items()))


def _hash_all(paths: list[str]) -> list[str]:
    return [file_sha256(path) for path in paths]


def file_sha256(path: str | os.PathLike[str]) -> str:
    sha = hashlib.sha256()
    with opened(os.open(path, FILE_FLAGS)) as fd:  # listed as a file: never a link followed or a FIFO waited on
        while chunk := os.read(fd, CHUNK):
            sha.update(chunk)
    return sha.hexdigest()
