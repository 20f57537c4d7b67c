"""Copying a prepared tree into a new workspace, hard-linking the files a caller shares, at the cost of the links.

shutil.copytree with a linking copy function spent about 150 us a file in Python around each 30 us link (a
pathlib path, an lstat and a relative path per file), so a workspace of 200,000 read-only files took half a
minute before any script ran, once for each script `mlab check-task` runs. This walk lists each folder once
(the kinds come from the listing, no stat per file) and builds relative paths as strings.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable


def link_tree(source: str | os.PathLike[str], target: str | os.PathLike[str],
              share: Callable[[str], bool]) -> list[str]:
    """Copy source into target (made here, as shutil.copytree(source, target, symlinks=False) would), hard-linking
    each regular file whose path relative to source `share` accepts, and copying it where a link cannot be made
    (another file system). A symlink is copied as what it names. Returns the linked paths, relative to target."""
    linked: list[str] = []
    pending = [("", os.fspath(source), os.fspath(target))]
    made: list[tuple[str, str]] = []  # folders whose mode and times are set once filled (copystat would change
    while pending:                    # an mtime a later entry changes again)
        rel, src, dst = pending.pop()
        if rel:
            os.mkdir(dst)
        else:
            os.makedirs(dst)  # the top folder's parents too, as copytree makes them
        made.append((src, dst))
        with os.scandir(src) as listing:
            entries = list(listing)
        for entry in entries:
            name = f"{rel}{entry.name}"
            to = os.path.join(dst, entry.name)
            if entry.is_dir():  # a link to a folder included: copied as the folder it names
                pending.append((f"{name}/", entry.path, to))
                continue
            if entry.is_file(follow_symlinks=False) and share(name):
                try:
                    os.link(entry.path, to, follow_symlinks=False)
                    linked.append(name)
                    continue
                except OSError:
                    pass
            shutil.copy2(entry.path, to)
    for src, dst in reversed(made):
        shutil.copystat(src, dst)
    return linked
