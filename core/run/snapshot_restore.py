"""Putting a snapshot back: making the workspace equal to one (undo, resume), or writing one into a scratch folder
(scoring).

The workspace is read and changed only through directory descriptors (mlab.core.fs.dirfd): agent code may
swap any of its folders for a symlink while a snapshot is restored.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from mlab.core.fs.dirfd import FILE_FLAGS, DirChain, WalkLimits, lstat_at, open_root, opened, remove_at, walk
from mlab.core.fs.durable import trust_horizon_ns
from mlab.core.fs.tree_index import Entry, Folder, StatKey, stat_key
from mlab.core.run.object_store import ObjectStore, digest_fd


def is_link(entry: Entry) -> bool:
    return "link" in entry


def restore(manifest: dict[str, Entry], objects: ObjectStore, workspace: Path, skip: Callable[[str], bool],
            clock: Path) -> tuple[tuple[int, int], Folder]:
    """Make the workspace equal to the manifest, leaving paths for which skip() is true alone; returns the
    workspace's (device, inode) and its tree as now recorded, files found intact with their stat keys (those
    taken before the trust horizon of the `clock` marker), so the next snapshot reads only those written here."""
    folders = {rel.rsplit("/", 1)[0] for rel in manifest if "/" in rel}
    folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
    workspace.mkdir(parents=True, exist_ok=True)
    tree = Folder()
    with opened(open_root(workspace)) as root:
        st = os.fstat(root)
        horizon = trust_horizon_ns(clock, st.st_dev)
        # 1. remove what the snapshot does not have, each entry through its folder's descriptor
        limits = WalkLimits()
        extra_dirs = []
        for found in walk(root, skip, limits):
            entry = manifest.get(found.rel)
            if stat.S_ISDIR(found.st.st_mode):
                if found.rel not in folders:
                    if found.depth >= limits.max_depth:
                        remove_at(found.dir_fd, found.name)  # too deep for any snapshot to hold a file
                    else:
                        extra_dirs.append(found.rel)  # removed below once empty (it may hold skipped files)
                continue
            if entry is None or is_link(entry) != stat.S_ISLNK(found.st.st_mode) or not (
                    stat.S_ISLNK(found.st.st_mode) or stat.S_ISREG(found.st.st_mode)):
                remove_at(found.dir_fd, found.name)
        with DirChain(root) as chain:
            for rel in sorted(extra_dirs, key=lambda r: (-r.count("/"), r)):
                *parts, leaf = rel.split("/")
                with suppress(OSError):  # not empty (skipped files), or gone
                    os.rmdir(leaf, dir_fd=chain.folder(parts))
        # 2. put back every file and link, folders made (or cleared of what stands in their way) on the way
        with DirChain(root, create=True, replace=True) as chain:
            for rel, entry in sorted(manifest.items()):
                *parts, leaf = rel.split("/")
                key = _restore_entry(objects, chain.folder(parts), leaf, entry)
                node = tree
                for part in parts:
                    node = node.folders.setdefault(part, Folder())
                node.files[leaf] = (key if key is not None and key[3] < horizon else None, entry)
    return (st.st_dev, st.st_ino), tree


def _restore_entry(objects: ObjectStore, folder: int, leaf: str, entry: Entry) -> StatKey | None:
    """Put back one file or link; the stat key of what was found intact, None for what was written."""
    st = lstat_at(folder, leaf)
    if is_link(entry):
        if st is not None and stat.S_ISLNK(st.st_mode) and os.readlink(leaf, dir_fd=folder) == entry["link"]:
            return stat_key(st)
        if st is not None:
            remove_at(folder, leaf)
        os.symlink(entry["link"], leaf, dir_fd=folder)
        return None
    # A file with other hard links is written afresh: a write to it would reach the other names (a shipped
    # run folder may have a link into the task's own copy put in its place).
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == entry["size"] and st.st_nlink == 1:
        try:
            fd = os.open(leaf, FILE_FLAGS, dir_fd=folder)
        except OSError:
            fd = -1
        if fd >= 0:
            with opened(fd):
                os.set_blocking(fd, True)
                now = os.fstat(fd)
                if stat.S_ISREG(now.st_mode) and digest_fd(fd)[0] == entry["sha256"]:
                    if stat.S_IMODE(now.st_mode) != entry["mode"]:
                        os.fchmod(fd, entry["mode"])
                        return None
                    return stat_key(now)
    if st is not None:
        remove_at(folder, leaf)
    objects.copy_to(entry["sha256"], folder, leaf, entry["mode"])
    return None


def materialize(manifest: dict[str, Entry], objects: ObjectStore, target: Path) -> None:
    """Write the manifest into an empty folder. Links that would lead out of it are left out: the result is
    read by the harness itself (scoring), which must never follow the agent's links out."""
    links = []
    with opened(open_root(target)) as root, DirChain(root, create=True) as chain:
        for rel, entry in sorted(manifest.items()):
            *parts, leaf = rel.split("/")
            if is_link(entry):
                links.append(target / rel)
                os.symlink(entry["link"], leaf, dir_fd=chain.folder(parts))
            else:
                objects.copy_to(entry["sha256"], chain.folder(parts), leaf, entry["mode"] | 0o200)
    root_path = os.path.realpath(target)
    for path in links:
        real = os.path.realpath(path)
        if not (real == root_path or real.startswith(root_path + os.sep)) or not os.path.exists(path):
            os.unlink(path)
