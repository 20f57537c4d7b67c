"""Resolving agent-given paths inside a workspace, and matching read-only patterns."""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from .errors import EnvError


def resolve_in_workspace(workspace: Path, given: str) -> Path:
    """The real path of `given` (symlinks resolved), refused unless it lies inside the workspace."""
    if not isinstance(given, str) or not given.strip():
        raise EnvError("a file or directory name is required")
    if "\x00" in given:
        raise EnvError("file names cannot contain NUL bytes")
    if os.path.isabs(given):
        raise EnvError(f"absolute paths are not allowed: {given!r}; use a path relative to the workspace")
    root = workspace.resolve()
    target = (root / given).resolve()
    if target != root and root not in target.parents:
        raise EnvError(f"path {given!r} points outside the workspace")
    return target


def relative_name(workspace: Path, path: Path) -> str:
    return path.relative_to(workspace.resolve()).as_posix() or "."


def is_read_only(relpath: str, patterns: list[str]) -> bool:
    """True when relpath, or a folder above it, matches one of the task's read-only glob patterns."""
    parts = relpath.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(prefix, pattern) for pattern in patterns for prefix in prefixes)
