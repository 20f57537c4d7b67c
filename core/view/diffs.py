"""What a step changed in the workspace: the files added, deleted or modified between two snapshots of a run,
with unified diffs.

Run folders are read as untrusted data (a folder copied from elsewhere, a bench shared by others): a snapshot or
object name never leads outside the run's snapshots/ and objects/, a symlink is never followed, and every read
is bounded. Nothing here writes.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from mlab.core.fs.dirfd import read_regular_at
from mlab.core.run.object_pack import PackIndex, read_packed

SNAPSHOTS_DIR = "snapshots"
OBJECTS_DIR = "objects"
SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
DIGEST = re.compile(r"[0-9a-f]{64}")

MAX_MANIFEST_BYTES = 64 << 20
MAX_FOLDERS = 100_000  # folder listings read for one snapshot
MAX_ENTRIES = 2_000_000  # files of one snapshot (the harness's own walk stops there too)
TREE = "tree"  # a subfolder's entry in a tree snapshot: {"tree": digest of its listing}
MAX_DIFFED_FILE = 400_000  # bigger files are compared by size only
MAX_DIFF = 40_000  # characters of one file's diff shown
_INDEXES = 16  # runs whose pack indexes are kept between requests

Manifest = dict[str, dict[str, Any]]


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more characters not shown]"


def read_regular(path: Path, limit: int) -> bytes | None:
    """Up to limit + 1 bytes of a regular file (one more than allowed tells the caller it is too long); None when
    it is missing, unreadable, a symlink, a FIFO or a device."""
    try:
        return read_regular_at(path.parent, path.name, limit)
    except OSError:
        return None


@functools.lru_cache(maxsize=_INDEXES)
def _packs(run_dir: Path) -> PackIndex:
    """The run's pack index, kept between requests (a miss reads what was indexed since)."""
    return PackIndex(run_dir / OBJECTS_DIR)


def read_object(run_dir: Path, digest: str, limit: int) -> bytes | None:
    """A stored object's bytes, packed or not; None when it is missing, unreadable, longer than `limit` or not
    what its digest promises (a pack torn by a crash)."""
    packs = _packs(run_dir)
    location = packs.find(digest)
    if location is not None:
        packed = read_packed(packs, location, limit)
        return packed if packed is not None and hashlib.sha256(packed).hexdigest() == digest else None
    data = read_regular(run_dir / OBJECTS_DIR / digest[:2] / digest, limit)
    return data if data is not None and len(data) <= limit else None


def _listing(data: bytes | None, limit: int) -> dict[str, Any] | None:
    if data is None or len(data) > limit:
        return None
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) else None


def _is_file_entry(entry: object) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and bool(DIGEST.fullmatch(entry["sha256"]))
            and isinstance(entry.get("size"), int) and entry["size"] >= 0)


def read_manifest(run_dir: Path, name: str) -> Manifest | None:
    """A snapshot as one mapping of path -> file entry, with only well-formed entries; None when the name is odd
    or the file is unusable. Reads both kinds of snapshot: flat (paths as keys) and a tree of folder listings
    ({"tree": digest} for a subfolder, its listing stored as an object), bounded in folders and entries."""
    if not isinstance(name, str) or not SNAPSHOT_NAME.fullmatch(name):
        return None
    root = _listing(read_regular(run_dir / SNAPSHOTS_DIR / f"{name}.json", MAX_MANIFEST_BYTES), MAX_MANIFEST_BYTES)
    if root is None:
        return None
    flat: Manifest = {}
    pending, folders = [(root, "")], 0
    while pending and folders < MAX_FOLDERS and len(flat) < MAX_ENTRIES:
        listing, prefix = pending.pop()
        folders += 1
        for key, entry in listing.items():
            if not isinstance(key, str) or not key:
                continue
            tree = entry.get(TREE) if isinstance(entry, dict) else None
            if isinstance(tree, str) and DIGEST.fullmatch(tree):
                sub = _listing(read_object(run_dir, tree, MAX_MANIFEST_BYTES), MAX_MANIFEST_BYTES)
                if sub is not None:
                    pending.append((sub, f"{prefix}{key}/"))
            elif _is_file_entry(entry):
                flat[prefix + key] = entry
    return flat


def _text(run_dir: Path, entry: dict[str, Any] | None) -> str | None:
    """A file's text as of a snapshot: "" for a file that is not there, None for a binary or large one."""
    if entry is None:
        return ""
    if entry["size"] > MAX_DIFFED_FILE:
        return None
    digest = entry["sha256"]
    data = read_object(run_dir, digest, MAX_DIFFED_FILE)
    if data is None or len(data) > MAX_DIFFED_FILE or b"\x00" in data[:8192]:
        return None
    text = data.decode("utf-8", errors="replace")
    return f"(symbolic link to {text})\n" if "link" in entry else text


def file_changes(run_dir: Path, before: Manifest, after: Manifest) -> list[dict[str, str]]:
    """Files a step added, deleted or modified, with a unified diff where the file is text and not huge."""
    changes = []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel), after.get(rel)
        if a and b and a["sha256"] == b["sha256"] and ("link" in a) == ("link" in b):
            continue
        kind = "added" if a is None else "deleted" if b is None else "modified"
        old, new = _text(run_dir, a), _text(run_dir, b)
        if old is None or new is None:
            diff = f"(binary, large or unreadable file: {a['size'] if a else 0} → {b['size'] if b else 0} bytes)"
        else:
            diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                fromfile=f"a/{rel}", tofile=f"b/{rel}"))
        changes.append({"file": rel, "change": kind, "diff": clip(diff, MAX_DIFF)})
    return changes
