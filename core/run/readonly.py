"""Resolving agent-given paths inside a workspace, and matching read-only patterns."""
from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
from pathlib import Path

from mlab.core.errors import EnvError

MAX_PATH_CHARS = 1024
# Read-only files at least this large are left out of a run's archive (a receiver links its own copy, see
# ray_engine.link_shared) and linked when held out; a workspace links every read-only file a sandbox protects.
SHARE_MIN_BYTES = 1 << 20


def resolve_in_workspace(root: str, given: str) -> Path:
    """The real path of `given` (symlinks resolved), refused unless it lies inside the workspace whose real
    path is `root` (resolved once, by the caller: a workspace folder later swapped for a link is not followed)."""
    if not isinstance(given, str) or not given.strip():
        raise EnvError("a file or directory name is required")
    if "\x00" in given:
        raise EnvError("file names cannot contain NUL bytes")
    if len(given) > MAX_PATH_CHARS:
        raise EnvError(f"the path is {len(given)} characters long; at most {MAX_PATH_CHARS} are allowed")
    if os.path.isabs(given):
        raise EnvError(f"absolute paths are not allowed: {given!r}; use a path relative to the workspace")
    # realpath, unlike Path.resolve, does not raise on symlink loops; such a path fails later with ELOOP.
    try:
        target = _real_below(root, given)
    except OSError as exc:  # a part was swapped between realpath's lstat and readlink
        raise EnvError(f"path {given!r} changed while it was looked up: {exc.strerror}") from None
    if not inside(root, target):
        raise EnvError(f"path {given!r} points outside the workspace")
    return Path(target)


def _real_below(root: str, given: str) -> str:
    """os.path.realpath(root/given) for a real `root`, lstatting only given's own parts (realpath lstats every
    part of root too); a path with a link or a '..' in it is left to realpath."""
    current = root
    parts = given.split("/")
    for number, part in enumerate(parts):
        if part in ("", "."):
            continue
        if part == "..":
            return os.path.realpath(os.path.join(root, given))
        current = f"{current}/{part}" if current != "/" else f"/{part}"
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            if ".." in parts[number + 1:]:
                return os.path.realpath(os.path.join(root, given))
            # missing (or unreadable): realpath keeps the rest as written
            rest = "/".join(p for p in parts[number + 1:] if p not in ("", "."))
            return f"{current}/{rest}" if rest else current
        if stat.S_ISLNK(mode):
            return os.path.realpath(os.path.join(root, given))
    return current


def inside(root: str, real: str) -> bool:
    """Whether the real path `real` is the workspace (real path `root`) or lies in it."""
    return real == root or real.startswith(root.rstrip("/") + "/")


def relative_name(root: str, real: str) -> str:
    """The workspace-relative name of `real`, a real path inside the workspace whose real path is `root`."""
    return "." if real == root else real[len(root.rstrip("/")) + 1:]


def is_read_only(relpath: str, patterns: list[str]) -> bool:
    """True when relpath, or a folder above it, matches one of the task's read-only glob patterns."""
    return read_only_rule(tuple(patterns)).covers(relpath)


class ReadOnlyRule:
    """A task's read-only patterns, for walks that visit a folder before what it holds: `matches` tests one
    path alone (what lies below a matching folder is read-only without testing), `may_hold` says whether a
    folder can hold a match at all, so a walk looking for read-only files enters only those folders. Called
    with a path, it is a snapshot's skip (covers), and `any_name_matches` spares the snapshot listing a folder
    whose entries it would all leave out."""

    def __init__(self, patterns: tuple[str, ...]):
        self.patterns = patterns
        normalized = [_normalize(p) for p in patterns]
        self._regex = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in normalized)) if patterns else None
        # what every path a pattern matches starts with: the pattern up to its first wildcard
        self._prefixes = tuple(re.split(r"[*?\[]", p, maxsplit=1)[0] for p in normalized)
        # patterns naming every entry of the folders their head matches: HEAD/ then stars only ("images/*")
        heads = [head for head, _, tail in (p.rpartition("/") for p in normalized)
                 if head and tail and not tail.strip("*")]
        self._filled = re.compile("|".join(f"(?:{fnmatch.translate(h)})" for h in heads)) if heads else None

    def __bool__(self) -> bool:
        return self._regex is not None

    def __eq__(self, other: object) -> bool:  # the same skip to a snapshot store, when built again
        return isinstance(other, ReadOnlyRule) and other.patterns == self.patterns

    def __hash__(self) -> int:
        return hash(self.patterns)

    def __call__(self, relpath: str) -> bool:
        return self.covers(relpath)

    def matches(self, relpath: str) -> bool:
        return self._regex is not None and self._regex.match(relpath) is not None

    def covers(self, relpath: str) -> bool:
        """relpath or a folder above it matches."""
        if self._regex is None:
            return False
        parts = relpath.split("/")
        return any(self._regex.match("/".join(parts[: i + 1])) for i in range(len(parts)))

    def any_name_matches(self, folder: str) -> bool:
        """Whether every name in `folder` is read-only: a pattern is HEAD/ then stars only (`images/*`), HEAD
        matching the folder. Decided from the patterns' text: a probe name cannot stand in for all names
        (`images/[!.]*` matches any probe but leaves `.notes` writable)."""
        return self._filled is not None and self._filled.match(folder) is not None

    def may_hold(self, folder: str) -> bool:
        below = folder + "/"
        return any(prefix.startswith(below) or below.startswith(prefix) for prefix in self._prefixes)


@functools.lru_cache(maxsize=64)
def read_only_rule(patterns: tuple[str, ...]) -> ReadOnlyRule:
    """Built once per set of patterns: snapshots test every new workspace path."""
    return ReadOnlyRule(patterns)


def _normalize(pattern: str) -> str:
    """'./data/' and 'data' mean the same folder."""
    while pattern.startswith("./"):
        pattern = pattern[2:]
    return pattern.rstrip("/") or pattern
