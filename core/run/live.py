"""The step a run is in the middle of: its number, the action once the agent has chosen one, when it began and
the tail of a running script's output.

The runner keeps it in memory for the terminal view and in RUN_DIR/live.json for viewers in other processes
(`mlab view`, the bench view). The file is written by the process's ticker, only for a step that has lasted
SHOW_AFTER_S and then at most every WRITE_EVERY_S: a bench of hundreds of runs, each taking a step every second
or so, writes no file per step (viewers poll about once a second anyway). It is removed when the next step
begins and when the run stops. The run's folder is hidden from agent code, so agent code cannot forge it.
Viewers read it with mlab.core.view.live.
"""
from __future__ import annotations

import copy
import json
import os
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, TypedDict

from mlab.core.models import Action
from mlab.core.ticker import ticker

LIVE_FILE = "live.json"
TAIL_BYTES = 4096  # of the running script's output, kept in memory
TAIL_LINES = 12  # of those, shown
WRITE_EVERY_S = 0.5  # output arrives in many small chunks: the file follows it at most this often
SHOW_AFTER_S = 1.0  # a step shorter than this is never written
MAX_ARG_CHARS = 200  # of each action argument in the live state (a Write File's content can be megabytes)


class LiveState(TypedDict):
    step: int
    action: str | None  # None while the agent is still choosing (e.g. waiting for its model)
    args: dict[str, str]
    started: float  # time.time() when the step began
    output_tail: str  # last lines of a running script's output, "" for other actions
    pid: int


def output_tail(data: bytes, lines: int = TAIL_LINES) -> str:
    """The last lines of output as a terminal would show them: a carriage return (a progress bar) starts its line
    over, so only what came after the last one stays."""
    text = data.decode("utf-8", errors="replace")
    shown = [line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")]
    while shown and not shown[-1]:
        shown.pop()
    return "\n".join(shown[-lines:])


def short_arg(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_ARG_CHARS else text[:MAX_ARG_CHARS] + "…"


class LiveStep:
    """Written by the run loop (begin, acting, end) and by the thread reading a script's output (output); put on
    disk when due by the process's ticker (mlab.core.ticker)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LIVE_FILE
        self._lock = threading.Lock()
        self._state: LiveState | None = None
        self._tail = bytearray()
        self._began = 0.0  # time.monotonic() when the step began
        self._written_at = float("-inf")
        self._dirty = False  # the state changed since it was written
        self._on_disk = False

    @property
    def state(self) -> LiveState | None:
        with self._lock:
            return None if self._state is None else copy.copy(self._state)

    def begin(self, index: int) -> None:
        with self._lock:
            self._tail.clear()
            self._began = time.monotonic()
            self._state = {"step": index, "action": None, "args": {}, "started": time.time(), "output_tail": "",
                           "pid": os.getpid()}
            if self._on_disk:  # the file would show a step that is over
                self._remove()
            self._changed()

    def acting(self, action: Action) -> None:
        with self._lock:
            if self._state is None:
                return
            args = action.args if isinstance(action.args, dict) else {}
            self._state["action"] = action.name if isinstance(action.name, str) else repr(action.name)
            self._state["args"] = {str(k): short_arg(v) for k, v in list(args.items())[:10]}
            self._changed()

    def output(self, chunk: bytes) -> None:
        with self._lock:
            if self._state is None:
                return
            self._tail += chunk
            del self._tail[:-TAIL_BYTES]
            self._state["output_tail"] = output_tail(bytes(self._tail))
            self._changed()

    def end(self) -> None:
        """The run stops: the file goes, and no tick writes it again."""
        with self._lock:
            self._state = None
            self._dirty = False
            self._tail.clear()
            self._remove()
            ticker().drop(self)

    def tick(self, now: float) -> bool:
        with self._lock:
            if self._state is None or not self._dirty:
                return False
            if now < max(self._began + SHOW_AFTER_S, self._written_at + WRITE_EVERY_S):
                return True
            self._write()
            return False

    def _changed(self) -> None:
        self._dirty = True
        ticker().want(self)

    def _remove(self) -> None:
        self._on_disk = False
        with suppress(OSError):
            self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        """Replace the file whole (a reader never sees half of it) without syncing it to disk: it only matters
        while the run goes. Best effort: a viewer missing an update is better than a run stopped by it."""
        self._written_at = time.monotonic()
        self._dirty = False
        tmp = self.path.with_name(f".{LIVE_FILE}.tmp{os.getpid()}")
        try:
            tmp.write_bytes(json.dumps(self._state).encode())
            os.replace(tmp, self.path)
            self._on_disk = True
        except OSError:
            tmp.unlink(missing_ok=True)


RUN_LOCK_FILE = ".lock"  # the runner holds an exclusive flock on it while the run goes
