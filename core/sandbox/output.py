"""A command's output: read from its pipe as it comes, and kept within a byte budget (head and tail)."""
from __future__ import annotations

import array
import contextlib
import fcntl
import os
import select
import termios
import threading
from collections.abc import Callable
from typing import IO


class CappedOutput:
    """Keeps the head and tail of a stream within a byte budget, and counts what it drops."""

    def __init__(self, cap: int):
        self.head_cap = cap * 3 // 4
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if len(chunk) >= self.tail_cap:  # a big chunk replaces the whole tail at once
            self.dropped += len(self.tail) + len(chunk) - self.tail_cap
            self.tail = bytearray(chunk[len(chunk) - self.tail_cap:]) if self.tail_cap else bytearray()
            return
        self.tail += chunk
        if len(self.tail) > self.tail_cap:
            excess = len(self.tail) - self.tail_cap
            self.dropped += excess
            del self.tail[:excess]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.dropped:
            return head + self.tail.decode("utf-8", errors="replace")
        marker = f"\n[... {self.dropped} bytes of output left out ...]\n"
        return head + marker + self.tail.decode("utf-8", errors="replace")


class OutputPump:
    """Reads a command's pipe (the sandbox contract's stdout) into `output` as the output comes (run() is a
    thread's), showing each chunk to on_output. drain() delivers, in order, what the pipe holds when it is called:
    a caller that has frozen the command, or seen its writers end, then has all they wrote, however late the
    reading thread runs."""

    def __init__(self, stream: IO[bytes], cap: int, on_output: Callable[[bytes], None] | None):
        self.output = CappedOutput(cap)
        self._fd = stream.fileno()
        os.set_blocking(self._fd, False)  # a read under the lock must not wait for the command
        self._on_output = on_output
        self._lock = threading.Lock()  # held from a read until its chunk is delivered: chunks keep their order
        self._ended = False

    def run(self) -> None:
        """Read the pipe to its end (for a thread)."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while not self._ended:
            try:
                if any(flags & select.POLLNVAL for _fd, flags in poller.poll()):  # closed under us
                    return
            except (OSError, ValueError):
                return
            self.drain()

    def drain(self) -> None:
        """Deliver what the pipe holds now (at least one read: it may say the end); not what comes meanwhile, so
        a command writing without pause cannot keep the caller here."""
        with self._lock:
            queued = array.array("i", [0])
            with contextlib.suppress(OSError):
                fcntl.ioctl(self._fd, termios.FIONREAD, queued, True)
            read = 0
            while not self._ended and (read == 0 or read < queued[0]):
                try:
                    chunk = os.read(self._fd, 1 << 16)
                except BlockingIOError:
                    return
                except OSError:
                    chunk = b""
                self._ended = not chunk
                read += len(chunk)
                self.output.feed(chunk)
                if chunk and self._on_output is not None:
                    try:
                        self._on_output(chunk)
                    except Exception:  # an observer's bug must not stop the command's output
                        self._on_output = None
