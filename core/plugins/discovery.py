"""The installed entry points of group 'mlab', with their distributions' names and versions, found the way
importlib.metadata finds them but reading only what listing plugins needs.

importlib.metadata costs `mlab list-plugins` about as much as all the rest of its work: importing it (email,
zipfile, csv...), then parsing every installed distribution's entry_points.txt and each plugin's whole METADATA
with the email parser, twice (name, then version). Here the folders on sys.path are listed once, the first
distribution of each name wins (as in importlib.metadata), and only the plugins' METADATA headers are read. Where
a distribution may come from somewhere this scan does not read (a zip or an egg on sys.path, a finder other than
the path finder), importlib.metadata answers instead. tests/test_cli_startup.py checks that both agree.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys
from functools import reduce
from typing import Any, NamedTuple

# How importlib.metadata reads an entry point's value: "module", "module:attr.attr", extras ignored.
_ENTRY_POINT_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"
_METADATA_SUFFIXES = (".dist-info", ".egg-info")


class EntryPoint(NamedTuple):
    name: str
    value: str  # "module" or "module:attribute"
    distribution: str  # the Name in the distribution's metadata
    version: str

    def load(self) -> Any:
        match = re.match(_ENTRY_POINT_VALUE, self.value)
        if match is None:
            raise ValueError(f"entry point {self.name} = {self.value!r} is not 'module' or 'module:attribute'")
        module = importlib.import_module(match.group("module"))
        return reduce(getattr, filter(None, (match.group("attr") or "").split(".")), module)


class _Unreadable(Exception):
    """Something the fast scan does not read like importlib.metadata would: it answers instead."""


def entry_points(group: str) -> list[EntryPoint]:
    """Every installed entry point of group, in the order importlib.metadata lists them."""
    try:
        return _scanned_entry_points(group)
    except _Unreadable:
        return metadata_entry_points(group)


def distribution_version(name: str) -> str | None:
    """The version of the first installed distribution called name (as importlib.metadata finds it), or None."""
    try:
        folder = dict(_distribution_folders()).get(_normalized(name))
        if folder is None:
            return None
        return _headers(folder).get("version", "?")
    except _Unreadable:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(name)
        except PackageNotFoundError:
            return None


def metadata_entry_points(group: str) -> list[EntryPoint]:
    """The same list through importlib.metadata itself (the slow, general way)."""
    from importlib.metadata import entry_points as installed

    found = []
    for ep in installed(group=group):
        dist = ep.dist
        found.append(EntryPoint(name=ep.name, value=ep.value,
                                distribution=(dist.metadata["Name"] or "?") if dist else "?",
                                version=(dist.version or "?") if dist else "?"))
    return found


def _normalized(name: str) -> str:
    """PEP 503's normalization with underscores, as importlib.metadata compares names (no regex: it runs for
    every installed distribution)."""
    name = name.lower().replace("-", "_").replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name


def _distribution_folders() -> list[tuple[str, str]]:
    """(normalized name, metadata folder) of each distribution on sys.path, the first of each name only."""
    for finder in sys.meta_path:
        if hasattr(finder, "find_distributions") and finder is not importlib.machinery.PathFinder:
            raise _Unreadable(f"{finder!r} may find distributions")
    seen: set[str] = set()
    folders = []
    for entry in sys.path:
        root = entry or "."
        try:
            children = os.listdir(root)
        except OSError:
            if os.path.isfile(root):
                raise _Unreadable(f"{root} is an archive") from None
            continue  # a folder that does not exist, or a path hook's name
        if os.path.basename(root).lower().endswith(".egg"):
            raise _Unreadable(f"{root} is an egg")
        by_name: dict[str, list[str]] = {}  # importlib.metadata's order: by name as first listed, then listed
        for child in children:
            low = child.lower()
            if low.endswith(_METADATA_SUFFIXES):
                by_name.setdefault(_normalized(low.rpartition(".")[0].partition("-")[0]), []).append(child)
        for name, found in by_name.items():
            if name not in seen:
                seen.add(name)
                folders.append((name, os.path.join(root, found[0])))
    return folders


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _section(text: str, group: str) -> list[tuple[str, str]]:
    """The `name = value` lines of [group] in an entry_points.txt, as importlib.metadata reads them."""
    pairs, current = [], None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line.strip("[]")
        elif current == group:
            name, equals, value = line.partition("=")
            if not equals:
                raise _Unreadable(f"entry point line {line!r} has no '='")
            pairs.append((name.strip(), value.strip()))
    return pairs


def _headers(folder: str) -> dict[str, str]:
    """The first value of each header of a distribution's metadata, lower-cased names; the body is not read."""
    text = _read(os.path.join(folder, "METADATA")) or _read(os.path.join(folder, "PKG-INFO")) or \
        (_read(folder) if os.path.isfile(folder) else None) or ""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        if line[0] in " \t":
            continue  # a folded continuation: neither Name nor Version folds
        key, colon, value = line.partition(":")
        if colon:
            headers.setdefault(key.strip().lower(), value.strip())
    return headers


def _scanned_entry_points(group: str) -> list[EntryPoint]:
    found = []
    for _name, folder in _distribution_folders():
        text = _read(os.path.join(folder, "entry_points.txt"))
        pairs = _section(text, group) if text else []
        if pairs:
            headers = _headers(folder)
            found += [EntryPoint(name=name, value=value, distribution=headers.get("name", "?"),
                                 version=headers.get("version", "?")) for name, value in pairs]
    return found
