"""A bench host's runs' progress, sent to the driver together: the latest of each run, at most every SEND_EVERY_S,
by the process's ticker (mlab.core.ticker).

The driver only shows progress (at its tick, 0.2 s), so a line per step bought nothing but wake-ups: a bench of 256
runs of 20 steps woke the driver's reader 5,120 times; sent together, the driver's CPU went from 0.84-1.18 to
0.53-0.61 ms a run (benchmarks/bench_parallel.py's bench, old and new side by side, five rounds each), and a Ray run
makes a call to the progress board a few times a second instead of one a step. A run's own thread only stores its
progress; a run that ends is forgotten before its end is told, so none of it follows its end.
"""
from __future__ import annotations

import json
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from mlab.core.ticker import ticker

SEND_EVERY_S = 0.25  # a little over the driver's tick: every step of a run taking steps of a second or more is seen


class HostProgress:
    """The latest progress of each run of a host (a forked bench host, or a Ray worker), handed to `send` together:
    a run name -> progress mapping, at most every SEND_EVERY_S: by the run reporting, when the last send is
    that old, else by the process's ticker."""

    def __init__(self, send: Callable[[dict[str, dict[str, Any]]], None]):
        self.send = send
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}  # run name -> its latest progress, not yet sent
        self._sent_at = float("-inf")
        self._closed = False

    def reporter(self, name: str) -> Callable[[dict[str, Any]], None]:
        """What run `name` calls after each step (execute_job's `report`)."""
        def report(progress: dict[str, Any]) -> None:
            with self._lock:
                if self._closed:
                    return
                self._pending[name] = progress
                if not self._send_if_due(time.monotonic()):
                    ticker().want(self)

        return report

    def forget(self, name: str) -> None:
        """The run has ended: its unsent progress is dropped, and none of it is being sent once this returns."""
        with self._lock:
            self._pending.pop(name, None)

    def close(self) -> None:
        """Every run has ended (a Ray worker's task, whose process lives on): unsent progress is dropped, and
        nothing is being sent once this returns."""
        with self._lock:
            self._pending.clear()
            self._closed = True
            ticker().drop(self)

    def tick(self, now: float) -> bool:
        with self._lock:
            return bool(self._pending) and not self._send_if_due(now)

    def _send_if_due(self, now: float) -> bool:
        """Send what is pending unless the last send was under SEND_EVERY_S ago: then steps taken meanwhile replace
        their run's progress and go with a later send. Under the lock: forget() and close() wait for a send."""
        if now < self._sent_at + SEND_EVERY_S:
            return False
        batch, self._pending = self._pending, {}
        self._sent_at = now
        try:
            self.send(batch)
        except Exception:  # progress is best effort: the runs go on
            pass
        return True


def pipe_sender(fd: int) -> Callable[[dict[str, dict[str, Any]]], None]:
    """Progress as JSON lines on the driver's pipe (`fd`, non-blocking: a driver that stops reading costs lines, never
    a step), in writes of whole lines of at most PIPE_BUF bytes each: atomic, so they never interleave with another
    host's. A longer line is left out."""
    def send(batch: dict[str, dict[str, Any]]) -> None:
        chunk = b""
        for name, progress in [*batch.items(), ("", None)]:
            line = b"" if progress is None else (json.dumps({"progress": name, **progress}) + "\n").encode()
            if len(line) > select.PIPE_BUF:
                continue
            if chunk and (not line or len(chunk) + len(line) > select.PIPE_BUF):
                try:
                    os.write(fd, chunk)  # all or nothing: at most PIPE_BUF bytes
                except OSError:
                    return  # the pipe is full or gone
                chunk = b""
            chunk += line

    return send
