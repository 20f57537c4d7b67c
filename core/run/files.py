"""The file actions: List, Read, Write, Append and Copy File, Undo Edit Script, Inspect Script Lines."""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from mlab.core.errors import EnvError
from mlab.core.fs.dirfd import opened
from mlab.core.run.edit_history import EditHistory
from mlab.core.run.workspace import MAX_WRITE_BYTES, Workspace

MAX_INSPECT_LINES = 100
MAX_LINE_CHARS = 2_000  # Inspect Script Lines shortens longer lines (a CSV row, minified code)
MAX_LIST_ENTRIES = 1_000
_COUNT_BUDGET_BYTES = 256 * 2**20  # Inspect Script Lines counts the file's lines up to this far


class FileActions:
    def __init__(self, workspace: Workspace, history: EditHistory):
        self.workspace = workspace
        self.history = history

    def list_files(self, dir_path: str) -> str:
        names = []
        with opened(self.workspace.open_folder(dir_path)) as fd, os.scandir(fd) as entries:
            for entry in entries:
                try:
                    is_dir = entry.is_dir()
                except OSError:  # e.g. a symlink loop
                    is_dir = False
                names.append(entry.name + ("/" if is_dir else ""))
        if not names:
            return "(empty folder)"
        names.sort()
        shown = "\n".join(names[:MAX_LIST_ENTRIES])
        if len(names) > MAX_LIST_ENTRIES:
            shown += f"\n[... and {len(names) - MAX_LIST_ENTRIES} more entries]"
        return shown

    def read_file(self, file_name: str) -> str:
        return self.workspace.read_text(file_name)

    def write_file(self, file_name: str, content: str) -> str:
        path = self.workspace.writable(file_name)
        note = self.history.save(path, content.encode("utf-8"), file_name)
        return f"File {file_name} written ({len(content)} characters).{note}"

    def append_file(self, file_name: str, content: str) -> str:
        path = self.workspace.writable(file_name)
        note = self.history.append(path, content.encode("utf-8"), file_name)
        return f"Appended {len(content)} characters to {file_name}.{note}"

    def copy_file(self, source: str, destination: str) -> str:
        data = self.workspace.read_bytes(source, MAX_WRITE_BYTES)
        dst = self.workspace.writable(destination)
        note = self.history.save(dst, data, destination)
        return f"File {source} copied to {destination}.{note}"

    def undo_edit_script(self, script_name: str) -> str:
        self.history.undo(script_name)
        try:
            shown = self.workspace.read_text(script_name)
        except EnvError as exc:
            shown = f"(not shown: {exc})"
        return f"{script_name} is back to its previous version:\n{shown}"

    def inspect_script_lines(self, script_name: str, start_line_number: int, end_line_number: int) -> str:
        start, end = start_line_number, end_line_number
        if start < 1 or end < start:
            raise EnvError("line numbers start at 1 and the end cannot come before the start")
        if end - start + 1 > MAX_INSPECT_LINES:
            raise EnvError(f"at most {MAX_INSPECT_LINES} lines at a time (asked for {end - start + 1}); "
                           f"e.g. lines {start} to {start + MAX_INSPECT_LINES - 1}")
        fd, _st = self.workspace.open_regular(script_name)
        with os.fdopen(fd, "rb") as f:
            if b"\x00" in f.read(8192):
                raise EnvError(f"{script_name!r} is a binary file, not text")
            f.seek(0)
            shown: list[str] = []
            consumed, at_end = 0, True
            for number, (raw, dropped) in enumerate(_lines(f, MAX_LINE_CHARS * 4), start=1):
                consumed = number
                if number > end:
                    at_end = False
                    break
                if number >= start:
                    text = raw.decode("utf-8", errors="replace").rstrip("\r")
                    if len(text) > MAX_LINE_CHARS or dropped:
                        text = text[:MAX_LINE_CHARS] + " [... rest of this long line left out]"
                    shown.append(f"{number}: {text}")
            total, exact = (consumed, True) if at_end else _count_rest(f, consumed)
        count = f"{total} lines" if exact else f"more than {total} lines"
        if not shown:
            if total == 0:
                raise EnvError(f"{script_name!r} is empty")
            raise EnvError(f"{script_name!r} has {count}, so there is no line {start}")
        return (f"{script_name} has {count}. Lines {start} to {start + len(shown) - 1}:\n" + "\n".join(shown))


def _lines(f: BinaryIO, max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """(line without its newline, bytes left out) of a binary file, reading at most max_bytes per line."""
    while True:
        piece = f.readline(max_bytes)
        if not piece:
            return
        if piece.endswith(b"\n"):
            yield piece[:-1], 0
            continue
        dropped = 0
        while True:
            more = f.readline(1 << 20)
            if not more:
                break
            dropped += len(more)
            if more.endswith(b"\n"):
                break
        yield piece, dropped


def _count_rest(f: BinaryIO, counted: int) -> tuple[int, bool]:
    """Total number of lines given `counted` already read; (count, exact) within a reading budget."""
    total, budget, last = counted, _COUNT_BUDGET_BYTES, b"\n"
    while budget > 0:
        chunk = f.read(min(1 << 20, budget))
        if not chunk:
            return total + (0 if last == b"\n" else 1), True
        total += chunk.count(b"\n")
        last = chunk[-1:]
        budget -= len(chunk)
    return total, False
