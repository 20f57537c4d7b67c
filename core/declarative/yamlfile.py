"""Reading a YAML file while remembering the line of every key, so a bad value is reported where it is written."""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs installed

from mlab.core.errors import MlabError

Location = tuple[str | int, ...]  # keys and list indexes from the document's root


class TaskFileError(MlabError):
    """A task.yaml that cannot become a task; its text is one line: `FILE:LINE: field 'F': what is wrong`."""

    def __init__(self, path: Path | str, line: int, field: str, problem: str):
        self.path, self.line, self.field, self.problem = str(path), line, field, problem
        where = f"field '{field}': " if field else ""
        super().__init__(f"{path}:{line}: {where}{problem}")


@dataclass
class LocatedYaml:
    data: Any
    lines: dict[Location, int]  # 1-based line of each key (of each item, for lists); () is the document
    path: Path

    def line_of(self, location: Location) -> int:
        """The line of the deepest part of location that is written in the file (a missing key: its parent's)."""
        for end in range(len(location), -1, -1):
            if location[:end] in self.lines:
                return self.lines[location[:end]]
        return 1

    def error(self, location: Location, problem: str) -> TaskFileError:
        return TaskFileError(self.path, self.line_of(location), dotted(location), problem)


def dotted(location: Location) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


_KEY_LINE = re.compile(r"^\s*(?:-\s+)?([A-Za-z_][\w-]*)\s*:")


# A task file is untrusted (packs come from strangers): aliases may name one list many times over, so the
# document is measured as its readers will see it, every alias expanded, and refused past this many values.
MAX_VALUES = 100_000


def _read_bounded(path: Path, max_bytes: int) -> bytes:
    """At most max_bytes of a regular file; a FIFO or device is refused without waiting on it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TaskFileError(path, 1, "", f"cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TaskFileError(path, 1, "", "is not a regular file")
        if size > max_bytes:
            raise TaskFileError(path, 1, "", f"is {size} bytes, more than the {max_bytes} a task file may have")
        os.set_blocking(fd, True)
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise TaskFileError(path, 1, "", f"is more than the {max_bytes} bytes a task file may have")
    return raw


def load_located(path: Path, max_bytes: int = 1_000_000) -> LocatedYaml:
    """Parse path (safe YAML: plain data, no tags) into its data and the line of every key."""
    raw = _read_bounded(path, max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFileError(path, raw[:exc.start].count(b"\n") + 1, "", "is not UTF-8 text") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise TaskFileError(path, 1, "", "is empty; it needs at least name, description, research_problem, "
                                             "metric and answers")
        lines: dict[Location, int] = {(): node.start_mark.line + 1}
        _walk(node, (), lines, path, [MAX_VALUES])
        data = loader.construct_document(node)
    except RecursionError:
        raise TaskFileError(path, 1, "", "nests its values too deep to be a task file") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = " ".join(filter(None, [exc.context, exc.problem]))
        raise TaskFileError(path, line, _key_near(text, line), f"is not valid YAML: {problem} "
                                                               "(check the indentation and the colons)") from None
    except yaml.YAMLError as exc:
        raise TaskFileError(path, 1, "", f"is not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    return LocatedYaml(data=data, lines=lines, path=path)


def _walk(node: yaml.Node, location: Location, lines: dict[Location, int], path: Path, budget: list[int]) -> None:
    """Record the line of every key and item, aliases expanded; past budget[0] values the file is refused."""
    budget[0] -= 1
    if budget[0] < 0:
        raise TaskFileError(path, node.start_mark.line + 1, dotted(location[:2]),
                            f"holds more than {MAX_VALUES} values once its aliases (*name) are expanded")
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            here = (*location, key)
            if key in seen:
                raise TaskFileError(path, key_node.start_mark.line + 1, dotted(here),
                                    f"is given twice (first on line {lines[here]})")
            seen.add(key)
            lines[here] = key_node.start_mark.line + 1
            _walk(value_node, here, lines, path, budget)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[location + (index,)] = item.start_mark.line + 1
            _walk(item, (*location, index), lines, path, budget)


def _key_near(text: str, line: int) -> str:
    """The key written on line, else the nearest one above it: what a syntax error most likely belongs to."""
    rows = text.splitlines()
    for number in range(min(line, len(rows)), 0, -1):
        match = _KEY_LINE.match(rows[number - 1])
        if match:
            return match.group(1)
    return ""
